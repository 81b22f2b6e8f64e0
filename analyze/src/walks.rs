//! Walks of the whole object graph: the breadth-first search over strong edges that retainer
//! paths follow, and the referrers of a node.

use crate::blocks::{NodeId, NO_NODE};
use crate::dominators::DominatorTree;
use crate::graph::{HeapGraph, SUPER_ROOT};
use crate::mem::prefetch;
use rayon::prelude::*;

/// One breadth-first search from the super-root over strong edges (weak and ephemeron edges
/// never retain): `discover(u, t)` is called once for every node `t` the search reaches, with
/// the node `u` it was first reached from, in BFS order (so `u` was discovered before).
///
/// Level by level: the nodes at one distance, then those they discover, which is a FIFO queue's
/// order exactly, but holds two levels at a time instead of every node reached (a heap is wide
/// and shallow near its roots, and the summary runs this beside its other arrays).
///
/// Returns the nodes reached, a bit per node (node `v`: bit `v % 64` of word `v / 64`).
pub fn strong_bfs(g: &HeapGraph<'_>, mut discover: impl FnMut(NodeId, NodeId)) -> Vec<u64> {
    strong_bfs_batches(g, |found| found.iter().for_each(|&(u, t)| discover(u, t)))
}

/// [`strong_bfs`], its discoveries given a batch at a time (in order): a caller that looks up
/// something scattered for each node met can start the loads for a whole batch at once.
pub(crate) fn strong_bfs_batches(g: &HeapGraph<'_>, mut discover: impl FnMut(&[(NodeId, NodeId)])) -> Vec<u64> {
    let mut search = Levels::new(g);
    while search.next_level(g, &mut discover) {}
    search.seen
}

/// The state of [`strong_bfs`] between two levels, so that a search can stop once it has met
/// what it looks for, and go on later from there ([`PartialParents`]).
struct Levels {
    seen: Vec<u64>,
    /// The nodes whose successors the next level comes from.
    level: Level,
    next: Level,
    /// Discoveries not yet given to the caller.
    found: Vec<(NodeId, NodeId)>,
}

/// Discoveries given to the caller at a time.
const FOUND_BATCH: usize = 256;

/// How far ahead in a level a node's edge offsets, then its edges, are loaded: a level's nodes
/// are scattered over the graph's arrays.
const PREFETCH_FAR: usize = 16;
const PREFETCH_NEAR: usize = 8;

impl Levels {
    fn new(g: &HeapGraph<'_>) -> Levels {
        let mut seen = vec![0u64; g.node_count().div_ceil(64)];
        seen[SUPER_ROOT as usize / 64] |= 1 << (SUPER_ROOT % 64);
        let mut level = Level::default();
        level.push(SUPER_ROOT);
        Levels { seen, level, next: Level::default(), found: Vec::with_capacity(FOUND_BATCH) }
    }

    fn has_seen(&self, v: NodeId) -> bool {
        self.seen.get(v as usize / 64).is_some_and(|w| w >> (v % 64) & 1 == 1)
    }

    /// Discovers one more level, giving every discovery to `discover` before it returns; false
    /// once there is none (the search is over).
    fn next_level(&mut self, g: &HeapGraph<'_>, discover: &mut impl FnMut(&[(NodeId, NodeId)])) -> bool {
        if self.level.is_empty() {
            return false;
        }
        let check = !g.condition_edges.is_empty();
        for chunk in self.level.chunks() {
            for (i, &u) in chunk.iter().enumerate() {
                if let Some(&far) = chunk.get(i + PREFETCH_FAR) {
                    prefetch(&g.offsets, far as usize);
                }
                if let Some(&near) = chunk.get(i + PREFETCH_NEAR) {
                    prefetch(&g.targets, g.offsets[near as usize] as usize);
                }
                for &t in g.successors(u) {
                    let (word, bit) = (t as usize / 64, 1u64 << (t % 64));
                    if self.seen[word] & bit == 0 && !(check && g.is_condition_edge(u, t)) {
                        self.seen[word] |= bit;
                        self.next.push(t);
                        self.found.push((u, t));
                    }
                }
                if self.found.len() >= FOUND_BATCH {
                    discover(&self.found);
                    self.found.clear();
                }
            }
        }
        if !self.found.is_empty() {
            discover(&self.found);
            self.found.clear();
        }
        std::mem::swap(&mut self.level, &mut self.next);
        self.next.clear();
        true
    }
}

