//! Which objects of a later snapshot are objects of an earlier one, so that they keep their
//! DevTools node ids (its Comparison view matches by id). Addresses do not tell: a compaction
//! moves blocks, and a freed block's address is reused. Objects are matched one to one, by the
//! way into them, as the diff matches places, and by what they hold, in this order:
//!
//! 1. **contents**: a block whose contents (its non-pointer words, every word of a string or a
//!    float) are found once in each snapshot (a key of a hash table, a record with a unique
//!    number);
//! 2. **roots**: a root record (`Cache_leak.1`) found once in both snapshots holds the same
//!    object;
//! 3. **fields**: field `i` of two matched objects holds the same object;
//! 4. **referrers**: two objects whose only referrers are matched, through the same field, are
//!    the same;
//! 5. **address**: a block at the address of an earlier one, when neither was matched otherwise
//!    (a block that did not move).
//!
//! Every match is extended at once through fields and referrers (3 and 4).
//! Two objects match only when they have the same tag and size, and, for blocks the GC does
//! not scan (strings, floats, custom blocks), the same contents. Rules 2, 3 and 5 also weigh
//! the evidence of the fields: a field agrees when its immediates are equal or both point to
//! objects matched with each other, and disagrees when its immediates differ or it points to
//! an object matched elsewhere; more must agree than disagree (rule 5: no more disagree), so
//! that a list that grew at its head is not matched cell by cell against the old one.
//! Each match extends the others (a matched object's fields and referrers are tried next).
//! What stays unmatched is a new object for DevTools: objects the baseline did not have, and
//! those that moved where no path, referrer or contents tell them apart (the cells of a list
//! whose items are all alike, after a compaction).

use heapsnap_analyze::{ocaml, root_label, Analysis, BlockRef, DominatorTree, HeapGraph, NodeId, PointsTo, NO_NODE};
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;
use xxhash_rust::xxh3::Xxh3;

/// How many objects each rule matched.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct MatchCounts {
    pub roots: u64,
    pub fields: u64,
    pub referrers: u64,
    pub contents: u64,
    pub address: u64,
}

impl MatchCounts {
    pub fn total(&self) -> u64 {
        self.roots + self.fields + self.referrers + self.contents + self.address
    }
}

/// For each node of the later snapshot, the earlier snapshot's node it is (`NO_NODE`: none).
pub struct Matching {
    pub old_of: Vec<NodeId>,
    pub counts: MatchCounts,
}

/// More than one referrer.
const MANY: NodeId = NO_NODE - 1;
/// The largest referrer matched through the field that points to a matched object.
const MAX_REFERRER_FIELDS: usize = 64;

/// One snapshot as matching reads it (its graph and tree: the analysis's names are not
/// shared between threads).
struct Side<'a, 's> {
    graph: &'a HeapGraph<'s>,
    tree: &'a DominatorTree,
    /// The only node with a strong edge to each node (`NO_NODE`: none, [`MANY`]: several).
    sole_referrer: Vec<NodeId>,
}

impl<'a, 's> Side<'a, 's> {
    fn new(g: &'a HeapGraph<'s>, tree: &'a DominatorTree) -> Self {
        let mut sole_referrer = vec![NO_NODE; g.node_count()];
        for u in g.blocks.first_block_node..g.node_count() as NodeId {
            for &t in g.successors(u) {
                let r = &mut sole_referrer[t as usize];
                *r = match *r {
                    NO_NODE => u,
                    x if x == u => u,
                    _ => MANY,
                };
            }
        }
        Side { graph: g, tree, sole_referrer }
    }

    fn block(&self, v: NodeId) -> Option<BlockRef<'s>> {
        self.graph.blocks.block(v).filter(|_| self.tree.is_reachable(v))
    }

    /// The node a field's word points to.
    fn target(&self, w: u64) -> Option<NodeId> {
        if !ocaml::is_pointer(w) {
            return None;
        }
        match self.graph.blocks.resolve(w) {
            PointsTo::Node(t) => Some(t),
            _ => None,
        }
    }
}

/// Whether two blocks can be one object: the same tag and size, and for blocks the GC does not
/// scan, the same words.
fn compatible(x: &BlockRef<'_>, y: &BlockRef<'_>) -> bool {
    x.header.tag == y.header.tag && x.header.wosize == y.header.wosize && (x.header.tag < ocaml::NO_SCAN_TAG || x.fields == y.fields)
}

