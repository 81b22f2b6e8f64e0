//! Types through the heap (issue 17): from each module global whose type the snapshot's OCaml
//! names give, the heap is followed with the types: a record's fields, a variant's constructor
//! by tag, a tuple's, list's, array's, option's, ref's and lazy value's contents, and the
//! standard library's containers through their own declarations, type parameters instantiated.
//!
//! A wrong type is worse than none: a block gets a type only when its tag and size are what the
//! type says (a record of 3 fields is a tag-0 block of 3 fields, a variant's block has the tag
//! and arity of one of its constructors); anything else is a mismatch, counted, and the walk
//! stops there. Typing stops, leaving blocks named by shape, at closures (their environments
//! have no type), type variables (an existential, an unresolved parameter), abstract and
//! extensible types, objects' instance variables. A block reached with two types keeps the one
//! that came through its immediate dominator; such conflicts are counted.

use crate::blocks::{BlockRef, NodeId, NO_NODE};
use crate::facts::HeapFacts;
use crate::model::NO_TYPE;
use heapsnap_format::RootKind;
use heapsnap_names::{PackageShape, Shape, Ty, TypeEnv};
use heapsnap_values as ocaml;
use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Mutex, OnceLock};

/// Distinct types named at most (nested types could make new ones without end).
const MAX_TYPES: usize = 100_000;

/// The types of the blocks of one analysed snapshot.
pub struct Typing<'a> {
    node_type: NodeTypes<'a>,
    /// By type id: what reports read of each type (the walk's types and layouts are dropped
    /// once it ends).
    types: TypeTable<'a>,
    /// Blocks reached with two different types.
    pub conflicts: u64,
    /// Blocks whose tag or size was not what their type says (left untyped).
    pub mismatches: u64,
    pub typed_objects: u64,
    pub typed_bytes: u64,
}

