//! What the `.cmt` reader prints (and a snapshot's `ocaml_names` section holds), parsed. The
//! JSON comes from a file that may be hostile: anything unexpected parses as "unknown", never
//! as a panic.

use serde::Deserialize;
use serde_json::Value;

/// The names of one program: every compilation unit the reader could read.
#[derive(Debug, Default, Deserialize)]
pub struct Program {
    #[serde(default)]
    pub ocaml_version: String,
    #[serde(default)]
    pub units: Vec<Unit>,
    /// Files the reader could not read, with why.
    #[serde(default)]
    pub errors: Vec<FileError>,
    /// Units left out when annotating: their module block does not match the snapshot's.
    #[serde(default)]
    pub refused: Vec<FileError>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FileError {
    pub file: String,
    pub message: String,
}

#[derive(Debug, Deserialize)]
pub struct Unit {
    /// The module name (`Cache_leak`, `Stdlib__Hashtbl`).
    pub unit: String,
    #[serde(default)]
    pub file: String,
    #[serde(default)]
    pub source: Option<String>,
    /// The module block, field by field.
    #[serde(default)]
    pub fields: Vec<Field>,
    #[serde(default)]
    pub types: Vec<Decl>,
    #[serde(default)]
    pub modules: Vec<ModuleDef>,
    /// Its module types: what a first-class module of each holds.
    #[serde(default)]
    pub module_types: Vec<ModuleTypeDef>,
    /// Its functions and lazy thunks, with what their closures hold.
    #[serde(default, deserialize_with = "functions")]
    pub functions: Vec<Function>,
}

/// A function (or a lazy value's thunk) of a unit, found by where its code starts.
#[derive(Debug, Clone)]
pub struct Function {
    /// Where the function's code starts in the unit's source (0-based column), as the
    /// executable's line table says it.
    pub line: u32,
    pub col: u32,
    /// The identifier it is bound to (`make_handler`), `lazy` for a lazy value's thunk,
    /// `None` for an anonymous function.
    pub name: Option<String>,
    /// The types of its arguments, in order (a partial application holds the first ones).
    pub params: Vec<Ty>,
    /// Its free variables in the order its closure's environment stores them.
    pub free: Vec<FreeVariable>,
    /// The application of a known function to fewer arguments than it takes (`name`): the
    /// closure the compiler makes there holds the arguments given, then the function.
    pub partial: bool,
    /// Whether its environment is in the order of `free`: false where translation renames
    /// identifiers (the reader says where), and then heapsnap names the closure but does not
    /// type its environment.
    pub ordered: bool,
    /// What it returns after `params` (`Ty::Unknown` where the reader did not say).
    pub result: Ty,
}

/// A variable a closure may capture.
#[derive(Debug, Clone)]
pub struct FreeVariable {
    pub name: String,
    /// `Ty::Unknown` where the reader knows none (a module, for instance).
    pub ty: Ty,
    /// A module of the unit (or what an include binds): the closure captures it only when
    /// the unit's interface coerces it, else reads it from the unit's global.
    pub maybe_global: bool,
}

fn functions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Function>, D::Error> {
    let v = Value::deserialize(d)?;
    let uint = |f: &Value, k: &str| f.get(k).and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
    Ok(v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| {
                    Some(Function {
                        line: uint(f, "line")?,
                        col: uint(f, "col")?,
                        name: f.get("name").and_then(Value::as_str).map(str::to_string),
                        partial: f.get("partial").and_then(Value::as_bool).unwrap_or(false),
                        ordered: f.get("ordered").and_then(Value::as_bool).unwrap_or(true),
                        result: f.get("result").map_or(Ty::Unknown, Ty::from_value),
                        params: f
                            .get("params")
                            .and_then(Value::as_array)
                            .map(|a| a.iter().map(Ty::from_value).collect())
                            .unwrap_or_default(),
                        free: f
                            .get("free")
                            .and_then(Value::as_array)?
                            .iter()
                            .map(|fv| {
                                let fv = fv.as_array()?;
                                Some(FreeVariable {
                                    name: fv.first()?.as_str()?.to_string(),
                                    ty: fv.get(1).map_or(Ty::Unknown, Ty::from_value),
                                    maybe_global: fv.get(2).and_then(Value::as_bool).unwrap_or(false),
                                })
                            })
                            .collect::<Option<Vec<_>>>()?,
                    })
                })
                .collect()
        })
        .unwrap_or_default())
}

