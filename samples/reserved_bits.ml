(* reserved_bits (rhb16 toolchain only): blocks whose header carries a value
   in the reserved header bits (configure --enable-reserved-header-bits=16).
     reserved 7     : 100 blocks, wosize 2,   tag 0, minor heap (Alloc_small_with_reserved), then promoted
     reserved 42    :  50 blocks, wosize 4,   tag 0, major heap (caml_alloc_shr_reserved)
     reserved 1000  :  10 blocks, wosize 300, tag 0, major heap, large allocation
     reserved 65535 :   5 blocks, wosize 3,   tag 0, major heap (largest 16-bit value)
   Fields hold Val_long(0..wosize-1). Each group is an array held by a global.
   Every checkpoint verifies the reserved bits are still in place. *)

external alloc_shr_reserved : int -> int -> int -> Obj.t = "heapsnap_alloc_shr_reserved"
external alloc_small_reserved : int -> int -> int -> Obj.t = "heapsnap_alloc_small_reserved"
external reserved_of : Obj.t -> int = "heapsnap_reserved_of"
external reserved_header_bits : unit -> int = "heapsnap_reserved_header_bits"

let res7 : Obj.t array = Array.init 100 (fun _ -> alloc_small_reserved 2 0 7)
let res42 : Obj.t array = Array.init 50 (fun _ -> alloc_shr_reserved 4 0 42)
let res1000 : Obj.t array = Array.init 10 (fun _ -> alloc_shr_reserved 300 0 1000)
let res65535 : Obj.t array = Array.init 5 (fun _ -> alloc_shr_reserved 3 0 65535)

let check step =
  let bits = reserved_header_bits () in
  if bits <> 16 then begin
    Printf.eprintf "reserved_bits: runtime has %d reserved header bits, need 16 (build with the rhb16 toolchain)\n%!" bits;
    exit 3
  end;
  List.iter
    (fun (r, a, wosize) ->
       Array.iter
         (fun b ->
            if reserved_of b <> r || Obj.size b <> wosize || Obj.tag b <> 0 then begin
              Printf.eprintf "reserved_bits: step %d: block has reserved %d size %d tag %d, expected %d/%d/0\n%!"
                step (reserved_of b) (Obj.size b) (Obj.tag b) r wosize;
              exit 4
            end)
         a)
    [ (7, res7, 2); (42, res42, 4); (1000, res1000, 300); (65535, res65535, 3) ];
  (* the arrays themselves have no reserved bits *)
  assert (reserved_of (Obj.repr res7) = 0)

let () =
  Heapsnap_sample.debug_root "res7" (fun () -> Obj.repr res7);
  Heapsnap_sample.debug_root "res42" (fun () -> Obj.repr res42);
  Heapsnap_sample.debug_root "res1000" (fun () -> Obj.repr res1000);
  Heapsnap_sample.debug_root "res65535" (fun () -> Obj.repr res65535);
  Heapsnap_sample.run (fun _cfg step -> check step) ~before_ready:check