/// A hash of what a block holds besides pointers to other blocks (None: nothing, so it cannot
/// tell one block from another of its size).
fn contents_key(side: &Side<'_, '_>, b: &BlockRef<'_>) -> Option<u64> {
    let scanned = b.header.tag < ocaml::NO_SCAN_TAG;
    let mut h = Xxh3::new();
    h.update(&[b.header.tag]);
    h.update(&b.header.wosize.to_le_bytes());
    let mut informative = !scanned;
    for &w in b.fields {
        let word = if scanned && side.target(w).is_some() { 0 } else { w };
        informative |= word != 0 && word != 1;
        h.update(&word.to_le_bytes());
    }
    informative.then(|| h.digest())
}

/// The contents keys found once in a snapshot, with their node, sorted by key.
fn unique_contents(side: &Side<'_, '_>, order: &[NodeId]) -> Vec<(u64, NodeId)> {
    let mut keys: Vec<(u64, NodeId)> = order
        .par_chunks(1 << 14)
        .flat_map_iter(|nodes| {
            let mut out = Vec::new();
            super::sweep::for_each_block(&side.graph.blocks, nodes, |_, b| {
                if let Some(key) = contents_key(side, &b) {
                    out.push((key, b.node));
                }
            });
            out
        })
        .collect();
    keys.par_sort_unstable();
    let mut unique = Vec::with_capacity(keys.len());
    let mut i = 0;
    while i < keys.len() {
        let mut j = i + 1;
        while j < keys.len() && keys[j].0 == keys[i].0 {
            j += 1;
        }
        if j == i + 1 {
            unique.push(keys[i]);
        }
        i = j;
    }
    unique
}

/// Strong root records found once by name, and the block each holds.
fn unique_roots(a: &Analysis<'_>) -> FxHashMap<String, Option<NodeId>> {
    let mut by_label: FxHashMap<String, Option<NodeId>> = FxHashMap::default();
    for r in a.snap.roots() {
        if r.is_weak() || !ocaml::is_pointer(r.value) {
            continue;
        }
        let PointsTo::Node(t) = a.graph.blocks.resolve(r.value) else { continue };
        by_label.entry(root_label(a.snap, r)).and_modify(|e| *e = None).or_insert(Some(t));
    }
    by_label
}

struct Matcher<'a, 's> {
    old: Side<'a, 's>,
    new: Side<'a, 's>,
    old_of: Vec<NodeId>,
    new_of: Vec<NodeId>,
    /// Matched pairs whose fields and referrers are still to try.
    work: Vec<(BlockRef<'s>, BlockRef<'s>)>,
    counts: MatchCounts,
    /// Pairs of large blocks whose fields said they are not one object.
    rejected: FxHashSet<(NodeId, NodeId)>,
}

#[derive(Clone, Copy)]
enum Rule {
    Roots,
    Fields,
    Referrers,
    Contents,
    Address,
}