/// Every node's type id, by node: as the walk made them, or as narrow as the analysis index
/// saved them, read where the index is mapped (a byte or two a node, neither widened nor
/// copied: 15M nodes on a real heap, of which a report may read a few). The width's largest
/// value is untyped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeTypes<'a> {
    U8(Cow<'a, [u8]>),
    U16(Cow<'a, [u16]>),
    U32(Cow<'a, [u32]>),
}

impl NodeTypes<'_> {
    /// Node `v`'s type id (`NO_TYPE`: untyped, or past the nodes).
    pub fn get(&self, v: usize) -> u32 {
        match self {
            NodeTypes::U8(t) => t.get(v).filter(|&&t| t != u8::MAX).map_or(NO_TYPE, |&t| t as u32),
            NodeTypes::U16(t) => t.get(v).filter(|&&t| t != u16::MAX).map_or(NO_TYPE, |&t| t as u32),
            NodeTypes::U32(t) => t.get(v).copied().unwrap_or(NO_TYPE),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            NodeTypes::U8(t) => t.len(),
            NodeTypes::U16(t) => t.len(),
            NodeTypes::U32(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every node's type id, `u32` each.
    pub fn widened(&self) -> Vec<u32> {
        match self {
            NodeTypes::U32(t) => t.to_vec(),
            _ => (0..self.len()).map(|v| self.get(v)).collect(),
        }
    }

    /// Whether every typed node's id is below `count`. Branch-free, so that it vectorises: a
    /// second look checks every node of the index this way.
    fn ids_below(&self, count: usize) -> bool {
        match self {
            NodeTypes::U8(t) => t.iter().fold(true, |ok, &t| ok & (((t as usize) < count) | (t == u8::MAX))),
            NodeTypes::U16(t) => t.iter().fold(true, |ok, &t| ok & (((t as usize) < count) | (t == u16::MAX))),
            NodeTypes::U32(t) => t.iter().fold(true, |ok, &t| ok & (((t as usize) < count) | (t == NO_TYPE))),
        }
    }
}

/// What reports read of a type once the walk is over: its name and the names of its parts
/// (constructors by tag, polymorphic variants' labels by hash, field names), never their types.
/// Self-contained: the analysis index saves it as it is, and reads it back without the
/// snapshot's OCaml names.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TypeNames {
    /// As an OCaml programmer writes it (`(string, Server.session) Hashtbl.t`).
    pub name: String,
    /// `None`: the walk never laid the type out (no block was checked against it).
    pub parts: Option<PartNames>,
}

/// The names of a type's parts, by the shape of its blocks.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum PartNames {
    /// Tag 0, these fields (records, tuples, first-class modules); `None`: unnamed.
    Fields(Vec<Option<String>>),
    /// By tag: the constructor and its fields' names (an inline record's labels).
    Variant(Vec<(String, Vec<Option<String>>)>),
    /// `(hash, label)`: a polymorphic variant's constructors, by the hash its block holds.
    PolyVariant(Vec<(i64, String)>),
    /// Elements named `[i]`.
    Array,
    /// A closure's environment from `env_start` on, its free variables' names.
    Closure { env_start: usize, names: Vec<Option<String>> },
    /// Nothing named (strings, floats, custom blocks, immediates, ...).
    Unnamed,
}

impl PartNames {
    fn of(layout: &Layout) -> PartNames {
        match layout {
            Layout::Fields(names, _) | Layout::Package(names, _, _) => PartNames::Fields(names.clone()),
            Layout::Variant(blocks, _, _) => PartNames::Variant(blocks.iter().map(|(c, names, _)| (c.clone(), names.clone())).collect()),
            Layout::PolyVariant(l) => PartNames::PolyVariant(l.iter().map(|(h, label, _)| (*h, label.clone())).collect()),
            Layout::Array(_) => PartNames::Array,
            Layout::Closure { env_start, names, .. } => PartNames::Closure { env_start: *env_start, names: names.clone() },
            _ => PartNames::Unnamed,
        }
    }

    /// The names of a block's fields, with the index of the first one named (a closure's
    /// environment); `None` when its fields are not named by list (arrays, unnamed parts).
    fn field_names(&self, tag: u8) -> Option<(&[Option<String>], usize)> {
        match self {
            PartNames::Fields(names) => Some((names, 0)),
            PartNames::Variant(blocks) => blocks.get(tag as usize).map(|(_, names)| (names.as_slice(), 0)),
            PartNames::Closure { env_start, names } => Some((names, *env_start)),
            _ => None,
        }
    }
}

struct TypeInfo {
    /// As an OCaml programmer writes it (`(string, Server.session) Hashtbl.t`).
    pub name: String,
    ty: Ty,
    /// Whether parts of it are unknown (`(unit, _) Dep_node.t`): where a block is reached with
    /// this type and one that knows more, the other wins.
    holes: bool,
    layout: OnceLock<Arc<Layout>>,
}

/// What a block of a type is, its field types interned.
#[derive(Debug, Clone)]
enum Layout {
    /// Tag 0, exactly these fields (records, tuples).
    Fields(Vec<Option<String>>, Vec<u32>),
    FloatRecord(usize),
    /// By tag: constructor, field names, field types; the number of constant constructors
    /// (the immediates the type allows); and by tag, what closures among a GADT constructor's
    /// arguments may say of its existentials (typed in the later rounds of `walk_rounds`).
    Variant(Vec<(String, Vec<Option<String>>, Vec<u32>)>, usize, Vec<Option<Arc<PackageShape>>>),
    /// `(hash, label, argument type)`.
    PolyVariant(Vec<(i64, String, u32)>),
    Array(u32),
    FloatArray,
    String,
    Float,
    Custom(&'static str),
    Lazy(u32),
    Object,
    /// The value is the one field's: typed as that.
    Unboxed(u32),
    /// A closure of a known function: its environment from `env_start` on, each field named
    /// (a free variable) and typed.
    Closure {
        env_start: usize,
        names: Vec<Option<String>>,
        types: Vec<u32>,
    },
    /// A first-class module: tag 0, its signature's fields; those of its abstract types are
    /// typed once its closures say what they are (the later rounds of `walk_rounds`).
    Package(Vec<Option<String>>, Vec<u32>, Arc<PackageShape>),
    /// Immediates only (`int`, `char`, `bool`, constant-only variants).
    Immediate,
    /// Typing stops here (a type variable, an abstract type, a function): anything goes.
    Opaque,
}

impl Layout {
    /// Whether an immediate `word` can have this type.
    fn allows_immediate(&self, word: u64) -> bool {
        match self {
            Layout::Variant(_, constants, _) => ((word as i64) >> 1) >= 0 && (((word as i64) >> 1) as usize) < *constants,
            Layout::Immediate | Layout::Opaque | Layout::Unboxed(_) | Layout::Lazy(_) | Layout::PolyVariant(_) => true,
            _ => false,
        }
    }

    /// Whether a pointer can have this type.
    fn allows_pointer(&self) -> bool {
        !matches!(self, Layout::Immediate)
    }

    /// The types this layout names (its fields', elements', contents').
    fn named_types(&self) -> Vec<u32> {
        match self {
            Layout::Fields(_, f) | Layout::Package(_, f, _) => f.clone(),
            Layout::Variant(blocks, _, _) => blocks.iter().flat_map(|(_, _, f)| f.iter().copied()).collect(),
            Layout::PolyVariant(l) => l.iter().map(|&(_, _, t)| t).collect(),
            Layout::Array(t) | Layout::Lazy(t) | Layout::Unboxed(t) => vec![*t],
            Layout::Closure { types, .. } => types.clone(),
            _ => Vec::new(),
        }
    }
}

/// A block's type as reports show it.
pub struct BlockType<'t> {
    pub name: &'t str,
    /// The variant constructor of the block (by its tag), or the polymorphic variant's label.
    pub constructor: Option<&'t str>,
}

struct Interner<'e> {
    env: &'e TypeEnv,
    ids: FxHashMap<Ty, u32>,
    types: Vec<TypeInfo>,
    /// Each type's layout once computed, and which words it allows (the hot path's copy).
    layouts: Vec<Option<(Arc<Layout>, Allows)>>,
    /// How deep [`Interner::layout`] is in unboxed types' fields.
    unboxing: u32,
}

/// Which words a type allows in a field: pointers, and immediates below `immediates`
/// (`u64::MAX`: any).
#[derive(Clone, Copy)]
struct Allows {
    pointer: bool,
    immediates: u64,
}

impl Allows {
    const ANY: Allows = Allows { pointer: true, immediates: u64::MAX };

    #[inline]
    fn word(self, w: u64) -> bool {
        if ocaml::is_pointer(w) {
            self.pointer
        } else if w == 0 || self.immediates == u64::MAX {
            true
        } else {
            let n = (w as i64) >> 1;
            n >= 0 && (n as u64) < self.immediates
        }
    }
}

impl Interner<'_> {
    fn intern(&mut self, ty: &Ty) -> u32 {
        if let Some(&id) = self.ids.get(ty) {
            return id;
        }
        // A type variable alone says nothing of a block; inside a type it is a part typed no
        // further (`(unit, _) Dep_node.t`). An unknown part (an existential) stops typing.
        if self.types.len() >= MAX_TYPES || matches!(ty, Ty::Var(_)) || ty.has_unknown() {
            return NO_TYPE;
        }
        let Some(canon) = self.env.canon(ty) else { return NO_TYPE };
        if matches!(canon, Ty::Var(_)) || canon.has_unknown() {
            return NO_TYPE;
        }
        // A type of a functor's body named without its application (a closure of the body
        // knows no better) does not know its parameters: the applied one wins over it.
        let holes = canon.has_var() || self.env.names_unapplied_functor(&canon);
        let canon = canon.erase_vars();
        let id = match self.ids.get(&canon) {
            Some(&id) => id,
            None => {
                let id = self.types.len() as u32;
                self.types.push(TypeInfo {
                    name: heapsnap_names::types::display(&canon),
                    ty: canon.clone(),
                    holes,
                    layout: OnceLock::new(),
                });
                self.ids.insert(canon, id);
                id
            }
        };
        self.ids.insert(ty.clone(), id);
        id
    }

    /// Computes the layout of `id` and of every type it names, and so on, so that the walk
    /// only reads them.
    fn complete(&mut self, id: u32) {
        let mut pending = vec![id];
        while let Some(t) = pending.pop() {
            if t == NO_TYPE || matches!(self.layouts.get(t as usize), Some(Some(_))) {
                continue;
            }
            pending.extend(self.layout(t).named_types());
        }
    }

    fn layout(&mut self, id: u32) -> Arc<Layout> {
        if let Some(Some((l, _))) = self.layouts.get(id as usize) {
            return l.clone();
        }
        let ty = self.types[id as usize].ty.clone();
        let fields = |f: &[(Option<String>, Ty)], me: &mut Self| -> (Vec<Option<String>>, Vec<u32>) {
            (f.iter().map(|(n, _)| n.clone()).collect(), f.iter().map(|(_, t)| me.intern(t)).collect())
        };
        let layout = match self.env.shape(&ty) {
            Shape::Fields(f) => {
                let (n, t) = fields(&f, self);
                Layout::Fields(n, t)
            }
            Shape::FloatRecord(labels) => Layout::FloatRecord(labels.len()),
            Shape::Variant { blocks, constants, reveals } => {
                let mut by_tag: Vec<Option<Arc<PackageShape>>> = vec![None; blocks.len()];
                for (rank, reveal) in reveals {
                    if let Some(slot) = by_tag.get_mut(rank) {
                        *slot = Some(Arc::new(reveal));
                    }
                }
                Layout::Variant(
                    blocks
                        .iter()
                        .map(|(c, f)| {
                            let (n, t) = fields(f, self);
                            (c.clone(), n, t)
                        })
                        .collect(),
                    constants.len(),
                    by_tag,
                )
            }
            Shape::PolyVariant(l) => Layout::PolyVariant(
                l.iter()
                    .map(|(label, arg)| (hash_variant(label), label.clone(), arg.as_ref().map_or(NO_TYPE, |t| self.intern(t))))
                    .collect(),
            ),
            Shape::Array(t) => Layout::Array(self.intern(&t)),
            Shape::FloatArray => Layout::FloatArray,
            Shape::String => Layout::String,
            Shape::Float => Layout::Float,
            Shape::Custom(c) => Layout::Custom(c),
            Shape::Lazy(t) => Layout::Lazy(self.intern(&t)),
            Shape::Object => Layout::Object,
            Shape::Unboxed(t) => Layout::Unboxed(self.intern(&t)),
            Shape::Immediate => Layout::Immediate,
            Shape::Closure { env_start, fields: f } => {
                let (names, types) = fields(&f, self);
                Layout::Closure { env_start, names, types }
            }
            Shape::Package(package) => {
                let (names, types) = fields(&package.fields, self);
                Layout::Package(names, types, Arc::new(package))
            }
            Shape::Function | Shape::Unknown => Layout::Opaque,
        };
        let allows = match layout {
            // An unboxed type's values are its field's (`type t = T of t array [@@unboxed]`
            // is an array): they allow what that type allows.
            Layout::Unboxed(inner) if inner != NO_TYPE && inner != id && self.unboxing < 8 => {
                self.unboxing += 1;
                self.layout(inner);
                self.unboxing -= 1;
                self.layouts.get(inner as usize).and_then(|l| l.as_ref()).map_or(Allows::ANY, |(_, a)| *a)
            }
            _ => Allows {
                pointer: layout.allows_pointer(),
                immediates: match &layout {
                    Layout::Variant(_, constants, _) => *constants as u64,
                    l if l.allows_immediate(1) => u64::MAX,
                    _ => 0,
                },
            },
        };
        let layout = Arc::new(layout);
        let _ = self.types[id as usize].layout.set(layout.clone());
        if self.layouts.len() <= id as usize {
            self.layouts.resize(self.types.len(), None);
        }
        self.layouts[id as usize] = Some((layout.clone(), allows));
        layout
    }
}

