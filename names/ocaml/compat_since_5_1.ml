
(* Compiler-libs differences, OCaml 5.1 and later: a generative application [F ()] is a node of
   its own. *)
let generative_application (me : Typedtree.module_expr) =
  match me.mod_desc with Typedtree.Tmod_apply_unit f -> Some f | _ -> None
