//! Type declarations of a whole program, found by path: through module aliases
//! (`Stdlib.Hashtbl` = `Stdlib__Hashtbl`), functor applications (`Stdlib__Map.Make(String).t`:
//! the functor body's `t` with its parameter replaced by the argument) and includes; and what a
//! value of a type looks like in the heap ([`Shape`]).

use crate::model::{ClosureTy, DeclKind, Function, ModuleTypeDef, Program, Ty};
use rustc_hash::FxHashMap;

/// Resolution gives up past this depth (aliases of aliases, abbreviations of abbreviations).
const MAX_DEPTH: usize = 40;
/// A type path's resolution gives up after this many tries (includes of includes can branch
/// without end).
const LOOKUP_STEPS: usize = 256;

pub struct TypeEnv {
    decls: FxHashMap<String, crate::model::Decl>,
    aliases: FxHashMap<String, String>,
    params: FxHashMap<String, Vec<String>>,
    includes: FxHashMap<String, Vec<String>>,
    module_types: FxHashMap<String, ModuleTypeDef>,
    /// Functions by unit and where their code starts; `None` where two share the place (their
    /// closures cannot be told apart).
    functions: FxHashMap<(String, u32, u32), Option<Function>>,
    /// What [`TypeEnv::lookup`] found for each path (the declaration's key), once.
    found: std::sync::Mutex<FxHashMap<String, Option<FoundKey>>>,
}

/// What a lookup found, by the declaration's key: (key, rewrites, canonical path).
type FoundKey = (String, Rewrites, String);

/// A block's fields: each with its label (records, inline records) and type.
pub type FieldTypes = Vec<(Option<String>, Ty)>;

/// What a value of a type is at run time, its type arguments applied.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// An immediate: `int`, `char`, `bool`, `unit`, a variant of constant constructors only.
    Immediate,
    /// A boxed float (tag 253).
    Float,
    /// `string` or `bytes` (tag 252).
    String,
    /// `int32`, `int64`, `nativeint`: a custom block with these operations.
    Custom(&'static str),
    /// `float array` or `floatarray` (tag 254; `float array` may also be an empty block).
    FloatArray,
    /// `'a array` of non-floats: tag 0, any size.
    Array(Ty),
    /// A record or tuple: tag 0, one field each (named or not).
    Fields(FieldTypes),
    /// A float record: tag 254, one unboxed float per label.
    FloatRecord(Vec<String>),
    /// A variant: constant constructors are the immediates 0, 1, ...; the others are blocks whose
    /// tag is their rank among them, with their arguments (an inline record's labels named).
    Variant {
        constants: Vec<String>,
        blocks: Vec<(String, FieldTypes)>,
        /// Constructors (by rank among `blocks`) with existentials that closures among their
        /// arguments may say.
        reveals: Vec<(usize, PackageShape)>,
    },
    PolyVariant(Vec<(String, Option<Ty>)>),
    /// `'a lazy_t`: a lazy block, a forward block, or (forced) the value itself.
    Lazy(Ty),
    /// An object (tag 248): its fields are instance variables the type does not list.
    Object,
    /// A closure of a function the program's names do not say (reached through a field of a
    /// function type).
    Function,
    /// A closure whose function is known: its environment's fields from `env_start` on (free
    /// variables, or a partial application's argument and the closure it extends).
    Closure {
        env_start: usize,
        fields: FieldTypes,
    },
    /// An `[@@unboxed]` type: the value is its one field's.
    Unboxed(Ty),
    /// A first-class module: a block of its module type's fields.
    Package(PackageShape),
    /// Typing stops: a type variable, an abstract or extensible type, an existential.
    Unknown,
}

/// A block's fields whose types its contents must say: a first-class module's (the abstract
/// types of its signature), or a GADT constructor's (its existential variables).
#[derive(Debug, Clone, PartialEq)]
pub struct PackageShape {
    /// Each field's name and type; the k-th unknown type is the variable `-1 - k`.
    pub fields: FieldTypes,
    /// For each field, a function's argument types as declared (empty for others): the
    /// closure in that field takes them, and so says what the unknown types are.
    pub params: Vec<Vec<Ty>>,
    /// For each field, a function's result as declared, where known.
    pub results: Vec<Option<Ty>>,
    pub abstracts: Vec<String>,
    /// Unknowns that are a GADT constructor's existentials: one is known only when the closures
    /// say all of it (no part left a variable); otherwise its fields stay untyped.
    pub existential: bool,
}

