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
use crate::model::{GroupKey, RootShare, NO_LABEL};
use crate::names::Names;
use heapsnap_format::{RootKind, Snapshot};
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

/// At most this many root names are kept per top object; more are counted as "more".
const MAX_NAMES: usize = 6;

/// How long a root lives: globals outlive C roots and threads, which outlive stack frames.
/// A bytecode program's `caml_global_data` (a registered root in OCaml 5, a static variable in
/// 4.14) is the table of every global, which the program's globals are roots of their own
/// beside (as in native code, where the table does not exist): ranked as a C root, so that
/// memory a global reaches is named by the global. A module's
/// toplevel binding held in its initialisation's frame (`BINDING`) ranks as a global.
pub fn stability_of(snap: &Snapshot, record: &heapsnap_format::RootRecord) -> u8 {
    let kind = record.root_kind();
    let table_kind = matches!(kind, RootKind::GenerationalRoot | RootKind::Global);
    if table_kind && snap.metadata().bytecode && snap.string(record.name) == Some("caml_global_data") {
        return stability(RootKind::LocalRoot) - 1;
    }
    // A binding (a bytecode unit's toplevel binding in its initialisation's frame, a toplevel
    // session's) lives as long as a global, and names what the program's own code keeps: the
    // globals that also reach it do so through the machinery that holds it (the toplevel's
    // table, closures of the unit's functions).
    if record.is_binding() {
        return 0;
    }
    stability(kind)
}

/// How long a root of `kind` lives (see [`stability_of`]).
pub fn stability(kind: RootKind) -> u8 {
    match kind {
        RootKind::Global | RootKind::DynGlobal | RootKind::GlobalRoot | RootKind::GenerationalRoot => 1,
        RootKind::Stack | RootKind::Register | RootKind::LocalRoot => 3,
        _ => 2,
    }
}

/// The roots that reach one top object: those of the most stable kind that does.
/// Inline, not a vector of names: there is one per top object, and a million of them is usual.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reach {
    /// Stability of the roots named (`u8::MAX`: none yet).
    rank: u8,
    /// How many of `ids` are names.
    len: u8,
    /// More roots of that rank reach it than are named.
    more: bool,
    /// Root names (ids), sorted: the first `len`.
    ids: [u32; MAX_NAMES],
}

impl Reach {
    fn none() -> Reach {
        Reach { rank: u8::MAX, len: 0, more: false, ids: [0; MAX_NAMES] }
    }

    fn one(rank: u8, id: u32) -> Reach {
        let mut reach = Reach { rank, ..Reach::none() };
        reach.add(id);
        reach
    }

