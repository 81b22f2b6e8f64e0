(* Pause protocol shared by every heapsnap sample (linked into each executable).

   Command line:  NAME [--steps K] [--pause] [sample-specific args]

   The sample runs steps 1..K (K defaults per sample, usually 3). After building
   or growing its data for step i it calls [compact ()] (Gc.compact), runs its optional
   [before_ready] hook, prints exactly "READY i" on stdout and flushes. With
   --pause it then blocks reading one line from stdin (EOF = stop pausing, run
   to the end). After the last step it runs its [finish] hook, prints "DONE"
   and exits 0.

   Diagnostics go to stderr only, and only when HEAPSNAP_SAMPLE_DEBUG is set:
   then each checkpoint prints "# step i root NAME reachable_bytes B" for the
   roots the sample registered with [debug_root] (Obj.reachable_words * 8),
   after "# step i heap_bytes B" (Gc.quick_stat heap_words * 8).

   HEAPSNAP_SAMPLE_MAJOR_SLICES=N runs N large major slices after each compaction, before
   "READY i", so that a checkpoint can fall in a later phase of the cycle than its start. *)

type config = {
  name : string;
  steps : int;
  pause : bool;
  args : string list;  (* sample-specific positional arguments *)
}

let usage name =
  Printf.eprintf "usage: %s [--steps K] [--pause] [args...]\n%!" name;
  exit 2

let parse ~default_steps =
  let name = Filename.basename Sys.argv.(0) in
  let steps = ref default_steps and pause = ref false and args = ref [] in
  let rec go = function
    | [] -> ()
    | "--steps" :: k :: rest ->
      (match int_of_string_opt k with
       | Some k when k >= 1 -> steps := k
       | _ -> usage name);
      go rest
    | "--pause" :: rest -> pause := true; go rest
    | ("--help" | "-help" | "-h") :: _ -> usage name
    | a :: rest -> args := a :: !args; go rest
  in
  go (List.tl (Array.to_list Sys.argv));
  { name; steps = !steps; pause = !pause; args = List.rev !args }

let debug = Sys.getenv_opt "HEAPSNAP_SAMPLE_DEBUG" <> None
let debug_roots : (string * (unit -> Obj.t)) list ref = ref []

(* Register a root whose reachable size is printed at each checkpoint when
   HEAPSNAP_SAMPLE_DEBUG is set (never call it on a continuation). *)
let debug_root name get = debug_roots := (name, get) :: !debug_roots

let stdin_eof = ref false

let major_slices =
  match Sys.getenv_opt "HEAPSNAP_SAMPLE_MAJOR_SLICES" with
  | Some n -> (match int_of_string_opt n with Some n -> n | None -> 0)
  | None -> 0

(* OCaml 5.1's Gc.compact is one major cycle, which leaves blocks that died during it
   unswept; Gc.full_major's three cycles free them, as 5.2's compaction does. *)
let compact () =
  if String.length Sys.ocaml_version >= 4 && String.sub Sys.ocaml_version 0 4 = "5.1." then Gc.full_major ();
  Gc.compact ()

let checkpoint cfg ?(before_ready = fun _ -> ()) step =
  compact ();
  for _ = 1 to major_slices do ignore (Gc.major_slice 1_000_000) done;
  before_ready step;
  if debug then begin
    let st = Gc.quick_stat () in
    Printf.eprintf "# step %d heap_bytes %d\n%!" step (8 * st.Gc.heap_words);
    List.iter
      (fun (n, get) ->
         Printf.eprintf "# step %d root %s reachable_bytes %d\n%!" step n
           (8 * Obj.reachable_words (get ())))
      (List.rev !debug_roots)
  end;
  print_string ("READY " ^ string_of_int step ^ "\n");
  flush stdout;
  if cfg.pause && not !stdin_eof then
    match input_line stdin with
    | _ -> ()
    | exception End_of_file -> stdin_eof := true

(* Run [build cfg step] for step = 1..steps, with a checkpoint after each. *)
let run ?(default_steps = 3) ?before_ready ?(finish = fun () -> ()) build =
  let cfg = parse ~default_steps in
  for step = 1 to cfg.steps do
    build cfg step;
    checkpoint cfg ?before_ready step
  done;
  finish ();
  print_string "DONE\n";
  flush stdout;
  exit 0