/// `ty` with each path `prefix` + NAME (no arguments) replaced by what `f` gives for NAME.
fn replace_local(ty: &Ty, prefix: &str, f: &mut impl FnMut(&str) -> Option<Ty>) -> Ty {
    match ty {
        Ty::Constr(p, a) if a.is_empty() => match p.strip_prefix(prefix).and_then(&mut *f) {
            Some(t) => t,
            None => ty.clone(),
        },
        t => t.map_children(&mut |c| replace_local(c, prefix, f)),
    }
}

/// Builtin types (Predef) that need no declaration.
fn predef(name: &str, args: &[Ty]) -> Option<Shape> {
    let arg = || args.first().cloned().unwrap_or(Ty::Unknown);
    Some(match name {
        "int" | "char" | "bool" | "unit" => Shape::Immediate,
        "float" => Shape::Float,
        "string" | "bytes" => Shape::String,
        "int32" => Shape::Custom("_i"),
        "int64" => Shape::Custom("_j"),
        "nativeint" => Shape::Custom("_n"),
        "floatarray" => Shape::FloatArray,
        "array" => match arg() {
            Ty::Constr(f, a) if f == "float" && a.is_empty() => Shape::FloatArray,
            t => Shape::Array(t),
        },
        "list" => Shape::Variant {
            constants: vec!["[]".into()],
            blocks: vec![("::".into(), vec![(None, arg()), (None, Ty::Constr("list".into(), vec![arg()]))])],
            reveals: Vec::new(),
        },
        "option" => {
            Shape::Variant { constants: vec!["None".into()], blocks: vec![("Some".into(), vec![(None, arg())])], reveals: Vec::new() }
        }
        "lazy_t" => Shape::Lazy(arg()),
        _ => return None,
    })
}

impl TypeEnv {
    pub fn new(program: &Program) -> TypeEnv {
        let mut env = TypeEnv {
            decls: FxHashMap::default(),
            aliases: FxHashMap::default(),
            params: FxHashMap::default(),
            includes: FxHashMap::default(),
            module_types: FxHashMap::default(),
            functions: FxHashMap::default(),
            found: Default::default(),
        };
        for u in &program.units {
            for f in &u.functions {
                env.functions.entry((u.unit.clone(), f.line, f.col)).and_modify(|known| *known = None).or_insert_with(|| Some(f.clone()));
            }
            for d in &u.types {
                env.decls.insert(d.path.clone(), d.clone());
            }
            for m in &u.module_types {
                env.module_types.insert(m.path.clone(), m.clone());
            }
            for m in &u.modules {
                if let Some(a) = &m.alias {
                    env.aliases.insert(m.path.clone(), a.clone());
                }
                if let Some(p) = &m.functor {
                    env.params.entry(m.path.clone()).or_default().push(p.clone());
                }
                if let Some(i) = &m.include {
                    env.includes.entry(m.path.clone()).or_default().push(i.clone());
                }
            }
        }
        env
    }

    /// The function of `unit` whose code starts at `line`, `col`; `None` when none is known there
    /// or two are.
    pub fn function(&self, unit: &str, line: u32, col: u32) -> Option<&Function> {
        self.functions.get(&(unit.to_string(), line, col))?.as_ref()
    }

    /// What a closure's environment holds: its function's free variables, or a partial
    /// application's argument (the `applied`-th parameter) and the closure it extends.
    fn closure_shape(&self, c: &ClosureTy) -> Shape {
        let Some(f) = self.function(&c.unit, c.line, c.col) else { return Shape::Unknown };
        let fields = if c.applied == 0 || f.partial {
            // A closed function's closure keeps no environment at all (its free variables
            // were constants); modules are captured only when the unit's interface coerces
            // them: the environment's length says which.
            let all = f.free.len();
            let sure = f.free.iter().filter(|v| !v.maybe_global).count();
            let keep_maybe = match c.env_len as usize {
                0 => return Shape::Closure { env_start: c.env_start as usize, fields: Vec::new() },
                n if !f.ordered => return Shape::Closure { env_start: c.env_start as usize, fields: vec![(None, Ty::Unknown); n] },
                n if n == all => true,
                n if n == sure => false,
                _ => return Shape::Unknown,
            };
            f.free.iter().filter(|v| keep_maybe || !v.maybe_global).map(|v| (Some(v.name.clone()), v.ty.clone())).collect()
        } else {
            let Some(arg) = f.params.get(c.applied as usize - 1) else { return Shape::Unknown };
            vec![(Some(format!("argument {}", c.applied)), arg.clone()), (Some("applied to".into()), Ty::Unknown)]
        };
        Shape::Closure { env_start: c.env_start as usize, fields }
    }

