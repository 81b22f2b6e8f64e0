(* typed_values: one module global per typing rule of heapsnap's OCaml names (issue 17), with
   what each block's type must be in typed_values.types.json. Records, a float record, a
   variant with constant, tuple and inline-record constructors, a polymorphic tree, a GADT
   (whose existential payload must stay untyped), a Map.Make map, a Hashtbl.Make table, a
   stdlib Hashtbl, Queue, Stack and Buffer, objects, a polymorphic variant, a forced lazy, an
   [@@unboxed] record, an Obj.magic'd value that must not be typed as its declared type, a
   block reached with two types, and an [include struct] before a submodule (whose fields
   OCaml 4.14 and 5 number differently). *)

type point = { x : int; y : int; label : string }
type fpoint = { fx : float; fy : float }
type shape = Empty | Circle of float | Rect of point * point | Poly of { pts : point list; closed : bool }
type 'a tree = Leaf | Node of 'a tree * 'a * 'a tree
type _ expr = Int : int -> int expr | Pair : 'a expr * 'b expr -> ('a * 'b) expr | Hidden : 'a * ('a -> string) -> string expr
type wrapped = { inner : point } [@@unboxed]
type a = { p : int; q : int }
type b = { r : int; s : int }
type holder = { x : a; more : b list }

module SMap = Map.Make (String)
module IH = Hashtbl.Make (struct type t = int let equal = Int.equal let hash = Hashtbl.hash end)

class counter name = object val mutable n = 0 val name : string = name method incr = n <- n + 1 method name = name end

let pt i = { x = i; y = -i; label = "p" ^ string_of_int i }
let points : point list ref = ref []
let fpoints : fpoint array = Array.init 4 (fun i -> { fx = float i; fy = 0.5 })
let shapes : shape array = [| Empty; Circle 2.5; Rect (pt 1, pt 2); Poly { pts = [ pt 3; pt 4 ]; closed = true } |]
let rec build d = if d = 0 then Leaf else Node (build (d - 1), "n" ^ string_of_int d, build (d - 1))
let tree : string tree = build 3
let pair : (int * int) expr = Pair (Int 1, Int 2)
let hidden : string expr = Hidden (Array.make 5 7, fun a -> string_of_int (Array.length a))
let smap : point SMap.t = SMap.(empty |> add "a" (pt 5) |> add "b" (pt 6) |> add "c" (pt 7))
let itbl : string IH.t = IH.create 8
let stbl : (string, point) Hashtbl.t = Hashtbl.create 8
let queue : point Queue.t = Queue.create ()
let stack : string Stack.t = Stack.create ()
let buffer : Buffer.t = Buffer.create 64
let objs : counter list = [ new counter "one"; new counter "two" ]
let poly : [ `Tag of point | `Other of string | `Const ] list = [ `Tag (pt 8); `Other "o"; `Const ]
let lazy_point : point Lazy.t = lazy (pt 9)
let boxed : wrapped = { inner = pt 10 }
let magic : point list = Obj.magic [| 1; 2 |]
(* One block seen as an [a] (through [holder.x], its immediate dominator) and as a [b]
   (through the list): it must be an [a]. *)
let conflict : holder = let v = { p = 1; q = 2 } in { x = v; more = [ Obj.magic v ] }
(* Module fields the compilers number differently: OCaml 4.14 stores an [include struct]'s
   bindings only as copies in the unit's own fields, 5.1 and later give the structure's
   bindings fields of their own too, before those of a submodule. *)
include struct let tags : string list = List.map String.uppercase_ascii [ "red"; "green" ] end
module Registry = struct let entries : (int * string) list ref = ref [ (1, string_of_int 1) ] end
(* A generative functor applied to an anonymous structure and included, its type abstract in
   its signature (menhir's [include GrammarFunctor.Make (struct ... end) ()]): the type is the
   one the functor's body defines. *)
module type COUNTED = sig type 'a t val make : 'a -> 'a t end
module Counted (X : sig val start : int end) () : COUNTED = struct
  type 'a t = { item : 'a; mutable count : int }
  let make item = { item; count = X.start + String.length "c" }
end
include Counted (struct let start = 7 end) ()
let counted : string t list = [ make "a"; make "b" ]

let () =
  Heapsnap_sample.run (fun _cfg step ->
      points := pt (100 + step) :: !points;
      IH.replace itbl step ("v" ^ string_of_int step);
      Hashtbl.replace stbl ("k" ^ string_of_int step) (pt step);
      Queue.push (pt (200 + step)) queue;
      Stack.push ("s" ^ string_of_int step) stack;
      Buffer.add_string buffer "abc";
      if step = 1 then ignore (Lazy.force lazy_point);
      List.iter (fun o -> o#incr) objs)
