(* closure_list: event handlers registered in a global list and never removed.
   Each step registers HANDLERS_PER_STEP (default 10000) closures created by
   [make_handler]; each closure captures 4 values (two ints, a 256-byte Bytes
   scratch buffer and a 13-character label). *)

let handlers : (int -> int) list ref = ref []

let make_handler id (scratch : Bytes.t) (weight : int) (label : string) =
  let handle_event ev =
    if ev = id then weight + Bytes.length scratch + String.length label else 0
  in
  handle_event

let register h = handlers := h :: !handlers

let dispatch ev = List.fold_left (fun acc h -> acc + h ev) 0 !handlers

let () =
  Heapsnap_sample.debug_root "handlers" (fun () -> Obj.repr handlers);
  Heapsnap_sample.run (fun cfg step ->
      let per_step =
        match cfg.args with [] -> 10_000 | n :: _ -> int_of_string n
      in
      for i = (step - 1) * per_step to step * per_step - 1 do
        let scratch = Bytes.make 256 '\000' in
        let label = Printf.sprintf "handler-%05d" i in
        register (make_handler i scratch (i mod 7) label)
      done;
      ignore (Sys.opaque_identity (dispatch (step * per_step - 1))))