/// A field of a module block.
#[derive(Debug, Deserialize)]
pub struct Field {
    /// The identifier (`cache`, `equal`).
    pub name: String,
    /// The identifier with its submodules (`cache`, `Key.equal`).
    pub path: String,
    /// `value`, `module`, `exception`, `class`, `primitive`.
    #[serde(default)]
    pub kind: String,
    #[serde(rename = "type", default, deserialize_with = "opt_ty")]
    pub ty: Option<Ty>,
}

/// The variable a locally abstract type (`?k` in the reader's output) reads as: one per name,
/// above the reader's own variable ids (so that a function's `(type k v)` are two variables,
/// and neither is one of its others).
fn local_type_var(name: &str) -> i64 {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    (1 << 36) + (hash & 0xffff_ffff) as i64
}

/// A type expression. Paths are qualified strings (`Stdlib__Hashtbl.t`, `Foo.Sub.t`,
/// `Stdlib__Map.Make{Ord}.t` for a functor's parameter, `F(A).t` for an application).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ty {
    Var(i64),
    Function,
    Tuple(Vec<Ty>),
    Constr(String, Vec<Ty>),
    Object(Vec<String>),
    PolyVariant(Vec<(String, Option<Ty>)>),
    /// A closure, typed by the function its code runs rather than by an OCaml type.
    Closure(Box<ClosureTy>),
    /// A first-class module: its module type's path, and the `with type` constraints.
    Package(String, Vec<(String, Ty)>),
    Unknown,
}

/// Which closure: a function's own, or a partial application of it (`caml_curryN_K`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClosureTy {
    /// The unit and the place where the function's code starts: [`Function::line`], `col`.
    pub unit: String,
    pub line: u32,
    pub col: u32,
    /// How reports name it: `Unit.name`, `Unit.fun` or `Unit.lazy`, and `file:line`.
    pub function: String,
    pub source: String,
    /// Arguments a partial application holds (its arity `arity`); 0 for the function's own
    /// closure.
    pub applied: u32,
    pub arity: u32,
    /// Where the environment starts in the block (its closure information says so), and
    /// its length.
    pub env_start: u32,
    pub env_len: u32,
}

