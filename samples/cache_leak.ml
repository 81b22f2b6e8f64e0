(* cache_leak: a memoisation cache that is never evicted.
   Every step adds ENTRIES_PER_STEP (default 5000) fresh string keys, each
   mapped to a record holding a 1000-byte Bytes payload. Nothing is ever removed,
   so the global [cache] grows by a fixed amount per step. *)

type entry = {
  id : int;                 (* immediate *)
  payload : Bytes.t;        (* 1000 bytes: wosize 126, 1016 bytes with header *)
  mutable hits : int;       (* immediate *)
}

let payload_bytes = 1000

let cache : (string, entry) Hashtbl.t = Hashtbl.create 16

let next_id = ref 0

let lookup key =
  match Hashtbl.find_opt cache key with
  | Some e -> e.hits <- e.hits + 1; e
  | None ->
    let id = !next_id in
    incr next_id;
    let e = { id; payload = Bytes.make payload_bytes (Char.chr (65 + id mod 26)); hits = 0 } in
    Hashtbl.replace cache key e;
    e

let () =
  Heapsnap_sample.debug_root "cache" (fun () -> Obj.repr cache);
  Heapsnap_sample.run (fun cfg step ->
      let per_step =
        match cfg.args with [] -> 5000 | n :: _ -> int_of_string n
      in
      for i = (step - 1) * per_step to step * per_step - 1 do
        (* keys are 10 characters: "req-000000" .. "req-999999" *)
        ignore (lookup (Printf.sprintf "req-%06d" i))
      done)