    /// The declaration of a type path and the rewriting of the paths inside it (a functor's
    /// parameters by the arguments, its body's own paths by the application).
    pub fn lookup(&self, path: &str) -> Option<Found<'_>> {
        if let Some(known) = self.found.lock().ok().and_then(|cache| cache.get(path).cloned()) {
            return known.and_then(|(key, rewrites, path)| Some(Found { decl: self.decls.get(&key)?, rewrites, path }));
        }
        let mut steps = LOOKUP_STEPS;
        let found = self.locate(path, 0, &mut steps, &|key| self.decls.contains_key(key));
        if let Ok(mut cache) = self.found.lock() {
            cache.insert(path.to_string(), found.clone());
        }
        let (key, rewrites, path) = found?;
        Some(Found { decl: self.decls.get(&key)?, rewrites, path })
    }

    /// A module type by path (through aliases of modules and of module types), with the
    /// rewriting of the paths inside it.
    pub fn module_type(&self, path: &str) -> Option<(&ModuleTypeDef, Rewrites)> {
        let mut path = path.to_string();
        let mut carried = Rewrites::default();
        for _ in 0..MAX_DEPTH {
            let mut steps = LOOKUP_STEPS;
            let (key, rewrites, _) = self.locate(&path, 0, &mut steps, &|key| self.module_types.contains_key(key))?;
            let def = self.module_types.get(&key)?;
            carried.0.extend(rewrites.0);
            match &def.alias {
                Some(target) => path = carried.apply(target),
                None => return Some((def, carried)),
            }
        }
        None
    }

    /// Where `path` is defined in the table `has` asks of: (key, rewrites, canonical path).
    fn locate(&self, path: &str, depth: usize, steps: &mut usize, has: &dyn Fn(&str) -> bool) -> Option<FoundKey> {
        *steps = steps.checked_sub(1)?;
        if depth > MAX_DEPTH {
            return None;
        }
        let (module, name) = split_last(path)?;
        let (def, applied, rewrites) = self.resolve_module(module, depth)?;
        let key = format!("{def}.{name}");
        if has(&key) {
            return Some((key, rewrites, format!("{applied}.{name}")));
        }
        for inc in self.includes.get(&def).into_iter().flatten() {
            let inc = rewrites.apply(inc);
            if let Some(found) = self.locate(&format!("{inc}.{name}"), depth + 1, steps, has) {
                return Some(found);
            }
        }
        // A submodule an include brought in (`include Stdune` gives `Import.Lazy`): through
        // the includes of each enclosing module.
        let segments = split_top(&def, '.');
        for cut in (1..segments.len()).rev() {
            let parent = segments[..cut].join(".");
            for inc in self.includes.get(&parent).into_iter().flatten() {
                let inc = rewrites.apply(inc);
                let rest = segments[cut..].join(".");
                if let Some(found) = self.locate(&format!("{inc}.{rest}.{name}"), depth + 1, steps, has) {
                    return Some(found);
                }
            }
        }
        None
    }

    /// A module path's place of definition, following aliases, with the rewritings that its
    /// applications call for.
    fn resolve_module(&self, path: &str, depth: usize) -> Option<(String, String, Rewrites)> {
        if depth > MAX_DEPTH {
            return None;
        }
        let segments = split_top(path, '.');
        let mut def = String::new();
        let mut applied = String::new();
        let mut rewrites = Rewrites::default();
        for (i, seg) in segments.iter().enumerate() {
            let (name, args) = split_args(seg)?;
            if !def.is_empty() {
                def.push('.');
                applied.push('.');
            }
            def.push_str(name);
            applied.push_str(name);
            if let Some(target) = self.aliases.get(&def) {
                // `module M = P`: continue from P, with what follows M.
                let mut rest = rewrites.apply(target);
                if !args.is_empty() {
                    rest.push_str(&seg[name.len()..]);
                }
                for s in &segments[i + 1..] {
                    rest.push('.');
                    rest.push_str(s);
                }
                return self.resolve_module(&rest, depth + 1);
            }
            if !args.is_empty() {
                let mut params = self.params.get(&def).into_iter().flatten();
                for arg in &args {
                    if arg.is_empty() {
                        // `F()`: a generative application takes no parameter.
                        applied.push_str("()");
                        continue;
                    }
                    let param = params.next()?;
                    // The argument's own canonical path, so that one module has one name.
                    let arg = rewrites.apply(arg);
                    let arg = self.resolve_module(&arg, depth + 1).map_or(arg, |(_, applied, _)| applied);
                    applied.push('(');
                    applied.push_str(&arg);
                    applied.push(')');
                    rewrites.0.push((format!("{def}{{{param}}}"), arg));
                }
                rewrites.0.push((def.clone(), applied.clone()));
            }
        }
        Some((def, applied, rewrites))
    }

    /// Whether a type names a functor's body without its application (`F.M.t` for a functor
    /// `F`): what its parameters are, it does not say.
    pub fn names_unapplied_functor(&self, ty: &Ty) -> bool {
        let unapplied = |path: &str| {
            let segments = split_top(path, '.');
            (1..segments.len()).any(|cut| {
                let module = segments[..cut].join(".");
                !segments[cut - 1].contains('(') && self.params.contains_key(&module)
            })
        };
        match ty {
            Ty::Constr(p, _) if unapplied(p) => true,
            _ => ty.children().any(|t| self.names_unapplied_functor(t)),
        }
    }

    /// The canonical form of a type: abbreviations expanded, every path the one of its
    /// definition (applications kept), so that two names of one type are one type. `None` for
    /// a type too big to be worth naming (nested types can grow without end).
    pub fn canon(&self, ty: &Ty) -> Option<Ty> {
        let mut budget = 400usize;
        self.canon_at(ty, &mut budget, 0)
    }

    fn canon_at(&self, ty: &Ty, budget: &mut usize, depth: usize) -> Option<Ty> {
        *budget = budget.checked_sub(1)?;
        if depth > MAX_DEPTH {
            return None;
        }
        Some(match ty {
            Ty::Constr(p, args) if p.contains('.') => {
                let Some(found) = self.lookup(p) else { return Some(Ty::Constr(p.clone(), args.clone())) };
                if found.decl.params.len() != args.len() {
                    return Some(Ty::Unknown);
                }
                if let (DeclKind::Abstract, Some(m)) = (&found.decl.kind, &found.decl.manifest) {
                    let bind = |v: i64| found.decl.params.iter().position(|&q| q == v).map(|i| args[i].clone());
                    let expanded = m.map_paths(&|q| found.rewrites.apply(q)).subst(&bind);
                    return self.canon_at(&expanded, budget, depth + 1);
                }
                let args = args.iter().map(|t| self.canon_at(t, budget, depth + 1)).collect::<Option<_>>()?;
                Ty::Constr(found.path, args)
            }
            Ty::Package(p, w) => {
                let path = self.module_type(p).map_or_else(|| p.clone(), |(def, _)| def.path.clone());
                let mut w = w.iter().map(|(n, t)| Some((n.clone(), self.canon_at(t, budget, depth + 1)?))).collect::<Option<Vec<_>>>()?;
                w.sort_by(|a, b| a.0.cmp(&b.0));
                Ty::Package(path, w)
            }
            // A tuple, a polymorphic variant, a predefined type's arguments, in order.
            t => t.try_map_children(&mut |c| self.canon_at(c, budget, depth + 1))?,
        })
    }

    /// A first-class module of `path` with constraints `with`: the fields of its module type's
    /// signature, the constrained types replaced, each abstract one a negative variable
    /// (`-1 - k` for the k-th in [`PackageShape::abstracts`]).
    fn package_shape(&self, path: &str, with: &[(String, Ty)]) -> Shape {
        let Some((def, rewrites)) = self.module_type(path) else { return Shape::Unknown };
        let mut abstracts: Vec<String> = Vec::new();
        let prefix = format!("{}.", def.path);
        let mut name_in_signature = |name: &str| -> Option<Ty> {
            // `with type key = k`, `with type Key.t = k`.
            if let Some((_, c)) = with.iter().find(|(n, _)| n == name) {
                return Some(c.clone());
            }
            if name.contains('.') {
                return None;
            }
            // The signature's own abstract type: what the implementation behind it is
            // can only be read from the module's contents.
            let decl = self.decls.get(&format!("{prefix}{name}"))?;
            if !matches!(decl.kind, DeclKind::Abstract) || decl.manifest.is_some() || !decl.params.is_empty() {
                return None;
            }
            let k = abstracts.iter().position(|a| a == name).unwrap_or_else(|| {
                abstracts.push(name.to_string());
                abstracts.len() - 1
            });
            Some(Ty::Var(-1 - k as i64))
        };
        let mut local = |t: &Ty| -> Ty {
            let t = replace_local(&t.map_paths(&|q| rewrites.apply(q)), &prefix, &mut name_in_signature);
            // The signature's own abbreviations expanded (`value H.t` is a `(Key.t, value)
            // Hashtbl.t`), so that a constraint reaches what they name (`with type Key.t = k`).
            match self.canon(&t) {
                Some(expanded) if expanded != t => replace_local(&expanded, &prefix, &mut name_in_signature),
                _ => t,
            }
        };
        let mut fields = Vec::with_capacity(def.fields.len());
        let mut params = Vec::with_capacity(def.fields.len());
        for f in &def.fields {
            let ty = match (f.kind.as_str(), &f.ty) {
                ("value", Some(t)) => local(t),
                _ => Ty::Unknown,
            };
            fields.push((Some(f.name.clone()), ty));
            params.push(f.params.iter().map(&mut local).collect());
        }
        let results = vec![None; fields.len()];
        Shape::Package(PackageShape { fields, params, results, abstracts, existential: false })
    }

    /// What a value of `ty` looks like in the heap.
    pub fn shape(&self, ty: &Ty) -> Shape {
        let mut ty = ty.clone();
        for _ in 0..MAX_DEPTH {
            let (path, args) = match &ty {
                Ty::Constr(p, a) => (p.clone(), a.clone()),
                Ty::Tuple(l) => return Shape::Fields(l.iter().map(|t| (None, t.clone())).collect()),
                Ty::Function => return Shape::Function,
                Ty::Closure(c) => return self.closure_shape(c),
                Ty::Object(_) => return Shape::Object,
                Ty::PolyVariant(l) => return Shape::PolyVariant(l.clone()),
                Ty::Package(p, w) => return self.package_shape(p, w),
                Ty::Var(_) | Ty::Unknown => return Shape::Unknown,
            };
            if !path.contains('.') {
                return predef(&path, &args).unwrap_or(Shape::Unknown);
            }
            let Some(Found { decl, rewrites, .. }) = self.lookup(&path) else { return Shape::Unknown };
            if decl.params.len() != args.len() {
                return Shape::Unknown;
            }
            let bind = |v: i64| decl.params.iter().position(|&p| p == v).map(|i| args[i].clone());
            let inst = |t: &Ty| t.map_paths(&|p| rewrites.apply(p)).subst(&bind);
            match &decl.kind {
                DeclKind::Record { labels, repr } => {
                    return match repr.as_str() {
                        "regular" => Shape::Fields(labels.iter().map(|l| (Some(l.name.clone()), inst(&l.ty))).collect()),
                        "float" => Shape::FloatRecord(labels.iter().map(|l| l.name.clone()).collect()),
                        "unboxed" => labels.first().map_or(Shape::Unknown, |l| Shape::Unboxed(inst(&l.ty))),
                        _ => Shape::Unknown,
                    }
                }
                DeclKind::Variant { constructors, unboxed } => {
                    if *unboxed {
                        let c = constructors.first();
                        let t = c.and_then(|c| c.args.first().cloned().or_else(|| c.record.as_ref()?.first().map(|l| l.ty.clone())));
                        return t.map_or(Shape::Unknown, |t| Shape::Unboxed(inst(&t)));
                    }
                    let mut constants = Vec::new();
                    let mut blocks = Vec::new();
                    let mut reveals = Vec::new();
                    for c in constructors {
                        if c.is_constant() {
                            constants.push(c.name.clone());
                            continue;
                        }
                        // A GADT constructor: its own variables, bound by matching its result
                        // type with the arguments; others are existential (stay unknown).
                        let mut binds = Vec::new();
                        if let Some(Ty::Constr(_, res_args)) = &c.res {
                            if res_args.len() != args.len() || !res_args.iter().zip(&args).all(|(r, a)| unify(r, a, &mut binds)) {
                                // This constructor cannot build a value of this type.
                                binds.clear();
                            }
                        }
                        // Variables its result does not bind are existential: no type of
                        // theirs would be true, so typing stops there.
                        let gadt_bind =
                            |v: i64| -> Option<Ty> { Some(binds.iter().find(|(w, _)| *w == v).map_or(Ty::Unknown, |(_, t)| t.clone())) };
                        let inst_c = |t: &Ty| {
                            let t = t.map_paths(&|p| rewrites.apply(p));
                            if c.res.is_some() {
                                t.subst(&gadt_bind)
                            } else {
                                t.subst(&bind)
                            }
                        };
                        let fields = match &c.record {
                            Some(labels) => labels.iter().map(|l| (Some(l.name.clone()), inst_c(&l.ty))).collect(),
                            None => c.args.iter().map(|t| (None, inst_c(t))).collect(),
                        };
                        if c.res.is_some() && c.arrows.iter().any(Option::is_some) {
                            if let Some(reveal) = existential_reveal(c, &binds, &|p: &str| rewrites.apply(p)) {
                                reveals.push((blocks.len(), reveal));
                            }
                        }
                        blocks.push((c.name.clone(), fields));
                    }
                    return if blocks.is_empty() { Shape::Immediate } else { Shape::Variant { constants, blocks, reveals } };
                }
                DeclKind::Open => return Shape::Unknown,
                DeclKind::Object => return Shape::Object,
                DeclKind::Abstract => match &decl.manifest {
                    Some(m) => ty = inst(m),
                    None => return Shape::Unknown,
                },
            }
        }
        Shape::Unknown
    }
}