/// OCaml's hash of a polymorphic variant's label (`Btype.hash_variant`), as the tagged
/// integer's value.
pub fn hash_variant(label: &str) -> i64 {
    let mut accu: i64 = 0;
    for b in label.bytes() {
        accu = accu.wrapping_mul(223).wrapping_add(b as i64);
    }
    accu &= (1 << 31) - 1;
    if accu > 0x3FFF_FFFF {
        accu - (1 << 31)
    } else {
        accu
    }
}

/// The types by id: as the walk made them, or as the analysis index saved them, each parsed
/// when a report first reads it (a report reads a few of a real heap's tens of thousands, most
/// of them closures'). An entry that does not parse (a hostile index) is no type: its nodes
/// read as untyped.
enum TypeTable<'a> {
    Made(Vec<TypeNames>),
    Saved(Vec<(&'a [u8], OnceLock<Option<TypeNames>>)>),
}

impl TypeTable<'_> {
    fn get(&self, id: usize) -> Option<&TypeNames> {
        match self {
            TypeTable::Made(types) => types.get(id),
            TypeTable::Saved(types) => {
                let (json, parsed) = types.get(id)?;
                parsed.get_or_init(|| serde_json::from_slice(json).ok()).as_ref()
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            TypeTable::Made(types) => types.len(),
            TypeTable::Saved(types) => types.len(),
        }
    }

    /// Every type by id (`None`: an entry that does not parse).
    fn iter(&self) -> impl Iterator<Item = Option<&TypeNames>> {
        (0..self.len()).map(|id| self.get(id))
    }
}

/// A typing's types and counts, as the analysis index stores them (each type as JSON):
/// self-contained, so that reading it back needs neither the snapshot's OCaml names nor the
/// walk's types. Read back lazily, each type is its JSON where it lies (`SavedTypes<&[u8]>`).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct SavedTypes<T = TypeNames> {
    /// By type id: its name and its parts' names.
    pub types: Vec<T>,
    pub conflicts: u64,
    pub mismatches: u64,
    pub typed_objects: u64,
    pub typed_bytes: u64,
}

/// `(pointer, type, the node it was reached from)`: a value to type.
type Arrival = (u64, u32, NodeId);

