(* Linked before alloc_sites.ml into alloc_sites_memtrace (memtrace/scripts/build-ocaml-programs.sh):
   with MEMTRACE=FILE, memtrace traces the program from its start, and its tracker's value for
   each sampled block is the allocation's id in the trace. *)
let () = Memtrace.trace_if_requested ~context:"alloc_sites" ()
