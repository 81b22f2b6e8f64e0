(* memory_growth: a leak that grows until something kills the program (the on-memory
   trigger's test: a snapshot before the out-of-memory killer).
     memory_growth [--steps K] [--pause] [MB_PER_S [MAX_MB]]   (defaults: 60, no maximum)
   The steps check in with nothing built (READY i). Then the program grows, for ever: every
   10 ms, on a fixed schedule (a late tick catches up), it adds MB_PER_S * 10 kB worth of
   sessions to the global table [sessions]. A session is a record {id; user; payload} whose
   payload is 1000 bytes: about 1100 heap bytes a session, Hashtbl cell and user name
   included. With MAX_MB, it stops growing there, prints DONE and exits 0 (a test's guard
   against a limit that did not hold). The table is made at its final size (2^20 buckets: it
   resizes only past 2^21 sessions, about 2.3 GB), so that no bucket array is ever replaced:
   the major heap then holds no garbage, and `heapsnap verify --strict` of a snapshot taken
   while it grows checks that no root was missed. *)

type session = { id : int; user : string; payload : Bytes.t }

let sessions : (int, session) Hashtbl.t = Hashtbl.create (1 lsl 20)
let bytes_per_session = 1100
let tick = 0.01

let grow rate_mb max_mb () =
  let per_tick = max 1 (int_of_float (rate_mb *. 1e6 *. tick) / bytes_per_session) in
  let cap = match max_mb with Some mb -> int_of_float (mb *. 1e6) / bytes_per_session | None -> max_int in
  let start = Unix.gettimeofday () in
  let rec loop k next_id =
    if next_id < cap then begin
      for id = next_id to next_id + per_tick - 1 do
        Hashtbl.replace sessions id { id; user = "user-" ^ string_of_int id; payload = Bytes.make 1000 'x' }
      done;
      let wait = start +. (float_of_int (k + 1) *. tick) -. Unix.gettimeofday () in
      if wait > 0. then Unix.sleepf wait;
      loop (k + 1) (next_id + per_tick)
    end
  in
  loop 0 0

let () =
  Heapsnap_sample.debug_root "sessions" (fun () -> Obj.repr sessions);
  let cfg_args = ref [] in
  Heapsnap_sample.run ~default_steps:1
    ~finish:(fun () ->
      let rate, max_mb =
        match !cfg_args with
        | [] -> (60., None)
        | [ r ] -> (float_of_string r, None)
        | r :: m :: _ -> (float_of_string r, Some (float_of_string m))
      in
      grow rate max_mb ())
    (fun cfg _ -> cfg_args := cfg.Heapsnap_sample.args)
