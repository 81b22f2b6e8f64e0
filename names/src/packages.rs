//! What a block's contents say of the types its own type leaves unknown (issue 26): the
//! abstract types of a first-class module's signature, and a GADT constructor's existentials.
//!
//! A packed module of `(module Store_intf.Instance with type key = k and type value = v)` holds
//! `val store : t` with `t` abstract: its type is not in the package type. The closures beside
//! it are the implementation's own functions (`Stdune.Table.find : ('k, 'v) t -> 'k -> 'v
//! option`), and the signature says what each takes (`find : t -> key -> value option`).
//! Matching the two says what `t` is there: `(k, v) Stdune.Table.t`. Only the closures' own
//! functions are read, never guessed, and a field whose function does not match is left out.
//!
//! An existential (`Shown : 'a list * ('a -> string) -> shown`) is said the same way by the
//! closures among the constructor's arguments, but more strictly: two names for a type are a
//! disagreement, any disagreement leaves every existential unknown, and a field is typed only
//! when each existential in it is known whole.

use crate::model::{Function, Ty};
use crate::types::{PackageShape, TypeEnv};
use rustc_hash::FxHashMap;

/// Matching gives up past this depth (types nest without end only when something is wrong).
const MAX_DEPTH: usize = 24;

/// A function's own type variables are renamed apart per field: field `i`'s variable `v` is
/// `v + (i + 1) * VARIABLES_APART` (the reader's variable ids, locally abstract types' too, are
/// far below it).
const VARIABLES_APART: i64 = 1 << 40;

/// The signature side's own variables (the package type's unknown parts, every one `_` once
/// interned) are made distinct from here on, so that matching never makes two of them one.
const SIGNATURE_VARIABLES: i64 = 1 << 60;

/// The fields of a packed module whose type its abstract types make unknown, with their type
/// now known: `functions[i]` is the function the closure in field `i` runs (its own closure,
/// not a partial application), where known.
pub fn reveal(env: &TypeEnv, shape: &PackageShape, functions: &[Option<&Function>]) -> Vec<(usize, Ty)> {
    if shape.abstracts.is_empty() {
        return Vec::new();
    }
    let mut binds: FxHashMap<i64, Ty> = FxHashMap::default();
    let mut fresh = SIGNATURE_VARIABLES;
    for (i, sig_params) in shape.params.iter().enumerate() {
        let Some(f) = functions.get(i).copied().flatten() else { continue };
        let result_mentions = shape.results.get(i).and_then(Option::as_ref).is_some_and(mentions_abstract);
        if sig_params.is_empty() || !(sig_params.iter().any(mentions_abstract) || result_mentions) || f.params.len() < sig_params.len() {
            continue;
        }
        let apart = (i as i64 + 1) * VARIABLES_APART;
        let mut trial = binds.clone();
        let mut pairs: Vec<(&Ty, &Ty)> = sig_params.iter().zip(&f.params).collect();
        // The result too, when the function takes exactly the arguments declared.
        if let Some(result) = shape.results.get(i).and_then(Option::as_ref).filter(|_| f.params.len() == sig_params.len()) {
            pairs.push((result, &f.result));
        }
        let fits = pairs.into_iter().all(|(s, p)| {
            let s = env.canon(s).unwrap_or_else(|| s.clone());
            let s = apart_holes(&s, &mut fresh);
            let p = p.subst(&|v| Some(Ty::Var(v + apart)));
            let p = env.canon(&p).unwrap_or(p);
            unify(&s, &p, &mut trial, shape.existential, 0)
        });
        if fits {
            binds = trial;
        } else if shape.existential {
            // The contents do not agree on one type.
            return Vec::new();
        }
    }
    // An existential is known only when the closures say all of it: a field that holds one
    // known otherwise stays untyped.
    let known = |v: i64| resolve(&Ty::Var(v), &binds, 0).is_some_and(|t| !t.has_var() && !t.has_unknown());
    shape
        .fields
        .iter()
        .enumerate()
        .filter(|(_, (_, ty))| mentions_abstract(ty))
        .filter(|(_, (_, ty))| {
            let mut vars = Vec::new();
            abstracts_in(ty, &mut vars);
            !shape.existential || vars.into_iter().all(known)
        })
        .filter_map(|(i, (_, ty))| {
            let t = resolve(ty, &binds, 0)?;
            // Still abstract somewhere, or only a variable: nothing is known.
            (!mentions_abstract(&t) && !matches!(t, Ty::Var(_))).then_some((i, t))
        })
        .collect()
}