    /// Root names (ids), sorted; at most [`MAX_NAMES`].
    fn names(&self) -> &[u32] {
        &self.ids[..self.len as usize]
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
        for &n in from.names() {
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
        let Err(i) = self.names().binary_search(&name) else { return false };
        if i >= MAX_NAMES {
            let changed = !self.more;
            self.more = true;
            return changed;
        }
        let len = self.len as usize;
        if len == MAX_NAMES {
            // The largest name makes room.
            self.more = true;
        } else {
            self.len += 1;
        }
        self.ids.copy_within(i..len.min(MAX_NAMES - 1), i + 1);
        self.ids[i] = name;
        true
    }
}

/// The names of the top objects, and each root's retained bytes, alone and shared.
pub struct Retainers {
    /// Root names (`Cache_leak.1`, `stack camlFoo.bar_12`), by id.
    pub names: Vec<String>,
    /// The distinct labels of the top objects (`Cache_leak.1`, `Hashtbl shared by 14 globals
    /// of Foo`).
    pub labels: Vec<String>,
    /// Per label: every root it stands for, sorted, and whether that list is whole (false when
    /// the walk up to the roots ran out of budget: then the roots named are the first ones).
    pub label_roots: Vec<LabelRoots>,
    /// The top objects' preorder numbers, ascending: top object `s` (its slot) is `tops[s]`.
    /// Nothing here is per reachable node (a million top objects is usual, ten million nodes
    /// too): [`top_slots`] finds every node's top object again for the one grouping that needs it.
    tops: Vec<u32>,
    /// By slot: the top object's label (an index in `labels`), else [`NO_LABEL`].
    slot_label: Vec<u32>,
    /// Per root name: the bytes of the top objects only it reaches, and of those it shares.
    pub per_root: Vec<RootShare>,
}

impl Retainers {
    /// Millions of top objects are usual (every item of a table that two globals reach): they
    /// are numbered densely, and their labels interned, so that nothing here is per-object
    /// hashing or a string per object.
    ///
    /// `kind_of` gives a node's kind from every block's kind, found once per analysis: the labels of shared memory say
    /// what their members are (`Hashtbl shared by ...`), and a million shared top objects are
    /// usual.
    pub fn compute(
        snap: &Snapshot,
        graph: &HeapGraph<'_>,
        tree: &DominatorTree,
        root_names: &Names<'_>,
        kind_of: impl Fn(NodeId) -> Option<GroupKey>,
    ) -> Retainers {
        let timer = crate::progress::PhaseTimer::start("roots' reach");
        let first_block = graph.blocks.first_block_node;
        let (top_slot, tops) = top_slots(tree, first_block);
        timer.lap("top objects");
        let RootHolders { names, name_rank, held, mut holders } = RootHolders::find(snap, graph, tree, root_names, &top_slot, &tops);
        let parts = crossing_edges(graph, tree, first_block, &top_slot, &tops);
        // Every node's top object is known by its subtree from here on: the per-node array
        // goes before the per-top-object ones come, and its pages with it. Whether the
        // allocator could reuse its place for them depended on where the parts above had
        // landed beside it (the threads' timing): when it could not, both stayed resident.
        drop(top_slot);
        crate::mem::release_free_memory();
        timer.lap(&format!("crossing edges ({}, {} top objects)", parts.iter().map(Vec::len).sum::<usize>(), tops.len()));
        let crossing = SubtreeGraph::from_parts(parts, tops.len());
        let mut reach: Vec<Reach> = vec![Reach::none(); tops.len()];
        for &(s, id) in &holders {
            reach[s as usize].absorb(&Reach::one(name_rank[id as usize], id));
        }
        timer.lap("crossing edges sorted");
        let (order, passes) = propagate(&mut reach, held, &crossing);
        timer.lap(&format!("propagated ({passes} passes)"));
        let interned = InternedLabels::of(&reach, &tops, tree, kind_of);
        timer.lap("labels interned");
        // The whole list of roots of each label that names only some: the roots (of the label's
        // rank) that reach any of its members, found up the subtree graph from them.
        let partial_labels = interned.sets.iter().filter(|set| set.more).count();
        let mut budget = UP_WALK_BUDGET;
        let full_lists = if partial_labels == 0 {
            interned.sets.iter().map(|set| Some(set.names().to_vec())).collect::<Vec<_>>()
        } else {
            holders.sort_unstable();
            holders.dedup();
            let reach_up = RootsUp { crossing: &crossing, holders: &holders, reach: &reach, order: &order, name_rank: &name_rank };
            reach_up.full_lists(&interned, &mut budget)
        };
        timer.lap(&format!("full lists ({partial_labels} labels naming only some; {} steps up)", UP_WALK_BUDGET - budget));
        let InternedLabels { sets: label_sets, bytes: label_bytes, kinds: label_kind, mut slot_label, .. } = interned;
        // Each label's roots in the order of their names, by the names' ranks in that order
        // (thousands of lists, some of thousands of roots: no text compared but once).
        let text_rank = ranks_in_text_order(&names);
        let label_roots: Vec<LabelRootIds> = label_sets
            .iter()
            .zip(&full_lists)
            .map(|(set, full)| {
                let mut list = full.as_deref().unwrap_or(set.names()).to_vec();
                list.sort_unstable_by_key(|&n| text_rank[n as usize]);
                (list, full.is_some())
            })
            .collect();
        let labels: Vec<String> = label_sets
            .iter()
            .zip(&label_roots)
            .zip(&label_kind)
            .map(|((set, (list, whole)), kind)| match (set.names(), set.more) {
                ([one], false) => names[*one as usize].clone(),
                _ => shared_label(&names, set, list, *whole, &kind.name(root_names)),
            })
            .collect();
        let (labels, label_roots, merged_into) = one_label_per_name(labels, label_roots, &names, &text_rank);
        for l in slot_label.iter_mut().filter(|l| **l != NO_LABEL) {
            *l = merged_into[*l as usize];
        }
        let per_root = root_shares(&names, &label_sets, &label_bytes);
        Retainers { names, labels, label_roots, tops, slot_label, per_root }
    }

    /// The top objects' preorder numbers, ascending (a top object's index here is its slot).
    pub fn tops(&self) -> &[u32] {
        &self.tops
    }

    /// The label of the top object in `slot` as an index in `labels`; None when no root
    /// names it.
    pub fn slot_label(&self, slot: u32) -> Option<u32> {
        self.slot_label.get(slot as usize).copied().filter(|&l| l != NO_LABEL)
    }

    /// The label of a top object (by preorder number) as an index in `labels`; None for other
    /// nodes and for top objects no root names.
    pub fn label_id(&self, p: u32) -> Option<u32> {
        self.slot_label(self.tops.binary_search(&p).ok()? as u32)
    }