/// A GADT constructor's arguments with its existential variables as unknowns (`-1 - k`), and
/// its function arguments' declared types: what [`crate::packages::reveal`] reads closures
/// with. `None` without existentials.
fn existential_reveal(c: &crate::model::Constructor, binds: &[(i64, Ty)], rewrite: &dyn Fn(&str) -> String) -> Option<PackageShape> {
    // The constructor's variables its result does not bind, in order of appearance.
    let mut unknowns: Vec<i64> = Vec::new();
    let arrow_types = c.arrows.iter().flatten().flat_map(|(p, r)| p.iter().chain(std::iter::once(r)));
    for t in c.args.iter().chain(arrow_types) {
        collect_vars(t, &mut unknowns);
    }
    unknowns.retain(|v| !binds.iter().any(|(w, _)| w == v));
    let abstracts: Vec<String> = (1..=unknowns.len()).map(|k| format!("'{k}")).collect();
    let inst = |t: &Ty| -> Ty {
        t.map_paths(&|p| rewrite(p)).subst(&|v| {
            Some(match binds.iter().find(|(w, _)| *w == v) {
                Some((_, bound)) => bound.clone(),
                None => Ty::Var(-1 - unknowns.iter().position(|&u| u == v)? as i64),
            })
        })
    };
    let fields: FieldTypes = c.args.iter().map(|t| (None, inst(t))).collect();
    let mut params = Vec::with_capacity(fields.len());
    let mut results = Vec::with_capacity(fields.len());
    for i in 0..fields.len() {
        match c.arrows.get(i).cloned().flatten() {
            Some((p, r)) => {
                params.push(p.iter().map(inst).collect());
                results.push(Some(inst(&r)));
            }
            None => {
                params.push(Vec::new());
                results.push(None);
            }
        }
    }
    (!abstracts.is_empty()).then_some(PackageShape { fields, params, results, abstracts, existential: true })
}

