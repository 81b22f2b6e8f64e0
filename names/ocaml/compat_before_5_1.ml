
(* Compiler-libs differences, OCaml 4.14 and 5.0: a generative application [F ()] is an
   application of F to an empty structure, where F's parameter is [()]. *)
let generative_application (me : Typedtree.module_expr) =
  match me.mod_desc with
  | Typedtree.Tmod_apply (f, { mod_desc = Tmod_structure { str_items = []; _ }; _ }, _) -> (
      match f.mod_type with Types.Mty_functor (Types.Unit, _) -> Some f | _ -> None)
  | _ -> None