/// Counts of one walk (or one part of a parallel walk).
#[derive(Default)]
struct Tally {
    conflicts: u64,
    mismatches: u64,
    typed_objects: u64,
    typed_bytes: u64,
    /// Blocks typed whose contents say more (a first-class module whose signature has abstract
    /// types, a GADT constructor's block with existentials): `(address, node)`.
    packages: Vec<(u64, NodeId)>,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.conflicts += o.conflicts;
        self.mismatches += o.mismatches;
        self.typed_objects += o.typed_objects;
        self.typed_bytes += o.typed_bytes;
        self.packages.extend(o.packages);
    }
}

/// Rounds of the walk at most: each types what the first-class modules the previous one met
/// reveal (a module's abstract type may hold another first-class module).
const MAX_ROUNDS: usize = 8;

/// The typing walk over one heap, every layout it can meet computed beforehand.
struct Walk<'w, 's, F> {
    /// The block a pointer points at (`HeapFacts::block_of_pointer`).
    find: F,
    custom_ops: &'w std::collections::HashMap<u64, &'s str>,
    layouts: &'w [Option<(Arc<Layout>, Allows)>],
    types: &'w [TypeInfo],
    node_type: Vec<AtomicU32>,
    /// The node each block was typed from (the serial walk's conflicts need it; empty in the
    /// parallel walk).
    via: Vec<AtomicU32>,
    /// Set by a parallel walk that met a block reached with two types.
    conflicted: AtomicBool,
    tally: Mutex<Tally>,
}

/// A parallel walk gives part of its stack away when it grows past this.
const SPLIT_AT: usize = 4096;

/// A block's immediate dominator, for the serial walk's conflicts.
type Idom<'i> = &'i dyn Fn(NodeId) -> Option<NodeId>;