/// Every type variable of `ty`, once each, in order of appearance.
fn collect_vars(ty: &Ty, out: &mut Vec<i64>) {
    match ty {
        Ty::Var(v) if !out.contains(v) => out.push(*v),
        t => t.children().for_each(|c| collect_vars(c, out)),
    }
}

/// Matches a GADT constructor's result type `pattern` with the actual type, binding the
/// pattern's variables; false when they cannot match.
fn unify(pattern: &Ty, actual: &Ty, binds: &mut Vec<(i64, Ty)>) -> bool {
    match (pattern, actual) {
        (Ty::Var(v), t) => match binds.iter().find(|(w, _)| w == v) {
            Some((_, bound)) => bound == t,
            None => {
                binds.push((*v, t.clone()));
                true
            }
        },
        (Ty::Tuple(p), Ty::Tuple(a)) => p.len() == a.len() && p.iter().zip(a).all(|(p, a)| unify(p, a, binds)),
        (Ty::Constr(pp, pa), Ty::Constr(ap, aa)) => pp == ap && pa.len() == aa.len() && pa.iter().zip(aa).all(|(p, a)| unify(p, a, binds)),
        // `[> `Empty ]` in a result type: an open row, matched by any polymorphic variant.
        (Ty::PolyVariant(_), Ty::PolyVariant(_)) => true,
        (Ty::Package(pp, pw), Ty::Package(ap, aw)) => {
            pp == ap && pw.len() == aw.len() && pw.iter().zip(aw).all(|((pn, p), (an, a))| pn == an && unify(p, a, binds))
        }
        (p, a) => p == a,
    }
}