/// Shortest-path parents found by a breadth-first search that goes only as deep as the nodes
/// asked about ([`PartialParents::parent`]): the same parents as [`ShortestParents`], for a
/// first look whose suspects sit a few levels below the roots, without searching the whole
/// heap. Parents that are not the immediate dominator are listed as they are met.
pub struct PartialParents {
    levels: Levels,
    listed: rustc_hash::FxHashMap<NodeId, NodeId>,
}

impl PartialParents {
    pub fn new(g: &HeapGraph<'_>) -> PartialParents {
        let mut listed = rustc_hash::FxHashMap::default();
        listed.insert(SUPER_ROOT, SUPER_ROOT);
        PartialParents { levels: Levels::new(g), listed }
    }

    /// Node `v`'s shortest-path parent, as [`ShortestParents::get`] gives it; the search goes
    /// on, level by level, until it meets `v` or ends.
    pub fn parent(&mut self, v: NodeId, g: &HeapGraph<'_>, tree: &DominatorTree) -> NodeId {
        if v as usize >= g.node_count() {
            return NO_NODE;
        }
        let listed = &mut self.listed;
        while !self.levels.has_seen(v) {
            let more = self.levels.next_level(g, &mut |found: &[(NodeId, NodeId)]| {
                tree.for_each_not_idom(found, |u, t| {
                    listed.insert(t, u);
                })
            });
            if !more {
                // Never reached over strong edges: no parent (as the whole search lists it).
                return NO_NODE;
            }
        }
        self.listed.get(&v).copied().unwrap_or_else(|| tree.idom(v))
    }
}

/// The nodes of one level of [`strong_bfs`], in the order met, in chunks of a fixed size kept
/// from level to level: a level of millions of nodes grows without copying itself (a vector
/// doubling in place held both copies at once), and without more than a chunk to spare.
#[derive(Default)]
struct Level {
    chunks: Vec<Vec<NodeId>>,
    /// Chunks in use: the others are empty, kept for the next levels.
    used: usize,
}

impl Level {
    /// Nodes per chunk (256 KiB).
    const CHUNK: usize = 1 << 16;

    fn push(&mut self, v: NodeId) {
        if self.used == 0 || self.chunks[self.used - 1].len() == Self::CHUNK {
            if self.used == self.chunks.len() {
                self.chunks.push(Vec::with_capacity(Self::CHUNK));
            }
            self.used += 1;
        }
        self.chunks[self.used - 1].push(v);
    }

    fn is_empty(&self) -> bool {
        self.used == 0
    }

    fn chunks(&self) -> &[Vec<NodeId>] {
        &self.chunks[..self.used]
    }

    fn clear(&mut self) {
        self.chunks[..self.used].iter_mut().for_each(Vec::clear);
        self.used = 0;
    }
}

/// BFS parents from the super-root, over strong edges only (the super-root is its own).
pub fn bfs_parents(g: &HeapGraph<'_>) -> Vec<NodeId> {
    let mut parent = vec![NO_NODE; g.node_count()];
    parent[SUPER_ROOT as usize] = SUPER_ROOT;
    strong_bfs(g, |u, t| parent[t as usize] = u);
    parent
}

/// Every node's shortest-path parent ([`bfs_parents`]), held as how it differs from its
/// immediate dominator: a block with one referrer (most of a heap's) has that referrer as both,
/// so only the others' parents are listed, by node, found through a bit per node. A few bytes
/// per listed node and a bit per node, where a parent per node takes 4 bytes: the summary holds
/// them beside the dominator tree's child lists.
pub struct ShortestParents {
    /// Bit `v`: node `v`'s parent is listed (it is not its immediate dominator).
    listed: Vec<u64>,
    /// Listed nodes before each word of `listed`.
    before: Vec<u32>,
    /// The listed nodes' parents, by node.
    parents: Vec<NodeId>,
}

