(* Compiler-libs differences, OCaml 5.2 and later. *)
let let_bound vbs =
  List.map (fun (id, _, ty, _) -> (id, ty)) (Typedtree.let_bound_idents_full vbs)

let pat_vars p = List.map (fun (id, _, ty, _) -> (id, ty)) (Typedtree.pat_bound_idents_full p)