impl<'w, 's, F: Fn(u64) -> Option<BlockRef<'s>>> Walk<'w, 's, F> {
    /// A walk that goes on from `state` (the blocks earlier rounds typed).
    fn new(
        find: F,
        custom_ops: &'w std::collections::HashMap<u64, &'s str>,
        layouts: &'w [Option<(Arc<Layout>, Allows)>],
        types: &'w [TypeInfo],
        state: WalkState,
    ) -> Self {
        Walk {
            find,
            custom_ops,
            layouts,
            types,
            node_type: state.node_type,
            via: state.via,
            conflicted: AtomicBool::new(false),
            tally: Mutex::new(Tally::default()),
        }
    }

    fn layout_of(&self, t: u32) -> Option<&'w (Arc<Layout>, Allows)> {
        self.layouts.get(t as usize).and_then(|l| l.as_ref())
    }

    /// Types the block one arrival reaches and pushes its typed fields. Without `idom` (the
    /// parallel walk), a block already typed otherwise is a conflict left to the serial walk
    /// (`false`).
    fn visit(&self, (pointer, mut t, from): Arrival, stack: &mut Vec<Arrival>, tally: &mut Tally, idom: Option<Idom<'_>>) -> bool {
        let parallel = idom.is_none();
        let Some(b) = (self.find)(pointer) else { return true };
        let Some((first, _)) = self.layout_of(t) else { return true };
        let mut layout: &Layout = first;
        // Unboxed types and forced lazy values: the block is the inner value.
        let mut hops = 0;
        loop {
            let inner = match *layout {
                Layout::Unboxed(inner) => inner,
                Layout::Lazy(inner) if !matches!(b.header.tag, ocaml::LAZY_TAG | ocaml::FORWARD_TAG | ocaml::FORCING_TAG) => inner,
                _ => break,
            };
            let Some((l, _)) = self.layout_of(inner).filter(|_| hops < 8) else { break };
            (t, layout, hops) = (inner, &**l, hops + 1);
        }
        if matches!(layout, Layout::Lazy(NO_TYPE)) && !matches!(b.header.tag, ocaml::LAZY_TAG | ocaml::FORWARD_TAG | ocaml::FORCING_TAG) {
            // A forced `'a lazy_t`: the value itself, of no known type.
            return true;
        }
        let v = b.node;
        let current = self.node_type[v as usize].load(Relaxed);
        if current == t {
            // Typed so already: its fit was checked then.
            return true;
        }
        let (tag, size) = (b.header.tag, b.header.wosize as usize);
        if parallel && current != NO_TYPE {
            return false;
        }
        // An empty block (`[||]`, an atom) is one for every type that has one: reached with
        // another type, it keeps the first (in the serial walk's order) and is no conflict.
        if current != NO_TYPE && size == 0 {
            return true;
        }
        let fits = match layout {
            Layout::Fields(_, f) | Layout::Package(_, f, _) => tag == 0 && size == f.len(),
            Layout::FloatRecord(n) => tag == ocaml::DOUBLE_ARRAY_TAG && size == *n,
            Layout::Variant(blocks, _, _) => blocks.get(tag as usize).is_some_and(|(_, _, f)| f.len() == size),
            Layout::PolyVariant(l) => {
                tag == 0 && size == 2 && l.iter().any(|(h, _, _)| b.fields[0] as i64 >> 1 == *h && b.fields[0] & 1 == 1)
            }
            // `'a array` may be a float array.
            Layout::Array(e) => tag == 0 || (*e == NO_TYPE && tag == ocaml::DOUBLE_ARRAY_TAG),
            Layout::FloatArray => tag == ocaml::DOUBLE_ARRAY_TAG || size == 0,
            Layout::String => tag == ocaml::STRING_TAG,
            Layout::Float => tag == ocaml::DOUBLE_TAG,
            Layout::Custom(id) => tag == ocaml::CUSTOM_TAG && b.fields.first().and_then(|ops| self.custom_ops.get(ops)) == Some(id),
            Layout::Lazy(_) => matches!(tag, ocaml::LAZY_TAG | ocaml::FORWARD_TAG | ocaml::FORCING_TAG),
            Layout::Object => tag == ocaml::OBJECT_TAG,
            Layout::Closure { env_start, types, .. } => {
                tag == ocaml::CLOSURE_TAG
                    && b.fields.get(1).is_some_and(|&info| crate::closures::closure_info(info).1 == *env_start)
                    && size.checked_sub(*env_start) == Some(types.len())
            }
            Layout::Unboxed(_) | Layout::Immediate | Layout::Opaque => false,
        };
        // Every field must be possible for its type too: an immediate where the type has
        // only blocks (a string, a record) or a pointer where it has only immediates.
        let (field_types, first_field): (&[u32], usize) = match layout {
            Layout::Fields(_, f) | Layout::Package(_, f, _) => (f, 0),
            Layout::Variant(blocks, _, _) if fits => (&blocks[tag as usize].2, 0),
            Layout::Closure { env_start, types, .. } if fits => (types, *env_start),
            _ => (&[], 0),
        };
        let allowed = |ft: u32, w: u64| ft == NO_TYPE || self.layout_of(ft).is_none_or(|(_, allows)| allows.word(w));
        let fields_fit = match layout {
            // Every element too: a block made an array by Obj.magic (a record whose first field
            // is an int) is not one.
            Layout::Array(e) => b.fields.iter().all(|&w| allowed(*e, w)),
            _ => field_types.iter().zip(&b.fields[first_field.min(b.fields.len())..]).all(|(&ft, &w)| allowed(ft, w)),
        };
        if !fits || !fields_fit {
            if !matches!(layout, Layout::Opaque | Layout::Unboxed(_)) {
                tally.mismatches += 1;
            }
            return true;
        }
        if parallel {
            // Claimed by whichever walk comes first; another type there is a conflict.
            if let Err(other) = self.node_type[v as usize].compare_exchange(NO_TYPE, t, Relaxed, Relaxed) {
                return other == t;
            }
        } else if let Some(idom) = idom {
            if current != NO_TYPE {
                let (old, new) = (&self.types[current as usize], &self.types[t as usize]);
                // Two types that differ only where one does not know (`(unit, _) Dep_node.t`
                // and `(unit, Rule.t) Dep_node.t`) do not conflict.
                if !same_where_known(&old.ty, &new.ty) {
                    tally.conflicts += 1;
                }
                // The type that knows all its parts wins over one that does not; else the
                // type through the immediate dominator, once.
                let wins = match (old.holes, new.holes) {
                    (true, false) => true,
                    (false, true) => false,
                    _ => {
                        let idom = idom(v).unwrap_or(NO_NODE);
                        from == idom && self.via.get(v as usize).map(|n| n.load(Relaxed)) != Some(idom)
                    }
                };
                if !wins {
                    return true;
                }
            }
            self.node_type[v as usize].store(t, Relaxed);
        }
        // Typed blocks are reachable: typing follows strong fields only (weak arrays and
        // ephemerons are abstract blocks, never typed).
        if current == NO_TYPE {
            tally.typed_objects += 1;
            tally.typed_bytes += b.header.bytes();
        }
        if let Some(via) = self.via.get(v as usize) {
            via.store(from, Relaxed);
        }
        let mut push = |i: usize, ft: u32| {
            if ft == NO_TYPE {
                return;
            }
            if let Some(&w) = b.fields.get(i) {
                if ocaml::is_pointer(w) {
                    stack.push((w, ft, v));
                }
            }
        };
        let reveals = match layout {
            Layout::Package(_, _, package) => !package.abstracts.is_empty(),
            Layout::Variant(_, _, reveals) => reveals.get(tag as usize).is_some_and(Option::is_some),
            _ => false,
        };
        if reveals {
            tally.packages.push((b.address, v));
        }
        match layout {
            Layout::Fields(_, f) | Layout::Package(_, f, _) => f.iter().enumerate().for_each(|(i, &ft)| push(i, ft)),
            Layout::Variant(blocks, _, _) => blocks[tag as usize].2.iter().enumerate().for_each(|(i, &ft)| push(i, ft)),
            Layout::PolyVariant(l) => {
                if let Some((_, _, ft)) = l.iter().find(|(h, _, _)| b.fields[0] as i64 >> 1 == *h) {
                    push(1, *ft);
                }
            }
            Layout::Array(e) => (0..size).for_each(|i| push(i, *e)),
            Layout::Lazy(inner) if tag == ocaml::FORWARD_TAG => push(0, *inner),
            Layout::Closure { env_start, types, .. } => types.iter().enumerate().for_each(|(i, &ft)| push(env_start + i, ft)),
            _ => {}
        }
        true
    }

    fn finish(self) -> (WalkState, Tally) {
        (WalkState { node_type: self.node_type, via: self.via }, self.tally.into_inner().expect("tally"))
    }

    fn serial(&self, mut stack: Vec<Arrival>, idom: Idom<'_>) {
        let mut tally = Tally::default();
        while let Some(arrival) = stack.pop() {
            self.visit(arrival, &mut stack, &mut tally, Some(idom));
        }
        self.tally.lock().expect("tally").add(tally);
    }

    /// One part of the parallel walk: gives half its stack to another task when it grows.
    fn parallel<'scope>(&'scope self, scope: &rayon::Scope<'scope>, mut stack: Vec<Arrival>)
    where
        'w: 'scope,
        F: Sync,
    {
        let mut tally = Tally::default();
        while let Some(arrival) = stack.pop() {
            // A conflict anywhere sends the whole walk to one core: stop soon.
            if self.conflicted.load(Relaxed) {
                break;
            }
            if !self.visit(arrival, &mut stack, &mut tally, None) {
                self.conflicted.store(true, Relaxed);
            }
            if stack.len() >= SPLIT_AT {
                let given: Vec<Arrival> = stack.drain(..stack.len() / 2).collect();
                scope.spawn(move |scope| self.parallel(scope, given));
            }
        }
        self.tally.lock().expect("tally").add(tally);
    }
}

/// Whether two types are one where both are known (a variable, `_`, matches anything).
fn same_where_known(a: &Ty, b: &Ty) -> bool {
    let all = |l: &[Ty], r: &[Ty]| l.len() == r.len() && l.iter().zip(r).all(|(x, y)| same_where_known(x, y));
    match (a, b) {
        (Ty::Var(_), _) | (_, Ty::Var(_)) => true,
        (Ty::Tuple(l), Ty::Tuple(r)) => all(l, r),
        (Ty::Constr(p, l), Ty::Constr(q, r)) => same_path_where_known(p, q) && all(l, r),
        (Ty::Package(p, l), Ty::Package(q, r)) => {
            p == q && l.len() == r.len() && l.iter().zip(r).all(|((m, x), (n, y))| m == n && same_where_known(x, y))
        }
        _ => a == b,
    }
}