    /// The label of a top object (by node): its most stable roots.
    pub fn label(&self, tree: &DominatorTree, v: NodeId) -> Option<&str> {
        let p = *tree.pre_of.get(v as usize)?;
        self.label_id(p).map(|l| self.labels[l as usize].as_str())
    }
}

/// The names of the roots that hold a top object directly, and which they hold.
struct RootHolders {
    /// Root names, by id.
    names: Vec<String>,
    /// Per name id: its stability ([`stability_of`]).
    name_rank: Vec<u8>,
    /// The slots of the top objects some root holds directly (repeated once per root).
    held: Vec<u32>,
    /// (top object's slot, root name id) for every root that holds a top object itself.
    holders: Vec<(u32, u32)>,
}

impl RootHolders {
    fn find(
        snap: &Snapshot,
        graph: &HeapGraph<'_>,
        tree: &DominatorTree,
        root_names: &Names<'_>,
        top_slot: &[u32],
        tops: &[u32],
    ) -> RootHolders {
        let mut holders_found = RootHolders { names: Vec::new(), name_rank: Vec::new(), held: Vec::new(), holders: Vec::new() };
        let mut name_ids: FxHashMap<String, u32> = FxHashMap::default();
        for edge in &graph.roots {
            let p = tree.pre_of[edge.node as usize];
            if p == NO_NODE {
                continue;
            }
            let Some(s) = slot_of_top(top_slot, tops, p) else { continue };
            let record = &snap.roots()[edge.record as usize];
            let label = root_names.root_label(record);
            let rank = stability_of(snap, record);
            let RootHolders { names, name_rank, held, holders } = &mut holders_found;
            let id = *name_ids.entry(label.clone()).or_insert_with(|| {
                names.push(label);
                name_rank.push(rank);
                names.len() as u32 - 1
            });
            held.push(s);
            holders.push((s, id));
        }
        holders_found
    }
}

/// The slot of the node numbered `p` in preorder when it is a top object itself.
fn slot_of_top(top_slot: &[u32], tops: &[u32], p: u32) -> Option<u32> {
    Some(top_slot[p as usize]).filter(|&s| s != NO_LABEL && tops[s as usize] == p)
}

/// The subtree graph's edges, `top(u) -> w` for every edge `u -> w` into another subtree, in
/// parts to be sorted into adjacency lists by slot.
///
/// In a fixed number of parts, copied once into a list of the exact size: folding into
/// vectors merged pairwise would hold several growing copies of it at once. By node, not by
/// preorder number: a node's edges, and mostly their targets, are next to the node before's
/// in the snapshot's address order.
fn crossing_edges(
    graph: &HeapGraph<'_>,
    tree: &DominatorTree,
    first_block: NodeId,
    top_slot: &[u32],
    tops: &[u32],
) -> Vec<Vec<(u32, u32)>> {
    const PARTS: usize = 64;
    let n = tree.pre_of.len();
    let blocks = n.saturating_sub(first_block as usize);
    (0..PARTS)
        .into_par_iter()
        .map(|i| {
            let mut out = Vec::new();
            for u in (first_block as usize + blocks * i / PARTS)..(first_block as usize + blocks * (i + 1) / PARTS) {
                let p = tree.pre_of[u];
                if p == NO_NODE {
                    continue;
                }
                let from = top_slot[p as usize];
                for &w in graph.successors(u as u32) {
                    let q = tree.pre_of[w as usize];
                    if q != NO_NODE {
                        if let Some(to) = slot_of_top(top_slot, tops, q).filter(|&to| to != from) {
                            out.push((from, to));
                        }
                    }
                }
            }
            out
        })
        .collect()
}

/// Passes each top object's roots on along the subtree graph until nothing changes; the order
/// it passes them in (reverse postorder from the held top objects) and how many passes it took.
///
/// Each set only grows or improves its rank, so this ends, and absorbing is a join (the
/// smallest names of the best rank, and whether there are more), so the sets it ends with do
/// not depend on the order. In reverse postorder from the holders, a node's sets have come in
/// from all but its back edges when it passes them on: each pass over the dirty nodes is close
/// to the last, where a stack of changes passed each one on as often as it grew.
fn propagate(reach: &mut [Reach], mut held: Vec<u32>, crossing: &SubtreeGraph) -> (Vec<u32>, usize) {
    let next = |s: u32| crossing.next(s).iter().copied();
    held.sort_unstable();
    held.dedup();
    let order = reverse_postorder(&held, reach.len(), next);
    let mut dirty = vec![false; reach.len()];
    for &h in &held {
        dirty[h as usize] = true;
    }
    let mut pending = held.len();
    let mut passes = 0;
    while pending > 0 {
        passes += 1;
        for &t in &order {
            if !std::mem::take(&mut dirty[t as usize]) {
                continue;
            }
            pending -= 1;
            let from = reach[t as usize];
            for s in next(t) {
                if reach[s as usize].absorb(&from) && !std::mem::replace(&mut dirty[s as usize], true) {
                    pending += 1;
                }
            }
        }
    }
    (order, passes)
}

/// The top objects' labels, interned by the set of names they list, with the bytes and the
/// kind of what each label stands for. Their text is made once every member is known: it
/// names what the members are.
struct InternedLabels {
    /// Per label: the roots it names.
    sets: Vec<Reach>,
    /// Per label: the bytes its top objects retain.
    bytes: Vec<u64>,
    /// Per label naming more than one root: what its top objects are.
    kinds: Vec<MemberKind>,
    /// Per label that names only some of its roots (`more`): its members' slots.
    members: Vec<Vec<u32>>,
    /// By slot: the top object's label, else [`NO_LABEL`].
    slot_label: Vec<u32>,
}

impl InternedLabels {
    fn of(reach: &[Reach], tops: &[u32], tree: &DominatorTree, kind_of: impl Fn(NodeId) -> Option<GroupKey>) -> InternedLabels {
        let preorder = tree.preorder();
        let mut interned = InternedLabels {
            sets: Vec::new(),
            bytes: Vec::new(),
            kinds: Vec::new(),
            members: Vec::new(),
            slot_label: vec![NO_LABEL; tops.len()],
        };
        let mut label_ids: FxHashMap<(Vec<u32>, bool), u32> = FxHashMap::default();
        let mut last: Option<(usize, u32)> = None;
        for (s, set) in reach.iter().enumerate() {
            if set.rank == u8::MAX {
                continue;
            }
            // Neighbouring top objects are often named alike: skip the hash then.
            let id = match last {
                Some((l, id)) if reach[l].names() == set.names() && reach[l].more == set.more => id,
                _ => *label_ids.entry((set.names().to_vec(), set.more)).or_insert_with(|| {
                    interned.sets.push(*set);
                    interned.bytes.push(0);
                    interned.kinds.push(MemberKind::None);
                    interned.members.push(Vec::new());
                    interned.sets.len() as u32 - 1
                }),
            };
            last = Some((s, id));
            let node = preorder[tops[s] as usize];
            interned.slot_label[s] = id;
            interned.bytes[id as usize] += tree.retained(node);
            if (set.names().len() > 1 || set.more) && interned.kinds[id as usize] != MemberKind::Mixed {
                interned.kinds[id as usize].add(kind_of(node));
            }
            if set.more {
                interned.members[id as usize].push(s as u32);
            }
        }
        interned
    }
}

/// What finding every root of the labels that name only some needs.
struct RootsUp<'a> {
    crossing: &'a SubtreeGraph,
    /// (top object's slot, root name id), sorted, without repeats.
    holders: &'a [(u32, u32)],
    reach: &'a [Reach],
    order: &'a [u32],
    name_rank: &'a [u8],
}