/// `ty` with each occurrence of a variable that is not an abstract type a variable of its own.
fn apart_holes(ty: &Ty, fresh: &mut i64) -> Ty {
    match ty {
        Ty::Var(v) if *v >= 0 => {
            *fresh += 1;
            Ty::Var(*fresh)
        }
        t => t.map_children(&mut |c| apart_holes(c, fresh)),
    }
}

/// The negative variables of `ty`.
fn abstracts_in(ty: &Ty, out: &mut Vec<i64>) {
    match ty {
        Ty::Var(v) if *v < 0 => out.push(*v),
        t => t.children().for_each(|c| abstracts_in(c, out)),
    }
}

/// Whether `ty` names an abstract type of the signature (a negative variable).
fn mentions_abstract(ty: &Ty) -> bool {
    match ty {
        Ty::Var(v) => *v < 0,
        t => t.children().any(mentions_abstract),
    }
}

/// `ty` with the variables `binds` gives replaced, deeply; `None` past the depth.
fn resolve(ty: &Ty, binds: &FxHashMap<i64, Ty>, depth: usize) -> Option<Ty> {
    if depth > MAX_DEPTH {
        return None;
    }
    match ty {
        Ty::Var(v) => match binds.get(v) {
            Some(t) => resolve(t, binds, depth + 1),
            None => Some(ty.clone()),
        },
        t => t.try_map_children(&mut |c| resolve(c, binds, depth + 1)),
    }
}

/// Matches the signature's `a` with the function's `b`, binding variables of either. Two
/// different type constructors are not a failure unless `strict`: they may be one type under
/// two names (a functor's parameter, an abbreviation the canonical form keeps), so nothing is
/// bound below them. Different shapes (a tuple against a constructor) are.
fn unify(a: &Ty, b: &Ty, binds: &mut FxHashMap<i64, Ty>, strict: bool, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let (a, b) = (deref(a, binds), deref(b, binds));
    match (&a, &b) {
        (Ty::Var(x), Ty::Var(y)) if x == y => true,
        (Ty::Var(x), t) | (t, Ty::Var(x)) => {
            if occurs(*x, t, binds, 0) {
                return false;
            }
            binds.insert(*x, t.clone());
            true
        }
        (Ty::Tuple(l), Ty::Tuple(r)) => l.len() == r.len() && l.iter().zip(r).all(|(l, r)| unify(l, r, binds, strict, depth + 1)),
        (Ty::Constr(p, l), Ty::Constr(q, r)) if p == q => {
            l.len() == r.len() && l.iter().zip(r).all(|(l, r)| unify(l, r, binds, strict, depth + 1))
        }
        (Ty::Constr(..), Ty::Constr(..)) => !strict,
        (Ty::Package(p, l), Ty::Package(q, r)) if p == q => {
            l.iter().all(|(n, x)| r.iter().find(|(m, _)| m == n).is_none_or(|(_, y)| unify(x, y, binds, strict, depth + 1)))
        }
        (Ty::Tuple(_), Ty::Constr(..)) | (Ty::Constr(..), Ty::Tuple(_)) => false,
        // What the reader could not write, and functions (whose arrows it does not give),
        // say nothing either way.
        (Ty::Unknown | Ty::Function, _) | (_, Ty::Unknown | Ty::Function) => true,
        _ => !strict || a == b,
    }
}

/// What a variable is bound to, through chains of variables (never a bound variable).
fn deref(ty: &Ty, binds: &FxHashMap<i64, Ty>) -> Ty {
    let mut ty = ty;
    for _ in 0..MAX_DEPTH {
        match ty {
            Ty::Var(v) if binds.contains_key(v) => ty = &binds[v],
            _ => break,
        }
    }
    ty.clone()
}