impl Ty {
    fn from_value(v: &Value) -> Ty {
        let list = |v: &Value| -> Vec<Ty> { v.as_array().map(|a| a.iter().map(Ty::from_value).collect()).unwrap_or_default() };
        let Some(o) = v.as_object() else { return Ty::Unknown };
        if let Some(id) = o.get("v").and_then(Value::as_i64) {
            Ty::Var(id)
        } else if o.contains_key("f") {
            Ty::Function
        } else if let Some(t) = o.get("t") {
            Ty::Tuple(list(t))
        } else if let Some(c) = o.get("c").and_then(Value::as_str) {
            if c.starts_with('?') && !c.contains('.') && o.get("a").and_then(Value::as_array).is_none_or(Vec::is_empty) {
                // A locally abstract type (`fun (type k) ...`): some type, as a variable is.
                return Ty::Var(local_type_var(c));
            }
            Ty::Constr(c.to_string(), o.get("a").map(list).unwrap_or_default())
        } else if let Some(m) = o.get("o").and_then(Value::as_array) {
            Ty::Object(m.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        } else if let Some(c) = o.get("cl").and_then(Value::as_array) {
            let text = |i: usize| c.get(i).and_then(Value::as_str).map(str::to_string);
            let num = |i: usize| c.get(i).and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
            let closure = (|| {
                Some(ClosureTy {
                    unit: text(0)?,
                    line: num(1)?,
                    col: num(2)?,
                    function: text(3)?,
                    source: text(4)?,
                    applied: num(5)?,
                    arity: num(6)?,
                    env_start: num(7)?,
                    env_len: num(8)?,
                })
            })();
            closure.map_or(Ty::Unknown, |c| Ty::Closure(Box::new(c)))
        } else if let Some(p) = o.get("pk").and_then(Value::as_str) {
            let constraints = o.get("w").and_then(Value::as_array).map_or(Vec::new(), |w| {
                w.iter()
                    .filter_map(|c| {
                        let c = c.as_array()?;
                        Some((c.first()?.as_str()?.to_string(), c.get(1).map_or(Ty::Unknown, Ty::from_value)))
                    })
                    .collect()
            });
            Ty::Package(p.to_string(), constraints)
        } else if let Some(fields) = o.get("pv").and_then(Value::as_array) {
            Ty::PolyVariant(
                fields
                    .iter()
                    .filter_map(|f| {
                        let f = f.as_array()?;
                        let label = f.first()?.as_str()?.to_string();
                        let arg = f.get(1).filter(|a| !a.is_null()).map(Ty::from_value);
                        Some((label, arg))
                    })
                    .collect(),
            )
        } else {
            Ty::Unknown
        }
    }

    /// The paths it names, rewritten by `f`.
    pub fn map_paths(&self, f: &impl Fn(&str) -> String) -> Ty {
        match self {
            Ty::Tuple(l) => Ty::Tuple(l.iter().map(|t| t.map_paths(f)).collect()),
            Ty::Constr(p, a) => Ty::Constr(f(p), a.iter().map(|t| t.map_paths(f)).collect()),
            Ty::PolyVariant(l) => Ty::PolyVariant(l.iter().map(|(n, t)| (n.clone(), t.as_ref().map(|t| t.map_paths(f)))).collect()),
            Ty::Package(p, w) => Ty::Package(f(p), w.iter().map(|(n, t)| (n.clone(), t.map_paths(f))).collect()),
            t => t.clone(),
        }
    }

    /// Replaces type variables by what `bind` gives (others stay variables).
    pub fn subst(&self, bind: &impl Fn(i64) -> Option<Ty>) -> Ty {
        match self {
            Ty::Var(v) => bind(*v).unwrap_or(Ty::Var(*v)),
            t => t.map_children(&mut |c| c.subst(bind)),
        }
    }

    /// Whether it holds a type variable or an unknown part.
    pub fn has_var(&self) -> bool {
        matches!(self, Ty::Var(_) | Ty::Unknown) || self.children().any(Ty::has_var)
    }

    /// Whether it holds an unknown part (an existential, a type the reader could not write):
    /// the heap is not typed through it, since no name would be true.
    pub fn has_unknown(&self) -> bool {
        matches!(self, Ty::Unknown) || self.children().any(Ty::has_unknown)
    }

    /// The types directly inside it: a tuple's, a constructor's arguments, a polymorphic
    /// variant's arguments, a package type's constraints.
    pub fn children(&self) -> Box<dyn Iterator<Item = &Ty> + '_> {
        match self {
            Ty::Tuple(l) | Ty::Constr(_, l) => Box::new(l.iter()),
            Ty::PolyVariant(l) => Box::new(l.iter().filter_map(|(_, t)| t.as_ref())),
            Ty::Package(_, w) => Box::new(w.iter().map(|(_, t)| t)),
            _ => Box::new(std::iter::empty()),
        }
    }

    /// The same type with each type directly inside it replaced by what `f` gives; `None` as
    /// soon as `f` gives none.
    pub fn try_map_children(&self, f: &mut impl FnMut(&Ty) -> Option<Ty>) -> Option<Ty> {
        Some(match self {
            Ty::Tuple(l) => Ty::Tuple(l.iter().map(&mut *f).collect::<Option<_>>()?),
            Ty::Constr(p, a) => Ty::Constr(p.clone(), a.iter().map(&mut *f).collect::<Option<_>>()?),
            Ty::PolyVariant(l) => Ty::PolyVariant(
                l.iter()
                    .map(|(n, t)| {
                        Some((
                            n.clone(),
                            match t {
                                Some(t) => Some(f(t)?),
                                None => None,
                            },
                        ))
                    })
                    .collect::<Option<_>>()?,
            ),
            Ty::Package(p, w) => Ty::Package(p.clone(), w.iter().map(|(n, t)| Some((n.clone(), f(t)?))).collect::<Option<_>>()?),
            t => t.clone(),
        })
    }

