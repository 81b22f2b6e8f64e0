(* long_list: a list of exactly 1_000_000 elements held by a global.
   The elements are immediate ints, so the list is 10^6 cons blocks. *)

let long_list : int list = List.init 1_000_000 (fun i -> i)

let () =
  Heapsnap_sample.debug_root "long_list" (fun () -> Obj.repr long_list);
  Heapsnap_sample.run (fun _cfg _step -> assert (List.length long_list = 1_000_000))