impl RootsUp<'_> {
    /// Per label: every root of its rank that reaches it, or None when the walk up ran out of
    /// `budget`; the labels that name all their roots keep their own list.
    fn full_lists(&self, labels: &InternedLabels, budget: &mut u64) -> Vec<Option<Vec<u32>>> {
        let tops = self.reach.len();
        let reverse = SubtreeGraph::from_parts(vec![self.crossing.pairs().map(|(from, to)| (to, from)).collect()], tops);
        let holder_starts = starts_by_slot(self.holders.iter().map(|&(slot, _)| slot), tops);
        let up = UpGraph { reverse: &reverse, holders: self.holders, holder_starts: &holder_starts };
        let partial: Vec<u32> = (0..labels.sets.len() as u32).filter(|&id| labels.sets[id as usize].more).collect();
        let mut found = up.roots_reaching(&partial, &labels.sets, &labels.members, self.reach, self.order, budget);
        labels
            .sets
            .iter()
            .enumerate()
            .map(|(id, set)| {
                if !set.more {
                    return Some(set.names().to_vec());
                }
                let mut list = found.remove(&(id as u32)).flatten()?;
                list.retain(|&n| self.name_rank[n as usize] == set.rank);
                Some(list)
            })
            .collect()
    }
}

/// Per root name: the bytes of the top objects only it reaches, those it shares, and with whom;
/// the largest first.
fn root_shares(names: &[String], label_sets: &[Reach], label_bytes: &[u64]) -> Vec<RootShare> {
    let mut alone = vec![0u64; names.len()];
    let mut shared = vec![0u64; names.len()];
    let mut partners: Vec<FxHashSet<u32>> = vec![FxHashSet::default(); names.len()];
    for (set, &bytes) in label_sets.iter().zip(label_bytes) {
        match set.names() {
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
    per_root
}

/// The slot of every reachable node's top object (the top of its chain of dominators below the
/// super-root and the root kinds), by preorder number ([`NO_LABEL`] for those), and the top
/// objects' preorder numbers by slot: numbered densely as met in preorder (dominators come
/// first), so ascending.
pub fn top_slots(tree: &DominatorTree, first_block: NodeId) -> (Vec<u32>, Vec<u32>) {
    let preorder = tree.preorder();
    let r = tree.reachable_count();
    let mut top_slot = vec![NO_LABEL; r];
    let mut tops: Vec<u32> = Vec::new();
    for p in 1..r {
        let d = tree.idom_pre[p] as usize;
        if preorder[d] >= first_block {
            top_slot[p] = top_slot[d];
        } else if preorder[p] >= first_block {
            top_slot[p] = tops.len() as u32;
            tops.push(p as u32);
        }
    }
    (top_slot, tops)
}

/// Where each slot's entries start in a list of them sorted by slot (`slot_of_each`: their
/// slots, in any order, each below `slots`), and past the last, where they end: slot `s`'s are
/// `starts[s]..starts[s + 1]`.
fn starts_by_slot(slot_of_each: impl Iterator<Item = u32>, slots: usize) -> Vec<u32> {
    let mut starts = vec![0u32; slots + 1];
    for slot in slot_of_each {
        starts[slot as usize + 1] += 1;
    }
    for i in 0..slots {
        starts[i + 1] += starts[i];
    }
    starts
}

/// The subtree graph: each top object's successors (by slot), ascending and distinct.
struct SubtreeGraph {
    /// Slot `s`'s successors are `targets[starts[s]..starts[s + 1]]`.
    starts: Vec<u32>,
    targets: Vec<u32>,
}

impl SubtreeGraph {
    /// From `(from, to)` pairs in any order and with repeats, by slot below `slots`: placed
    /// by a count of each slot's (no sort of millions of pairs), then each slot's few sorted.
    fn from_parts(parts: Vec<Vec<(u32, u32)>>, slots: usize) -> SubtreeGraph {
        let mut starts = starts_by_slot(parts.iter().flatten().map(|&(from, _)| from), slots);
        let mut targets = vec![0u32; starts[slots] as usize];
        // Filled from each slot's end, so that `starts[s + 1]` comes down to `s`'s start.
        for &(from, to) in parts.iter().flatten().rev() {
            let end = &mut starts[from as usize + 1];
            *end -= 1;
            targets[*end as usize] = to;
        }
        drop(parts);
        starts.copy_within(1.., 0);
        starts[slots] = targets.len() as u32;
        // Each slot's successors sorted, in pieces of whole slots on every core.
        let pieces = rayon::current_num_threads() * 8;
        let mut rest: &mut [u32] = &mut targets;
        let mut at = 0usize;
        let mut jobs: Vec<(usize, usize, &mut [u32])> = Vec::with_capacity(pieces);
        for i in 1..=pieces {
            let slot_end = slots * i / pieces;
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(starts[slot_end] as usize - at);
            jobs.push((slots * (i - 1) / pieces, slot_end, mine));
            at = starts[slot_end] as usize;
            rest = tail;
        }
        let base = &starts;
        jobs.into_par_iter().for_each(|(first, last, piece)| {
            let offset = base[first] as usize;
            for s in first..last {
                piece[base[s] as usize - offset..base[s + 1] as usize - offset].sort_unstable();
            }
        });
        // Repeats out, moving each slot's successors down.
        let mut kept = 0usize;
        for s in 0..slots {
            let (from, to) = (starts[s] as usize, starts[s + 1] as usize);
            starts[s] = kept as u32;
            let mut last = None;
            for i in from..to {
                let t = targets[i];
                if last != Some(t) {
                    targets[kept] = t;
                    kept += 1;
                    last = Some(t);
                }
            }
        }
        starts[slots] = kept as u32;
        targets.truncate(kept);
        SubtreeGraph { starts, targets }
    }

    fn next(&self, s: u32) -> &[u32] {
        &self.targets[self.starts[s as usize] as usize..self.starts[s as usize + 1] as usize]
    }

    /// Every `(from, to)` edge.
    fn pairs(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..self.starts.len().saturating_sub(1) as u32).flat_map(move |s| self.next(s).iter().map(move |&t| (s, t)))
    }
}

/// The nodes reachable from `starts` in `slots` nodes, in reverse postorder of a depth-first
/// search along `next` (iterative: chains of subtrees are millions long).
fn reverse_postorder<I: Iterator<Item = u32>>(starts: &[u32], slots: usize, next: impl Fn(u32) -> I) -> Vec<u32> {
    let mut visited = vec![false; slots];
    let mut post: Vec<u32> = Vec::new();
    let mut stack: Vec<(u32, I)> = Vec::new();
    for &start in starts {
        if std::mem::replace(&mut visited[start as usize], true) {
            continue;
        }
        stack.push((start, next(start)));
        while let Some((node, successors)) = stack.last_mut() {
            match successors.find(|&s| !visited[s as usize]) {
                Some(s) => {
                    visited[s as usize] = true;
                    stack.push((s, next(s)));
                }
                None => {
                    post.push(*node);
                    stack.pop();
                }
            }
        }
    }
    post.reverse();
    post
}

/// Steps of the walks up the subtree graph that list every root of the labels naming only
/// some of theirs; past it, those labels name the roots they know.
const UP_WALK_BUDGET: u64 = 50_000_000;

/// What the members of a label are: none yet, all of one kind, or of several kinds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MemberKind {
    None,
    One(Option<GroupKey>),
    Mixed,
}

