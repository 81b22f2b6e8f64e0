(* Compiler-libs differences, OCaml 5.2 and later. *)
let let_bound vbs =
  List.map (fun (id, _, ty, _) -> (id, ty)) (Typedtree.let_bound_idents_full vbs)
