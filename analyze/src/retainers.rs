//! Which roots retain what: the name of every *top object* (one whose immediate dominator is
//! the super-root or a root kind, so the top of a dominator subtree), by the most stable roots
//! that reach it.
//!
//! The dominator tree stays exact; only the names change. An object that a global and a stack
//! slot both reach hangs from the super-root (no single root dominates it), but the stack slot
//! is transient: the object is named by the global. Several globals reaching it are all named
//! (`shared: A, B`), and each global's retained set is split into what it alone retains and what
//! it shares (Eclipse MAT's "retained set" of a group of roots).
//!
//! Finding the roots that reach each top object needs no walk of the heap: an edge from one
//! dominator subtree into another always lands on the other's top object (a node that is not a
//! top object is dominated from within its own subtree). So the roots' reach is propagated
//! over the *subtree graph*: top objects, linked where some edge crosses from one subtree into
//! another; one pass over the edges builds it.

use crate::blocks::{NodeId, NO_NODE};
use crate::dominators::DominatorTree;
use crate::facts::HeapFacts;
use crate::graph::HeapGraph;
use crate::model::{RootShare, NO_LABEL};
use crate::names::Names;
use heapsnap_format::{RootKind, Snapshot};
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

/// At most this many root names are kept per top object; more are counted as "more".
const MAX_NAMES: usize = 6;

/// How long a root lives: globals outlive C roots and threads, which outlive stack frames.
pub fn stability(kind: RootKind) -> u8 {
    match kind {
        RootKind::Global | RootKind::DynGlobal | RootKind::GlobalRoot | RootKind::GenerationalRoot => 0,
        RootKind::Stack | RootKind::Register | RootKind::LocalRoot => 2,
        _ => 1,
    }
}

/// The roots that reach one top object: those of the most stable kind that does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Reach {
    /// Stability of the roots named (`u8::MAX`: none yet).
    rank: u8,
    /// Root names (ids), sorted; at most [`MAX_NAMES`].
    names: Vec<u32>,
    /// More roots of that rank reach it than are named.
    more: bool,
}

impl Reach {
    fn none() -> Reach {
        Reach { rank: u8::MAX, names: Vec::new(), more: false }
    }

    /// Adds what reaches `from`; true when this changed.
    fn absorb(&mut self, from: &Reach) -> bool {
        if from.rank > self.rank || from.rank == u8::MAX {
            return false;
        }
        let mut changed = false;
        if from.rank < self.rank {
            *self = Reach::none();
            self.rank = from.rank;
            changed = true;
        }
        for &n in &from.names {
            changed |= self.add(n);
        }
        if from.more && !self.more {
            self.more = true;
            changed = true;
        }
        changed
    }

    /// Keeps the [`MAX_NAMES`] smallest name ids (so that which are named does not depend on
    /// the order roots are met in); true when this changed.
    fn add(&mut self, name: u32) -> bool {
        let Err(i) = self.names.binary_search(&name) else { return false };
        if i >= MAX_NAMES {
            let changed = !self.more;
            self.more = true;
            return changed;
        }
        self.names.insert(i, name);
        if self.names.len() > MAX_NAMES {
            self.names.pop();
            self.more = true;
        }
        true
    }
}

/// The names of the top objects, and each root's retained bytes, alone and shared.
pub struct Retainers {
    /// Root names (`Cache_leak.1`, `stack camlFoo.bar_12`), by id.
    pub names: Vec<String>,
    /// The distinct labels of the top objects (`Cache_leak.1`, `shared: A, B`).
    pub labels: Vec<String>,
    /// The top object of every reachable node, by preorder number.
    pub top: Vec<u32>,
    /// By preorder number: a top object's label (an index in `labels`), else [`NO_LABEL`].
    label_of: Vec<u32>,
    /// Per root name: the bytes of the top objects only it reaches, and of those it shares.
    pub per_root: Vec<RootShare>,
}