/// A declaration found by path: the rewriting of the paths inside it, and the canonical path
/// of the type (its definition's, with the applications that led there).
pub struct Found<'e> {
    pub decl: &'e crate::model::Decl,
    pub rewrites: Rewrites,
    pub path: String,
}

/// Rewritings of path prefixes, the latest first.
#[derive(Debug, Default, Clone)]
pub struct Rewrites(Vec<(String, String)>);

impl Rewrites {
    /// Rewrites every path inside `path` (its application arguments too) that starts with one of
    /// the prefixes, at a path boundary.
    pub fn apply(&self, path: &str) -> String {
        if self.0.is_empty() {
            return path.to_string();
        }
        let bytes = path.as_bytes();
        let mut out = String::with_capacity(path.len());
        let mut i = 0;
        while i < path.len() {
            let at_start = i == 0 || bytes[i - 1] == b'(';
            if at_start {
                let hit = self.0.iter().rev().filter(|(from, _)| {
                    path[i..].starts_with(from.as_str()) && matches!(bytes.get(i + from.len()), None | Some(b'.' | b'(' | b')'))
                });
                if let Some((from, to)) = hit.max_by_key(|(from, _)| from.len()) {
                    out.push_str(to);
                    i += from.len();
                    continue;
                }
            }
            let c = path[i..].chars().next().expect("in bounds");
            out.push(c);
            i += c.len_utf8();
        }
        out
    }
}

