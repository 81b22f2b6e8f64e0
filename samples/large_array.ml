(* large_array: arrays far above the large-allocation threshold.
   [big_ints]   : Array.make 1_000_000 0       (one block, immediates)
   [big_floats] : Array.make 500_000 0.5       (one Double_array_tag block)
   [big_boxed]  : Array.init 100_000 (i, i)    (one block pointing to 100000 pairs) *)

let big_ints : int array = Array.make 1_000_000 0
let big_floats : float array = Array.make 500_000 0.5
let big_boxed : (int * int) array = Array.init 100_000 (fun i -> (i, i + 1))

let () =
  Heapsnap_sample.debug_root "big_ints" (fun () -> Obj.repr big_ints);
  Heapsnap_sample.debug_root "big_floats" (fun () -> Obj.repr big_floats);
  Heapsnap_sample.debug_root "big_boxed" (fun () -> Obj.repr big_boxed);
  Heapsnap_sample.run (fun _cfg step ->
      big_ints.(step) <- step;
      big_floats.(step) <- float_of_int step)
