//! One parallel pass over the blocks of an analysed snapshot, for everything the diff needs per
//! block:
//!
//! * the block's **class**: its group (as the groupings would put it, for `reserved`,
//!   `kind` and `closure`) and its shape (for signatures), as one id by preorder number;
//! * every group's count and shallow bytes (reachable blocks only, as `groups`);
//! * the **edge** that links each reachable block to its immediate dominator: which field of
//!   the dominator points at it.
//!
//! With the blocks' OCaml types ([`classify_with_types`]), a typed block's shape is its type,
//! and the edges from it are its fields (any of its first [`FIELD_EDGES`], whatever its size),
//! or `[*]` for an array's elements (whatever its length).
//!
//! One pass instead of the two of `groups` plus one for shapes: the diff analyses two heaps,
//! and each pass over ten million blocks costs a tenth of a second.

use super::shape::{shape_key, shape_name, typed_shape, typed_shape_name, ShapeKey, FOLD_ABOVE_FIELDS};
use crate::blocks::{BlockMap, BlockRef, NodeId, PointsTo, NO_NODE};
use crate::dominators::DominatorTree;
use crate::full_analysis::Analysis;
use crate::graph::HeapGraph;
use crate::kinds::{key_for, key_name};
use crate::mem::Scatter;
use crate::model::{GroupBy, GroupKey, NO_TYPE};
use crate::structures;
use crate::typed::Typing;
use heapsnap_values as ocaml;
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::sync::Mutex;

/// Edge codes: below [`FIELD_EDGES`] a field index (of a block of at most 16 fields, or of a
/// typed block that is no array).
pub type Edge = u8;
/// Field indices an edge can name.
pub const FIELD_EDGES: usize = 240;
/// Some element of a block of more than 16 fields, or of a typed array (`[*]`).
pub const EDGE_ANY: Edge = 252;
/// Dominated without being pointed at by the dominator (`~`): several referrers, all of them
/// dominated by it.
pub const EDGE_DOMINATED: Edge = 253;
/// A root record (the trie level under the super-root).
pub const EDGE_ROOT: Edge = 254;
/// The object a root holds (the first object of a chain).
pub const EDGE_TOP: Edge = 255;

/// How the edges from a block of a class are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeMode {
    /// An untyped block: `.N` up to 16 fields, `[*]` for larger blocks.
    Shape,
    /// A typed block that is no array: `.N` for its first [`FIELD_EDGES`] fields, whatever its
    /// size (reports name them by their labels).
    Fields,
    /// A typed array: `[*]` whatever its length.
    Elements,
}

/// No class: a preorder number that is not a block (super-root, root kinds).
pub const NO_CLASS: u32 = u32::MAX;
/// A class in no group (`--by closure`: blocks that are not closures).
pub const NO_GROUP: u32 = u32::MAX;

/// What a block is for the diff: its group key (if the grouping has one for it) and its shape.
type ClassKey = (Option<GroupKey>, ShapeKey);

/// A class as the pass interns it: its key, the first block met of it (typed shapes are named
/// from it), how edges from it are written.
type ClassEntry = (ClassKey, NodeId, EdgeMode);

/// The groups of a snapshot, as the pass found them.
#[derive(Default)]
pub struct GroupTable {
    pub keys: Vec<GroupKey>,
    pub names: Vec<String>,
    /// Reachable blocks and their bytes.
    pub count: Vec<u64>,
    pub shallow: Vec<u64>,
}

pub struct Classified {
    /// Class of each reachable block by preorder number ([`NO_CLASS`] for non-blocks).
    pub class_pre: Vec<u32>,
    /// Edge from the immediate dominator, by preorder number.
    pub edge_pre: Vec<Edge>,
    /// Shape id of each class.
    pub class_shape: Vec<u32>,
    /// Group id of each class ([`NO_GROUP`] when in none).
    pub class_group: Vec<u32>,
    /// How the edges from each class's blocks are written.
    pub class_edges: Vec<EdgeMode>,
    /// Shape names by shape id.
    pub shape_names: Vec<String>,
    /// The field labels of each typed shape that has them (its record labels, `None` for an
    /// unnamed field), by shape id; empty for the others.
    pub shape_fields: Vec<Vec<Option<String>>>,
    pub groups: GroupTable,
    /// For `--by root`: `(preorder, bytes)` of every top object (one a root kind or the
    /// super-root immediately dominates), by preorder. Root groups count their bytes.
    pub top_bytes: Vec<(u32, u64)>,
}

