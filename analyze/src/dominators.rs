//! Dominators and retained sizes over a CSR graph with `u32` node ids.
//!
//! The algorithm is Lengauer-Tarjan with simple path compression (O(m log n), no recursion
//! anywhere: a list 10^7 long is fine), working in DFS preorder numbers, with three things
//! that make it fit heap graphs:
//!
//! * Single-referrer shortcut. A node with exactly one reachable referrer has that referrer as
//!   its DFS parent, its semi-dominator and its immediate dominator: it needs no predecessor
//!   list, no `eval` and no bucket. Most OCaml blocks are like that. The other predecessors are
//!   exactly the DFS's non-tree edges: recorded as the DFS meets them and sorted by target, they
//!   are all the predecessor lists LT needs (no reverse graph, no second pass over the edges).
//! * Deferred buckets. The bucket of `s` is drained when `s` itself is processed (all of its
//!   descendants are linked then, so `eval` gives the same answer as in the textbook order).
//!   Bucket heads live in `label[s]` until `s` is processed and bucket links in `idom[v]`
//!   until `v` is drained, so buckets cost no memory.
//! * The DFS parent array doubles as the link-eval forest's `ancestor` array: a vertex is
//!   linked exactly when its preorder number is above the one being processed.
//!
//! Working set: five `u32` per reachable node (preorder->node, parent/ancestor, semi, label,
//! idom) plus 8 bytes per non-tree edge (the node->preorder map is freed after the DFS). Cooper-Harvey-Kennedy and semi-NCA are
//! quadratic on shapes that heaps do have (a list whose cells are also referenced from an
//! array); Lengauer-Tarjan is not.

use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub const NONE: u32 = u32::MAX;

/// A graph in compressed sparse row form: the successors of `u` are
/// `targets[offsets[u]..offsets[u + 1]]`.
#[derive(Clone, Copy)]
pub struct Csr<'a> {
    pub offsets: &'a [u32],
    pub targets: &'a [u32],
}

impl<'a> Csr<'a> {
    pub fn node_count(&self) -> usize {
        self.offsets.len() - 1
    }

    #[inline]
    pub fn successors(&self, u: u32) -> &'a [u32] {
        &self.targets[self.offsets[u as usize] as usize..self.offsets[u as usize + 1] as usize]
    }
}

/// The dominator tree of the nodes reachable from a root.
pub struct DominatorTree {
    pub root: u32,
    /// Immediate dominator of every node; [`NONE`] for the root and for unreachable nodes.
    pub idom: Vec<u32>,
    /// Reachable nodes in DFS preorder, root first: a node always comes after its dominators.
    pub preorder: Vec<u32>,
    /// Retained bytes of every node (0 when unreachable), when shallow sizes were given.
    pub retained: Vec<u64>,
}

impl DominatorTree {
    pub fn is_reachable(&self, node: u32) -> bool {
        node == self.root || self.idom[node as usize] != NONE
    }