/// `A.B(C.D).t` -> (`A.B(C.D)`, `t`).
fn split_last(path: &str) -> Option<(&str, &str)> {
    let mut depth = 0i32;
    for (i, c) in path.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => depth -= 1,
            '.' if depth == 0 => return Some((&path[..i], &path[i + 1..])),
            _ => {}
        }
    }
    None
}

/// Splits at `sep` outside parentheses.
fn split_top(path: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in path.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&path[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&path[start..]);
    out
}

/// `Make(A)(B)` -> (`Make`, [`A`, `B`]).
fn split_args(seg: &str) -> Option<(&str, Vec<&str>)> {
    let Some(open) = seg.find('(') else { return Some((seg, Vec::new())) };
    let (name, mut rest) = seg.split_at(open);
    let mut args = Vec::new();
    while !rest.is_empty() {
        let mut depth = 0i32;
        let mut end = None;
        for (i, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end?;
        args.push(&rest[1..end]);
        rest = &rest[end + 1..];
        if !rest.is_empty() && !rest.starts_with('(') {
            return None;
        }
    }
    Some((name, args))
}

/// A type as an OCaml programmer writes it, with the standard library's paths shortened
/// (`Stdlib__Hashtbl.t` -> `Hashtbl.t`).
pub fn display(ty: &Ty) -> String {
    match ty {
        Ty::Var(_) => "_".into(),
        Ty::Function => "<fun>".into(),
        Ty::Closure(c) => match c.applied {
            0 if c.function.ends_with(".lazy") => format!("lazy thunk of {} ({})", &c.function[..c.function.len() - 5], c.source),
            0 => format!("closure {} ({})", c.function, c.source),
            k => format!("partial application of {} ({}), {k} of {} arguments", c.function, c.source, c.arity),
        },
        Ty::Unknown => "?".into(),
        Ty::Package(p, w) => {
            let constraints: Vec<String> = w.iter().map(|(n, t)| format!("type {n} = {}", display(t))).collect();
            match constraints.is_empty() {
                true => format!("(module {})", short_path(p)),
                false => format!("(module {} with {})", short_path(p), constraints.join(" and ")),
            }
        }
        Ty::Object(m) => format!("< {} >", m.iter().map(|m| m.as_str()).chain(std::iter::once("..")).collect::<Vec<_>>().join("; ")),
        Ty::PolyVariant(l) => {
            let mut labels: Vec<String> = l.iter().map(|(n, _)| format!("`{n}")).collect();
            labels.sort();
            format!("[ {} ]", labels.join(" | "))
        }
        Ty::Tuple(l) => format!("({})", l.iter().map(display_arg).collect::<Vec<_>>().join(" * ")),
        Ty::Constr(p, args) => {
            let p = short_path(p);
            match args.len() {
                0 => p,
                1 => format!("{} {p}", display_arg(&args[0])),
                _ => format!("({}) {p}", args.iter().map(display).collect::<Vec<_>>().join(", ")),
            }
        }
    }
}

fn display_arg(ty: &Ty) -> String {
    match ty {
        Ty::Constr(_, a) if a.len() == 1 => display(ty),
        Ty::Tuple(_) => display(ty),
        Ty::Constr(_, a) if a.len() > 1 => display(ty),
        _ => display(ty),
    }
}

/// `Stdlib__Hashtbl.t` -> `Hashtbl.t`, `Stdlib.ref` -> `ref`.
pub fn short_path(p: &str) -> String {
    let p = p.replace("Stdlib__", "");
    let p = p.strip_prefix("Stdlib.").unwrap_or(&p).to_string();
    p.replace("(Stdlib.", "(")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dune's layout: a library's alias module maps `Lib__.Import` to `Lib__Import`, which
    /// includes another library whose `Lazy` is an alias of its own unit.
    #[test]
    fn types_resolve_through_alias_modules_and_includes() {
        let program = Program::parse(
            r#"{"units": [
              {"unit": "Lib__", "modules": [{"path": "Lib__.Import", "alias": "Lib__Import"}]},
              {"unit": "Lib__Import", "modules": [{"path": "Lib__Import", "include": "Base"}]},
              {"unit": "Base", "modules": [{"path": "Base.Lazy", "alias": "Base__Lazy"}]},
              {"unit": "Base__Lazy", "types": [{"path": "Base__Lazy.t", "params": [7], "manifest": {"c": "lazy_t", "a": [{"v": 7}]}, "kind": "abstract"}]}
            ]}"#,
        )
        .unwrap();
        let env = TypeEnv::new(&program);
        let found = env.lookup("Lib__.Import.Lazy.t").expect("found through the include");
        assert_eq!(found.decl.path, "Base__Lazy.t");
        let ty = Ty::Constr("Lib__.Import.Lazy.t".into(), vec![Ty::Constr("int".into(), vec![])]);
        assert_eq!(env.shape(&ty), Shape::Lazy(Ty::Constr("int".into(), vec![])));
        // Asked again (the answer is cached), and for what no include gives.
        assert!(env.lookup("Lib__.Import.Lazy.t").is_some());
        assert!(env.lookup("Lib__.Import.Missing.t").is_none());
    }

    /// menhir's `include GrammarFunctor.Make (struct ... end) ()`: a generative application
    /// takes no parameter, and an unnamed parameter (`functor (_ : S)`) takes its argument.
    #[test]
    fn types_resolve_through_generative_applications_and_unnamed_parameters() {
        let program = Program::parse(
            r#"{"units": [
              {"unit": "G", "modules": [{"path": "G", "include": "F.Make(G.%1)()"}, {"path": "G.Map", "alias": "F.Make(G.%1)().Map"}]},
              {"unit": "F", "modules": [{"path": "F.Make", "functor": "X"}, {"path": "F.Make.Map", "alias": "P.Big"},
                                        {"path": "F.Skip", "functor": "_"}, {"path": "F.Skip", "functor": "Y"}],
               "types": [{"path": "F.Make.t", "params": [], "manifest": {"c": "F.Make{X}.key", "a": []}, "kind": "abstract"},
                         {"path": "F.Skip.u", "params": [], "manifest": {"c": "F.Skip{Y}.key", "a": []}, "kind": "abstract"}]},
              {"unit": "P", "modules": [{"path": "P.Big", "alias": "P.Make(P.E)"}, {"path": "P.Make", "functor": "E"}],
               "types": [{"path": "P.Make.t", "params": [1], "manifest": {"c": "list", "a": [{"v": 1}]}, "kind": "abstract"}]}
            ]}"#,
        )
        .unwrap();
        let env = TypeEnv::new(&program);
        let found = env.lookup("G.Map.t").expect("through the include of a generative application");
        assert_eq!((found.decl.path.as_str(), found.path.as_str()), ("P.Make.t", "P.Make(P.E).t"));
        let found = env.lookup("G.t").expect("the functor body's own type");
        assert_eq!(found.path, "F.Make(G.%1)().t");
        assert_eq!(found.rewrites.apply("F.Make{X}.key"), "G.%1.key");
        // The second argument goes to the second parameter, the first being unnamed.
        let found = env.lookup("F.Skip(A)(B).u").unwrap();
        assert_eq!(found.rewrites.apply("F.Skip{Y}.key"), "B.key");
        // More arguments than parameters: no answer.
        assert!(env.lookup("F.Make(A)(B).t").is_none());
        // The functor body's type named without the application does not know its parameters.
        let named = |p: &str| Ty::Constr(p.into(), vec![]);
        assert!(env.names_unapplied_functor(&named("F.Make.t")));
        assert!(env.names_unapplied_functor(&Ty::Tuple(vec![named("int"), named("F.Make.Map.t")])));
        assert!(!env.names_unapplied_functor(&named("F.Make(G.%1)().t")));
        assert!(!env.names_unapplied_functor(&named("P.Big.t")));
    }

    #[test]
    fn paths_split_and_rewrite() {
        assert_eq!(split_last("A.B(C.D).t"), Some(("A.B(C.D)", "t")));
        assert_eq!(split_top("A.B(C.D).t", '.'), vec!["A", "B(C.D)", "t"]);
        assert_eq!(split_args("Make(A.B)(C)"), Some(("Make", vec!["A.B", "C"])));
        assert_eq!(split_args("Make(A)()"), Some(("Make", vec!["A", ""])));
        let r = Rewrites(vec![("M.F{P}".into(), "X.K".into()), ("M.F".into(), "M.F(X.K)".into())]);
        assert_eq!(r.apply("M.F{P}.t"), "X.K.t");
        assert_eq!(r.apply("M.F.%1.t"), "M.F(X.K).%1.t");
        assert_eq!(r.apply("M.G(M.F.%1).t"), "M.G(M.F(X.K).%1).t");
        assert_eq!(r.apply("M.Fx.t"), "M.Fx.t");
    }
}