impl<'s> Matcher<'_, 's> {
    /// Matches `n` (new) with `o` (old) when both are free, can be one object, and (but for
    /// roots and contents, which name one object) their fields do not say otherwise.
    fn try_match(&mut self, o: NodeId, n: NodeId, rule: Rule) -> bool {
        if self.old_of.get(n as usize) != Some(&NO_NODE) || self.new_of.get(o as usize) != Some(&NO_NODE) {
            return false;
        }
        let (Some(ob), Some(nb)) = (self.old.block(o), self.new.block(n)) else { return false };
        let large = ob.fields.len() > MAX_REFERRER_FIELDS;
        if !compatible(&ob, &nb) || (large && self.rejected.contains(&(o, n))) {
            return false;
        }
        let accepted = match rule {
            Rule::Roots | Rule::Contents => true,
            _ if ob.header.tag >= ocaml::NO_SCAN_TAG => true,
            Rule::Fields | Rule::Referrers => {
                let (agree, disagree) = self.evidence(&ob, &nb);
                agree > disagree
            }
            Rule::Address => {
                let (agree, disagree) = self.evidence(&ob, &nb);
                agree >= disagree
            }
        };
        if !accepted {
            // A large block is weighed once (each of its many referrers would try it again).
            if large {
                self.rejected.insert((o, n));
            }
            return false;
        }
        self.old_of[n as usize] = o;
        self.new_of[o as usize] = n;
        self.work.push((ob, nb));
        let c = &mut self.counts;
        *match rule {
            Rule::Roots => &mut c.roots,
            Rule::Fields => &mut c.fields,
            Rule::Referrers => &mut c.referrers,
            Rule::Contents => &mut c.contents,
            Rule::Address => &mut c.address,
        } += 1;
        true
    }

    /// Fields of two scanned blocks of one size that agree and that disagree (module doc).
    fn evidence(&self, ob: &BlockRef<'_>, nb: &BlockRef<'_>) -> (u32, u32) {
        let (mut agree, mut disagree) = (0, 0);
        for (&wo, &wn) in ob.fields.iter().zip(nb.fields) {
            match (self.old.target(wo), self.new.target(wn)) {
                (Some(to), Some(tn)) => {
                    let (mo, mn) = (self.new_of[to as usize], self.old_of[tn as usize]);
                    if mo == tn {
                        agree += 1;
                    } else if mo != NO_NODE || mn != NO_NODE {
                        disagree += 1;
                    }
                }
                (None, None) if wo == wn => agree += u32::from(wo != 1 && wo != 0),
                _ => disagree += 1,
            }
        }
        (agree, disagree)
    }

    /// Extends every match made so far through fields and sole referrers.
    fn propagate(&mut self) {
        while let Some((ob, nb)) = self.work.pop() {
            let (o, n) = (ob.node, nb.node);
            if ob.header.tag < ocaml::NO_SCAN_TAG {
                for (&wo, &wn) in ob.fields.iter().zip(nb.fields) {
                    if let (Some(to), Some(tn)) = (self.old.target(wo), self.new.target(wn)) {
                        self.try_match(to, tn, Rule::Fields);
                    }
                }
            }
            let (ro, rn) = (self.old.sole_referrer[o as usize], self.new.sole_referrer[n as usize]);
            if ro < MANY && rn < MANY && self.both_free(ro, rn) && self.same_field(ro, o, rn, n) {
                self.try_match(ro, rn, Rule::Referrers);
            }
        }
    }

    fn both_free(&self, o: NodeId, n: NodeId) -> bool {
        self.old_of.get(n as usize) == Some(&NO_NODE) && self.new_of.get(o as usize) == Some(&NO_NODE)
    }

    /// Whether `ro` points to `o` through the field through which `rn` first points to `n`.
    /// Not for referrers of more than [`MAX_REFERRER_FIELDS`] fields: finding the field is a
    /// scan, which every element of a large array would repeat (they are matched downwards,
    /// from the array, when it is).
    fn same_field(&self, ro: NodeId, o: NodeId, rn: NodeId, n: NodeId) -> bool {
        let (Some(rob), Some(rnb)) = (self.old.block(ro), self.new.block(rn)) else { return false };
        if rnb.fields.len() > MAX_REFERRER_FIELDS {
            return false;
        }
        let Some(i) = rnb.fields.iter().position(|&w| self.new.target(w) == Some(n)) else { return false };
        rob.fields.get(i).is_some_and(|&w| self.old.target(w) == Some(o))
    }
}

/// Matches the objects of `new` with those of `old` (`new_order`, `old_order`: their exported,
/// reachable nodes).
pub fn match_objects(old: &Analysis<'_>, old_order: &[NodeId], new: &Analysis<'_>, new_order: &[NodeId]) -> Matching {
    let (og, ot, ng, nt) = (&old.graph, &old.tree, &new.graph, &new.tree);
    let (old_side, new_side) = rayon::join(|| Side::new(og, ot), || Side::new(ng, nt));
    let mut m = Matcher {
        old_of: vec![NO_NODE; new.graph.node_count()],
        new_of: vec![NO_NODE; old.graph.node_count()],
        old: old_side,
        new: new_side,
        work: Vec::new(),
        counts: MatchCounts::default(),
        rejected: FxHashSet::default(),
    };
    // Contents found once in each snapshot.
    let (old_keys, new_keys) = rayon::join(|| unique_contents(&m.old, old_order), || unique_contents(&m.new, new_order));
    let mut i = 0;
    for &(key, n) in &new_keys {
        while i < old_keys.len() && old_keys[i].0 < key {
            i += 1;
        }
        if i < old_keys.len() && old_keys[i].0 == key {
            m.try_match(old_keys[i].1, n, Rule::Contents);
        }
    }
    m.propagate();
    // Roots.
    let old_roots = unique_roots(old);
    let mut new_roots: Vec<(String, Option<NodeId>)> = unique_roots(new).into_iter().collect();
    new_roots.sort();
    for (label, n) in new_roots {
        if let (Some(n), Some(Some(o))) = (n, old_roots.get(&label)) {
            m.try_match(*o, n, Rule::Roots);
        }
    }
    m.propagate();
    // The same address, last.
    for &n in new_order {
        if m.old_of[n as usize] != NO_NODE {
            continue;
        }
        let Some(address) = new.address(n) else { continue };
        if let PointsTo::Node(o) = old.graph.blocks.resolve(address) {
            if old.address(o) == Some(address) && m.try_match(o, n, Rule::Address) {
                m.propagate();
            }
        }
    }
    Matching { old_of: m.old_of, counts: m.counts }
}