    /// The same type with each type directly inside it replaced by what `f` gives.
    pub fn map_children(&self, f: &mut impl FnMut(&Ty) -> Ty) -> Ty {
        self.try_map_children(&mut |t| Some(f(t))).expect("every child is mapped")
    }

    /// The same type with every type variable one (`Var(0)`): a polymorphic function's
    /// `(unit, 'a) Dep_node.t` and another's `(unit, 'b) Dep_node.t` are one type, `(unit, _)
    /// Dep_node.t`, whose `'a` parts are typed no further.
    pub fn erase_vars(&self) -> Ty {
        self.subst(&|_| Some(Ty::Var(0)))
    }
}

impl Ty {
    /// The reader's JSON form (what [`Ty::from_value`] reads back).
    fn to_value(&self) -> Value {
        let list = |l: &[Ty]| Value::Array(l.iter().map(Ty::to_value).collect());
        match self {
            Ty::Var(id) => serde_json::json!({ "v": id }),
            Ty::Function => serde_json::json!({ "f": true }),
            Ty::Tuple(l) => serde_json::json!({ "t": list(l) }),
            Ty::Constr(c, a) => serde_json::json!({ "c": c, "a": list(a) }),
            Ty::Object(m) => serde_json::json!({ "o": m }),
            Ty::PolyVariant(fields) => serde_json::json!({
                "pv": fields.iter().map(|(label, arg)| serde_json::json!([label, arg.as_ref().map(Ty::to_value)])).collect::<Vec<_>>()
            }),
            Ty::Package(p, w) => serde_json::json!({
                "pk": p,
                "w": w.iter().map(|(n, t)| serde_json::json!([n, t.to_value()])).collect::<Vec<_>>()
            }),
            Ty::Closure(c) => {
                serde_json::json!({ "cl": [c.unit, c.line, c.col, c.function, c.source, c.applied, c.arity, c.env_start, c.env_len] })
            }
            Ty::Unknown => serde_json::json!({}),
        }
    }
}

/// In the reader's JSON form (the analysis index stores types so).
impl serde::Serialize for Ty {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Ty {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Ty::from_value(&Value::deserialize(d)?))
    }
}

fn opt_ty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Ty>, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(if v.is_null() { None } else { Some(Ty::from_value(&v)) })
}

/// A type declaration.
#[derive(Debug, Clone, Deserialize)]
pub struct Decl {
    pub path: String,
    #[serde(default)]
    pub params: Vec<i64>,
    #[serde(default, deserialize_with = "opt_ty")]
    pub manifest: Option<Ty>,
    #[serde(default, deserialize_with = "decl_kind")]
    pub kind: DeclKind,
}

#[derive(Debug, Clone, Default)]
pub enum DeclKind {
    #[default]
    Abstract,
    Open,
    /// A class's object type.
    Object,
    Record {
        labels: Vec<Label>,
        /// `regular`, `float` (all fields unboxed floats), `unboxed`, `other`.
        repr: String,
    },
    Variant {
        constructors: Vec<Constructor>,
        unboxed: bool,
    },
}

#[derive(Debug, Clone)]
pub struct Label {
    pub name: String,
    pub mutable: bool,
    pub ty: Ty,
}

#[derive(Debug, Clone)]
pub struct Constructor {
    pub name: String,
    pub args: Vec<Ty>,
    /// An inline record's labels (then `args` is empty).
    pub record: Option<Vec<Label>>,
    /// A GADT constructor's result type.
    pub res: Option<Ty>,
    /// For each argument of a function type, its own arguments' types and its result, as
    /// declared (empty when no argument is a function).
    pub arrows: Vec<Option<(Vec<Ty>, Ty)>>,
}

impl Constructor {
    pub fn is_constant(&self) -> bool {
        self.args.is_empty() && self.record.is_none()
    }
}

