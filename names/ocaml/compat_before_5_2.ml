(* Compiler-libs differences, OCaml 4.14 to 5.1. *)
let let_bound vbs =
  List.map (fun (id, _, ty) -> (id, ty)) (Typedtree.let_bound_idents_full vbs)

let pat_vars p = List.map (fun (id, _, ty) -> (id, ty)) (Typedtree.pat_bound_idents_full p)

(* A function node's own default argument (Typecore makes [?(x = d)] a parameter [*opt*]
   whose body starts by matching it), and the function directly in its body (the next node of
   a curried chain). *)
let has_default_arg (e : Typedtree.expression) =
  match e.exp_desc with
  | Texp_function { arg_label = Optional _; cases = [ { c_lhs = { pat_desc = Tpat_var (id, _); _ }; _ } ]; _ } ->
      Ident.name id = "*opt*"
  | _ -> false

let nested_function (e : Typedtree.expression) =
  match e.exp_desc with
  | Texp_function { cases = [ { c_rhs = { exp_desc = Texp_function _; _ } as body; c_guard = None; _ } ]; _ } -> Some body
  | Texp_function { cases = [ { c_rhs = { exp_desc = Texp_let (_, _, ({ exp_desc = Texp_function _; _ } as body)); _ }; _ } ]; _ } ->
      (* [?(x = d)]: the default's binding, then the rest of the chain. *)
      Some body
  | _ -> None

(* The directories a unit was compiled with (-I), as its .cmt records them. *)
let load_path (info : Cmt_format.cmt_infos) = info.cmt_loadpath
