(* bigarray_sample: Bigarrays keep their payload outside the OCaml heap.
   Each global below is a small Custom_tag block (ops identifier "_bigarr02")
   in the heap, pointing to malloc'ed data. [ba_sub] is a slice of [ba_f64]
   that shares its data (through a proxy). *)

open Bigarray

let ba_f64 : (float, float64_elt, c_layout) Array1.t = Array1.create float64 c_layout 1_000_000
let ba_i32_2d : (int32, int32_elt, c_layout) Array2.t = Array2.create int32 c_layout 1000 500
let ba_char : (char, int8_unsigned_elt, c_layout) Array1.t = Array1.create char c_layout 100_000
let ba_sub : (float, float64_elt, c_layout) Array1.t = Array1.sub ba_f64 0 1000

let () =
  Array1.fill ba_f64 1.5;
  Array2.fill ba_i32_2d 7l;
  Array1.fill ba_char 'b';
  Heapsnap_sample.debug_root "ba_f64" (fun () -> Obj.repr ba_f64);
  Heapsnap_sample.debug_root "ba_i32_2d" (fun () -> Obj.repr ba_i32_2d);
  Heapsnap_sample.debug_root "ba_char" (fun () -> Obj.repr ba_char);
  Heapsnap_sample.debug_root "ba_sub" (fun () -> Obj.repr ba_sub);
  Heapsnap_sample.run (fun _cfg step ->
      ba_sub.{step} <- float_of_int step;
      assert (ba_f64.{step} = float_of_int step))