    /// Children of every node in the dominator tree, as a CSR (built on demand: 4 bytes per
    /// node plus 4 per reachable node).
    pub fn children(&self) -> (Vec<u32>, Vec<u32>) {
        let n = self.idom.len();
        let mut offsets = crate::mem::filled(n + 1, 0u32);
        for &v in &self.preorder[1..] {
            offsets[self.idom[v as usize] as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut cursor = offsets.clone();
        let mut children = crate::mem::filled(self.preorder.len().saturating_sub(1), 0u32);
        for &v in &self.preorder[1..] {
            let d = self.idom[v as usize] as usize;
            children[cursor[d] as usize] = v;
            cursor[d] += 1;
        }
        (offsets, children)
    }
}

/// Raw shared access for parallel scatters whose indices are known to be distinct.
struct Scatter<T>(*mut T);
unsafe impl<T: Send> Send for Scatter<T> {}
unsafe impl<T: Send> Sync for Scatter<T> {}
impl<T> Scatter<T> {
    /// # Safety
    /// `i` is in bounds and no two threads write the same index.
    #[inline]
    unsafe fn write(&self, i: usize, v: T) {
        unsafe { self.0.add(i).write(v) }
    }
}

/// Dominators only (no sizes).
pub fn dominators(graph: Csr<'_>, root: u32) -> DominatorTree {
    compute(graph, root, None::<fn(u32) -> u64>)
}

/// Dominators and retained sizes: `shallow(node)` is a node's own size in bytes.
pub fn dominators_and_retained(graph: Csr<'_>, root: u32, shallow: impl Fn(u32) -> u64 + Sync) -> DominatorTree {
    compute(graph, root, Some(shallow))
}

fn compute(graph: Csr<'_>, root: u32, shallow: Option<impl Fn(u32) -> u64 + Sync>) -> DominatorTree {
    let n = graph.node_count();
    assert!((root as usize) < n, "root {root} is not a node of a graph of {n} nodes");
    assert!(n < NONE as usize, "at most 2^32 - 1 nodes");

    let trace = std::env::var_os("HEAPSNAP_TRACE").is_some();
    let t0 = std::time::Instant::now();
    let lap = |what: &str| {
        if trace {
            eprintln!("dominators: {what} at {:.3}s", t0.elapsed().as_secs_f64());
        }
    };
    // 1. Iterative DFS: preorder numbers and DFS parents. Every reachable edge is seen once;
    //    the non-tree ones (to an already numbered node) are kept as (target, source) pairs in
    //    preorder numbers: with the DFS parent they are all the predecessors of "join" nodes,
    //    and nodes that have none (one referrer: the parent) need nothing more.
    let mut pre_of = crate::mem::filled(n, NONE);
    let mut vertex: Vec<u32> = crate::mem::with_capacity(n);
    let mut parent: Vec<u32> = crate::mem::with_capacity(n);
    let mut extra: Vec<u64> = crate::mem::with_capacity(graph.targets.len().saturating_sub(n) + 1024);
    {
        let mut stack: Vec<(u32, u32, u32)> = Vec::new(); // (node, next edge, preorder)
        pre_of[root as usize] = 0;
        vertex.push(root);
        parent.push(0);
        stack.push((root, graph.offsets[root as usize], 0));
        while let Some(top) = stack.last_mut() {
            let (u, mut cursor, pu) = *top;
            let end = graph.offsets[u as usize + 1];
            let mut child = NONE;
            while cursor < end {
                let t = graph.targets[cursor as usize];
                cursor += 1;
                let pt = pre_of[t as usize];
                if pt == NONE {
                    child = t;
                    break;
                }
                if t != u {
                    extra.push((u64::from(pt) << 32) | u64::from(pu));
                }
            }
            top.1 = cursor;
            if child != NONE {
                let p = vertex.len() as u32;
                pre_of[child as usize] = p;
                vertex.push(child);
                parent.push(pu);
                stack.push((child, graph.offsets[child as usize], p));
            } else {
                stack.pop();
            }
        }
    }
    let r = vertex.len();
    drop(pre_of);
    lap("dfs");

    // 2. Sorted by target, the extra predecessors are consumed from the end as the main loop
    //    walks the preorder backwards.
    extra.par_sort_unstable();
    lap("predecessors");

    // 3. Semi-dominators and relative dominators, in reverse preorder.
    let mut ancestor = parent; // the DFS parent until compressed
    let mut semi = crate::mem::filled(r, 0u32);
    let mut label = crate::mem::filled(r, NONE); // bucket heads until the vertex is processed
    let mut idom = crate::mem::filled(r, 0u32); // bucket links until the vertex is drained
    let mut path: Vec<u32> = Vec::new();
    let mut cursor = extra.len();

    // Linked vertices are those above `cur`; compress and return the label of v.
    let eval = |v: u32, cur: u32, ancestor: &mut [u32], label: &mut [u32], semi: &[u32], path: &mut Vec<u32>| -> u32 {
        if v <= cur {
            return v;
        }
        let mut x = v;
        while ancestor[x as usize] > cur {
            path.push(x);
            x = ancestor[x as usize];
        }
        // x's ancestor is a forest root: x needs no update; the others, nearest first.
        while let Some(y) = path.pop() {
            let a = ancestor[y as usize] as usize;
            if semi[label[a] as usize] < semi[label[y as usize] as usize] {
                label[y as usize] = label[a];
            }
            ancestor[y as usize] = ancestor[a];
        }
        label[v as usize]
    };

    for w in (0..r as u32).rev() {
        // Drain bucket(w): every v whose semi-dominator is w.
        let mut v = label[w as usize];
        while v != NONE {
            let next = idom[v as usize];
            let u = eval(v, w, &mut ancestor, &mut label, &semi, &mut path);
            idom[v as usize] = if semi[u as usize] < semi[v as usize] { u } else { w };
            v = next;
        }
        label[w as usize] = w;
        if w == 0 {
            break;
        }
        let p = ancestor[w as usize];
        if cursor == 0 || (extra[cursor - 1] >> 32) as u32 != w {
            // One referrer: the DFS parent is the semi-dominator and the immediate dominator.
            semi[w as usize] = p;
            idom[w as usize] = p;
            continue;
        }
        let mut s = p;
        while cursor > 0 && (extra[cursor - 1] >> 32) as u32 == w {
            cursor -= 1;
            let v = extra[cursor] as u32;
            let candidate = if v < w { v } else { semi[eval(v, w, &mut ancestor, &mut label, &semi, &mut path) as usize] };
            s = s.min(candidate);
        }
        semi[w as usize] = s;
        // Into bucket(s): s < w is not processed yet, so label[s] is free to hold the head.
        idom[w as usize] = label[s as usize];
        label[s as usize] = w;
    }
    drop(extra);
    drop(label);
    drop(ancestor);
    lap("semi-dominators");

    // 4. Immediate dominators, in preorder.
    for w in 1..r {
        if idom[w] != semi[w] {
            idom[w] = idom[idom[w] as usize];
        }
    }
    drop(semi);

    // 5. Retained sizes: each node's size added to its dominator's, deepest first.
    let mut retained = Vec::new();
    if let Some(shallow) = shallow {
        let mut by_pre: Vec<u64> = crate::mem::with_capacity(r);
        vertex.par_iter().map(|&v| shallow(v)).collect_into_vec(&mut by_pre);
        for w in (1..r).rev() {
            by_pre[idom[w] as usize] += by_pre[w];
        }
        retained = crate::mem::filled(n, 0u64);
        let out = Scatter(retained.as_mut_ptr());
        // SAFETY: vertex is a permutation of distinct in-bounds node ids.
        by_pre.par_iter().zip(vertex.par_iter()).for_each(|(&size, &v)| unsafe { out.write(v as usize, size) });
    }

    lap("retained");
    let mut idom_node = crate::mem::filled(n, NONE);
    {
        let out = Scatter(idom_node.as_mut_ptr());
        let vertex = &vertex;
        // SAFETY: as above; the root (preorder 0) keeps NONE.
        idom.par_iter().enumerate().skip(1).for_each(|(w, &d)| unsafe { out.write(vertex[w] as usize, vertex[d as usize]) });
    }
    lap("output");
    DominatorTree { root, idom: idom_node, preorder: vertex, retained }
}

/// Sum of `values` over a node's dominator subtree, for every node: the generic form of retained
/// sizes (e.g. retained object counts).
pub fn subtree_sums(tree: &DominatorTree, value: impl Fn(u32) -> u64 + Sync) -> Vec<u64> {
    let n = tree.idom.len();
    let sums: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    tree.preorder.par_iter().for_each(|&v| sums[v as usize].store(value(v), Relaxed));
    for &v in tree.preorder[1..].iter().rev() {
        let add = sums[v as usize].load(Relaxed);
        sums[tree.idom[v as usize] as usize].fetch_add(add, Relaxed);
    }
    sums.into_iter().map(AtomicU64::into_inner).collect()
}

/// One iterative depth-first traversal that only marks nodes: the baseline dominators are
/// measured against. Returns the number of nodes reached.
pub fn dfs_baseline(graph: Csr<'_>, root: u32) -> usize {
    let n = graph.node_count();
    let mut seen = crate::mem::filled(n, false);
    let mut stack: Vec<(u32, u32)> = vec![(root, graph.offsets[root as usize])];
    seen[root as usize] = true;
    let mut count = 1;
    while let Some(top) = stack.last_mut() {
        let end = graph.offsets[top.0 as usize + 1];
        let mut cursor = top.1;
        let mut child = None;
        while cursor < end {
            let t = graph.targets[cursor as usize];
            cursor += 1;
            if !seen[t as usize] {
                child = Some(t);
                break;
            }
        }
        top.1 = cursor;
        match child {
            Some(t) => {
                seen[t as usize] = true;
                count += 1;
                stack.push((t, graph.offsets[t as usize]));
            }
            None => {
                stack.pop();
            }
        }
    }
    count
}

/// One breadth-first traversal (the other baseline). Returns the number of nodes reached.
pub fn bfs_baseline(graph: Csr<'_>, root: u32) -> usize {
    let n = graph.node_count();
    let mut seen = crate::mem::filled(n, false);
    let mut queue: Vec<u32> = crate::mem::with_capacity(n);
    queue.push(root);
    seen[root as usize] = true;
    let mut head = 0;
    while head < queue.len() {
        let u = queue[head];
        head += 1;
        for &t in graph.successors(u) {
            if !seen[t as usize] {
                seen[t as usize] = true;
                queue.push(t);
            }
        }
    }
    queue.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(n: usize, edges: &[(u32, u32)]) -> (Vec<u32>, Vec<u32>) {
        let mut offsets = vec![0u32; n + 1];
        for &(a, _) in edges {
            offsets[a as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut cur = offsets.clone();
        let mut targets = vec![0u32; edges.len()];
        for &(a, b) in edges {
            targets[cur[a as usize] as usize] = b;
            cur[a as usize] += 1;
        }
        (offsets, targets)
    }

    #[test]
    fn diamond_and_chain() {
        // 0 -> 1 -> 2 -> 4, 0 -> 3 -> 4, 4 -> 5, 5 -> 4 (cycle)
        let (o, t) = csr(7, &[(0, 1), (1, 2), (2, 4), (0, 3), (3, 4), (4, 5), (5, 4)]);
        let tree = dominators_and_retained(Csr { offsets: &o, targets: &t }, 0, |v| u64::from(v) * 10);
        assert_eq!(tree.idom, vec![NONE, 0, 1, 0, 0, 4, NONE]);
        assert_eq!(tree.retained[4], 40 + 50);
        assert_eq!(tree.retained[1], 10 + 20);
        assert_eq!(tree.retained[0], 10 + 20 + 30 + 40 + 50);
        assert_eq!(tree.retained[6], 0);
        assert!(!tree.is_reachable(6));
    }

    #[test]
    fn long_list_does_not_overflow() {
        let n = 2_000_000u32;
        let edges: Vec<(u32, u32)> = (0..n - 1).map(|i| (i, i + 1)).chain([(0, n - 1)]).collect();
        let (o, t) = csr(n as usize, &edges);
        let tree = dominators(Csr { offsets: &o, targets: &t }, 0);
        assert_eq!(tree.idom[n as usize - 1], 0);
        assert_eq!(tree.idom[n as usize - 2], n - 3);
    }
}
