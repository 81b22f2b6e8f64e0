(* Compiler-libs differences, OCaml 5.2 and later. *)
let let_bound vbs =
  List.map (fun (id, _, ty, _) -> (id, ty)) (Typedtree.let_bound_idents_full vbs)

let pat_vars p = List.map (fun (id, _, ty, _) -> (id, ty)) (Typedtree.pat_bound_idents_full p)

(* A function node's own default argument ([?(x = d)]), and the function directly in its body
   (the next node of a curried chain). *)
let has_default_arg (e : Typedtree.expression) =
  match e.exp_desc with
  | Texp_function (params, _) ->
      List.exists (fun (p : Typedtree.function_param) -> match p.fp_kind with Tparam_optional_default _ -> true | Tparam_pat _ -> false) params
  | _ -> false

let nested_function (e : Typedtree.expression) =
  match e.exp_desc with
  | Texp_function (_, Tfunction_body ({ exp_desc = Texp_function _; _ } as body)) -> Some body
  | _ -> None

(* The directories a unit was compiled with (-I and -H), as its .cmt records them. *)
let load_path (info : Cmt_format.cmt_infos) = info.cmt_loadpath.visible @ info.cmt_loadpath.hidden
