(* effect_cont: data kept alive only by suspended effect continuations.
   Step 1 starts two jobs. Each allocates a working set in a local variable,
   performs [Suspend], and is parked: its continuation is stored in a global
   ref. The working set is referenced only from the suspended fiber's stack
   frame (it is used after the job resumes). After the last step both jobs are
   resumed and finish, so the data becomes garbage.
     deep job    (Effect.Deep):    array of 10000 strings of 100 bytes
     shallow job (Effect.Shallow): array of 2000 float arrays of 16 floats *)

open Effect

type _ Effect.t += Suspend : string -> int Effect.t

let parked_deep : (int, int) Deep.continuation option ref = ref None
let parked_shallow : (int, int) Shallow.continuation option ref = ref None

let deep_job () =
  let working_set = Array.init 10_000 (fun i -> String.make 100 (Char.chr (48 + i mod 10))) in
  let resumed_with = perform (Suspend "deep") in
  Array.fold_left (fun acc s -> acc + String.length s) resumed_with working_set

let shallow_job () =
  let samples = Array.init 2_000 (fun i -> Array.make 16 (float_of_int i)) in
  let resumed_with = perform (Suspend "shallow") in
  Array.fold_left (fun acc a -> acc + Array.length a) resumed_with samples

let start_deep () =
  Deep.match_with deep_job ()
    { retc = (fun r -> r);
      exnc = raise;
      effc = (fun (type a) (eff : a Effect.t) ->
          match eff with
          | Suspend _ ->
            Some (fun (k : (a, int) Deep.continuation) ->
                parked_deep := Some k;
                -1)
          | _ -> None) }

let shallow_handler : (int, int) Shallow.handler =
  { retc = (fun r -> r);
    exnc = raise;
    effc = (fun (type a) (eff : a Effect.t) ->
        match eff with
        | Suspend _ ->
          Some (fun (k : (a, int) Shallow.continuation) ->
              parked_shallow := Some k;
              -1)
        | _ -> None) }

let start_shallow () =
  Shallow.continue_with (Shallow.fiber shallow_job) () shallow_handler

let () =
  Heapsnap_sample.run
    (fun _cfg step ->
       if step = 1 then begin
         assert (start_deep () = -1);
         assert (start_shallow () = -1)
       end)
    ~finish:(fun () ->
        (match !parked_deep with
         | Some k -> parked_deep := None; assert (Deep.continue k 1 = 1 + 10_000 * 100)
         | None -> assert false);
        match !parked_shallow with
        | Some k ->
          parked_shallow := None;
          assert (Shallow.continue_with k 1 shallow_handler = 1 + 2_000 * 16)
        | None -> assert false)