fn labels(v: &Value) -> Vec<Label> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| {
                    let l = l.as_array()?;
                    Some(Label {
                        name: l.first()?.as_str()?.to_string(),
                        mutable: l.get(1).and_then(Value::as_bool).unwrap_or(false),
                        ty: l.get(2).map(Ty::from_value).unwrap_or(Ty::Unknown),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn decl_kind<'de, D: serde::Deserializer<'de>>(d: D) -> Result<DeclKind, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(if v.as_str() == Some("open") {
        DeclKind::Open
    } else if v.as_str() == Some("object") {
        DeclKind::Object
    } else if let Some(r) = v.get("record") {
        DeclKind::Record { labels: labels(r), repr: v.get("repr").and_then(Value::as_str).unwrap_or("other").to_string() }
    } else if let Some(cs) = v.get("variant").and_then(Value::as_array) {
        let constructors = cs
            .iter()
            .map(|c| Constructor {
                name: c.get("name").and_then(Value::as_str).unwrap_or("?").to_string(),
                args: c.get("args").and_then(Value::as_array).map(|a| a.iter().map(Ty::from_value).collect()).unwrap_or_default(),
                record: c.get("record").map(labels),
                res: c.get("res").filter(|r| !r.is_null()).map(Ty::from_value),
                arrows: c.get("arrows").and_then(Value::as_array).map_or(Vec::new(), |a| {
                    a.iter()
                        .map(|arrow| {
                            let params = arrow.get("p")?.as_array()?.iter().map(Ty::from_value).collect();
                            Some((params, arrow.get("r").map_or(Ty::Unknown, Ty::from_value)))
                        })
                        .collect()
                }),
            })
            .collect();
        DeclKind::Variant { constructors, unboxed: v.get("unboxed").and_then(Value::as_bool).unwrap_or(false) }
    } else {
        DeclKind::Abstract
    })
}

/// A module type, as a first-class module of it is laid out.
#[derive(Debug, Clone, Deserialize)]
pub struct ModuleTypeDef {
    pub path: String,
    /// `module type S = P`.
    #[serde(default)]
    pub alias: Option<String>,
    /// Its signature's runtime components, in order: a packed module's fields.
    #[serde(default)]
    pub fields: Vec<SigField>,
}

/// A runtime component of a module type's signature.
#[derive(Debug, Clone, Deserialize)]
pub struct SigField {
    pub name: String,
    /// `value`, `module`, `exception`, `class`.
    #[serde(default)]
    pub kind: String,
    #[serde(rename = "type", default, deserialize_with = "opt_ty")]
    pub ty: Option<Ty>,
    /// A function's argument types, as the signature writes them.
    #[serde(default)]
    pub params: Vec<Ty>,
}

/// What a module of a unit is, beyond its own declarations.
#[derive(Debug, Clone, Deserialize)]
pub struct ModuleDef {
    pub path: String,
    /// `module M = P` or `module M = F(A)`.
    #[serde(default)]
    pub alias: Option<String>,
    /// A functor parameter's name (one entry per parameter, in order).
    #[serde(default)]
    pub functor: Option<String>,
    /// `include P` in the module's structure.
    #[serde(default)]
    pub include: Option<String>,
}

impl Program {
    pub fn parse(json: &str) -> Result<Program, serde_json::Error> {
        serde_json::from_str(json)
    }

    pub fn unit(&self, name: &str) -> Option<&Unit> {
        self.units.iter().find(|u| u.unit == name)
    }
}

#[cfg(test)]
mod tests {
    use super::Ty;

    #[test]
    fn types_read_back_as_written() {
        let ty = Ty::Constr(
            "Stdlib__Hashtbl.t".into(),
            vec![
                Ty::Tuple(vec![Ty::Var(3), Ty::Function, Ty::Unknown]),
                Ty::PolyVariant(vec![("A".into(), None), ("B".into(), Some(Ty::Object(vec!["m".into()])))]),
                Ty::Closure(Box::new(super::ClosureTy {
                    unit: "Cache".into(),
                    line: 12,
                    col: 4,
                    function: "Cache.memo".into(),
                    source: "cache.ml:12".into(),
                    applied: 2,
                    arity: 3,
                    env_start: 3,
                    env_len: 2,
                })),
            ],
        );
        let json = serde_json::to_string(&ty).unwrap();
        assert_eq!(serde_json::from_str::<Ty>(&json).unwrap(), ty, "{json}");
    }
}
