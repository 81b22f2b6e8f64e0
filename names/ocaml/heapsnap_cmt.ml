(* heapsnap's .cmt reader. Built by heapsnap with the user's own toolchain (compiler-libs of the
   same OCaml version as the program), it reads .cmt files (and the .cmti beside each) and
   prints on stdout one JSON object:

     {"ocaml_version": V, "units": [UNIT...], "errors": [{"file": F, "message": M}...]}

   UNIT = {"unit", "file", "source", "digest", "interface": bool,
           "fields": [{"name", "path", "kind", "type"}...]   (* the module block, field by field *)
           "exported": N,    (* how many of "fields" the interface's runtime components are *)
           "types": [DECL...], "modules": [MODULE...], "module_types": [MODTYPE...]}

   MODTYPE = {"path", "fields": [{"name", "kind", "type", "params"}...]} (a signature's runtime
   components in order, what a first-class module of the type holds; "params" the argument
   types of a function's type) or {"path", "alias": MODTYPE_PATH}

   Field order is the native compiler's (Translmod.transl_store_gen): the interface's runtime
   components in order, then the other idents of the structure in order of definition, then
   the idents of its submodules and of the included structures compiled in place (more_idents;
   which includes those are depends on the OCaml version, see [translated_inline]). Bytecode
   (Translmod.transl_implementation) builds the block of the coerced structure: the interface's
   runtime components alone, the first "exported" fields. Paths are qualified strings: "Unit.Sub.t";
   a functor's parameter P is "Unit.F{P}" (an unnamed one "_"); an application is "F(A)", a
   generative one "F()"; an anonymous structure is "Unit.%N". Type expressions are JSON (see
   [ty]). Compat_* hides the compiler-libs
   differences between versions (chosen when heapsnap builds this program). *)

open Typedtree
open Types

(* ---- JSON output ---- *)

let out = Buffer.create (1 lsl 20)
let jstr s =
  Buffer.add_char out '"';
  String.iter
    (fun c ->
      match c with
      | '"' -> Buffer.add_string out "\\\""
      | '\\' -> Buffer.add_string out "\\\\"
      | c when Char.code c < 0x20 || Char.code c >= 0x7f ->
          Buffer.add_string out (Printf.sprintf "\\u%04x" (Char.code c))
      | c -> Buffer.add_char out c)
    s;
  Buffer.add_char out '"'
let raw s = Buffer.add_string out s
let list f l =
  raw "[";
  List.iteri (fun i x -> if i > 0 then raw ","; f x) l;
  raw "]"
let opt f = function None -> raw "null" | Some x -> f x
let key k = jstr k; raw ":"

(* ---- qualified names ---- *)

(* Ident (unique name) -> qualified path, filled as the structure is walked. *)
let quals : (string, string) Hashtbl.t = Hashtbl.create 1024
let qualify id q = Hashtbl.replace quals (Ident.unique_name id) q

let rec path_str (p : Path.t) =
  match p with
  | Pident id -> (
      match Hashtbl.find_opt quals (Ident.unique_name id) with
      | Some q -> q
      | None -> if Ident.global id || Ident.is_predef id then Ident.name id else "?" ^ Ident.name id)
  | Pdot (p, s) -> path_str p ^ "." ^ s
  | Papply (f, a) -> path_str f ^ "(" ^ path_str a ^ ")"
  | p -> "?" ^ Path.name p [@@warning "-11"]

(* ---- type expressions ----
   {"v": ID} a type variable; {"f": 1} a function; {"t": [T...]} a tuple;
   {"c": PATH, "a": [T...]} a constructor; {"o": [METHOD...]} an object;
   {"pv": [[LABEL, T or null]...]} a polymorphic variant; {"pk": MODTYPE_PATH, "w": [[TYPE_NAME,
   T]...]} a first-class module's package type with its constraints; {"u": 1} anything else. *)

let rec ty seen (t : type_expr) =
  let id = get_id t in
  if List.mem id seen || List.length seen > 60 then raw "{\"u\":1}"
  else
    let seen = id :: seen in
    match get_desc t with
    | Tvar _ | Tunivar _ -> raw (Printf.sprintf "{\"v\":%d}" id)
    | Tarrow _ -> raw "{\"f\":1}"
    | Ttuple l -> raw "{\"t\":"; list (ty seen) l; raw "}"
    | Tconstr (p, args, _) ->
        raw "{\"c\":"; jstr (path_str p); raw ",\"a\":"; list (ty seen) args; raw "}"
    | Tobject (fields, _) ->
        let rec methods t acc =
          match get_desc t with
          | Tfield (name, _, _, rest) -> methods rest (name :: acc)
          | _ -> List.rev acc
        in
        raw "{\"o\":"; list jstr (methods fields []); raw "}"
    | Tvariant row ->
        let field (label, f) =
          raw "["; jstr label; raw ",";
          (match row_field_repr f with
           | Rpresent (Some t) | Reither (_, [ t ], _) -> ty seen t
           | _ -> raw "null");
          raw "]"
        in
        raw "{\"pv\":"; list field (row_fields row); raw "}"
    | Tpoly (t, _) -> ty seen t
    | Tpackage (p, constraints) ->
        let constr (li, t) = raw "["; jstr (String.concat "." (Longident.flatten li)); raw ","; ty seen t; raw "]" in
        raw "{\"pk\":"; jstr (path_str p); raw ",\"w\":"; list constr constraints; raw "}"
    | _ -> raw "{\"u\":1}"

let ty t = ty [] t

(* The arguments' types of a signature item's function type, as written (no environment to
   expand abbreviations with). *)
let rec sig_arrow_params t =
  match get_desc t with
  | Tarrow (_, a, r, _) -> a :: sig_arrow_params r
  | Tpoly (t, _) -> sig_arrow_params t
  | _ -> []

(* ---- type declarations ---- *)

let label (l : label_declaration) =
  raw "["; jstr (Ident.name l.ld_id); raw ","; raw (if l.ld_mutable = Mutable then "true" else "false");
  raw ","; ty l.ld_type; raw "]"

let record_repr (r : record_representation) =
  match r with
  | Record_regular -> "regular"
  | Record_float -> "float"
  | Record_unboxed _ -> "unboxed"
  | _ -> "other" [@@warning "-11"]

let constructor (c : constructor_declaration) =
  raw "{"; key "name"; jstr (Ident.name c.cd_id); raw ",";
  (match c.cd_args with
   | Cstr_tuple l ->
       key "args"; list ty l;
       (* A function argument's own arguments and result, as declared: a closure there says
          what an existential is. *)
       let arrow t =
         match sig_arrow_params t with
         | [] -> raw "null"
         | params ->
             let rec result t = match get_desc t with Tarrow (_, _, r, _) -> result r | Tpoly (t, _) -> result t | _ -> t in
             raw "{\"p\":"; list ty params; raw ",\"r\":"; ty (result t); raw "}"
       in
       if List.exists (fun t -> sig_arrow_params t <> []) l then (raw ","; key "arrows"; list arrow l)
   | Cstr_record ls -> key "record"; list label ls);
  raw ","; key "res"; opt ty c.cd_res; raw "}"

let decl q (d : type_declaration) =
  raw "{"; key "path"; jstr q; raw ","; key "params";
  list (fun t -> raw (string_of_int (get_id t))) d.type_params;
  raw ","; key "manifest"; opt ty d.type_manifest; raw ","; key "kind";
  (match d.type_kind with
   | Type_record (ls, r) ->
       raw "{\"record\":"; list label ls; raw ",\"repr\":"; jstr (record_repr r); raw "}"
   | Type_variant (cs, r) ->
       raw "{\"variant\":"; list constructor cs; raw ",\"unboxed\":";
       raw (match r with Variant_unboxed -> "true" | _ -> "false"); raw "}"
   | Type_open -> jstr "open"
   | _ -> jstr "abstract");
  raw "}"

(* ---- the structure: qualified names, declarations, modules ---- *)

let types = ref []     (* (path, decl) in order *)
let classes = ref []   (* (path, parameter ids): object types *)
let modules = ref []   (* JSON writers *)
let module_types = ref []   (* JSON writers *)
let anon = ref 0

let add_module path what arg =
  modules := (fun () -> raw "{"; key "path"; jstr path; raw ","; key what; arg (); raw "}") :: !modules

(* Which binding of a module path is the last (a definition after an include shadows what the
   include bound, and the other way round): path -> its binding's number. *)
let last_binding : (string, int) Hashtbl.t = Hashtbl.create 256
let bindings = ref 0
let bind_module path = incr bindings; Hashtbl.replace last_binding path !bindings; !bindings

(* Submodules an include binds, as aliases: (path, binding, target). *)
let include_aliases = ref []

(* A module type's runtime components, in order: what a first-class module of that type holds
   (Translcore packs a module by coercing it to the package's signature). *)
let module_type_json q (mty : Types.module_type) =
  match mty with
  | Mty_signature sg ->
      let field = function
        | Sig_value (id, { val_kind = Val_reg; val_type; _ }, _) ->
            Some (fun () ->
                raw "{"; key "name"; jstr (Ident.name id); raw ","; key "kind"; jstr "value"; raw ",";
                key "type"; ty val_type; raw ","; key "params"; list ty (sig_arrow_params val_type); raw "}")
        | Sig_value (_, _, _) -> None
        | Sig_typext (id, _, _, _) -> Some (fun () -> raw "{"; key "name"; jstr (Ident.name id); raw ",\"kind\":\"exception\"}")
        | Sig_module (id, Mp_present, _, _, _) -> Some (fun () -> raw "{"; key "name"; jstr (Ident.name id); raw ",\"kind\":\"module\"}")
        | Sig_class (id, _, _, _) -> Some (fun () -> raw "{"; key "name"; jstr (Ident.name id); raw ",\"kind\":\"class\"}")
        | _ -> None
      in
      let fields = List.filter_map field sg in
      module_types := (fun () -> raw "{"; key "path"; jstr q; raw ","; key "fields"; list (fun f -> f ()) fields; raw "}") :: !module_types
  | Mty_ident p | Mty_alias p -> module_types := (fun () -> raw "{"; key "path"; jstr q; raw ","; key "alias"; jstr (path_str p); raw "}") :: !module_types
  | _ -> ()

(* A signature's types, submodules and module types, qualified under [p]: a recursive module's
   types are declared only in its signature (`module rec M : sig type t = ... end = M`). *)
let rec sig_types p (sg : signature) =
  List.iter
    (function
      | Sig_type (id, d, _, _) ->
          let q = p ^ "." ^ Ident.name id in
          qualify id q;
          types := (q, d) :: !types
      | Sig_module (id, _, md, _, _) -> (
          let q = p ^ "." ^ Ident.name id in
          qualify id q;
          match md.md_type with Mty_signature s -> sig_types q s | _ -> ())
      | Sig_modtype (id, mtd, _) -> (
          let q = p ^ "." ^ Ident.name id in
          qualify id q;
          match mtd.mtd_type with
          | Some mty -> (match mty with Mty_signature s -> sig_types q s | _ -> ()); module_type_json q mty
          | None -> ())
      | _ -> ())
    sg

let rec walk_structure prefix (items : structure_item list) =
  List.iter
    (fun item ->
      match item.str_desc with
      | Tstr_type (_, tds) ->
          List.iter (fun td -> qualify td.typ_id (prefix ^ "." ^ Ident.name td.typ_id)) tds;
          List.iter (fun td -> types := (prefix ^ "." ^ Ident.name td.typ_id, td.typ_type) :: !types) tds
      | Tstr_module mb -> module_binding prefix mb
      | Tstr_recmodule mbs -> List.iter (module_binding prefix) mbs
      | Tstr_modtype mtd -> (
          let q = prefix ^ "." ^ Ident.name mtd.mtd_id in
          qualify mtd.mtd_id q;
          match mtd.mtd_type with
          | Some mty ->
              (match mty.mty_type with Mty_signature s -> sig_types q s | _ -> ());
              module_type_json q mty.mty_type
          | None -> ())
      | Tstr_class cls ->
          List.iter
            (fun ((ci : Typedtree.class_declaration), _) ->
              let q = prefix ^ "." ^ Ident.name ci.ci_id_class_type in
              qualify ci.ci_id_object q;
              qualify ci.ci_id_class_type q;
              classes := (q, List.map (fun (ct, _) -> get_id ct.ctyp_type) ci.ci_params) :: !classes)
            cls
      | Tstr_include incl -> (
          match incl.incl_mod.mod_desc with
          | Tmod_structure s -> walk_structure prefix s.str_items
          | Tmod_constraint ({ mod_desc = Tmod_structure s; _ }, _, _, _) -> walk_structure prefix s.str_items
          | _ -> (
              match module_path prefix incl.incl_mod with
              | Some p ->
                  add_module prefix "include" (fun () -> jstr p);
                  (* What the include binds is the included module's: its types and module types
                     are named here (later code refers to the include's own idents), and its
                     submodules are aliases (`include Local_gen` then `Fix_root (...)`). *)
                  List.iter
                    (function
                      | Sig_type (id, _, _, _) | Sig_modtype (id, _, _) -> qualify id (prefix ^ "." ^ Ident.name id)
                      | Sig_module (id, _, _, _, _) ->
                          let q = prefix ^ "." ^ Ident.name id in
                          qualify id q;
                          include_aliases := (q, bind_module q, p ^ "." ^ Ident.name id) :: !include_aliases
                      | _ -> ())
                    incl.incl_type
              | None -> ()))
      | _ -> ())
    items

and module_binding prefix mb =
  match mb.mb_id with
  | Some id ->
      let p = prefix ^ "." ^ Ident.name id in
      qualify id p;
      ignore (bind_module p);
      module_expr ~parent:prefix p mb.mb_expr
  | None -> ()

(* [parent]: where anonymous structures of [me] are named (not under [p] itself, which may be
   an alias; inside a functor, the functor, so that they see its parameters). *)
and module_expr ~parent p (me : module_expr) =
  match me.mod_desc with
  | Tmod_structure s -> walk_structure p s.str_items
  | Tmod_constraint (({ mod_desc = Tmod_ident _; _ } as me), Mty_signature s, _, _) ->
      (* `module rec M : sig type t = ... end = M`: the types are declared in the signature only
         (a structure's own declarations, and its includes', are what a constraint on it hides
         behind abstract types). *)
      sig_types p s;
      module_expr ~parent p me
  | Tmod_constraint (me, _, _, _) -> module_expr ~parent p me
  | Tmod_functor (Named (Some id, _, _), body) ->
      qualify id (p ^ "{" ^ Ident.name id ^ "}");
      add_module p "functor" (fun () -> jstr (Ident.name id));
      module_expr ~parent:p p body
  | Tmod_functor (Named (None, _, _), body) ->
      (* [functor (_ : S)] takes an argument all the same: its place keeps the parameters after
         it matched with their arguments. *)
      add_module p "functor" (fun () -> jstr "_");
      module_expr ~parent:p p body
  | Tmod_functor (Unit, body) -> module_expr ~parent:p p body
  | _ -> (
      match module_path parent me with
      | Some q when q <> p -> add_module p "alias" (fun () -> jstr q)
      | _ -> ())

(* A module expression as a path: an identifier, an application, or an anonymous structure
   (walked under a fresh name). *)
and module_path prefix (me : module_expr) =
  match Compat.generative_application me with
  | Some f -> Option.map (fun f -> f ^ "()") (module_path prefix f)
  | None -> (
  match me.mod_desc with
  | Tmod_ident (p, _) -> Some (path_str p)
  | Tmod_constraint (me, _, _, _) -> module_path prefix me
  | Tmod_apply (f, a, _) -> (
      match (module_path prefix f, module_path prefix a) with
      | Some f, Some a -> Some (f ^ "(" ^ a ^ ")")
      | _ -> None)
  | Tmod_structure s ->
      incr anon;
      let p = Printf.sprintf "%s.%%%d" prefix !anon in
      walk_structure p s.str_items;
      Some p
  | _ -> None)

(* ---- the module block's fields (Translmod) ---- *)

type field = { ident : Ident.t option; name : string; kind : string; fty : (unit -> unit) option }

(* Types of the idents bound anywhere in the structure, and their paths from the unit. *)
let ident_info : (string, string * string * (unit -> unit) option) Hashtbl.t = Hashtbl.create 1024

let note id rel kind t = Hashtbl.replace ident_info (Ident.unique_name id) (rel, kind, t)

let sig_idents (sg : signature) =
  List.filter_map
    (function
      | Sig_value (id, { val_kind = Val_reg; val_type; _ }, _) -> Some (id, "value", Some (fun () -> ty val_type))
      | Sig_typext (id, _, _, _) -> Some (id, "exception", None)
      | Sig_module (id, Mp_present, _, _, _) -> Some (id, "module", None)
      | Sig_class (id, _, _, _) -> Some (id, "class", None)
      | _ -> None)
    sg

(* Records every bound ident's path (relative to the unit) and type. *)
let rec note_structure rel (items : structure_item list) =
  let sub name = if rel = "" then name else rel ^ "." ^ name in
  List.iter
    (fun item ->
      match item.str_desc with
      | Tstr_value (_, vbs) ->
          List.iter (fun (id, t) -> note id (sub (Ident.name id)) "value" (Some (fun () -> ty t))) (Compat.let_bound vbs)
      | Tstr_typext te -> List.iter (fun e -> note e.ext_id (sub (Ident.name e.ext_id)) "exception" None) te.tyext_constructors
      | Tstr_exception e -> note e.tyexn_constructor.ext_id (sub (Ident.name e.tyexn_constructor.ext_id)) "exception" None
      | Tstr_class cls -> List.iter (fun (ci, _) -> note ci.ci_id_class (sub (Ident.name ci.ci_id_class)) "class" None) cls
      | Tstr_module mb -> module_note sub mb
      | Tstr_recmodule mbs -> List.iter (module_note sub) mbs
      | Tstr_open od ->
          List.iter (fun (id, k, t) -> note id (sub (Ident.name id)) k t) (sig_idents od.open_bound_items);
          (match od.open_expr.mod_desc with Tmod_structure s -> note_structure rel s.str_items | _ -> ())
      | Tstr_include incl ->
          List.iter (fun (id, k, t) -> note id (sub (Ident.name id)) k t) (sig_idents incl.incl_type);
          (match incl.incl_mod.mod_desc with
           | Tmod_structure s | Tmod_constraint ({ mod_desc = Tmod_structure s; _ }, _, _, _) -> note_structure rel s.str_items
           | _ -> ())
      | _ -> ())
    items

and module_note sub mb =
  match mb.mb_id with
  | Some id ->
      let rel = sub (Ident.name id) in
      note id rel "module" None;
      (match mb.mb_expr.mod_desc with
       | Tmod_structure s | Tmod_constraint ({ mod_desc = Tmod_structure s; _ }, _, _, _) -> note_structure rel s.str_items
       | _ -> ())
  | None -> ()

let let_idents vbs = List.map fst (Compat.let_bound vbs)

(* Translmod.defined_idents *)
let rec defined_idents = function
  | [] -> []
  | item :: rem -> (
      match item.str_desc with
      | Tstr_value (_, vbs) -> let_idents vbs @ defined_idents rem
      | Tstr_typext te -> List.map (fun e -> e.ext_id) te.tyext_constructors @ defined_idents rem
      | Tstr_exception e -> e.tyexn_constructor.ext_id :: defined_idents rem
      | Tstr_module { mb_id = Some id; mb_presence = Mp_present; _ } -> id :: defined_idents rem
      | Tstr_recmodule mbs -> List.filter_map (fun mb -> mb.mb_id) mbs @ defined_idents rem
      | Tstr_open od -> bound_value_identifiers od.open_bound_items @ defined_idents rem
      | Tstr_class cls -> List.map (fun (ci, _) -> ci.ci_id_class) cls @ defined_idents rem
      | Tstr_include incl -> bound_value_identifiers incl.incl_type @ defined_idents rem
      | _ -> defined_idents rem)

(* The structure of an `include` that Translmod compiles in place, storing its idents as fields
   of their own (more_idents, all_idents): `include (struct ... end : S)` always; a plain
   `include struct ... end` since OCaml 5.1 (ocaml#11134), while 4.14 and 5.0 compile that as a
   module block of its own whose fields are copied, so its inner idents get no field. *)
let inline_plain_includes = Scanf.sscanf Sys.ocaml_version "%d.%d" (fun major minor -> (major, minor) >= (5, 1))

let translated_inline (me : module_expr) =
  match me.mod_desc with
  | Tmod_constraint ({ mod_desc = Tmod_structure s; _ }, _, _, _) -> Some s
  | Tmod_structure s when inline_plain_includes -> Some s
  | _ -> None

(* Translmod.more_idents *)
let rec more_idents = function
  | [] -> []
  | item :: rem -> (
      match item.str_desc with
      | Tstr_open od -> (
          let rest = more_idents rem in
          match od.open_expr.mod_desc with Tmod_structure s -> all_idents s.str_items @ rest | _ -> rest)
      | Tstr_include { incl_mod; _ } when translated_inline incl_mod <> None ->
          (match translated_inline incl_mod with Some s -> all_idents s.str_items | None -> []) @ more_idents rem
      | Tstr_module
          { mb_presence = Mp_present;
            mb_expr = { mod_desc = Tmod_structure s | Tmod_constraint ({ mod_desc = Tmod_structure s; _ }, _, _, _); _ };
            _ } ->
          all_idents s.str_items @ more_idents rem
      | _ -> more_idents rem)

(* Translmod.all_idents *)
and all_idents = function
  | [] -> []
  | item :: rem -> (
      match item.str_desc with
      | Tstr_value (_, vbs) -> let_idents vbs @ all_idents rem
      | Tstr_typext te -> List.map (fun e -> e.ext_id) te.tyext_constructors @ all_idents rem
      | Tstr_exception e -> e.tyexn_constructor.ext_id :: all_idents rem
      | Tstr_recmodule mbs -> List.filter_map (fun mb -> mb.mb_id) mbs @ all_idents rem
      | Tstr_open od -> (
          let rest = all_idents rem in
          match od.open_expr.mod_desc with
          | Tmod_structure s -> bound_value_identifiers od.open_bound_items @ all_idents s.str_items @ rest
          | _ -> bound_value_identifiers od.open_bound_items @ rest)
      | Tstr_class cls -> List.map (fun (ci, _) -> ci.ci_id_class) cls @ all_idents rem
      | Tstr_include { incl_type; incl_mod; _ } when translated_inline incl_mod <> None ->
          bound_value_identifiers incl_type
          @ (match translated_inline incl_mod with Some s -> all_idents s.str_items | None -> [])
          @ all_idents rem
      | Tstr_include incl -> bound_value_identifiers incl.incl_type @ all_idents rem
      | Tstr_module
          { mb_id = Some id;
            mb_presence = Mp_present;
            mb_expr = { mod_desc = Tmod_structure s | Tmod_constraint ({ mod_desc = Tmod_structure s; _ }, _, _, _); _ };
            _ } ->
          (id :: all_idents s.str_items) @ all_idents rem
      | Tstr_module { mb_id = Some id; mb_presence = Mp_present; _ } -> id :: all_idents rem
      | _ -> all_idents rem)

(* Idents that more_idents gives a field but Translmod.transl_store never stores into: those
   of a submodule constrained by a signature that leaves it as it is (Tcoerce_none), which is
   compiled as an ordinary module whose bindings are local to it (`module M : sig ... end =
   struct ... end` whose signature lists every item in order). Their fields hold () for ever. *)
let unstored_idents (items : structure_item list) =
  let tbl = Hashtbl.create 16 in
  let rec walk items =
    List.iter
      (fun item ->
        match item.str_desc with
        | Tstr_module
            { mb_presence = Mp_present; mb_expr = { mod_desc = Tmod_constraint ({ mod_desc = Tmod_structure s; _ }, _, _, cc); _ }; _ } -> (
            match cc with
            | Tcoerce_structure _ -> walk s.str_items
            | _ -> List.iter (fun id -> Hashtbl.replace tbl (Ident.unique_name id) ()) (all_idents s.str_items))
        | Tstr_module { mb_presence = Mp_present; mb_expr = { mod_desc = Tmod_structure s; _ }; _ } -> walk s.str_items
        | Tstr_include { incl_mod; _ } -> Option.iter (fun s -> walk s.str_items) (translated_inline incl_mod)
        | Tstr_open { open_expr = { mod_desc = Tmod_structure s; _ }; _ } -> walk s.str_items
        | _ -> ())
      items
  in
  walk items;
  tbl

(* The runtime components of a signature (Includemod: primitives in an interface are not),
   as (namespace, name, the item). *)
let runtime_components ?(made_present = fun _ -> false) ~interface (sg : signature) =
  List.filter_map
    (function
      | Sig_value (_, { val_kind = Val_prim _; _ }, _) when interface -> None
      | Sig_value (id, _, _) as it -> Some ("v:" ^ Ident.name id, it)
      | Sig_typext (id, _, _, _) as it -> Some ("e:" ^ Ident.name id, it)
      | Sig_module (id, Mp_present, _, _, _) as it -> Some ("m:" ^ Ident.name id, it)
      | Sig_module (id, Mp_absent, _, _, _) as it when made_present it -> Some ("m:" ^ Ident.name id, it)
      | Sig_class (id, _, _, _) as it -> Some ("c:" ^ Ident.name id, it)
      | _ -> None)
    sg

let field_of_ident id =
  match Hashtbl.find_opt ident_info (Ident.unique_name id) with
  | Some (rel, kind, t) -> { ident = Some id; name = rel; kind; fty = t }
  | None -> { ident = Some id; name = Ident.name id; kind = "value"; fty = None }

(* Translobj.transl_store_label_init: a unit whose code sends methods by name where
   Translobj.meth caches the method's label gets one more field at the end of its block, the
   method cache. Labels are cached once Translobj.oo_wrap has set cache_required: inside a
   function or a loop (Translcore.transl_exp1), a functor (Translmod), or a class or immediate
   object translated inside another wrap (oo_wrap_gen sets it for any nested wrap); a class or
   object at the unit's top level starts a wrap of its own without it. *)
let has_method_cache (str : structure) =
  let found = ref false and depth = ref 0 and classes = ref 0 in
  let open Tast_iterator in
  let nested f x = incr depth; f x; decr depth in
  let class_body f x =
    if !classes > 0 || !depth > 0 then nested f x else (incr classes; f x; decr classes)
  in
  let expr it (e : expression) =
    (match e.exp_desc with
     | Texp_send (_, Tmeth_name _) when !depth > 0 -> found := true
     | _ -> ());
    match e.exp_desc with
    | Texp_function _ | Texp_for _ | Texp_while _ -> nested (default_iterator.expr it) e
    | Texp_object _ -> class_body (default_iterator.expr it) e
    | _ -> default_iterator.expr it e
  in
  let module_expr it (me : module_expr) =
    match me.mod_desc with
    | Tmod_functor _ | Tmod_apply _ -> nested (default_iterator.module_expr it) me
    | _ -> default_iterator.module_expr it me
  in
  let class_declaration it cd = class_body (default_iterator.class_declaration it) cd in
  let it = { default_iterator with expr; module_expr; class_declaration } in
  it.structure it str;
  !found

(* Whether a signature item is exported (Includemod.item_visibility): an `open struct`'s
   items are in the structure's signature, hidden. *)
let exported_item = function
  | Sig_value (_, _, Exported) | Sig_typext (_, _, _, Exported) | Sig_module (_, _, _, _, Exported) | Sig_class (_, _, _, Exported) -> true
  | _ -> false

(* The module block's fields in native code's order, and how many of them are the interface's
   runtime components (the whole block in bytecode). *)
let block_fields (str : structure) (target : signature) =
  let idlist = defined_idents str.str_items in
  (* Absent modules too: Includemod pairs each item of the target with the last of its name in
     the structure, an alias made present with an absent one (Tcoerce_alias). *)
  let impl = runtime_components ~made_present:(fun _ -> true) ~interface:false str.str_type in
  let target = runtime_components ~interface:true target in
  (* Implementation components by key: the last of each (what Includemod pairs with), among
     those the structure exports: Includemod pairs no hidden item (what an `open struct` binds,
     `open struct module List = Stdune.List end` after an `include` that binds a List). *)
  let impl_by_key = Hashtbl.create 64 in
  List.iter (fun (k, it) -> if exported_item it then Hashtbl.replace impl_by_key k it) impl;
  let used = Hashtbl.create 64 in
  let exported =
    List.map
      (fun (k, it) ->
        let intf_name, intf_ty =
          match it with
          | Sig_value (id, vd, _) -> (Ident.name id, Some (fun () -> ty vd.val_type))
          | Sig_typext (id, _, _, _) | Sig_module (id, _, _, _, _) | Sig_class (id, _, _, _) -> (Ident.name id, None)
          | _ -> ("?", None)
        in
        match (Hashtbl.find_opt impl_by_key k, it) with
        (* An alias made present: the field holds the module it stands for, and the module it
           named (an included one, shadowed) keeps a field of its own after the exported ones. *)
        | Some (Sig_module (id, Mp_absent, _, _, _)), _ -> field_of_ident id
        | Some (Sig_value (_, { val_kind = Val_prim _; _ }, _)), _ ->
            { ident = None; name = intf_name; kind = "primitive"; fty = intf_ty }
        | Some (Sig_value (id, _, _) | Sig_typext (id, _, _, _) | Sig_module (id, _, _, _, _) | Sig_class (id, _, _, _)), _ ->
            Hashtbl.replace used (Ident.unique_name id) ();
            field_of_ident id
        | _ -> { ident = None; name = intf_name; kind = "missing"; fty = intf_ty })
      target
  in
  let undef = List.filter (fun id -> not (Hashtbl.mem used (Ident.unique_name id))) idlist in
  let unstored = unstored_idents str.str_items in
  let more =
    List.map
      (fun id ->
        let f = field_of_ident id in
        if Hashtbl.mem unstored (Ident.unique_name id) then { f with name = "(never stored) " ^ f.name; kind = "unused"; fty = None } else f)
      (more_idents str.str_items)
  in
  let cache = if has_method_cache str then [ { ident = None; name = "(method cache)"; kind = "method_cache"; fty = None } ] else [] in
  (exported @ List.map field_of_ident undef @ more @ cache, List.length exported)

(* ---- functions: what their closures hold ----

   A closure's environment holds its function's free variables, in the order closure
   conversion (Closure.close_functions, the same in 4.14 to 5.3) sorts them: the set of
   Lambda's free variables of the function (of the whole group for `let rec`), ordered by
   Ident.compare. Typed-tree idents keep their stamps through translation, so the free
   variables found here sort the same way; heapsnap checks every closure's environment size
   and each field against these types before it believes them. What the typed tree cannot
   see is left out on purpose: identifiers stored in the unit's module block are read from
   the global, not captured (Translmod.transl_store_structure); primitives are not values;
   `let x = y` is an alias Simplif replaces by `y`. Each function is found by where its code
   starts (the line table's first row at its entry is the function's location), lazy thunks
   likewise (their code starts at the lazy expression's body). *)

let bound_types : (string, type_expr) Hashtbl.t = Hashtbl.create 1024
let aliases : (string, Ident.t) Hashtbl.t = Hashtbl.create 64

(* A function, a lazy value's thunk, or the application of a known function to fewer
   arguments than it takes: closure conversion (Closure, "partial application") makes that a
   new function at the application's place whose environment holds the arguments given, in
   order, then the function applied. *)
type fn_kind = Fun | Lazy_thunk | Partial of string * expression list

(* [fsig]: a function's parameters' types and what it returns after them; [fbound]: what the
   function binds outside [fexp] (a binding operator's pattern). *)
type fn_node = {
  floc : Location.t;
  fname : string option;
  fexp : expression;
  fsig : (type_expr list * type_expr) option;
  fbound : Ident.t list;
  kind : fn_kind;
  ordered : bool;
}

(* Where translation gives identifiers new stamps, which then sort after all others, so that a
   closure's environment may not be in the typed tree's order: Lambda.rename, which Simplif
   applies to the body of a function with a default argument (split_default_wrapper, from the
   outermost function of its curried chain) and to a static handler it inlines (simplify_exits:
   the value cases of a match with exception cases, the body of a case with an or-pattern).
   Closures made there are named, but their environment is not typed. The same holds inside
   classes and objects. *)
let chain_has_default (e : expression) =
  let rec go e n = Compat.has_default_arg e || (n > 0 && match Compat.nested_function e with Some b -> go b (n - 1) | None -> false) in
  go e 130

(* Whether one of the expression's own cases (a match's, a function's, a try's) has an
   or-pattern or an exception pattern (compiled as a static handler that Simplif may inline). *)
let renames_cases (e : expression) =
  let found = ref false and depth = ref 0 in
  let open Tast_iterator in
  let pat : type k. iterator -> k general_pattern -> unit =
   fun it p ->
    (match p.pat_desc with Tpat_or _ | Tpat_exception _ -> found := true | _ -> ());
    default_iterator.pat it p
  in
  let case : type k. iterator -> k case -> unit = fun it c -> it.pat it c.c_lhs in
  let expr it (e : expression) =
    if !depth = 0 then (
      incr depth;
      default_iterator.expr it e;
      decr depth)
  in
  let it = { default_iterator with pat; case; expr } in
  it.expr it e;
  !found

let fn_nodes : fn_node list ref = ref []
(* A `let rec` group's functions (by location): the group's bodies and its idents. *)
let rec_groups : (int * int, expression list * Ident.t list) Hashtbl.t = Hashtbl.create 64
let fn_names : (int * int, string) Hashtbl.t = Hashtbl.create 256

let loc_key (l : Location.t) = (l.loc_start.pos_lnum, l.loc_start.pos_cnum - l.loc_start.pos_bol)

let is_function (e : expression) = match e.exp_desc with Texp_function _ -> true | _ -> false

let rec_group vbs =
  let fns = List.filter_map (fun vb -> if is_function vb.vb_expr then Some vb.vb_expr else None) vbs in
  let ids = List.map fst (Compat.let_bound vbs) in
  List.iter (fun e -> Hashtbl.replace rec_groups (loc_key e.exp_loc) (fns, ids)) fns

(* The unique names (name_stamp) of the identifiers functions are bound to: native code names
   each function's code after them (`camlUnit.name_stamp`, `camlUnit__name_stamp` in 4.14), so
   they tell which of two builds of a unit an executable holds (their stamps differ as soon as
   anything compiled before them does). *)
let fn_idents : string list ref = ref []

let name_functions vbs =
  List.iter
    (fun (vb : value_binding) ->
      match (Compat.pat_vars vb.vb_pat, vb.vb_expr.exp_desc) with
      | [ (id, _) ], Texp_function _ ->
          Hashtbl.replace fn_names (loc_key vb.vb_expr.exp_loc) (Ident.name id);
          fn_idents := Ident.unique_name id :: !fn_idents
      | _ -> ())
    vbs

(* The arguments' types of a function type, in order (at most 32). *)
let rec arrow_args env t n =
  if n = 0 then []
  else
    match get_desc (try Ctype.expand_head env t with _ -> t) with
    | Tarrow (_, a, r, _) -> a :: arrow_args env r (n - 1)
    | _ -> []

(* What a function type returns after those arguments. *)
let rec arrow_result env t n =
  if n = 0 then t
  else
    match get_desc (try Ctype.expand_head env t with _ -> t) with
    | Tarrow (_, _, r, _) -> arrow_result env r (n - 1)
    | _ -> t

(* Every function and lazy thunk of the unit; the types and aliases of the idents it binds. *)
let collect_functions (str : structure) =
  let renamed = ref 0 in
  let renaming f = incr renamed; Fun.protect ~finally:(fun () -> decr renamed) f in
  let in_chain = ref false in
  let open Tast_iterator in
  let pat : type k. iterator -> k general_pattern -> unit =
   fun it p ->
    List.iter (fun (id, t) -> Hashtbl.replace bound_types (Ident.unique_name id) t) (Compat.pat_vars p);
    default_iterator.pat it p
  in
  let value_bindings it ((rf, vbs) as b) =
    if rf = Asttypes.Recursive then rec_group vbs;
    name_functions vbs;
    List.iter
      (fun (vb : value_binding) ->
        match (Compat.pat_vars vb.vb_pat, vb.vb_expr.exp_desc) with
        | [ (id, _) ], Texp_ident (Pident w, _, { val_kind = Val_reg; _ }) when rf = Asttypes.Nonrecursive ->
            Hashtbl.replace aliases (Ident.unique_name id) w
        | _ -> ())
      vbs;
    default_iterator.value_bindings it b
  in
  let expr it (e : expression) =
    let ordered = !renamed = 0 in
    (match e.exp_desc with
     | Texp_function _ ->
         let params = arrow_args e.exp_env e.exp_type 32 in
         let fsig = Some (params, arrow_result e.exp_env e.exp_type (List.length params)) in
         fn_nodes := { floc = e.exp_loc; fname = Hashtbl.find_opt fn_names (loc_key e.exp_loc); fexp = e; fsig; fbound = []; kind = Fun; ordered } :: !fn_nodes
     (* [let+ p = e in body] (and [and+]) applies the operator to a function of one parameter,
        [fun p -> body], made at the body's place (Translcore.transl_letop). *)
     | Texp_letop { body; _ } when not (is_function body.c_rhs) ->
         let fsig = Some ([ body.c_lhs.pat_type ], body.c_rhs.exp_type) in
         let fbound = List.map fst (Compat.pat_vars body.c_lhs) in
         fn_nodes := { floc = body.c_rhs.exp_loc; fname = None; fexp = body.c_rhs; fsig; fbound; kind = Fun; ordered } :: !fn_nodes
     | Texp_lazy body -> fn_nodes := { floc = body.exp_loc; fname = None; fexp = body; fsig = None; fbound = []; kind = Lazy_thunk; ordered } :: !fn_nodes
     | Texp_apply ({ exp_desc = Texp_ident (p, _, _); _ }, args)
       when args <> [] && List.for_all (function Asttypes.Nolabel, Some _ -> true | _ -> false) args
            && arrow_args e.exp_env e.exp_type 1 <> [] ->
         let given = List.filter_map snd args in
         let callee = match p with Pident id -> Ident.name id | Pdot (_, s) -> s | _ -> "?" in
         fn_nodes := { floc = e.exp_loc; fname = Some callee; fexp = e; fsig = None; fbound = []; kind = Partial (callee, given); ordered = true } :: !fn_nodes
     | _ -> ());
    let outermost = not !in_chain in
    match e.exp_desc with
    | Texp_function _ when outermost && chain_has_default e -> renaming (fun () -> default_iterator.expr it e)
    | (Texp_match _ | Texp_try _ | Texp_function _) when renames_cases e -> renaming (fun () -> default_iterator.expr it e)
    | Texp_function _ ->
        (* The nodes of one curried chain are one function once translated. *)
        let inner = Compat.nested_function e <> None in
        let saved = !in_chain in
        in_chain := inner;
        Fun.protect ~finally:(fun () -> in_chain := saved) (fun () -> default_iterator.expr it e)
    | _ ->
        let saved = !in_chain in
        in_chain := false;
        Fun.protect ~finally:(fun () -> in_chain := saved) (fun () -> default_iterator.expr it e)
  in
  (* Methods and instance variables are translated through Translclass's own variables
     (self, the environment of the class): no order is known there. *)
  let class_structure it cs = renaming (fun () -> default_iterator.class_structure it cs) in
  let it = { default_iterator with pat; value_bindings; expr; class_structure } in
  it.structure it str

(* The idents an expression refers to and those it binds itself. *)
let refs_and_binds (e : expression) =
  let refs = ref [] and binds = Hashtbl.create 16 in
  let bind id = Hashtbl.replace binds (Ident.unique_name id) () in
  let rec refer id =
    match Hashtbl.find_opt aliases (Ident.unique_name id) with
    | Some w when not (Ident.same w id) -> refer w
    | _ -> refs := id :: !refs
  in
  let head p = match Path.head p with id -> refer id | exception _ -> () in
  let open Tast_iterator in
  let pat : type k. iterator -> k general_pattern -> unit =
   fun it p ->
    List.iter (fun (id, _) -> bind id) (Compat.pat_vars p);
    (match p.pat_desc with
     | Tpat_construct (_, { cstr_tag = Cstr_extension (Pident id, _); _ }, _, _) -> refer id
     | _ -> ());
    default_iterator.pat it p
  in
  let expr it (e : expression) =
    (match e.exp_desc with
     | Texp_ident (Pident id, _, { val_kind = Val_reg; _ }) -> refer id
     | Texp_ident (Pident _, _, _) -> ()
     | Texp_ident (p, _, _) -> head p
     | Texp_construct (_, { cstr_tag = Cstr_extension (p, _); _ }, _) -> head p
     | Texp_for (id, _, _, _, _, _) -> bind id
     | Texp_letmodule (Some id, _, _, _, _) -> bind id
     | Texp_letexception (ext, _) -> bind ext.ext_id
     | _ -> ());
    default_iterator.expr it e
  in
  let module_expr it (me : module_expr) =
    (match me.mod_desc with
     | Tmod_ident (p, _) -> head p
     | Tmod_functor (Named (Some id, _, _), _) -> bind id
     | _ -> ());
    default_iterator.module_expr it me
  in
  let it = { default_iterator with pat; expr; module_expr } in
  it.expr it e;
  (!refs, binds)

(* The idents Translmod.transl_store_structure replaces by a field of the unit's global, so
   that no closure captures them: true for those it always replaces (values, exceptions,
   classes, and everything a structure compiled in place binds), false for those it replaces
   only when the unit's interface does not coerce their field (modules, and what an include
   or an open binds), which otherwise stay variables that closures capture. A submodule is
   compiled in place when it is a structure, or one constrained by a signature that changes
   it (Tcoerce_structure); constrained to no effect, it is an ordinary module whose bindings
   are local to it. *)
let rec stored_idents (tbl : (string, bool) Hashtbl.t) (items : structure_item list) =
  let add sure id = if sure || not (Hashtbl.mem tbl (Ident.unique_name id)) then Hashtbl.replace tbl (Ident.unique_name id) sure in
  let in_place (me : module_expr) =
    match me.mod_desc with
    | Tmod_structure s | Tmod_constraint ({ mod_desc = Tmod_structure s; _ }, _, _, Tcoerce_structure _) -> Some s
    | _ -> None
  in
  List.iter
    (fun item ->
      match item.str_desc with
      | Tstr_value (_, vbs) -> List.iter (add true) (let_idents vbs)
      | Tstr_typext te -> List.iter (fun e -> add true e.ext_id) te.tyext_constructors
      | Tstr_exception e -> add true e.tyexn_constructor.ext_id
      | Tstr_class cls -> List.iter (fun (ci, _) -> add true ci.ci_id_class) cls
      | Tstr_module { mb_id = Some id; mb_presence = Mp_present; mb_expr; _ } ->
          add false id;
          Option.iter (fun s -> stored_idents tbl s.str_items) (in_place mb_expr)
      | Tstr_recmodule mbs -> List.iter (fun mb -> Option.iter (add false) mb.mb_id) mbs
      | Tstr_include incl ->
          List.iter (add false) (bound_value_identifiers incl.incl_type);
          Option.iter (fun s -> stored_idents tbl s.str_items) (translated_inline incl.incl_mod)
      | Tstr_open od ->
          List.iter (add false) (bound_value_identifiers od.open_bound_items);
          (match od.open_expr.mod_desc with Tmod_structure s -> stored_idents tbl s.str_items | _ -> ())
      | _ -> ())
    items

(* Functor parameters, ranked as translation renames them: Translmod.compile_functor binds each
   parameter to a fresh copy (Ident.rename, a new stamp) once the functor's body is translated,
   the last parameter of a curried functor first, and Simplif replaces the parameter by its
   copy. Their stamps therefore sort after every identifier of the typed tree, in this rank. *)
let functor_params : (string, int) Hashtbl.t = Hashtbl.create 16

let rank_functor_params (str : structure) =
  let next = ref 0 in
  let open Tast_iterator in
  let rec module_expr it (me : module_expr) =
    match me.mod_desc with
    | Tmod_functor _ ->
        let rec params acc (me : module_expr) =
          match me.mod_desc with
          | Tmod_functor (Named (Some id, _, _), body) -> params (Some id :: acc) body
          | Tmod_functor (_, body) -> params (None :: acc) body
          | _ -> (acc, me)
        in
        let reversed, body = params [] me in
        module_expr it body;
        List.iter
          (function Some id -> incr next; Hashtbl.replace functor_params (Ident.unique_name id) !next | None -> incr next)
          reversed
    | _ -> default_iterator.module_expr it me
  in
  let it = { default_iterator with module_expr } in
  it.structure it str

let functions_json (stored : (string, bool) Hashtbl.t) =
  (* Free variables in their environment order, each with whether the global may hold it
     instead (see [stored_idents]). *)
  let free_of exprs excluded =
    let ids = Hashtbl.create 16 in
    List.iter
      (fun e ->
        let refs, binds = refs_and_binds e in
        List.iter
          (fun id ->
            let u = Ident.unique_name id in
            if not (Hashtbl.mem binds u || Hashtbl.find_opt stored u = Some true || Ident.global id || Ident.is_predef id
                    || List.exists (Ident.same id) excluded)
            then Hashtbl.replace ids u id)
          refs)
      exprs;
    let rank id = Hashtbl.find_opt functor_params (Ident.unique_name id) in
    let order a b =
      match (rank a, rank b) with
      | None, None -> Ident.compare a b
      | None, Some _ -> -1
      | Some _, None -> 1
      | Some x, Some y -> compare x y
    in
    List.map (fun id -> (id, Hashtbl.mem stored (Ident.unique_name id))) (List.sort order (Hashtbl.fold (fun _ id acc -> id :: acc) ids []))
  in
  let fn f =
    let line, col = loc_key f.floc in
    raw "{"; key "line"; raw (string_of_int line); raw ","; key "col"; raw (string_of_int col); raw ",";
    key "name"; opt jstr (match f.kind with Lazy_thunk -> Some "lazy" | _ -> f.fname); raw ",";
    key "params"; list ty (match f.fsig with Some (params, _) -> params | None -> []); raw ",";
    (match f.fsig with Some (_, result) -> key "result"; ty result; raw "," | None -> ());
    let free_var ?(maybe = false) name t =
      raw "["; jstr name; raw ","; (match t with Some t -> ty t | None -> raw "null"); if maybe then raw ",true"; raw "]"
    in
    (match f.kind with
     | Partial (_, given) ->
         key "partial"; raw "true"; raw ",";
         key "free";
         list
           (fun (name, t) -> free_var name t)
           (List.mapi (fun i e -> (Printf.sprintf "argument %d" (i + 1), Some e.exp_type)) given @ [ ("function", None) ])
     | Fun | Lazy_thunk ->
         let fv =
           match Hashtbl.find_opt rec_groups (loc_key f.floc) with
           | Some (group, ids) when f.kind = Fun -> free_of group ids
           | _ -> free_of [ f.fexp ] f.fbound
         in
         if not f.ordered then (key "ordered"; raw "false,");
         key "free";
         list (fun (id, maybe) -> free_var ~maybe (Ident.name id) (Hashtbl.find_opt bound_types (Ident.unique_name id))) fv);
    raw "}"
  in
  list fn (List.rev !fn_nodes)

(* ---- files ---- *)

let digest_hex = function Some d -> Some (Digest.to_hex d) | None -> None

(* The signature the compiler coerced a unit's structure to, which orders its module block.
   - A unit without an .mli: its inferred (simplified) signature, saved as a .cmi inside its
     own .cmt (Typemod.type_implementation; [Cmt_format.read] returns it).
   - A unit with an .mli: its .cmt holds no .cmi, but records among its imports the CRC of the
     .cmi it was checked against. That .cmi, or the .cmti that holds the same, is looked for
     where builds put it: beside the .cmt, at the -cmi-file the compiler was given (dune gives
     native compilations the bytecode's), in the directories it was compiled with, and in the
     .cmt directory's siblings (dune's byte/ beside native/); only a file with that CRC is
     taken. Without one the order is unknown, and so are the unit's field names. *)
type interface =
  | Inferred of signature
  | Declared of signature * string  (* the file it was read from *)
  | Unknown of string  (* why *)

let cmi_crc name (cmi : Cmi_format.cmi_infos) =
  match List.assoc_opt name cmi.cmi_crcs with Some (Some crc) -> Some crc | _ -> None

(* A .cmi or a .cmti's interface, when its CRC is [crc]. *)
let interface_with_crc name crc file =
  if not (Sys.file_exists file) then None
  else
    match
      if Filename.check_suffix file ".cmti" then fst (Cmt_format.read file) else Some (Cmi_format.read_cmi file)
    with
    | Some cmi when cmi_crc name cmi = Some crc -> Some cmi.cmi_sign
    | _ -> None
    | exception _ -> None

let subdirectories dir =
  match Sys.readdir dir with
  | entries ->
      Array.sort compare entries;
      List.filter_map
        (fun e -> let d = Filename.concat dir e in if (try Sys.is_directory d with Sys_error _ -> false) then Some d else None)
        (Array.to_list entries)
  | exception Sys_error _ -> []

(* The files to try, in order, as a sequence: the siblings' directories are listed only when
   nothing nearer has the interface (a library directory's parent may hold hundreds). A .cmi is
   tried before the .cmti holding the same: it is what the compiler read, and smaller. *)
let interface_candidates cmt_file (info : Cmt_format.cmt_infos) : string Seq.t =
  let dir = Filename.dirname cmt_file in
  let against_builddir d = if Filename.is_relative d then Filename.concat info.cmt_builddir d else d in
  let rec cmi_file = function
    | "-cmi-file" :: f :: _ -> Some (against_builddir f)
    | _ :: rest -> cmi_file rest
    | [] -> None
  in
  let given = cmi_file (Array.to_list info.cmt_args) in
  let stems = List.sort_uniq compare
      (Filename.remove_extension (Filename.basename cmt_file)
       :: Option.to_list (Option.map (fun f -> Filename.remove_extension (Filename.basename f)) given)) in
  let files_in d = List.to_seq (List.concat_map (fun s -> [ Filename.concat d (s ^ ".cmi"); Filename.concat d (s ^ ".cmti") ]) stems) in
  let near = dir :: Option.to_list (Option.map Filename.dirname given) @ List.map against_builddir (Compat.load_path info) in
  let siblings () = List.to_seq (subdirectories (Filename.dirname dir)) () in
  Seq.append (List.to_seq (Option.to_list given))
    (Seq.append (Seq.concat_map files_in (List.to_seq near)) (Seq.concat_map files_in siblings))

let read_interface cmt_file (info : Cmt_format.cmt_infos) (own : Cmi_format.cmi_infos option) =
  match own with
  | Some cmi -> Inferred cmi.cmi_sign
  | None -> (
      let name = info.cmt_modname in
      match List.assoc_opt name info.cmt_imports with
      | Some (Some crc) -> (
          let candidates = interface_candidates cmt_file info in
          match Seq.find_map (fun f -> Option.map (fun sg -> (sg, f)) (interface_with_crc name crc f)) candidates with
          | Some (sg, f) -> Declared (sg, f)
          | None ->
              Unknown
                (Printf.sprintf
                   "its interface (the .cmi or .cmti of %s with CRC %s) is not beside it, at its -cmi-file, in the directories it was compiled with, or in its directory's siblings"
                   name (Digest.to_hex crc)))
      | _ -> Unknown "its .cmt records neither its inferred signature nor the CRC of its interface")

(* [--args]: each unit also says the command line that compiled it (what heapsnap's names
   oracle, scripts/names-oracle.sh, runs again with -drawlambda). *)
let with_args = ref false

let unit_json file (info : Cmt_format.cmt_infos) str (intf : interface) =
  Hashtbl.reset quals; Hashtbl.reset ident_info; types := []; classes := []; modules := []; module_types := []; anon := 0;
  Hashtbl.reset last_binding; include_aliases := [];
  Hashtbl.reset bound_types; Hashtbl.reset aliases; fn_nodes := []; Hashtbl.reset rec_groups; Hashtbl.reset fn_names;
  Hashtbl.reset functor_params; fn_idents := [];
  let u = info.cmt_modname in
  walk_structure u str.str_items;
  note_structure "" str.str_items;
  let fields, exported =
    match intf with
    | Inferred sg | Declared (sg, _) -> block_fields str sg
    | Unknown _ -> ([], 0)
  in
  collect_functions str;
  rank_functor_params str;
  let stored = Hashtbl.create 256 in
  stored_idents stored str.str_items;
  raw "{"; key "unit"; jstr u; raw ","; key "file"; jstr file; raw ",";
  key "source"; opt jstr info.cmt_sourcefile; raw ","; key "builddir"; jstr info.cmt_builddir; raw ",";
  if !with_args then (key "args"; list jstr (Array.to_list info.cmt_args); raw ",");
  key "digest"; opt jstr (Option.map Digest.to_hex info.cmt_source_digest); raw ",";
  (match intf with
   | Inferred _ -> key "interface"; raw "false"; raw ","
   | Declared (_, f) -> key "interface"; raw "true"; raw ","; key "interface_file"; jstr f; raw ","
   | Unknown why -> key "interface"; raw "true"; raw ","; key "fields_unknown"; jstr why; raw ",");
  key "fields";
  list
    (fun f ->
      raw "{"; key "name"; jstr (match f.ident with Some id -> Ident.name id | None -> f.name); raw ",";
      key "path"; jstr f.name; raw ","; key "kind"; jstr f.kind; raw ","; key "type";
      (match f.fty with Some t -> t () | None -> raw "null");
      raw "}")
    fields;
  raw ","; key "exported"; raw (string_of_int exported);
  raw ","; key "types";
  let object_type (q, params) =
    raw "{"; key "path"; jstr q; raw ","; key "params"; list (fun id -> raw (string_of_int id)) params;
    raw ",\"manifest\":null,\"kind\":\"object\"}"
  in
  list (fun f -> f ()) (List.map (fun (q, d) () -> decl q d) (List.rev !types) @ List.map (fun c () -> object_type c) (List.rev !classes));
  let include_alias (q, _, target) () =
    raw "{"; key "path"; jstr q; raw ","; key "alias"; jstr target; raw "}"
  in
  let still_bound (q, binding, _) = Hashtbl.find_opt last_binding q = Some binding in
  raw ","; key "modules";
  list (fun f -> f ()) (List.rev !modules @ List.map include_alias (List.rev (List.filter still_bound !include_aliases)));
  raw ","; key "module_types"; list (fun f -> f ()) (List.rev !module_types);
  raw ","; key "functions"; functions_json stored;
  raw ","; key "function_idents"; list jstr (List.filteri (fun i _ -> i < 64) (List.rev !fn_idents));
  raw "}"

let () =
  let files = List.tl (Array.to_list Sys.argv) in
  let files = match files with "--args" :: rest -> with_args := true; rest | files -> files in
  let errors = ref [] in
  raw "{"; key "ocaml_version"; jstr Sys.ocaml_version; raw ","; key "units"; raw "[";
  let first = ref true in
  List.iter
    (fun file ->
      let mark = Buffer.length out in
      try
        match Cmt_format.read file with
        | own, Some ({ cmt_annots = Cmt_format.Implementation str; _ } as info) ->
            if not !first then raw ",";
            unit_json file info str (read_interface file info own);
            first := false
        | _ -> errors := (file, "not the .cmt of an implementation") :: !errors
      with e ->
        Buffer.truncate out mark;
        let msg =
          match e with
          | Cmi_format.Error _ | Cmt_format.Error _ ->
              "not readable by OCaml " ^ Sys.ocaml_version ^ " (another version, or not a .cmt file)"
          | Sys_error m -> m
          | e -> Printexc.to_string e
        in
        errors := (file, msg) :: !errors)
    files;
  raw "],"; key "errors";
  list (fun (f, m) -> raw "{"; key "file"; jstr f; raw ","; key "message"; jstr m; raw "}") (List.rev !errors);
  raw "}\n";
  print_string (Buffer.contents out)