impl Retainers {
    /// Millions of top objects are usual (every item of a table that two globals reach): they
    /// are numbered densely, and their labels interned, so that nothing here is per-object
    /// hashing or a string per object.
    pub fn compute(snap: &Snapshot, graph: &HeapGraph<'_>, tree: &DominatorTree, root_names: &Names<'_>) -> Retainers {
        let preorder = tree.preorder();
        let first_block = graph.blocks.first_block_node;
        let r = tree.reachable_count();
        // The top object of every reachable node, by preorder number (dominators come first).
        let mut top = vec![0u32; r];
        for p in 1..r {
            let d = tree.idom_pre[p] as usize;
            top[p] = if preorder[d] < first_block { p as u32 } else { top[d] };
        }
        let is_top = |p: u32| top[p as usize] == p && preorder[p as usize] >= first_block;
        // Top objects numbered densely: `slot[p]` (NO_LABEL: not a top object), `tops[slot]`.
        let mut slot = vec![NO_LABEL; r];
        let mut tops: Vec<u32> = Vec::new();
        for p in 1..r as u32 {
            if is_top(p) {
                slot[p as usize] = tops.len() as u32;
                tops.push(p);
            }
        }

        // Root names, and the roots that hold each top object directly.
        let mut names: Vec<String> = Vec::new();
        let mut name_ids: FxHashMap<String, u32> = FxHashMap::default();
        let mut reach: Vec<Reach> = vec![Reach::none(); tops.len()];
        let mut held: Vec<u32> = Vec::new();
        for edge in &graph.roots {
            let p = tree.pre_of[edge.node as usize];
            if p == NO_NODE || slot[p as usize] == NO_LABEL {
                continue;
            }
            let record = &snap.roots()[edge.record as usize];
            let label = root_names.root_label(record);
            let id = *name_ids.entry(label.clone()).or_insert_with(|| {
                names.push(label);
                names.len() as u32 - 1
            });
            let from = Reach { rank: stability(record.root_kind()), names: vec![id], more: false };
            let s = slot[p as usize];
            reach[s as usize].absorb(&from);
            held.push(s);
        }

        // The subtree graph: top(u) -> w for every edge u -> w into another subtree, as
        // adjacency lists by slot.
        let mut crossing: Vec<(u32, u32)> = (1..r as u32)
            .into_par_iter()
            .fold(Vec::new, |mut out, p| {
                let u = preorder[p as usize];
                if u >= first_block {
                    let from = top[p as usize];
                    for &w in graph.successors(u) {
                        let q = tree.pre_of[w as usize];
                        if q != NO_NODE && q != from && is_top(q) {
                            out.push((slot[from as usize], slot[q as usize]));
                        }
                    }
                }
                out
            })
            .reduce(Vec::new, |mut x, y| {
                x.extend(y);
                x
            });
        crossing.par_sort_unstable();
        crossing.dedup();
        let mut next_start = vec![0u32; tops.len() + 1];
        for &(from, _) in &crossing {
            next_start[from as usize + 1] += 1;
        }
        for i in 0..tops.len() {
            next_start[i + 1] += next_start[i];
        }
        let next = |s: u32| crossing[next_start[s as usize] as usize..next_start[s as usize + 1] as usize].iter().map(|&(_, t)| t);

        // Propagate: each set only grows or improves its rank, so this ends.
        held.sort_unstable();
        held.dedup();
        let mut work = held;
        while let Some(t) = work.pop() {
            let from = reach[t as usize].clone();
            for s in next(t) {
                if reach[s as usize].absorb(&from) {
                    work.push(s);
                }
            }
        }

        // Labels, interned by the set of names they list; bytes per label, then per root.
        let mut labels: Vec<String> = Vec::new();
        let mut label_sets: Vec<Reach> = Vec::new();
        let mut label_ids: FxHashMap<(Vec<u32>, bool), u32> = FxHashMap::default();
        let mut label_bytes: Vec<u64> = Vec::new();
        let mut label_of = vec![NO_LABEL; r];
        let mut last: Option<(usize, u32)> = None;
        for (s, set) in reach.iter().enumerate() {
            if set.rank == u8::MAX {
                continue;
            }
            // Neighbouring top objects are often named alike: skip the hash then.
            let id = match last {
                Some((l, id)) if reach[l].names == set.names && reach[l].more == set.more => id,
                _ => *label_ids.entry((set.names.clone(), set.more)).or_insert_with(|| {
                    labels.push(label_of_set(&names, set));
                    label_sets.push(set.clone());
                    label_bytes.push(0);
                    labels.len() as u32 - 1
                }),
            };
            last = Some((s, id));
            let p = tops[s];
            label_of[p as usize] = id;
            label_bytes[id as usize] += tree.retained(preorder[p as usize]);
        }
        let mut alone = vec![0u64; names.len()];
        let mut shared = vec![0u64; names.len()];
        let mut partners: Vec<FxHashSet<u32>> = vec![FxHashSet::default(); names.len()];
        for (set, &bytes) in label_sets.iter().zip(&label_bytes) {
            match set.names.as_slice() {
                [one] if !set.more => alone[*one as usize] += bytes,
                many => {
                    for &n in many {
                        shared[n as usize] += bytes;
                        partners[n as usize].extend(many.iter().copied().filter(|&m| m != n));
                    }
                }
            }
        }
        let mut per_root: Vec<RootShare> = names
            .iter()
            .enumerate()
            .filter(|&(i, _)| alone[i] + shared[i] > 0)
            .map(|(i, n)| {
                let mut with: Vec<String> = partners[i].iter().map(|&m| names[m as usize].clone()).collect();
                with.sort();
                with.truncate(MAX_NAMES);
                RootShare { root: n.clone(), alone: alone[i], shared: shared[i], shared_with: with }
            })
            .collect();
        per_root.sort_by(|x, y| (y.alone + y.shared).cmp(&(x.alone + x.shared)).then(x.root.cmp(&y.root)));
        Retainers { names, labels, top, label_of, per_root }
    }

