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

use crate::analysed::AnalysedHeap;
use crate::analysis::Analysis;
use crate::blocks::NodeId;
use heapsnap_format::RootKind;
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
        if from.rank < self.rank {
            *self = Reach::none();
            self.rank = from.rank;
        }
        let before = (self.names.len(), self.more);
        for &n in &from.names {
            self.add(n);
        }
        self.more |= from.more;
        before != (self.names.len(), self.more)
    }

    fn add(&mut self, name: u32) {
        if let Err(i) = self.names.binary_search(&name) {
            if self.names.len() < MAX_NAMES {
                self.names.insert(i, name);
            } else {
                self.more = true;
            }
        }
    }
}

/// The names of the top objects, and each root's retained bytes, alone and shared.
pub struct Retainers {
    /// Root names (`Cache_leak.1`, `stack camlFoo.bar_12`), by id.
    pub names: Vec<String>,
    /// The label of each top object by preorder number.
    labels: FxHashMap<u32, String>,
    /// Per root name: the bytes of the top objects only it reaches, and of those it shares.
    pub per_root: Vec<RootShare>,
}

/// What one root (by name) retains: alone, and together with other roots of its rank.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct RootShare {
    pub root: String,
    /// Bytes freed if this root alone dropped its references.
    pub alone: u64,
    /// Bytes this root reaches together with other roots, freed only when all of them drop
    /// their references.
    pub shared: u64,
    /// The other roots it shares with (at most a few).
    pub shared_with: Vec<String>,
}

impl Retainers {
    pub fn compute(a: &Analysis<'_>) -> Retainers {
        let tree = &a.tree;
        let graph = &a.graph;
        let preorder = a.preorder();
        let first_block = graph.blocks.first_block_node;
        let r = tree.reachable_count();
        // The top object of every reachable node, by preorder number (dominators come first).
        let mut top = vec![0u32; r];
        for p in 1..r {
            let d = tree.idom_pre[p] as usize;
            top[p] = if preorder[d] < first_block { p as u32 } else { top[d] };
        }
        let is_top = |p: u32| top[p as usize] == p && preorder[p as usize] >= first_block;

        // Root names, and the roots that hold each top object directly.
        let mut names: Vec<String> = Vec::new();
        let mut name_ids: FxHashMap<String, u32> = FxHashMap::default();
        let mut reach: FxHashMap<u32, Reach> = FxHashMap::default();
        for edge in &graph.roots {
            let p = tree.pre_of[edge.node as usize];
            if p == crate::blocks::NO_NODE {
                continue;
            }
            let record = &a.snap.roots()[edge.record as usize];
            let label = a.names.root_label(record);
            let id = *name_ids.entry(label.clone()).or_insert_with(|| {
                names.push(label);
                names.len() as u32 - 1
            });
            let from = Reach { rank: stability(record.root_kind()), names: vec![id], more: false };
            reach.entry(p).or_insert_with(Reach::none).absorb(&from);
        }

        // The subtree graph: top(u) -> w for every edge u -> w into another subtree.
        let crossing: Vec<(u32, u32)> = (1..r as u32)
            .into_par_iter()
            .fold(Vec::new, |mut out, p| {
                let u = preorder[p as usize];
                if u >= first_block {
                    let from = top[p as usize];
                    for &w in graph.successors(u) {
                        let q = tree.pre_of[w as usize];
                        if q != crate::blocks::NO_NODE && q != from && is_top(q) {
                            out.push((from, q));
                        }
                    }
                }
                out
            })
            .reduce(Vec::new, |mut x, y| {
                x.extend(y);
                x
            });
        let mut next: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
        for (from, to) in crossing.into_iter().collect::<FxHashSet<_>>() {
            next.entry(from).or_default().push(to);
        }

        // Propagate: each set only grows or improves its rank, so this ends.
        let mut work: Vec<u32> = reach.keys().copied().collect();
        while let Some(t) = work.pop() {
            let Some(targets) = next.get(&t) else { continue };
            let from = reach[&t].clone();
            for &s in targets {
                if reach.entry(s).or_insert_with(Reach::none).absorb(&from) {
                    work.push(s);
                }
            }
        }

        // Labels, and each root's part.
        let mut labels = FxHashMap::default();
        let mut alone = vec![0u64; names.len()];
        let mut shared = vec![0u64; names.len()];
        let mut partners: Vec<FxHashSet<u32>> = vec![FxHashSet::default(); names.len()];
        for (&p, set) in &reach {
            if !is_top(p) {
                continue;
            }
            let bytes = a.retained(preorder[p as usize]);
            labels.insert(p, label_of(&names, set));
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
        Retainers { names, labels, per_root }
    }

    /// The label of a top object (by node): its most stable roots.
    pub fn label(&self, a: &Analysis<'_>, v: NodeId) -> Option<&str> {
        self.labels.get(&a.tree.pre_of[v as usize]).map(String::as_str)
    }
}

/// `Cache_leak.1`; `shared: A, B`; `shared: A, B, ... (more)`, names sorted.
fn label_of(names: &[String], set: &Reach) -> String {
    let mut list: Vec<&str> = set.names.iter().map(|&n| names[n as usize].as_str()).collect();
    list.sort_unstable();
    match (list.as_slice(), set.more) {
        ([one], false) => one.to_string(),
        (_, more) => format!("shared: {}{}", list.join(", "), if more { ", ... (more)" } else { "" }),
    }
}

/// The roots of `kind` that point at `v` themselves, named (`Module.field`; `A (+2 roots)` when
/// several differ): where a retainer path starts, as `inspect` lists an object's roots.
pub fn held_by<'s>(a: &impl AnalysedHeap<'s>, kind: RootKind, v: NodeId) -> String {
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
