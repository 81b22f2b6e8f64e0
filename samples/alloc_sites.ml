(* alloc_sites: objects of one shape allocated at two sites, and only one site leaks.
   Each step handles REQUESTS requests (default 2000). [open_session] allocates a session (a
   record holding a PAYLOAD-byte Bytes, default 1000) that the global Hashtbl [sessions] keeps
   forever: the leak. [scratch] allocates a record of the same shape that only [recent], a
   global ring of 64 slots, keeps: bounded. The lines marked SITE are found by the tests: keep
   each marker on its line.

   alloc_sites [--steps K] [--pause] [REQUESTS [PAYLOAD]] [--tracker callstack] [--rate R]

   --tracker callstack: Gc.Memprof samples at rate R (default 0.01, per word) with a tracker
   that keeps each sampled block's call stack (a Printexc.raw_backtrace) as its tracking
   data; OCaml 5.3 and later. alloc_sites_memtrace (this program linked with memtrace, built
   by memtrace/scripts/build-ocaml-programs.sh) is traced by memtrace instead with
   MEMTRACE=FILE (MEMTRACE_RATE=R). Without either, nothing is sampled. *)

type session = {
  id : int;
  payload : Bytes.t;
  mutable hits : int;
}

let sessions : (int, session) Hashtbl.t = Hashtbl.create 16
let recent : session option array = Array.make 64 None
let next_id = ref 0

let[@inline never] open_session payload_bytes =
  let id = !next_id in
  incr next_id;
  let s = { id; payload = Bytes.make payload_bytes 's'; hits = 0 } (* SITE leak *) in
  Hashtbl.replace sessions id s

let[@inline never] scratch payload_bytes i =
  let s = { id = i; payload = Bytes.make payload_bytes 't'; hits = 0 } (* SITE scratch *) in
  recent.(i mod Array.length recent) <- Some s

let[@inline never] handle payload_bytes i =
  open_session payload_bytes;
  scratch payload_bytes i

let start_tracker rate =
  let keep_stack info = Some info.Gc.Memprof.callstack in
  let tracker =
    { Gc.Memprof.null_tracker with
      alloc_minor = keep_stack;
      alloc_major = keep_stack;
      promote = (fun stack -> Some stack) }
  in
  ignore (Gc.Memprof.start ~sampling_rate:rate ~callstack_size:32 tracker)

let () =
  Heapsnap_sample.debug_root "sessions" (fun () -> Obj.repr sessions);
  let rec options ~tracker ~rate rest = function
    | "--tracker" :: t :: more -> options ~tracker:(Some t) ~rate rest more
    | "--rate" :: r :: more -> options ~tracker ~rate:(float_of_string r) rest more
    | a :: more -> options ~tracker ~rate (a :: rest) more
    | [] -> (tracker, rate, List.rev rest)
  in
  let args = List.tl (Array.to_list Sys.argv) in
  let tracker, rate, _ = options ~tracker:None ~rate:0.01 [] args in
  (match tracker with
   | Some "callstack" -> start_tracker rate
   | Some t -> Printf.eprintf "alloc_sites: unknown tracker %s\n%!" t; exit 2
   | None -> ());
  Heapsnap_sample.run (fun cfg step ->
      let _, _, positional = options ~tracker:None ~rate [] cfg.args in
      let positional = List.filter (fun a -> int_of_string_opt a <> None) positional in
      let requests, payload =
        match positional with
        | [] -> (2000, 1000)
        | [ n ] -> (int_of_string n, 1000)
        | n :: p :: _ -> (int_of_string n, int_of_string p)
      in
      for i = (step - 1) * requests to (step * requests) - 1 do
        handle payload i
      done)