impl MemberKind {
    fn add(&mut self, key: Option<GroupKey>) {
        *self = match *self {
            MemberKind::None => MemberKind::One(key),
            MemberKind::One(k) if k == key => MemberKind::One(k),
            _ => MemberKind::Mixed,
        };
    }

    /// `Hashtbl`, `block tag 0 size 4`; `objects` for members of several kinds.
    fn name(self, names: &Names<'_>) -> String {
        match self {
            MemberKind::One(Some(k)) => crate::kinds::key_name(names, &k),
            _ => "objects".to_string(),
        }
    }
}

/// The subtree graph reversed (who reaches each top object), and the roots holding each.
struct UpGraph<'a> {
    /// Each top object's predecessors.
    reverse: &'a SubtreeGraph,
    /// `(slot, root name)` pairs, sorted, `holder_starts` their offsets by slot (a walk meets
    /// many slots: no search for each).
    holders: &'a [(u32, u32)],
    holder_starts: &'a [u32],
}

impl UpGraph<'_> {
    /// For each label of `partial` (their sets in `sets`, their members in `members`): the
    /// roots of the label's stability that reach any of its members, sorted; `None` when
    /// `budget` (steps up) ran out before its turn came or during it. `reach` holds every top
    /// object's set, `order` the top objects they reach in reverse postorder.
    ///
    /// A root reaches a member through the sets above it, so the walk goes up only through
    /// the sets of the label's stability that name some of their roots: a set of a worse
    /// stability has none of it above it, one that names all of its roots lists them. The
    /// labels of one stability walk together, up to [`MASK_WORDS_BUDGET`] at once: each top
    /// object met carries a bit per label, passed up (descendants first) until no bit moves.
    fn roots_reaching(
        &self,
        partial: &[u32],
        sets: &[Reach],
        members: &[Vec<u32>],
        reach: &[Reach],
        order: &[u32],
        budget: &mut u64,
    ) -> FxHashMap<u32, Option<Vec<u32>>> {
        let slots = reach.len();
        let mut by_rank: Vec<u32> = partial.to_vec();
        by_rank.sort_by_key(|&id| (sets[id as usize].rank, id));
        let words_at_once = (MASK_WORDS_BUDGET / slots.max(1)).max(1);
        let mut out: FxHashMap<u32, Option<Vec<u32>>> = FxHashMap::default();
        let mut rest = by_rank.as_slice();
        while let Some(&first) = rest.first() {
            let rank = sets[first as usize].rank;
            let same = rest.iter().take_while(|&&id| sets[id as usize].rank == rank).count().min(words_at_once * 64);
            let (batch, later) = rest.split_at(same);
            rest = later;
            let lists = self.walk_batch(batch, rank, members, reach, order, budget);
            for (&id, list) in batch.iter().zip(lists) {
                out.insert(id, list);
            }
        }
        out
    }

    /// [`UpGraph::roots_reaching`] for labels of one stability, at most 64 times as many as the
    /// words of their bits.
    fn walk_batch(
        &self,
        batch: &[u32],
        rank: u8,
        members: &[Vec<u32>],
        reach: &[Reach],
        order: &[u32],
        budget: &mut u64,
    ) -> Vec<Option<Vec<u32>>> {
        let words = batch.len().div_ceil(64);
        let slots = reach.len();
        if *budget == 0 {
            return vec![None; batch.len()];
        }
        let mut masks = vec![0u64; slots * words];
        let mut dirty = vec![false; slots];
        let mut pending = 0usize;
        for (j, &id) in batch.iter().enumerate() {
            for &m in &members[id as usize] {
                masks[m as usize * words + j / 64] |= 1 << (j % 64);
                if !std::mem::replace(&mut dirty[m as usize], true) {
                    pending += 1;
                }
            }
        }
        while pending > 0 {
            let before = pending;
            for &s in order.iter().rev() {
                if !std::mem::take(&mut dirty[s as usize]) {
                    continue;
                }
                pending -= 1;
                let set = &reach[s as usize];
                if set.rank != rank || !set.more {
                    continue;
                }
                for &from in self.reverse.next(s) {
                    let Some(left) = budget.checked_sub(1) else { return vec![None; batch.len()] };
                    *budget = left;
                    if reach[from as usize].rank != rank {
                        continue;
                    }
                    let (s, from) = (s as usize * words, from as usize * words);
                    let mut grew = false;
                    for w in 0..words {
                        let bits = masks[s + w] & !masks[from + w];
                        masks[from + w] |= bits;
                        grew |= bits != 0;
                    }
                    if grew && !std::mem::replace(&mut dirty[from / words], true) {
                        pending += 1;
                    }
                }
            }
            // Every set is in `order` (sets come down from the holders along it): a pass that
            // cleared none would mean one is not, and the walk would never end.
            if pending == before && order.iter().all(|&s| !dirty[s as usize]) {
                // A bug, not a property of the heap: said in every build, and these labels keep
                // the partial lists a spent budget leaves them (marked as naming only some).
                eprintln!(
                    "heapsnap: warning: internal error: a top object with a set is not in the order of the walk; {} retainer labels list only some of their roots",
                    batch.len()
                );
                return vec![None; batch.len()];
            }
        }
        // Each label's roots: those that hold the sets it met that name some (which the walk
        // went through), and the names of the sets that name all.
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); batch.len()];
        for s in 0..slots {
            let mask = &masks[s * words..(s + 1) * words];
            if mask.iter().all(|&w| w == 0) {
                continue;
            }
            let set = &reach[s];
            let held = &self.holders[self.holder_starts[s] as usize..self.holder_starts[s + 1] as usize];
            for (w, &bits) in mask.iter().enumerate() {
                let mut bits = bits;
                while bits != 0 {
                    let j = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if set.more {
                        lists[j].extend(held.iter().map(|&(_, n)| n));
                    } else {
                        lists[j].extend_from_slice(set.names());
                    }
                }
            }
        }
        lists
            .into_iter()
            .map(|mut list| {
                list.sort_unstable();
                list.dedup();
                Some(list)
            })
            .collect()
    }
}

