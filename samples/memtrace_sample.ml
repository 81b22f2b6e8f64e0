(* Traced by memtrace (MEMTRACE=FILE, MEMTRACE_RATE=RATE), for heapsnap-memtrace's tests:
   allocates known sizes at known lines through two call paths, and only one path keeps its
   blocks. The lines marked SITE are found by the tests: keep each marker on its line.

   memtrace_sample ITERATIONS
   Each iteration allocates one block of 100 words through [leak] (kept) and one through
   [churn] (dropped, at a recursion depth of ITERATION mod 8); every 100th iteration, one block of 4096 words in the major heap (every
   other one kept) and one external allocation of 8000 bytes (every other one freed). *)

let small_words = 100
let big_words = 4096
let external_bytes = 8000
let kept = ref []
let kept_big = ref []

let[@inline never] make_block words = Array.make words 0 (* SITE make_block *)
let[@inline never] leak () = kept := make_block small_words :: !kept (* SITE leak *)

(* Recursive, so that churned blocks have backtraces of varying depth. *)
let[@inline never] rec churn depth =
  if depth = 0
  then ignore (Sys.opaque_identity (make_block small_words)) (* SITE churn *)
  else (
    churn (depth - 1) (* SITE churn_recursion *);
    ignore (Sys.opaque_identity depth))
;;

let[@inline never] big_block () = Array.make big_words 1 (* SITE big_block *)

(* A tail call: memtrace's backtrace of it starts at the caller. *)
let[@inline never] external_alloc () = Memtrace.External.alloc ~bytes:external_bytes

let () =
  Memtrace.trace_if_requested ~context:"heapsnap-memtrace sample" ();
  let iterations = int_of_string Sys.argv.(1) in
  let big = ref 0
  and ext_tokens = ref [] in
  for i = 1 to iterations do
    leak ();
    churn (i mod 8);
    if i mod 100 = 0
    then (
      let b = big_block () in
      if !big mod 2 = 0 then kept_big := b :: !kept_big;
      incr big;
      match external_alloc () (* SITE external *) with
      | Stdlib_shim.This token ->
        if List.length !ext_tokens mod 2 = 0 then Memtrace.External.free token;
        ext_tokens := token :: !ext_tokens
      | Null -> ())
  done;
  Gc.full_major ();
  Printf.printf
    "leak_blocks=%d churn_blocks=%d small_words=%d big_blocks=%d big_kept=%d big_words=%d \
     external_allocs=%d external_bytes=%d\n"
    (List.length !kept)
    iterations
    small_words
    !big
    (List.length !kept_big)
    big_words
    !big
    external_bytes
;;