/// Two paths of one type: the same, or one a functor body's type named without the
/// application the other names (`F.M.t` and `F(A)().M.t`).
fn same_path_where_known(p: &str, q: &str) -> bool {
    let unapplied = |applied: &str, bare: &str| !bare.contains('(') && applied.contains('(') && without_applications(applied) == bare;
    p == q || unapplied(p, q) || unapplied(q, p)
}

/// `F(A)().M.t` -> `F.M.t`.
fn without_applications(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut depth = 0u32;
    for c in path.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// What the walk has typed so far: each node's type, and (serial walk only) the node it was
/// typed from.
struct WalkState {
    node_type: Vec<AtomicU32>,
    via: Vec<AtomicU32>,
}

impl WalkState {
    fn fresh(nodes: usize, serial: bool) -> WalkState {
        let fresh = |value: u32, n: usize| (0..n).map(|_| AtomicU32::new(value)).collect::<Vec<_>>();
        WalkState { node_type: fresh(NO_TYPE, nodes), via: fresh(NO_NODE, if serial { nodes } else { 0 }) }
    }
}

/// The typing walk from `roots`, in rounds: after each, the first-class modules it typed say
/// what their abstract types are (their closures' functions, [`heapsnap_names::packages`]),
/// and the fields of those types are walked in the next. On every core with `blocks`: `None`
/// when blocks were reached with two types (then the caller walks on one core, where the
/// immediate dominator settles each conflict in a fixed order).
fn walk_rounds<'s>(
    a: &(impl HeapFacts<'s> + ?Sized),
    interner: &mut Interner<'_>,
    closures: &crate::closures::TypedClosures,
    mut roots: Vec<Arrival>,
    blocks: Option<&crate::blocks::BlockMap<'s>>,
) -> Option<(Vec<u32>, Tally)> {
    let names = a.names();
    let custom_ops = names.custom_ops();
    let idom = |v| a.idom(v);
    let mut state = WalkState::fresh(a.node_count(), blocks.is_none());
    let mut total = Tally::default();
    let mut closure_at: Option<FxHashMap<u64, u32>> = None;
    for _ in 0..MAX_ROUNDS {
        let layouts = &interner.layouts[..];
        let (next, mut tally) = match blocks {
            Some(blocks) => {
                let w = Walk::new(|p| blocks.block_of_pointer(p), custom_ops, layouts, &interner.types, state);
                rayon::scope(|scope| w.parallel(scope, roots));
                if w.conflicted.load(Relaxed) {
                    return None;
                }
                w.finish()
            }
            None => {
                let w = Walk::new(|p| a.block_of_pointer(p), custom_ops, layouts, &interner.types, state);
                w.serial(roots, &idom);
                w.finish()
            }
        };
        state = next;
        let mut packages = std::mem::take(&mut tally.packages);
        total.add(tally);
        if packages.is_empty() {
            break;
        }
        // In a fixed order, each once, by the type it ended with.
        packages.sort_unstable();
        packages.dedup();
        let closure_at = closure_at.get_or_insert_with(|| closures.blocks.iter().copied().collect());
        roots = Vec::new();
        for (address, v) in packages {
            let t = state.node_type[v as usize].load(Relaxed);
            let Some(b) = a.block_of_pointer(address) else { continue };
            let shape = match interner.layouts.get(t as usize).and_then(|l| l.as_ref()).map(|(l, _)| &**l) {
                Some(Layout::Package(_, _, shape)) => shape.clone(),
                Some(Layout::Variant(_, _, reveals)) => match reveals.get(b.header.tag as usize) {
                    Some(Some(shape)) => shape.clone(),
                    _ => continue,
                },
                _ => continue,
            };
            let functions: Vec<Option<&heapsnap_names::model::Function>> = b
                .fields
                .iter()
                .map(|&w| {
                    let Ty::Closure(c) = &closures.types[*closure_at.get(&w)? as usize] else { return None };
                    let f = interner.env.function(&c.unit, c.line, c.col)?;
                    // The function's own closure: a partial application takes other arguments.
                    (c.applied == 0 && !f.partial).then_some(f)
                })
                .collect();
            for (i, ty) in heapsnap_names::packages::reveal(interner.env, &shape, &functions) {
                let id = interner.intern(&ty);
                interner.complete(id);
                if let Some(&w) = b.fields.get(i).filter(|&&w| ocaml::is_pointer(w) && id != NO_TYPE) {
                    roots.push((w, id, v));
                }
            }
        }
        if roots.is_empty() {
            break;
        }
    }
    Some((state.node_type.into_iter().map(AtomicU32::into_inner).collect(), total))
}

impl<'a> Typing<'a> {
    /// Types the heap from its typed module globals; `None` without OCaml names.
    ///
    /// The walk runs on every core, each block claimed by the first arrival. When blocks are
    /// reached with two types, which one wins must not depend on timing: the walk is then run
    /// again on one core, in a fixed order, and the immediate dominator settles each conflict.
    pub fn compute<'s>(a: &(impl HeapFacts<'s> + ?Sized)) -> Option<Typing<'static>> {
        Self::compute_with(a, true, None)
    }

    /// [`Typing::compute`] from the closures the analysis swept already.
    pub fn compute_swept<'s>(a: &(impl HeapFacts<'s> + ?Sized), sweep: Option<crate::closures::ClosureSweep>) -> Option<Typing<'static>> {
        Self::compute_with(a, true, sweep)
    }

    /// The walk on one core only, in its fixed order: the reference the parallel walk must
    /// agree with where it is used (tests compare them).
    pub fn compute_on_one_core<'s>(a: &(impl HeapFacts<'s> + ?Sized)) -> Option<Typing<'static>> {
        Self::compute_with(a, false, None)
    }

    fn compute_with<'s>(
        a: &(impl HeapFacts<'s> + ?Sized),
        parallel: bool,
        sweep: Option<crate::closures::ClosureSweep>,
    ) -> Option<Typing<'static>> {
        let names = a.names();
        let ocaml = names.ocaml()?;
        let timer = crate::progress::PhaseTimer::start("types");
        let mut interner = Interner { env: &ocaml.env, ids: FxHashMap::default(), types: Vec::new(), layouts: Vec::new(), unboxing: 0 };
        let mut roots: Vec<Arrival> = Vec::new();
        let snap = a.snap();
        for r in snap.roots() {
            let global = matches!(r.root_kind(), RootKind::Global | RootKind::DynGlobal) && !r.is_binding();
            if !(global || r.is_binding()) || !ocaml::is_pointer(r.value) {
                continue;
            }
            let Some(symbol) = snap.string(r.name) else { continue };
            let field = match global {
                true => names.global_field(symbol, r.origin),
                // A bytecode unit's binding in its initialisation's frame.
                false => names.binding_field(symbol),
            };
            let Some(field) = field else { continue };
            let Some(ty) = field.ty.as_ref().filter(|_| field.kind == "value") else { continue };
            let t = interner.intern(ty);
            if t != NO_TYPE {
                interner.complete(t);
                let holder = r.slot.checked_sub(8 * r.origin).and_then(|x| a.node_at(x).ok()).unwrap_or(NO_NODE);
                roots.push((r.value, t, holder));
            }
        }
        timer.lap(&format!("module globals ({} types)", interner.types.len()));
        // Closures say which function they run, and so what their environment holds: each is
        // a root of the walk too, however it was reached.
        let closures = crate::closures::typed_closures(a, &ocaml.env, sweep);
        let ids: Vec<u32> = closures
            .types
            .iter()
            .map(|ty| {
                let t = interner.intern(ty);
                interner.complete(t);
                t
            })
            .collect();
        roots.extend(closures.blocks.iter().map(|&(address, i)| (address, ids[i as usize], NO_NODE)).filter(|r| r.1 != NO_TYPE));
        timer.lap(&format!("closures ({} types)", interner.types.len()));
        let on_cores = a.block_map().filter(|_| parallel);
        let (node_type, tally) = match on_cores.and_then(|blocks| walk_rounds(a, &mut interner, &closures, roots.clone(), Some(blocks))) {
            Some(done) => done,
            None => {
                if on_cores.is_some() {
                    timer.lap("parallel walk (conflicts: again on one core)");
                }
                walk_rounds(a, &mut interner, &closures, roots, None).expect("the serial walk always ends")
            }
        };
        timer.lap("typed walk");
        let types =
            interner.types.iter().map(|t| TypeNames { name: t.name.clone(), parts: t.layout.get().map(|l| PartNames::of(l)) }).collect();
        // The walk's types are tens of thousands of trees of small allocations on a real
        // program: freed on a thread of their own, so that the reports do not wait for it (where
        // no thread can be started, here).
        let Interner { ids, types: walked, layouts, .. } = interner;
        let _ = std::thread::Builder::new().name("heapsnap-free".into()).spawn(move || drop((ids, walked, layouts, closures)));
        Some(Typing {
            node_type: NodeTypes::U32(node_type.into()),
            types: TypeTable::Made(types),
            conflicts: tally.conflicts,
            mismatches: tally.mismatches,
            typed_objects: tally.typed_objects,
            typed_bytes: tally.typed_bytes,
        })
    }

    /// Every node's type id (`NO_TYPE`: untyped), by node.
    pub fn node_types(&self) -> &NodeTypes<'a> {
        &self.node_type
    }

    /// What the analysis index keeps beside [`Typing::node_types`]; `None` for a typing read
    /// back from an index with an entry that does not parse (saving it would renumber the
    /// types after it).
    pub fn saved(&self) -> Option<SavedTypes> {
        Some(SavedTypes {
            types: self.types.iter().map(|t| t.cloned()).collect::<Option<_>>()?,
            conflicts: self.conflicts,
            mismatches: self.mismatches,
            typed_objects: self.typed_objects,
            typed_bytes: self.typed_bytes,
        })
    }

    /// The typing an analysis index saved (the index is tied to the snapshot, hence to its
    /// names). `None` when a node names a type the list lacks: then the walk runs again. A
    /// hostile list gives wrong names at worst.
    pub fn from_saved(node_type: NodeTypes<'a>, saved: SavedTypes) -> Option<Typing<'a>> {
        Self::with_table(node_type, saved, TypeTable::Made)
    }

    /// [`Typing::from_saved`] with each type the JSON of its [`TypeNames`], read where it lies:
    /// each type is parsed when first read.
    pub fn from_saved_json(node_type: NodeTypes<'a>, saved: SavedTypes<&'a [u8]>) -> Option<Typing<'a>> {
        Self::with_table(node_type, saved, |types| TypeTable::Saved(types.into_iter().map(|json| (json, OnceLock::new())).collect()))
    }

    /// The saved typing with its types as `table` keeps them, when they number every node's.
    fn with_table<T>(node_type: NodeTypes<'a>, saved: SavedTypes<T>, table: impl FnOnce(Vec<T>) -> TypeTable<'a>) -> Option<Typing<'a>> {
        if !node_type.ids_below(saved.types.len()) {
            return None;
        }
        Some(Typing {
            node_type,
            types: table(saved.types),
            conflicts: saved.conflicts,
            mismatches: saved.mismatches,
            typed_objects: saved.typed_objects,
            typed_bytes: saved.typed_bytes,
        })
    }

    /// The type id of a node (`NO_TYPE`: untyped).
    pub fn type_id(&self, v: NodeId) -> u32 {
        self.node_type.get(v as usize)
    }

    pub fn type_name(&self, id: u32) -> Option<&str> {
        self.types.get(id as usize).map(|t| t.name.as_str())
    }

    pub fn type_count(&self) -> usize {
        self.types.len()
    }

    /// A node's type and constructor (`tag`: its block's tag; `first`: its first field).
    pub fn of(&self, v: NodeId, tag: u8, first: Option<u64>) -> Option<BlockType<'_>> {
        let info = self.types.get(self.type_id(v) as usize)?;
        let constructor = match info.parts.as_ref()? {
            PartNames::Variant(blocks) => blocks.get(tag as usize).map(|(c, _)| c.as_str()),
            PartNames::PolyVariant(l) => first.and_then(|w| l.iter().find(|(h, _)| w as i64 >> 1 == *h)).map(|(_, label)| label.as_str()),
            _ => None,
        };
        Some(BlockType { name: &info.name, constructor })
    }

    /// The name of field `i` of a typed node (a record label, a constructor's inline-record
    /// label, `[i]` for an array element); `None` for unnamed fields (tuples, constructor
    /// arguments) and untyped nodes.
    pub fn field_name(&self, v: NodeId, tag: u8, i: usize) -> Option<String> {
        let parts = self.types.get(self.type_id(v) as usize)?.parts.as_ref()?;
        match parts {
            PartNames::Array => Some(format!("[{i}]")),
            _ => self.field_label(v, tag, i).map(str::to_string),
        }
    }

    /// The label of field `i` of a typed node (a record's or inline record's), without
    /// allocating; `None` for unlabelled fields, array elements and untyped nodes.
    pub fn field_label(&self, v: NodeId, tag: u8, i: usize) -> Option<&str> {
        let (names, first) = self.types.get(self.type_id(v) as usize)?.parts.as_ref()?.field_names(tag)?;
        names.get(i.checked_sub(first)?)?.as_deref()
    }

    /// Every field label of the types met ([`Typing::field_label`]'s answers), once each.
    pub fn labels(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for info in self.types.iter().flatten() {
            let names: Vec<&Option<String>> = match &info.parts {
                Some(PartNames::Fields(names)) | Some(PartNames::Closure { names, .. }) => names.iter().collect(),
                Some(PartNames::Variant(blocks)) => blocks.iter().flat_map(|(_, names)| names).collect(),
                _ => continue,
            };
            out.extend(names.into_iter().flatten().map(String::as_str));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// A typed node's one-line description: `Server.session`, or with its constructor
    /// `Cons : (string, int) Hashtbl.bucketlist`.
    pub fn describe(&self, v: NodeId, tag: u8, first: Option<u64>) -> Option<String> {
        let t = self.of(v, tag, first)?;
        Some(match t.constructor {
            Some(c) => format!("{c} : {}", t.name),
            None => t.name.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A functor body's type named without its application is the applied one; two
    /// applications are two types.
    #[test]
    fn an_unapplied_body_type_is_the_applied_one() {
        let c = |p: &str| Ty::Constr(p.into(), vec![Ty::Constr("int".into(), vec![])]);
        assert!(same_where_known(&c("F.Make.Symbol.t"), &c("F.Make(G.%1)().Symbol.t")));
        assert!(same_where_known(&c("F.Make(G.%1)().Symbol.t"), &c("F.Make.Symbol.t")));
        assert!(!same_where_known(&c("Map.Make(A).t"), &c("Map.Make(B).t")));
        assert!(!same_where_known(&c("F.Make.Other.t"), &c("F.Make(G.%1)().Symbol.t")));
        assert_eq!(without_applications("F.Make(G.%1)(H(I)).M.t"), "F.Make.M.t");
    }

    fn saved(types: usize) -> SavedTypes {
        let types = (0..types).map(|i| TypeNames { name: format!("t{i}"), parts: None }).collect();
        SavedTypes { types, conflicts: 0, mismatches: 0, typed_objects: 0, typed_bytes: 0 }
    }

    /// Each type's JSON apart, as the analysis index keeps them.
    fn entries(saved: &SavedTypes) -> Vec<Vec<u8>> {
        saved.types.iter().map(|t| serde_json::to_vec(t).unwrap()).collect()
    }

    fn read_back<'a>(ids: NodeTypes<'a>, entries: &'a [Vec<u8>]) -> Option<Typing<'a>> {
        let saved = SavedTypes {
            types: entries.iter().map(Vec::as_slice).collect(),
            conflicts: 0,
            mismatches: 0,
            typed_objects: 0,
            typed_bytes: 0,
        };
        Typing::from_saved_json(ids, saved)
    }

    /// A saved typing read back from its types' JSON names every node as the one it was saved
    /// from; an entry that is not a type (a hostile index) leaves its nodes untyped, the others
    /// read.
    #[test]
    fn a_saved_typing_reads_back_from_its_json_one_type_at_a_time() {
        let ids = || NodeTypes::U8(vec![0, 1, u8::MAX, 2, 0].into());
        let mut json = entries(&saved(3));
        let back = read_back(ids(), &json).expect("a typing");
        let names: Vec<Option<&str>> = (0..5).map(|v| back.type_name(back.type_id(v))).collect();
        assert_eq!(names, [Some("t0"), Some("t1"), None, Some("t2"), Some("t0")]);
        assert_eq!(back.type_count(), 3);

        json[1] = b"[1,2]".to_vec();
        let back = read_back(ids(), &json).expect("a typing");
        let names: Vec<Option<&str>> = (0..5).map(|v| back.type_name(back.type_id(v))).collect();
        assert_eq!(names, [Some("t0"), None, None, Some("t2"), Some("t0")]);
        assert!(back.saved().is_none(), "saved again, the types after the bad entry would be renumbered");

        assert!(read_back(NodeTypes::U8(vec![3].into()), &entries(&saved(3))).is_none());
    }

    /// An index whose node types name a type it does not list is refused, at every width; the
    /// width's largest value is "untyped" and always allowed.
    #[test]
    fn a_saved_typing_naming_a_type_it_lacks_is_refused() {
        let with = |last: u32| {
            [
                NodeTypes::U8(vec![0, u8::MAX, last as u8].into()),
                NodeTypes::U16(vec![0, u16::MAX, last as u16].into()),
                NodeTypes::U32(vec![0, NO_TYPE, last].into()),
            ]
        };
        for ids in with(2) {
            assert!(Typing::from_saved(ids, saved(3)).is_some());
        }
        for ids in with(3) {
            assert!(Typing::from_saved(ids, saved(3)).is_none());
        }
    }
}