/// How many words of label bits the walks up to the roots hold at once, over all top objects
/// (a word per top object for each 64 labels): 32 MiB.
const MASK_WORDS_BUDGET: usize = 4 << 20;

/// Every root a label stands for, sorted, and whether the list is whole.
type LabelRoots = (Vec<String>, bool);

/// [`LabelRoots`] as ids in the root names, sorted by their text.
type LabelRootIds = (Vec<u32>, bool);

/// Each name's place among `names` in text order (names are distinct).
fn ranks_in_text_order(names: &[String]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..names.len() as u32).collect();
    order.sort_unstable_by(|&x, &y| names[x as usize].cmp(&names[y as usize]));
    let mut rank = vec![0u32; names.len()];
    for (i, &n) in order.iter().enumerate() {
        rank[n as usize] = i as u32;
    }
    rank
}

/// Labels such that one name stands for one list of roots: labels of the same roots (sets
/// that kept different first names) become one; labels that name different roots alike
/// (`objects shared by 5 globals of Foo`, twice) each add their roots (the first 5, then how
/// many more). Deterministic: it depends on the lists, not on the order labels were met in.
/// `roots` are ids in `names`, sorted by `text_rank` ([`ranks_in_text_order`]). Returns the
/// labels, their roots, and each old label's new id.
fn one_label_per_name(
    labels: Vec<String>,
    roots: Vec<LabelRootIds>,
    names: &[String],
    text_rank: &[u32],
) -> (Vec<String>, Vec<LabelRoots>, Vec<u32>) {
    let mut lists_of: FxHashMap<&str, Vec<&[u32]>> = FxHashMap::default();
    for (label, (list, _)) in labels.iter().zip(&roots) {
        let lists = lists_of.entry(label.as_str()).or_default();
        if !lists.contains(&list.as_slice()) {
            lists.push(list);
        }
    }
    const LISTED: usize = 5;
    let named: Vec<String> = labels
        .iter()
        .zip(&roots)
        .map(|(label, (list, _))| {
            if lists_of[label.as_str()].len() < 2 {
                return label.clone();
            }
            let more = if list.len() > LISTED { format!(", ... {} more", list.len() - LISTED) } else { String::new() };
            let first: Vec<&str> = list.iter().take(LISTED).map(|&n| names[n as usize].as_str()).collect();
            format!("{label} [{}{more}]", first.join(", "))
        })
        .collect();
    let mut ids: FxHashMap<&str, u32> = FxHashMap::default();
    let mut out_labels: Vec<String> = Vec::new();
    let mut out_roots: Vec<LabelRootIds> = Vec::new();
    let mut merged_into = Vec::with_capacity(named.len());
    for (label, (list, complete)) in named.iter().zip(&roots) {
        let id = *ids.entry(label.as_str()).or_insert_with(|| {
            out_labels.push(label.clone());
            out_roots.push((Vec::new(), true));
            out_labels.len() as u32 - 1
        });
        // Still alike (the same first roots and count): their roots together.
        let (all, all_complete) = &mut out_roots[id as usize];
        all.extend_from_slice(list);
        all.sort_unstable_by_key(|&n| text_rank[n as usize]);
        all.dedup();
        *all_complete &= complete;
        merged_into.push(id);
    }
    let out_roots =
        out_roots.into_iter().map(|(list, complete)| (list.iter().map(|&n| names[n as usize].clone()).collect(), complete)).collect();
    (out_labels, out_roots, merged_into)
}

