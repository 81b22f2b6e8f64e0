//! One parallel pass over the blocks of an analysed snapshot: the shape of every reachable block
//! and the edge that links it to its immediate dominator (which field of the dominator points
//! at it), both by preorder number. The signature tries are built from these.

use super::shape::{shape_key, shape_name, ShapeKey, FOLD_ABOVE_FIELDS};
use crate::analysis::Analysis;
use crate::blocks::{BlockMap, BlockRef, NodeId, Target, NO_NODE};
use crate::ocaml;
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::sync::Mutex;

/// Edge codes: `0..=15` a field index (of a block of at most 16 fields).
pub type Edge = u8;
/// Some element of a block of more than 16 fields (`[*]`).
pub const EDGE_ANY: Edge = 16;
/// Dominated without being pointed at by the dominator (`~`): several referrers, all of them
/// dominated by it.
pub const EDGE_DOMINATED: Edge = 17;
/// A root record (the trie level under the super-root).
pub const EDGE_ROOT: Edge = 18;
/// The object a root holds (the first object of a chain).
pub const EDGE_TOP: Edge = 19;

/// No shape: a preorder number that is not a block (super-root, root kinds).
pub const NO_SHAPE: u32 = u32::MAX;

/// Shapes of a snapshot, numbered in the order the pass met them.
#[derive(Default)]
pub struct ShapeTable {
    pub keys: Vec<ShapeKey>,
    pub names: Vec<String>,
}

/// The per-node inputs of the signature tries.
pub struct Classified {
    /// Shape id of each reachable node, by preorder number ([`NO_SHAPE`] for non-blocks).
    pub shape_pre: Vec<u32>,
    /// Edge from the immediate dominator, by preorder number.
    pub edge_pre: Vec<Edge>,
    pub shapes: ShapeTable,
}

/// Threads write distinct preorder slots of one vector.
#[derive(Clone, Copy)]
pub(super) struct Scatter<T>(pub(super) *mut T);
unsafe impl<T> Send for Scatter<T> {}
unsafe impl<T> Sync for Scatter<T> {}
impl<T: Copy> Scatter<T> {
    /// # Safety
    /// `i` is in bounds and no other thread accesses slot `i`.
    #[inline]
    pub(super) unsafe fn write(&self, i: usize, v: T) {
        unsafe { self.0.add(i).write(v) }
    }
    /// # Safety
    /// As for `write`.
    #[inline]
    unsafe fn read(&self, i: usize) -> T {
        unsafe { self.0.add(i).read() }
    }
}

pub fn classify(a: &Analysis<'_>) -> Classified {
    let blocks = &a.graph.blocks;
    let tree = &a.tree;
    let reachable = tree.reachable_count();
    let mut shape_pre = vec![NO_SHAPE; reachable];
    let mut edge_pre = vec![EDGE_DOMINATED; reachable];
    let global: Mutex<FxHashMap<ShapeKey, u32>> = Mutex::new(FxHashMap::default());
    let keys: Mutex<Vec<ShapeKey>> = Mutex::new(Vec::new());
    {
        let shapes_out = Scatter(shape_pre.as_mut_ptr());
        let edges_out = Scatter(edge_pre.as_mut_ptr());
        let regions: Vec<usize> = blocks.block_regions().collect();
        regions.par_iter().for_each(|&r| {
            let mut local: FxHashMap<ShapeKey, u32> = FxHashMap::default();
            let mut last: Option<(ShapeKey, u32)> = None;
            for b in blocks.region_blocks(r) {
                let p = tree.pre_of[b.node as usize];
                if p == NO_NODE {
                    continue;
                }
                let key = shape_key(blocks, &b);
                let id = match last {
                    Some((k, id)) if k == key => id,
                    _ => *local.entry(key).or_insert_with(|| {
                        let mut g = global.lock().expect("no panic while holding the shape map");
                        *g.entry(key).or_insert_with(|| {
                            let mut k = keys.lock().expect("no panic while holding the shape list");
                            k.push(key);
                            k.len() as u32 - 1
                        })
                    }),
                };
                last = Some((key, id));
                // SAFETY: preorder numbers are distinct and below `reachable`; each block is
                // visited once.
                unsafe { shapes_out.write(p as usize, id) };
                // SAFETY: a node's edge slot is written only by its immediate dominator's visit.
                unsafe { dominated_edges(a, blocks, &b, p, &edges_out) };
            }
        });
    }
    let keys = keys.into_inner().expect("no panic while holding the shape list");
    let names = keys.iter().map(|k| shape_name(a, k)).collect();
    Classified { shape_pre, edge_pre, shapes: ShapeTable { keys, names } }
}

/// Writes the edge of every child that `b` (preorder `p`) immediately dominates and points at:
/// `[*]` for a large block, the first field pointing at it for a small one.
///
/// # Safety
/// Only the immediate dominator of a node writes its slot: callers visit each block once.
unsafe fn dominated_edges(a: &Analysis<'_>, blocks: &BlockMap<'_>, b: &BlockRef<'_>, p: u32, out: &Scatter<Edge>) {
    let tree = &a.tree;
    let succ = a.graph.successors(b.node);
    if succ.is_empty() {
        return;
    }
    let large = b.header.wosize > FOLD_ABOVE_FIELDS;
    // Field index of each successor, in order: the scanned pointer fields, when every one of
    // them became an edge (no external or bad pointer, no extra ephemeron edge).
    let mut fields = [0u8; FOLD_ABOVE_FIELDS as usize];
    let mut ordinal_ok = false;
    if !large {
        let mut n = 0usize;
        crate::graph::scanned_fields(&b.header, b.fields, |i, _| {
            if n < fields.len() {
                fields[n] = i as u8;
            }
            n += 1;
        });
        ordinal_ok = n == succ.len();
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
        unsafe { out.write(pt as usize, edge) };
    }
}

/// The first field of a small block pointing at `to` (scanned fields, then any field of an
/// abstract block: ephemerons hold their data there).
pub fn field_pointing(blocks: &BlockMap<'_>, b: &BlockRef<'_>, to: NodeId) -> Option<usize> {
    let mut found = None;
    crate::graph::scanned_fields(&b.header, b.fields, |i, v| {
        if found.is_none() && blocks.resolve(v) == Target::Node(to) {
            found = Some(i);
        }
    });
    if found.is_none() && b.header.tag == ocaml::ABSTRACT_TAG {
        found = b.fields.iter().position(|&v| ocaml::is_pointer(v) && blocks.resolve(v) == Target::Node(to));
    }
    found.filter(|&i| i < FOLD_ABOVE_FIELDS as usize)
}
