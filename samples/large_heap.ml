(* large_heap: generator of large heaps for benchmarks.
     large_heap [--steps K] [--pause] [N]     (N = millions of objects, float, default 1)
   Step 1 builds about N million live objects: ITEMS = round(N * 10^6 / 7)
   items, each made of exactly 7 heap blocks:
     name    string "item-<i>"                 (String_tag)
     vec     int array of 3                    (tag 0)
     weight  boxed float                       (Double_tag)
     score   closure capturing i and name      (Closure_tag)
     item    record {id; name; vec; score; weight}  (tag 0, 5 fields)
     cons    cell of the global list [items]   (tag 0, 2 fields)
     bucket  Hashtbl Cons cell in [index]      (tag 0, 3 fields; key = i, an int)
   plus the Hashtbl bucket array. Later steps change nothing. *)

type item = {
  id : int;
  name : string;
  vec : int array;
  score : int -> int;
  weight : float;
}

let items : item list ref = ref []
let index : (int, item) Hashtbl.t = Hashtbl.create 16

let make_item i =
  let name = "item-" ^ string_of_int i in
  let score k = k * i + String.length name in
  { id = i; name; vec = [| i; 2 * i; 3 * i |]; score; weight = float_of_int i *. 0.5 }

let () =
  Heapsnap_sample.debug_root "items" (fun () -> Obj.repr items);
  Heapsnap_sample.debug_root "index" (fun () -> Obj.repr index);
  Heapsnap_sample.run (fun cfg step ->
      if step = 1 then begin
        let millions =
          match cfg.args with [] -> 1.0 | n :: _ -> float_of_string n
        in
        let count = int_of_float (Float.round (millions *. 1e6 /. 7.)) in
        let t0 = Sys.time () in
        for i = 0 to count - 1 do
          let it = make_item i in
          items := it :: !items;
          Hashtbl.replace index i it
        done;
        Printf.eprintf "large_heap: %d items, %d objects, built in %.2fs cpu\n%!"
          count (7 * count) (Sys.time () -. t0)
      end)