/// The group a root name belongs to in a shared label: a global's module, another root's kind.
fn group_of(name: &str) -> &str {
    let separator = if name.contains(' ') { ' ' } else { '.' };
    name.split(separator).next().unwrap_or(name)
}

/// A label for top objects several roots reach, naming what they are and who shares them:
/// `Hashtbl shared by Foo.a, Bar.b`, `objects shared by 14 globals of Foo`, `list cell shared by
/// 9 roots: Foo (5), Bar (4)`. `sorted`: the roots in text order, every one when `whole`; else
/// the label names the roots it knows (the first six) and says there are more. It depends on
/// the roots and the members' kind only, not on sizes, so that snapshots of a growing heap name
/// their shared memory alike.
fn shared_label(names: &[String], set: &Reach, sorted: &[u32], whole: bool, what: &str) -> String {
    let list: Vec<&str> = sorted.iter().map(|&n| names[n as usize].as_str()).collect();
    if !whole {
        return format!("{what} shared by more than {} roots: {}, ...", list.len(), list.join(", "));
    }
    if list.len() <= 3 {
        return format!("{what} shared by {}", list.join(", "));
    }
    // Globals are `Module.field`; other roots are `kind name`: grouped by kind.
    let globals = set.rank <= stability(RootKind::Global) && list.iter().all(|n| !n.contains(' '));
    let who = if globals { "globals" } else { "roots" };
    // Counted by name: a label may stand for thousands of roots of hundreds of modules.
    let mut counts: rustc_hash::FxHashMap<&str, usize> = Default::default();
    for n in &list {
        *counts.entry(group_of(n)).or_default() += 1;
    }
    let mut groups: Vec<(&str, usize)> = counts.into_iter().collect();
    if let [(group, _)] = groups.as_slice() {
        return format!("{what} shared by {} {who} of {group}", list.len());
    }
    groups.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(y.0)));
    const SHOWN: usize = 3;
    let shown: Vec<String> = groups.iter().take(SHOWN).map(|(g, k)| format!("{g} ({k})")).collect();
    let rest = if groups.len() > SHOWN { format!(", {} more", groups.len() - SHOWN) } else { String::new() };
    format!("{what} shared by {} {who}: {}{rest}", list.len(), shown.join(", "))
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

