(* closure_shapes: the data functional programs keep in closures (issue 26), one module global
   per shape, with what each block's type must be in closure_shapes.types.json: a partial
   application, a closure capturing a record, a list, an array and a ref, mutually recursive
   functions sharing one block, nested closures, a closure over a functor-made table, an
   unforced lazy value, a memoisation library over a first-class module, a GADT with an
   existential, Lwt-style callback chains, dune's memo stores, a recursive module, a map an include brings. *)

type point = { x : int; y : int; label : string }

module SH = Hashtbl.Make (struct type t = string let equal = String.equal let hash = Hashtbl.hash end)

(* A partial application: [handler] holds its first four arguments. *)
let make_handler (id : int) (scratch : Bytes.t) (weight : float) (label : string) (ev : int) =
  if ev = id then int_of_float weight + Bytes.length scratch + String.length label else 0

let handlers : (int -> int) list ref = ref []

(* A closure over a record, a list, an array and a ref. *)
let counter (p : point) (names : string list) (samples : float array) =
  let calls = ref 0 in
  fun () -> incr calls; !calls + p.x + List.length names + Array.length samples

(* Mutually recursive functions share one block, and its environment. *)
let parity (seen : (string, point) Hashtbl.t) =
  let rec even n = n = 0 || (odd (n - 1) && Hashtbl.length seen >= 0)
  and odd n = n <> 0 && even (n - 1) in
  even

(* A closure that returns a closure: both keep [prefix]. *)
let greeter (prefix : string) =
  let greet (times : int) = fun name -> String.concat "" (List.init times (fun _ -> prefix ^ name)) in
  greet

(* A closure over a table made by a functor. *)
let lookup (table : point SH.t) = fun key -> SH.find_opt table key

(* An unforced lazy value, its thunk holding an array. *)
let delayed_sum (values : float array) = lazy (Array.fold_left ( +. ) 0. values)

(* A memoisation library in plain OCaml: a first-class module packs the table's
   implementation, and the memoised function keeps its table. *)
module type TABLE = sig
  type key
  type 'a t
  val create : int -> 'a t
  val find : 'a t -> key -> 'a option
  val add : 'a t -> key -> 'a -> unit
end

module String_table = struct
  type key = string
  type 'a t = 'a SH.t
  let create = SH.create
  let find = SH.find_opt
  let add = SH.replace
end

let memoise (type k) (module T : TABLE with type key = k) (f : k -> int) : k -> int =
  let table = T.create 16 in
  fun key ->
    match T.find table key with
    | Some v -> v
    | None -> let v = f key in T.add table key v; v

(* A store in dune's style (its memo tables): the signature keeps the table's type abstract; the
   closures beside it are the table's own functions, which say what it is. *)
module type INSTANCE = sig
  type key
  type value
  type t
  val find : t -> key -> value option
  val set : t -> key -> value -> unit
  val store : t
end

module Point_table = struct
  type ('k, 'v) t = { mutable entries : ('k * 'v) list; name : string }
  let create name = { entries = []; name }
  let find (t : ('k, 'v) t) (k : 'k) : 'v option = List.assoc_opt k t.entries
  let set (t : ('k, 'v) t) (k : 'k) (v : 'v) = t.entries <- (k, v) :: t.entries
end

let make_store (type k v) (name : string) : (module INSTANCE with type key = k and type value = v) =
  (module struct
    type key = k
    type value = v
    type t = (k, v) Point_table.t
    let find = Point_table.find
    let set = Point_table.set
    let store = Point_table.create name
  end)

(* A recursive module, whose type is declared in its signature only. *)
module rec Chain : sig
  type t = { label : string; mutable next : Chain.t option }
end =
  Chain

(* A map made by a functor that an include brings in (dune's Path.Build.Map). *)
module Maps = struct
  module Fix (R : sig type w end) = struct
    type w = R.w
    module Names = Map.Make (String)
  end
end

module Paths = struct
  include Maps
  include Fix (struct type w = int end)
end

(* A definition after an include shadows what the include bound (dune's Memo.Lazy). *)
module Shadowed = struct
  include Paths
  module Names = Map.Make (Int)
end

(* A GADT whose constructor hides its payload's type. *)
type shown = Shown : 'a list * ('a -> string) -> shown

(* Callback chains in the style of Lwt: a promise keeps the callbacks waiting for it, each a
   closure over the next promise. *)
type 'a state = Pending of ('a -> unit) list | Resolved of 'a
type 'a promise = { mutable state : 'a state }

let resolve p v =
  match p.state with
  | Pending waiting -> p.state <- Resolved v; List.iter (fun k -> k v) waiting
  | Resolved _ -> ()

let bind (p : 'a promise) (f : 'a -> 'b promise) : 'b promise =
  let next = { state = Pending [] } in
  let on_value v = let q = f v in match q.state with Resolved w -> resolve next w | Pending l -> q.state <- Pending ((fun w -> resolve next w) :: l) in
  (match p.state with Resolved v -> on_value v | Pending l -> p.state <- Pending (on_value :: l));
  next

(* A closure in a functor's body over the functor's parameter: translation renames the
   parameter, which the environment then stores last. *)
module Numbered (Start : sig val first : int end) = struct
  let make (name : string) =
    let n = ref Start.first in
    fun () -> incr n; name ^ string_of_int (!n + Start.first)
end

module Numbered_from_5 = Numbered (struct let first = 5 end)

(* A closure in a function with a default argument, whose body translation renames: it is
   named, its environment not typed. *)
let scaled (label : string) =
  let go ?(scale = 2) (items : int list) = fun () -> String.length label + (List.length items * scale) in
  go

(* A partial application of a function the caller does not know: caml_curry3's closure holds
   the first argument and the function's own closure. *)
let join3 (b : string) (a : int) (c : float) = b ^ string_of_int a ^ string_of_float c
let apply_first (f : string -> int -> float -> string) (x : string) = (Sys.opaque_identity f) x

(* A tupled function: caml_tuplify2's closure, its own code in field 2 (the test keeps the
   compiler from merging it into pair_adder, as 4.14 to 5.2 would). *)
let pair_adder (base : point) = if base.x < 0 then fun (_, _) -> 0 else fun (a, b) -> a + b + base.x

let counters : (unit -> int) list ref = ref []
let tupled : (int * int -> int) list ref = ref []
let curried : (int -> float -> string) list ref = ref []
let numbered : (unit -> string) list ref = ref []
let scalers : (unit -> int) list ref = ref []
let parities : (int -> bool) list ref = ref []
let greeters : (string -> string) list ref = ref []
let lookups : (string -> point option) list ref = ref []
let delayed : float Lazy.t list ref = ref []
let memo_lengths : (string -> int) list ref = ref []
let shown : shown list ref = ref []
let shown_any : shown list ref = ref []
let pending : (string promise * int promise) list ref = ref []
let stores : (module INSTANCE with type key = string and type value = point) list ref = ref []
let chains : Chain.t list ref = ref []
let by_name : point Paths.Names.t ref = ref Paths.Names.empty
let by_number : point Shadowed.Names.t ref = ref Shadowed.Names.empty

let pt i = { x = i; y = -i; label = "p" ^ string_of_int i }
let describe_any (_ : 'a) = "any"

(* Binding operators (dune's Action_builder): [let+ p = a and+ n = b in body] applies the
   operator to [fun (p, n) -> body], a function made at the body's place. *)
type _ builder =
  | Pure : 'a -> 'a builder
  | Mapped : 'a builder * ('a -> 'b) -> 'b builder
  | Both : 'a builder * 'b builder -> ('a * 'b) builder

let ( let+ ) b f = Mapped (b, f)
let ( and+ ) a b = Both (a, b)
let builders : string builder list ref = ref []

let () =
  Heapsnap_sample.run (fun _cfg step ->
      handlers := make_handler step (Bytes.make 16 'h') 1.5 ("handler-" ^ string_of_int step) :: !handlers;
      counters := counter (pt step) [ "a" ^ string_of_int step; "b" ] (Array.make 3 0.5) :: !counters;
      tupled := pair_adder (pt (50 + step)) :: !tupled;
      let seen = Hashtbl.create 4 in
      Hashtbl.replace seen ("k" ^ string_of_int step) (pt step);
      parities := parity seen :: !parities;
      greeters := greeter ("hello-" ^ string_of_int step) 2 :: !greeters;
      let table = SH.create 4 in
      SH.replace table ("t" ^ string_of_int step) (pt (10 + step));
      lookups := lookup table :: !lookups;
      delayed := delayed_sum (Array.make 4 (float step)) :: !delayed;
      let memo = memoise (module String_table) String.length in
      ignore (memo ("word" ^ string_of_int step));
      memo_lengths := memo :: !memo_lengths;
      shown := Shown ([ pt step ], fun p -> p.label) :: !shown;
      shown_any := Shown ([ "s" ^ string_of_int step ], describe_any) :: !shown_any;
      let suffix = String.make step '!' in
      builders := (let+ p = Pure (pt (60 + step)) and+ n = Pure step in p.label ^ string_of_int n ^ suffix) :: !builders;
      let first = { state = Pending [] } in
      let second = bind first (fun s -> { state = Resolved (String.length s + step) }) in
      pending := (first, second) :: !pending;
      let store : (module INSTANCE with type key = string and type value = point) = make_store ("store-" ^ string_of_int step) in
      (let module S = (val store) in
       S.set S.store ("s" ^ string_of_int step) (pt (20 + step)));
      stores := store :: !stores;
      chains := { Chain.label = "c" ^ string_of_int step; next = Some { Chain.label = "end"; next = None } } :: !chains;
      by_name := Paths.Names.add ("n" ^ string_of_int step) (pt (30 + step)) !by_name;
      by_number := Shadowed.Names.add step (pt (40 + step)) !by_number;
      curried := apply_first join3 ("first-" ^ string_of_int step) :: !curried;
      numbered := Numbered_from_5.make ("item-" ^ string_of_int step) :: !numbered;
      scalers := scaled ("s" ^ string_of_int step) [ step; step ] :: !scalers;
      ignore (Sys.opaque_identity (List.map (fun h -> h step) !handlers)))
