(* Compiler-libs differences, OCaml 4.14 to 5.1. *)
let let_bound vbs =
  List.map (fun (id, _, ty) -> (id, ty)) (Typedtree.let_bound_idents_full vbs)

let pat_vars p = List.map (fun (id, _, ty) -> (id, ty)) (Typedtree.pat_bound_idents_full p)
