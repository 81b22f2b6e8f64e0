(* steady_state: allocates heavily but keeps a constant live set.
   Live set: [ring] (1000 slots, each a fresh 1000-byte Bytes every step) and
   [table] (a Hashtbl with exactly 1000 int keys whose values, 4-element int
   arrays, are replaced every step). Each step also allocates about
   ROUNDS (default 200000) x ~150 bytes of short-lived garbage (lists, strings,
   tuples) plus a temporary list of ROUNDS/2 strings that lives long
   enough to be promoted; all of it is dropped before the checkpoint. *)

let ring : Bytes.t array = Array.make 1000 Bytes.empty
let table : (int, int array) Hashtbl.t = Hashtbl.create 1024

let churn rounds =
  let acc = ref 0 in
  for i = 1 to rounds do
    let l = [ i; i + 1; i + 2 ] in
    let s = string_of_int i ^ "-tmp" in
    let pair = (l, s) in
    acc := !acc + List.length (fst pair) + String.length (snd pair)
  done;
  !acc

let () =
  Heapsnap_sample.debug_root "ring" (fun () -> Obj.repr ring);
  Heapsnap_sample.debug_root "table" (fun () -> Obj.repr table);
  Heapsnap_sample.run (fun cfg step ->
      let rounds = match cfg.args with [] -> 200_000 | n :: _ -> int_of_string n in
      for i = 0 to 999 do
        ring.(i) <- Bytes.make 1000 (Char.chr (65 + step mod 26));
        Hashtbl.replace table i (Array.make 4 step)
      done;
      ignore (Sys.opaque_identity (churn rounds));
      (* medium-lived garbage: survives minor GCs, then dropped *)
      let tmp = List.init (rounds / 2) (fun i -> string_of_int i) in
      ignore (Sys.opaque_identity (List.length tmp)))
