(* lazy_sample: lazy values before and after forcing.
   [unforced] is never forced: its Lazy_tag block holds a closure whose
   environment captures [captured] (an int array of 10000 elements), so the
   array is retained through the suspended computation.
   [forced] is forced at step 1 and then holds its result, a float array of
   20000 elements (after forcing, the block has Forward_tag and points to the
   result). *)

let make_table n = Array.init n (fun i -> i * i)

let unforced : int Lazy.t =
  let captured = make_table 10_000 in
  lazy (Array.fold_left ( + ) 0 captured)

let forced : float array Lazy.t = lazy (Array.init 20_000 float_of_int)

let () =
  Heapsnap_sample.debug_root "unforced" (fun () -> Obj.repr unforced);
  Heapsnap_sample.debug_root "forced" (fun () -> Obj.repr forced);
  Heapsnap_sample.run
    (fun _cfg step -> if step = 1 then assert (Array.length (Lazy.force forced) = 20_000))
    ~before_ready:(fun step ->
        if Heapsnap_sample.debug then
          Printf.eprintf "# step %d tag(unforced)=%d tag(forced)=%d\n%!" step
            (Obj.tag (Obj.repr unforced)) (Obj.tag (Obj.repr forced)))