impl Classified {
    /// The shape id of a preorder number ([`NO_CLASS`] for non-blocks).
    #[inline]
    pub fn shape(&self, p: usize) -> u32 {
        match self.class_pre[p] {
            NO_CLASS => NO_CLASS,
            c => self.class_shape[c as usize],
        }
    }

    /// How the edges from the block of a preorder number are written.
    #[inline]
    pub fn edge_mode(&self, p: usize) -> EdgeMode {
        match self.class_pre.get(p) {
            Some(&c) if c != NO_CLASS => self.class_edges[c as usize],
            _ => EdgeMode::Shape,
        }
    }
}

/// What identifies a block's class without naming it: tag, size where the class depends on it,
/// the code or operations pointer of closures and custom blocks, the reserved bits when they
/// group, the structure a small block has the layout of. Cheap to compare: neighbouring blocks are
/// often of one class.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct RawKey {
    tag_size: u64,
    extra: u64,
    reserved: u32,
    /// The typed shape's type and constructor ([`ShapeKey::Typed`]); `NO_TYPE` untyped.
    ty: u32,
    constructor: usize,
    /// `--by type`: the block's type, strings' included (`NO_TYPE`: untyped, or another grouping).
    group_type: u32,
}

fn raw_key(blocks: &BlockMap<'_>, by_reserved: bool, b: &BlockRef<'_>) -> RawKey {
    let tag = b.header.tag;
    let first = || b.fields.first().copied().unwrap_or(0);
    let (size, extra) = match tag {
        ocaml::CLOSURE_TAG | ocaml::CUSTOM_TAG => (0, first()),
        t if t >= ocaml::NO_SCAN_TAG || t == ocaml::CONT_TAG => (0, 0),
        0 if b.header.wosize <= 5 => (b.header.wosize, structures::recognise(blocks, b).map_or(0, |s| 1 + s as u64)),
        _ => (b.header.wosize, 0),
    };
    RawKey {
        tag_size: u64::from(tag) | (size << 8),
        extra,
        reserved: if by_reserved { b.header.reserved } else { 0 },
        ty: NO_TYPE,
        constructor: 0,
        group_type: NO_TYPE,
    }
}

/// What each worker accumulates: its class ids, counts and bytes by global class id, and the
/// top objects it met (`--by root` only).
#[derive(Default)]
struct Local {
    ids: FxHashMap<RawKey, (u32, EdgeMode)>,
    stats: Vec<(u64, u64)>,
    tops: Vec<(u32, u64)>,
    /// The lowest node met of each class.
    first: Vec<NodeId>,
}

impl Local {
    fn add(&mut self, class: u32, count: u64, bytes: u64) {
        let c = class as usize;
        if c >= self.stats.len() {
            self.stats.resize(c + 1, (0, 0));
        }
        self.stats[c].0 += count;
        self.stats[c].1 += bytes;
    }

    fn met(&mut self, class: u32, node: NodeId) {
        let c = class as usize;
        if c >= self.first.len() {
            self.first.resize(c + 1, NodeId::MAX);
        }
        self.first[c] = self.first[c].min(node);
    }
}

/// The classes of the blocks by their kinds (no types).
pub fn classify(a: &Analysis<'_>, by: GroupBy) -> Classified {
    classify_with_types(a, by, None)
}

/// How edges from the blocks of a shape are written: a typed array's by `[*]`.
fn edge_mode(typing: Option<&Typing>, shape: &ShapeKey, b: &BlockRef<'_>) -> EdgeMode {
    match (shape, typing) {
        (ShapeKey::Typed { .. }, Some(t)) => match t.field_name(b.node, b.header.tag, 0) {
            Some(name) if name.starts_with('[') => EdgeMode::Elements,
            _ => EdgeMode::Fields,
        },
        _ => EdgeMode::Shape,
    }
}