/// Whether variable `v` occurs in `ty` (binding it there would make an infinite type).
fn occurs(v: i64, ty: &Ty, binds: &FxHashMap<i64, Ty>, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return true;
    }
    match ty {
        Ty::Var(w) if *w == v => true,
        Ty::Var(w) => binds.get(w).is_some_and(|t| occurs(v, t, binds, depth + 1)),
        t => t.children().any(|c| occurs(v, c, binds, depth + 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Program;
    use crate::types::Shape;

    /// A function of these arguments and result, as the reader writes one.
    fn function(params: Vec<Ty>, result: Ty) -> Function {
        Function { line: 1, col: 0, name: None, params, free: vec![], partial: false, ordered: true, result }
    }

    /// dune's memo store: `Store.of_table` packs a `Stdune.Table.t` with the table's own
    /// functions; `make` packs a functor-made table's.
    #[test]
    fn a_packed_modules_closures_reveal_its_abstract_type() {
        let program = Program::parse(
            r#"{"units": [
              {"unit": "Intf", "types": [
                 {"path": "Intf.Instance.key", "params": [], "kind": "abstract"},
                 {"path": "Intf.Instance.value", "params": [], "kind": "abstract"},
                 {"path": "Intf.Instance.t", "params": [], "kind": "abstract"}],
               "module_types": [{"path": "Intf.Instance", "fields": [
                 {"name": "clear", "kind": "value", "type": {"f": 1}, "params": [{"c": "Intf.Instance.t", "a": []}]},
                 {"name": "find", "kind": "value", "type": {"f": 1},
                  "params": [{"c": "Intf.Instance.t", "a": []}, {"c": "Intf.Instance.key", "a": []}]},
                 {"name": "set", "kind": "value", "type": {"f": 1},
                  "params": [{"c": "Intf.Instance.t", "a": []}, {"c": "Intf.Instance.key", "a": []}, {"c": "Intf.Instance.value", "a": []}]},
                 {"name": "store", "kind": "value", "type": {"c": "Intf.Instance.t", "a": []}},
                 {"name": "stores", "kind": "value", "type": {"c": "list", "a": [{"c": "Intf.Instance.t", "a": []}]}}]}]},
              {"unit": "Table", "types": [{"path": "Table.t", "params": [1, 2], "kind": {"record": [["data", true, {"c": "array", "a": [{"v": 2}]}]], "repr": "regular"}}]}
            ]}"#,
        )
        .unwrap();
        let env = TypeEnv::new(&program);
        let int = Ty::Constr("int".into(), vec![]);
        let string = Ty::Constr("string".into(), vec![]);
        let package = Ty::Package("Intf.Instance".into(), vec![("key".into(), int.clone()), ("value".into(), string.clone())]);
        let Shape::Package(shape) = env.shape(&package) else { panic!("a package's shape: {:?}", env.shape(&package)) };
        assert_eq!(shape.abstracts, vec!["t".to_string()]);
        assert_eq!(shape.fields[3].1, Ty::Var(-1), "store : t");
        let table = |k: Ty, v: Ty| Ty::Constr("Table.t".into(), vec![k, v]);
        let function = |params: Vec<Ty>| function(params, Ty::Unknown);
        let clear = function(vec![table(Ty::Var(7), Ty::Var(8))]);
        let set = function(vec![table(Ty::Var(4), Ty::Var(5)), Ty::Var(4), Ty::Var(5)]);
        // `clear` alone leaves the table's parameters open; `set` binds them to key and value.
        let revealed = reveal(&env, &shape, &[Some(&clear), None, Some(&set), None, None]);
        let store = table(int.clone(), string.clone());
        assert_eq!(revealed, vec![(3, store.clone()), (4, Ty::Constr("list".into(), vec![store.clone()]))]);
        // Without `set`, `t` is a table of unknown parameters: still a table.
        let revealed = reveal(&env, &shape, &[Some(&clear), None, None, None, None]);
        assert_eq!(revealed[0], (3, table(Ty::Var(7 + VARIABLES_APART), Ty::Var(8 + VARIABLES_APART))));
        // A function that does not take what the signature says (a pair where the key is an
        // int) reveals nothing.
        let wrong = function(vec![table(Ty::Var(4), Ty::Var(5)), Ty::Tuple(vec![int.clone(), int.clone()]), Ty::Var(5)]);
        assert_eq!(reveal(&env, &shape, &[None, None, Some(&wrong), None, None]), vec![]);
        // No closure read: nothing known.
        assert_eq!(reveal(&env, &shape, &[None, None, None, None, None]), vec![]);
    }

    /// `Both : 'a list * ('a -> string) * ('a -> string) -> t`: the two closures must agree on
    /// `'a`, and a function polymorphic in it says nothing.
    #[test]
    fn an_existential_is_known_only_when_the_closures_agree_on_all_of_it() {
        let env = TypeEnv::new(&Program::parse(r#"{"units": []}"#).unwrap());
        let ty = |p: &str| Ty::Constr(p.into(), vec![]);
        let list = |t: Ty| Ty::Constr("list".into(), vec![t]);
        let shape = PackageShape {
            fields: vec![(None, list(Ty::Var(-1))), (None, Ty::Function), (None, Ty::Function)],
            params: vec![vec![], vec![Ty::Var(-1)], vec![Ty::Var(-1)]],
            results: vec![None, Some(ty("string")), Some(ty("string"))],
            abstracts: vec!["'1".into()],
            existential: true,
        };
        let function = |params: Vec<Ty>| function(params, ty("string"));
        let (on_int, on_float, on_any) = (function(vec![ty("int")]), function(vec![ty("float")]), function(vec![Ty::Var(3)]));
        assert_eq!(reveal(&env, &shape, &[None, Some(&on_int), Some(&on_int)]), vec![(0, list(ty("int")))]);
        assert_eq!(reveal(&env, &shape, &[None, Some(&on_int), Some(&on_float)]), vec![], "two types: none");
        assert_eq!(reveal(&env, &shape, &[None, Some(&on_any), None]), vec![], "any 'a: none");
        assert_eq!(reveal(&env, &shape, &[None, Some(&on_any), Some(&on_int)]), vec![(0, list(ty("int")))]);
    }

    /// Stdune's `Table`: `(module Hashtbl with type value = v and type Key.t = k)` whose
    /// `value : value H.t` is, through the signature's own abbreviation, a table keyed by `Key.t`.
    #[test]
    fn a_nested_constraint_reaches_what_the_signature_abbreviates() {
        let program = Program::parse(
            r#"{"units": [
              {"unit": "Intf", "types": [
                 {"path": "Intf.Tbl.Key.t", "params": [], "kind": "abstract"},
                 {"path": "Intf.Tbl.value", "params": [], "kind": "abstract"},
                 {"path": "Intf.Tbl.H.t", "params": [1], "kind": "abstract",
                  "manifest": {"c": "Table.t", "a": [{"c": "Intf.Tbl.Key.t", "a": []}, {"v": 1}]}}],
               "module_types": [{"path": "Intf.Tbl", "fields": [
                 {"name": "Key", "kind": "module"},
                 {"name": "value", "kind": "value", "type": {"c": "Intf.Tbl.H.t", "a": [{"c": "Intf.Tbl.value", "a": []}]}}]}]},
              {"unit": "Table", "types": [{"path": "Table.t", "params": [1, 2], "kind": {"record": [["data", true, {"c": "array", "a": [{"v": 2}]}]], "repr": "regular"}}]}
            ]}"#,
        )
        .unwrap();
        let env = TypeEnv::new(&program);
        let (int, string) = (Ty::Constr("int".into(), vec![]), Ty::Constr("string".into(), vec![]));
        let package = Ty::Package("Intf.Tbl".into(), vec![("Key.t".into(), int.clone()), ("value".into(), string.clone())]);
        let Shape::Package(shape) = env.shape(&package) else { panic!("a package's shape") };
        assert_eq!(shape.fields[1].1, Ty::Constr("Table.t".into(), vec![int, string]));
        assert!(shape.abstracts.is_empty(), "every type of the signature is constrained or defined");
    }
}