#[cfg(test)]
mod tests {
    use super::{shared_label, stability, Reach, SubtreeGraph};
    use heapsnap_format::RootKind;

    #[test]
    fn a_shared_label_counts_the_roots_of_each_module_largest_first_then_by_name() {
        // Modules by count (C 3, then A and B 2 each, by name), the fourth and fifth as "more".
        let names: Vec<String> = ["A.x", "A.y", "B.x", "B.y", "C.x", "C.y", "C.z", "D.x", "E.x"].map(String::from).to_vec();
        let set = Reach { rank: stability(RootKind::Global), ..Reach::none() };
        let all: Vec<u32> = (0..names.len() as u32).collect();
        assert_eq!(shared_label(&names, &set, &all, true, "list cell"), "list cell shared by 9 globals: C (3), A (2), B (2), 2 more");
        assert_eq!(shared_label(&names, &set, &all[4..7], true, "list cell"), "list cell shared by C.x, C.y, C.z");
        assert_eq!(shared_label(&names, &set, &[0, 1, 4, 5], true, "Hashtbl"), "Hashtbl shared by 4 globals: A (2), C (2)");
        assert_eq!(shared_label(&names, &set, &[4, 5, 6, 7], true, "x").split(':').nth(1), Some(" C (3), D (1)"));
        // Ties, whatever order the roots are counted in.
        let one_each: Vec<String> = ["Q", "K", "W", "B", "Z", "M", "A", "T"].iter().map(|m| format!("{m}.x")).collect();
        let every: Vec<u32> = (0..one_each.len() as u32).collect();
        assert_eq!(shared_label(&one_each, &set, &every, true, "x"), "x shared by 8 globals: A (1), B (1), K (1), 5 more");
    }

    #[test]
    fn the_subtree_graph_lists_each_slots_successors_once_in_order() {
        // Pairs from several parts, out of order and repeated, slot 2 with none, slot 4 the
        // last.
        let parts = vec![vec![(3, 1), (0, 4), (3, 0), (0, 1)], vec![], vec![(0, 4), (1, 3), (3, 1), (4, 0), (0, 2)]];
        let graph = SubtreeGraph::from_parts(parts, 5);
        assert_eq!(graph.next(0), [1, 2, 4]);
        assert_eq!(graph.next(1), [3]);
        assert!(graph.next(2).is_empty());
        assert_eq!(graph.next(3), [0, 1]);
        assert_eq!(graph.next(4), [0]);
        assert_eq!(graph.pairs().collect::<Vec<_>>(), [(0, 1), (0, 2), (0, 4), (1, 3), (3, 0), (3, 1), (4, 0)]);
        // More slots than pieces of the parallel sort, most without successors.
        let many = SubtreeGraph::from_parts(vec![(0..1000u32).rev().map(|s| (s, 999 - s)).chain([(999, 0), (7, 7)]).collect()], 1000);
        assert_eq!(many.next(7), [7, 992]);
        assert_eq!(many.next(999), [0]);
        assert_eq!(many.pairs().count(), 1001);
    }
}