/// The classes of the blocks, typed blocks by their types when `typing` is given.
pub fn classify_with_types(a: &Analysis<'_>, by: GroupBy, typing: Option<&Typing>) -> Classified {
    // The names (not thread-safe) are used only after the parallel pass.
    let graph = &a.graph;
    let blocks = &graph.blocks;
    let tree = &a.tree;
    let reserved_bits = blocks.layout.reserved_bits();
    let by_reserved = by == GroupBy::Reserved && reserved_bits > 0;
    let by_type = by == GroupBy::Type;
    let reachable = tree.reachable_count();
    // Preorder numbers of the super-root and the root kinds: what top objects hang from.
    let rootish: Vec<u32> =
        if by == GroupBy::Root { (0..=graph.root_kinds.len() as NodeId).map(|n| tree.pre_of[n as usize]).collect() } else { Vec::new() };
    let mut class_pre = vec![NO_CLASS; reachable];
    let mut edge_pre = vec![EDGE_DOMINATED; reachable];
    let global: Mutex<(FxHashMap<ClassKey, u32>, Vec<ClassEntry>)> = Mutex::new(Default::default());
    let intern = |key: ClassKey, b: &BlockRef<'_>| -> (u32, EdgeMode) {
        let mode = edge_mode(typing, &key.1, b);
        let mut g = global.lock().expect("no panic while holding the classes");
        if let Some(&id) = g.0.get(&key) {
            return (id, mode);
        }
        g.1.push((key, b.node, mode));
        let id = g.1.len() as u32 - 1;
        g.0.insert(key, id);
        (id, mode)
    };
    let Local { stats, tops: mut top_bytes, first, .. } = {
        let classes_out = Scatter(class_pre.as_mut_ptr());
        let edges_out = Scatter(edge_pre.as_mut_ptr());
        let regions: Vec<usize> = blocks.block_regions().collect();
        regions
            .par_iter()
            .fold(Local::default, |mut local, &r| {
                // The current run of blocks of one class: its raw key, class, count and bytes.
                let mut run: Option<(RawKey, u32, EdgeMode)> = None;
                let (mut count, mut bytes) = (0u64, 0u64);
                for b in blocks.region_blocks(r) {
                    let mut raw = raw_key(blocks, by_reserved, &b);
                    let typed = typing.and_then(|t| typed_shape(t, &b));
                    if let Some(ShapeKey::Typed { ty, constructor }) = typed {
                        (raw.ty, raw.constructor) = (ty, constructor);
                    }
                    if by_type {
                        raw.group_type = typing.map_or(NO_TYPE, |t| t.type_id(b.node));
                    }
                    let group = |b: &BlockRef<'_>| match by_type {
                        true => Some(raw.group_type).filter(|&t| t != NO_TYPE).map(GroupKey::Type),
                        false => key_for(by, blocks, b),
                    };
                    let (id, mode) = match run {
                        Some((k, id, mode)) if k == raw => (id, mode),
                        _ => {
                            if let Some((_, id, _)) = run {
                                local.add(id, count, bytes);
                            }
                            (count, bytes) = (0, 0);
                            let (id, mode) = *local
                                .ids
                                .entry(raw)
                                .or_insert_with(|| intern((group(&b), typed.unwrap_or_else(|| shape_key(blocks, &b))), &b));
                            local.met(id, b.node);
                            run = Some((raw, id, mode));
                            (id, mode)
                        }
                    };
                    let p = tree.pre_of[b.node as usize];
                    if p == NO_NODE {
                        continue; // unreachable: counted in no group (as `Analysis::group_by`)
                    }
                    count += 1;
                    bytes += b.header.bytes();
                    if !rootish.is_empty() && rootish.contains(&tree.idom_pre[p as usize]) {
                        local.tops.push((p, b.header.bytes()));
                    }
                    // SAFETY: preorder numbers are distinct and below `reachable`; each block is
                    // visited once; a node's edge slot is written only by its immediate
                    // dominator's visit.
                    unsafe {
                        classes_out.write(p as usize, id);
                        dominated_edges(graph, tree, &b, p, mode, &edges_out);
                    }
                }
                if let Some((_, id, _)) = run {
                    local.add(id, count, bytes);
                }
                local
            })
            .reduce(Local::default, |mut x, y| {
                if x.stats.len() < y.stats.len() {
                    x.stats.resize(y.stats.len(), (0, 0));
                }
                for (s, t) in x.stats.iter_mut().zip(y.stats) {
                    s.0 += t.0;
                    s.1 += t.1;
                }
                x.tops.extend(y.tops);
                if x.first.len() < y.first.len() {
                    x.first.resize(y.first.len(), NodeId::MAX);
                }
                for (f, g) in x.first.iter_mut().zip(y.first) {
                    *f = (*f).min(g);
                }
                x
            })
    };
    top_bytes.sort_unstable();
    let (_, keys) = global.into_inner().expect("no panic while holding the classes");
    // The threads numbered the classes in the order they met them: numbered again by the
    // lowest node of each, so that the shapes, groups and signatures numbered from them are the
    // same every time (an index saves them).
    let (keys, stats) = {
        let mut order: Vec<u32> = (0..keys.len() as u32).collect();
        order.sort_unstable_by_key(|&c| first.get(c as usize).copied().unwrap_or(NodeId::MAX));
        let mut renumbered = vec![0u32; keys.len()];
        for (new, &old) in order.iter().enumerate() {
            renumbered[old as usize] = new as u32;
        }
        class_pre.par_iter_mut().filter(|c| **c != NO_CLASS).for_each(|c| *c = renumbered[*c as usize]);
        let keys: Vec<ClassEntry> = order
            .iter()
            .map(|&c| {
                let (key, met, mode) = keys[c as usize];
                (key, first.get(c as usize).copied().filter(|&f| f != NodeId::MAX).unwrap_or(met), mode)
            })
            .collect();
        let stats: Vec<(u64, u64)> = order.iter().map(|&c| stats.get(c as usize).copied().unwrap_or((0, 0))).collect();
        (keys, stats)
    };

    // Number the shapes and groups of the classes, and name them.
    let mut shape_ids: FxHashMap<ShapeKey, u32> = FxHashMap::default();
    let mut group_ids: FxHashMap<GroupKey, u32> = FxHashMap::default();
    let mut shape_names = Vec::new();
    let mut shape_fields = Vec::new();
    let mut groups = GroupTable::default();
    let mut class_shape = Vec::with_capacity(keys.len());
    let mut class_group = Vec::with_capacity(keys.len());
    let mut class_edges = Vec::with_capacity(keys.len());
    for (c, ((group, shape), first, mode)) in keys.iter().enumerate() {
        class_shape.push(*shape_ids.entry(*shape).or_insert_with(|| {
            let (name, fields) = match (shape, typing, blocks.block(*first)) {
                (ShapeKey::Typed { .. }, Some(t), Some(b)) => {
                    let fields = if *mode == EdgeMode::Fields {
                        (0..(b.header.wosize as usize).min(FIELD_EDGES)).map(|i| t.field_name(b.node, b.header.tag, i)).collect()
                    } else {
                        Vec::new()
                    };
                    (typed_shape_name(t, &b), fields)
                }
                _ => (shape_name(a, shape), Vec::new()),
            };
            shape_names.push(name);
            shape_fields.push(fields);
            shape_names.len() as u32 - 1
        }));
        class_edges.push(*mode);
        let g = match group {
            None => NO_GROUP,
            Some(k) => *group_ids.entry(*k).or_insert_with(|| {
                groups.keys.push(*k);
                groups.names.push(match (k, typing) {
                    (GroupKey::Type(t), Some(typing)) => typing.type_name(*t).unwrap_or("?").to_string(),
                    _ => key_name(&a.names, k),
                });
                groups.count.push(0);
                groups.shallow.push(0);
                groups.keys.len() as u32 - 1
            }),
        };
        class_group.push(g);
        if g != NO_GROUP {
            let (n, bytes) = stats.get(c).copied().unwrap_or((0, 0));
            groups.count[g as usize] += n;
            groups.shallow[g as usize] += bytes;
        }
    }
    Classified { class_pre, edge_pre, class_shape, class_group, class_edges, shape_names, shape_fields, groups, top_bytes }
}