    /// The label of a top object (by preorder number) as an index in `labels`; None for other
    /// nodes and for top objects no root names.
    pub fn label_id(&self, p: u32) -> Option<u32> {
        self.label_of.get(p as usize).copied().filter(|&l| l != NO_LABEL)
    }

    /// The label of a top object (by node): its most stable roots.
    pub fn label(&self, tree: &DominatorTree, v: NodeId) -> Option<&str> {
        let p = *tree.pre_of.get(v as usize)?;
        self.label_id(p).map(|l| self.labels[l as usize].as_str())
    }
}

/// `Cache_leak.1`; `shared: A, B`; `shared: A, B, ... (more)`, names sorted.
fn label_of_set(names: &[String], set: &Reach) -> String {
    let mut list: Vec<&str> = set.names.iter().map(|&n| names[n as usize].as_str()).collect();
    list.sort_unstable();
    match (list.as_slice(), set.more) {
        ([one], false) => one.to_string(),
        (_, more) => format!("shared: {}{}", list.join(", "), if more { ", ... (more)" } else { "" }),
    }
}

/// The roots of `kind` that point at `v` themselves, named (`Module.field`; `A (+2 roots)` when
/// several differ): where a retainer path starts, as `inspect` lists an object's roots.
pub fn held_by<'s>(a: &impl HeapFacts<'s>, kind: RootKind, v: NodeId) -> String {
    let snap = a.snap();
    let mut labels: Vec<String> = a
        .root_records(v)
        .iter()
        .filter_map(|&r| snap.roots().get(r as usize))
        .filter(|r| r.root_kind() == kind)
        .map(|r| a.names().root_label(r))
        .collect();
    labels.sort();
    labels.dedup();
    match labels.as_slice() {
        [] => format!("{kind} (shared)"),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (+{} roots)", rest.len()),
    }
}
