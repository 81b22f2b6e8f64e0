//! Walks of the whole object graph: the breadth-first search over strong edges that retainer
//! paths follow, and the referrers of a node.

use crate::blocks::{NodeId, NO_NODE};
use crate::graph::{HeapGraph, SUPER_ROOT};
use rayon::prelude::*;

/// One breadth-first search from the super-root over strong edges (weak and ephemeron edges
/// never retain): `discover(u, t)` is called once for every node `t` the search reaches, with
/// the node `u` it was first reached from, in BFS order (so `u` was discovered before).
///
/// Level by level: the nodes at one distance, then those they discover, which is a FIFO queue's
/// order exactly, but holds two levels at a time instead of every node reached (a heap is wide
/// and shallow near its roots, and the summary runs this beside its other arrays).
pub fn strong_bfs(g: &HeapGraph<'_>, mut discover: impl FnMut(NodeId, NodeId)) {
    let mut seen = vec![0u64; g.node_count().div_ceil(64)];
    seen[SUPER_ROOT as usize / 64] |= 1 << (SUPER_ROOT % 64);
    let mut level: Vec<NodeId> = vec![SUPER_ROOT];
    let mut next: Vec<NodeId> = Vec::new();
    let check = !g.condition_edges.is_empty();
    while !level.is_empty() {
        for &u in &level {
            for &t in g.successors(u) {
                let (word, bit) = (t as usize / 64, 1u64 << (t % 64));
                if seen[word] & bit == 0 && !(check && g.is_condition_edge(u, t)) {
                    seen[word] |= bit;
                    next.push(t);
                    discover(u, t);
                }
            }
        }
        std::mem::swap(&mut level, &mut next);
        next.clear();
    }
}

/// BFS parents from the super-root, over strong edges only (the super-root is its own).
pub fn bfs_parents(g: &HeapGraph<'_>) -> Vec<NodeId> {
    let mut parent = vec![NO_NODE; g.node_count()];
    parent[SUPER_ROOT as usize] = SUPER_ROOT;
    strong_bfs(g, |u, t| parent[t as usize] = u);
    parent
}

/// Up to `max` nodes with an edge to `v` (one pass over all edges).
pub fn referrers(g: &HeapGraph<'_>, v: NodeId, max: usize) -> Vec<NodeId> {
    let n = g.node_count();
    let mut found: Vec<NodeId> =
        (0..n as NodeId).into_par_iter().filter(|&u| g.successors(u).contains(&v) && !g.is_condition_edge(u, v)).collect();
    found.truncate(max);
    found
}