/// Writes the edge of every child that `b` (preorder `p`) immediately dominates and points at:
/// `[*]` for a large block or a typed array, the first field pointing at it for others.
///
/// # Safety
/// Only the immediate dominator of a node writes its slot: callers visit each block once.
unsafe fn dominated_edges(graph: &HeapGraph<'_>, tree: &DominatorTree, b: &BlockRef<'_>, p: u32, mode: EdgeMode, out: &Scatter<Edge>) {
    let blocks = &graph.blocks;
    let succ = graph.successors(b.node);
    if succ.is_empty() {
        return;
    }
    let large = folds_fields(b, mode);
    // Field index of each successor, in order: the scanned pointer fields, when every one of
    // them became an edge (no external or bad pointer, no extra ephemeron edge).
    let mut fields = [0u8; FOLD_ABOVE_FIELDS as usize];
    let mut ordinal_ok = false;
    if !large {
        let mut n = 0usize;
        b.header.scanned_fields(b.fields, |i, _| {
            if n < fields.len() {
                fields[n] = i as u8;
            }
            n += 1;
        });
        ordinal_ok = n == succ.len() && n <= fields.len();
    }
    for (k, &t) in succ.iter().enumerate() {
        let pt = tree.pre_of[t as usize];
        if pt == NO_NODE || tree.idom_pre[pt as usize] != p {
            continue;
        }
        // SAFETY: `pt` is t's preorder number; only its immediate dominator (this block) writes it.
        if unsafe { out.read(pt as usize) } != EDGE_DOMINATED {
            continue; // an earlier field already points at it
        }
        let edge = if large {
            EDGE_ANY
        } else if ordinal_ok {
            fields[k]
        } else {
            field_pointing(blocks, b, t).map_or(EDGE_DOMINATED, |i| i as Edge)
        };
        // SAFETY: as for the read: this block is the only writer of slot `pt`.
        unsafe { out.write(pt as usize, edge) };
    }
}