impl ShortestParents {
    /// From `(node, parent)` pairs for every node whose parent differs from its immediate
    /// dominator, in any order (`n` nodes).
    fn from_listed(n: usize, mut listed_pairs: Vec<(NodeId, NodeId)>) -> ShortestParents {
        listed_pairs.par_sort_unstable();
        let mut listed = vec![0u64; n.div_ceil(64)];
        for &(v, _) in &listed_pairs {
            listed[v as usize / 64] |= 1 << (v % 64);
        }
        let mut before = Vec::with_capacity(listed.len());
        let mut count = 0u32;
        for w in &listed {
            before.push(count);
            count += w.count_ones();
        }
        // A vector of its own, not the pairs' memory reused (twice the size needed, kept as
        // long as the summary runs).
        let mut parents: Vec<NodeId> = Vec::with_capacity(listed_pairs.len());
        parents.extend(listed_pairs.iter().map(|&(_, p)| p));
        drop(listed_pairs);
        ShortestParents { listed, before, parents }
    }

    /// From every node's parent ([`bfs_parents`]).
    pub fn from_all(parents: &[NodeId], tree: &DominatorTree) -> ShortestParents {
        let listed: Vec<(NodeId, NodeId)> =
            parents.par_iter().enumerate().filter(|&(v, &p)| p != tree.idom(v as NodeId)).map(|(v, &p)| (v as NodeId, p)).collect();
        ShortestParents::from_listed(parents.len(), listed)
    }

    /// The breadth-first search of [`bfs_parents`], keeping only the parents that differ from
    /// the immediate dominators (never every node's at once).
    pub fn search(g: &HeapGraph<'_>, tree: &DominatorTree) -> ShortestParents {
        let n = g.node_count();
        // The super-root is its own parent; it has no immediate dominator.
        let mut listed: Vec<(NodeId, NodeId)> = vec![(SUPER_ROOT, SUPER_ROOT)];
        let reached = strong_bfs_batches(g, |found| tree.for_each_not_idom(found, |u, t| listed.push((t, u))));
        // The nodes the search never reaches have no parent: listed when they have an
        // immediate dominator (reached only through an ephemeron's condition).
        let unreached: Vec<(NodeId, NodeId)> = (0..n as NodeId)
            .into_par_iter()
            .filter(|&v| reached[v as usize / 64] >> (v % 64) & 1 == 0 && tree.idom(v) != NO_NODE)
            .map(|v| (v, NO_NODE))
            .collect();
        listed.extend(unreached);
        let parents = ShortestParents::from_listed(n, listed);
        // Its levels and lists are gone: their pages would stay resident beside what the
        // summary makes meanwhile (the dominator tree's child lists).
        crate::mem::release_free_memory();
        parents
    }

    /// Node `v`'s shortest-path parent (`NO_NODE`: none, unreachable or out of range).
    pub fn get(&self, v: NodeId, tree: &DominatorTree) -> NodeId {
        let (w, bit) = (v as usize / 64, 1u64 << (v % 64));
        match self.listed.get(w) {
            None => NO_NODE,
            Some(&word) if word & bit != 0 => {
                let rank = self.before[w] + (word & (bit - 1)).count_ones();
                self.parents[rank as usize]
            }
            Some(_) => tree.idom(v),
        }
    }
}

/// Up to `max` nodes with an edge to `v` (one pass over all edges).
pub fn referrers(g: &HeapGraph<'_>, v: NodeId, max: usize) -> Vec<NodeId> {
    let n = g.node_count();
    let mut found: Vec<NodeId> =
        (0..n as NodeId).into_par_iter().filter(|&u| g.successors(u).contains(&v) && !g.is_condition_edge(u, v)).collect();
    found.truncate(max);
    found
}