/// Whether the edges from `b` are all `[*]`: a typed array, an untyped block of more than 16
/// fields, a typed block of more than [`FIELD_EDGES`].
#[inline]
fn folds_fields(b: &BlockRef<'_>, mode: EdgeMode) -> bool {
    match mode {
        EdgeMode::Shape => b.header.wosize > FOLD_ABOVE_FIELDS,
        EdgeMode::Fields => b.header.wosize > FIELD_EDGES as u64,
        EdgeMode::Elements => true,
    }
}

/// The edge from `b` (whose edges are written as `mode` says) to the block `to`, which one of
/// its fields points at: `[*]` or the first such field (`~` when none is found).
pub fn edge_to(blocks: &BlockMap<'_>, b: &BlockRef<'_>, to: NodeId, mode: EdgeMode) -> Edge {
    if folds_fields(b, mode) {
        return EDGE_ANY;
    }
    field_pointing(blocks, b, to).map_or(EDGE_DOMINATED, |i| i as Edge)
}

/// The first field of a block pointing at `to` (scanned fields, then any field of an
/// abstract block: ephemerons hold their data there), when an edge can name it.
pub fn field_pointing(blocks: &BlockMap<'_>, b: &BlockRef<'_>, to: NodeId) -> Option<usize> {
    let mut found = None;
    b.header.scanned_fields(b.fields, |i, v| {
        if found.is_none() && blocks.resolve(v) == PointsTo::Node(to) {
            found = Some(i);
        }
    });
    if found.is_none() && b.header.tag == ocaml::ABSTRACT_TAG {
        found = b.fields.iter().position(|&v| ocaml::is_pointer(v) && blocks.resolve(v) == PointsTo::Node(to));
    }
    found.filter(|&i| i < FIELD_EDGES)
}
