//! Dominators and retained sizes over a CSR graph with `u32` node ids.
//!
//! The algorithm is Lengauer-Tarjan with simple path compression (O(m log n), no recursion
//! anywhere: a list 10^7 long is fine), working in DFS preorder numbers, with three things
//! that make it fit heap graphs:
//!
//! * Single-referrer shortcut. A node with exactly one reachable referrer has that referrer as
//!   its DFS parent, its semi-dominator and its immediate dominator: it needs no predecessor
//!   list, no `eval` and no bucket. Most OCaml blocks are like that. The other predecessors are
//!   exactly the DFS's non-tree edges: recorded as the DFS meets them, then linked into one
//!   list per target whose head waits in the target's `idom` slot, they are all the
//!   predecessor lists LT needs (no reverse graph, no second pass over the edges, no sort).
//! * Deferred buckets. The bucket of `s` is drained when `s` itself is processed (all of its
//!   descendants are linked then, so `eval` gives the same answer as in the textbook order).
//!   Bucket heads live in `label[s]` until `s` is processed and bucket links in `idom[v]`
//!   once `v`'s own predecessor list is consumed, so buckets cost no memory.
//! * The DFS parent array doubles as the link-eval forest's `ancestor` array: a vertex is
//!   linked exactly when its preorder number is above the one being processed.
//! * Cache misses, not instructions, are the cost on a real heap, whose blocks the minor
//!   collector promoted in its own order: the DFS tests "visited" in a bitset that stays in
//!   cache, and the passes whose scattered accesses are known ahead of time (linking the
//!   predecessor lists, the semi-dominator loop) prefetch them. On a dump of the large-heap
//!   sample this halved the time; on heaps laid out in allocation order it changes little.
//! * Fresh memory, not the algorithm, was most of the first run's time on big heaps: the DFS
//!   fills 16 bytes per node of never-touched pages, one page fault at a time (and on a virtual
//!   machine the host's first touch behind each one). Another thread faults them in ahead of
//!   it ([`crate::mem::Prefault`]); on a dump of 5 * 10^7 objects, on a 2-core virtual machine,
//!   this took the first DFS from 9.5 s to 4 s. It stays a bounded distance ahead: the slots
//!   are sized for every node, and in a busy program's heap a third of them may be unreachable.
//!
//! `HEAPSNAP_TRACE=1` prints the time of each phase on stderr.
//!
//! Working set: 4 bytes per node (node -> preorder), 1 bit per node during the DFS, and 16 per
//! reachable node (the slots: ancestor, semi, label, idom side by side), plus 8 per non-tree
//! edge; the result keeps the node -> preorder map, 4 bytes of immediate dominator and 4 or 8
//! of retained size per reachable node (the slots' memory is reused in place for the
//! dominators).
//!
//! Cooper-Harvey-Kennedy and semi-NCA are quadratic on shapes that heaps do have (a list whose
//! cells are also referenced from an array); Lengauer-Tarjan with path compression is
//! O(m log n) whatever the shape.

use crate::mem::{prefetch, spare_capacity, Prefault};
use crate::progress::PhaseTimer;
use rayon::prelude::*;

pub const NONE: u32 = u32::MAX;

/// A graph in compressed sparse row form: the successors of `u` are
/// `targets[offsets[u]..offsets[u + 1]]`.
#[derive(Clone, Copy)]
pub struct Csr<'a> {
    pub offsets: &'a [u32],
    pub targets: &'a [u32],
}

/// Offsets and targets of a CSR graph with `n` nodes built from an edge list (tests, benchmarks).
pub fn csr_from_edges(n: usize, edges: &[(u32, u32)]) -> (Vec<u32>, Vec<u32>) {
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

impl<'a> Csr<'a> {
    pub fn node_count(&self) -> usize {
        self.offsets.len() - 1
    }

    #[inline]
    pub fn successors(&self, u: u32) -> &'a [u32] {
        &self.targets[self.offsets[u as usize] as usize..self.offsets[u as usize + 1] as usize]
    }
}

/// The dominator tree of the nodes reachable from a root. Kept in DFS preorder numbers (the
/// order the algorithm works in, and a cache-friendly one: a node comes after its dominators).
/// Memory: 4 bytes per node (`pre_of`) plus 12 per reachable node.
pub struct DominatorTree {
    pub root: u32,
    /// Preorder number of every node; [`NONE`] for unreachable nodes.
    pub pre_of: Vec<u32>,
    /// Immediate dominator of each reachable node, both in preorder numbers (the root's is 0).
    pub idom_pre: Vec<u32>,
    /// Retained sizes of the reachable nodes, by preorder number (empty until
    /// [`DominatorTree::set_retained`]).
    pub retained_pre: RetainedSizes,
    /// Preorder number -> node, built on first use (4 bytes per reachable node).
    preorder: std::sync::OnceLock<Vec<u32>>,
    /// The children of every reachable node ([`DominatorTree::children_pre`]), built on first
    /// use: the groupings walk the tree with them, and the reports that go down it read them.
    children: std::sync::OnceLock<(Vec<u32>, Vec<u32>)>,
}

/// Retained sizes by preorder number: in words as `u32` when every sum fits (heaps below
/// 32 GiB: 4 bytes per node), in bytes as `u64` otherwise.
pub enum RetainedSizes {
    Words(Vec<u32>),
    Bytes(Vec<u64>),
}

impl RetainedSizes {
    /// Retained bytes of preorder number `p` (0 when out of range).
    #[inline]
    pub fn get(&self, p: usize) -> u64 {
        match self {
            RetainedSizes::Words(v) => v.get(p).map_or(0, |&w| u64::from(w) * 8),
            RetainedSizes::Bytes(v) => v.get(p).copied().unwrap_or(0),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            RetainedSizes::Words(v) => v.len(),
            RetainedSizes::Bytes(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DominatorTree {
    pub fn reachable_count(&self) -> usize {
        self.idom_pre.len()
    }

    pub fn is_reachable(&self, node: u32) -> bool {
        self.pre_of.get(node as usize).is_some_and(|&p| p != NONE)
    }

    /// Reachable nodes in preorder (root first; a node comes after its dominators). Built on
    /// first use: 4 bytes per reachable node.
    pub fn preorder(&self) -> &[u32] {
        self.preorder.get_or_init(|| {
            let mut vertex = vec![0u32; self.idom_pre.len()];
            for (v, &p) in self.pre_of.iter().enumerate() {
                if p != NONE {
                    vertex[p as usize] = v as u32;
                }
            }
            vertex
        })
    }

    /// Immediate dominator of a node; [`NONE`] for the root and unreachable nodes.
    pub fn idom(&self, node: u32) -> u32 {
        match self.pre_of.get(node as usize) {
            Some(&p) if p != NONE && p != 0 => self.preorder()[self.idom_pre[p as usize] as usize],
            _ => NONE,
        }
    }

    /// Calls `differs(u, t)`, in order, for each edge `(u, t)` of `edges` whose source is not
    /// its target's immediate dominator (`idom(t) != u`). Compared in preorder numbers, with
    /// each edge's scattered loads started for the whole batch before the first is needed: a
    /// breadth-first search asks this of every node it meets, in no order the arrays are in.
    pub fn for_each_not_idom(&self, edges: &[(u32, u32)], mut differs: impl FnMut(u32, u32)) {
        const BATCH: usize = 64;
        let mut pres = [(NONE, NONE); BATCH];
        for batch in edges.chunks(BATCH) {
            for &(u, t) in batch {
                prefetch(&self.pre_of, u as usize);
                prefetch(&self.pre_of, t as usize);
            }
            for (pre, &(u, t)) in pres.iter_mut().zip(batch) {
                let pre_of = |v: u32| self.pre_of.get(v as usize).copied().unwrap_or(NONE);
                *pre = (pre_of(u), pre_of(t));
                prefetch(&self.idom_pre, pre.1 as usize);
            }
            for (&(u_pre, t_pre), &(u, t)) in pres.iter().zip(batch) {
                // `idom` is NONE for the root and unreachable targets; an unreachable source
                // (NONE) is no one's, as `idom_pre` holds preorder numbers only.
                let is_idom = t_pre != NONE && t_pre != 0 && self.idom_pre.get(t_pre as usize) == Some(&u_pre);
                if !is_idom {
                    differs(u, t);
                }
            }
        }
    }

    /// Retained bytes of a node (0 when unreachable).
    #[inline]
    pub fn retained(&self, node: u32) -> u64 {
        match self.pre_of.get(node as usize) {
            Some(&p) if p != NONE => self.retained_pre.get(p as usize),
            _ => 0,
        }
    }

    /// Sets retained sizes from shallow sizes in bytes by preorder number (summed in place).
    pub fn set_retained(&mut self, mut shallow_by_pre: Vec<u64>) {
        assert_eq!(shallow_by_pre.len(), self.idom_pre.len());
        sum_over_subtrees(&self.idom_pre, &mut shallow_by_pre);
        self.retained_pre = RetainedSizes::Bytes(shallow_by_pre);
    }

    /// Sets retained sizes from shallow sizes in words by preorder number, when the sum of all
    /// of them fits a `u32` (so does every partial sum); returns false (and changes nothing)
    /// when it does not.
    pub fn set_retained_words(&mut self, mut shallow_words_by_pre: Vec<u32>) -> bool {
        assert_eq!(shallow_words_by_pre.len(), self.idom_pre.len());
        let total: u64 = shallow_words_by_pre.iter().map(|&w| u64::from(w)).sum();
        if total > u64::from(u32::MAX) {
            return false;
        }
        sum_over_subtrees(&self.idom_pre, &mut shallow_words_by_pre);
        self.retained_pre = RetainedSizes::Words(shallow_words_by_pre);
        true
    }

    /// For each group, the retained bytes of the union of its members' dominator subtrees: a
    /// member counts unless another member dominates it. `group_of(p)` is the group of preorder
    /// number `p`, or [`NONE`]; the root belongs to none.
    ///
    /// Depth-first walks down the dominator tree ([`DominatorTree::children_csr`], which the
    /// reports that go down the tree read too: no array of its own). A member counts when no
    /// member of its group is open on the walk's path: each group remembers its open member,
    /// the one that counted, until the walk leaves it.
    ///
    /// The subtrees of the root's grandchildren (the top objects below the root kinds) are
    /// disjoint, and when the root's children belong to no group nothing above those subtrees
    /// covers them: they are walked apart, on every core.
    pub fn union_retained(&self, groups: usize, group_of: impl Fn(usize) -> u32 + Sync) -> Vec<u64> {
        if self.idom_pre.is_empty() {
            return vec![0u64; groups];
        }
        let (offsets, kids) = self.children_csr();
        let children = |p: u32| &kids[offsets[p as usize] as usize..offsets[p as usize + 1] as usize];
        let walk = UnionWalk { tree: self, offsets, kids, group_of: &group_of };
        let first_level = children(0);
        if first_level.iter().any(|&c| group_of(c as usize) != NONE) {
            let mut state = UnionState::new(groups);
            for &c in first_level {
                walk.subtree(c, &mut state);
            }
            return state.retained;
        }
        let mut retained = vec![0u64; groups];
        for &c in first_level {
            let part = children(c)
                .par_iter()
                .fold(
                    || UnionState::new(groups),
                    |mut state, &top| {
                        walk.subtree(top, &mut state);
                        state
                    },
                )
                .map(|state| state.retained)
                .reduce(
                    || vec![0u64; groups],
                    |mut x, y| {
                        x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
                        x
                    },
                );
            retained.iter_mut().zip(part).for_each(|(a, b)| *a += b);
        }
        retained
    }

    /// Children of every reachable node in the dominator tree, in preorder numbers, as a CSR
    /// (`offsets` by preorder number): [`DominatorTree::children_pre`], built on first use and
    /// kept.
    pub fn children_csr(&self) -> (&[u32], &[u32]) {
        let (offsets, kids) = self.children.get_or_init(|| {
            // 8 bytes a node, made while a summary's breadth-first search frees its levels on
            // another thread: their pages would stay resident beside these.
            crate::mem::release_free_memory();
            self.children_pre()
        });
        (offsets, kids)
    }

    /// Children of every reachable node in the dominator tree, in preorder numbers, as a CSR
    /// (`offsets` by preorder number), each node's in ascending order. 8 bytes per reachable
    /// node.
    pub fn children_pre(&self) -> (Vec<u32>, Vec<u32>) {
        let r = self.idom_pre.len();
        // Both arrays are written whole, by one core: the other faults their fresh pages in
        // meanwhile.
        let mut offsets: Vec<u32> = Vec::with_capacity(r + 1);
        let mut children: Vec<u32> = Vec::with_capacity(r.saturating_sub(1));
        let prefault = Prefault::start(vec![spare_capacity(&mut offsets), spare_capacity(&mut children)]);
        prefault.written(0, usize::MAX / 2);
        prefault.written(1, usize::MAX / 2);
        offsets.resize(r + 1, 0);
        for p in 1..r {
            offsets[self.idom_pre[p] as usize + 1] += 1;
        }
        for i in 0..r {
            offsets[i + 1] += offsets[i];
        }
        children.resize(r.saturating_sub(1), 0);
        // Fill backwards from each range's end, so that the offsets become starts again.
        for p in (1..r).rev() {
            let d = self.idom_pre[p] as usize;
            offsets[d + 1] -= 1;
            children[offsets[d + 1] as usize] = p as u32;
        }
        // offsets[d + 1] now holds d's start; shift back to the usual layout.
        for d in 0..r {
            offsets[d] = offsets[d + 1];
        }
        offsets[r] = r.saturating_sub(1) as u32;
        (offsets, children)
    }
}

/// One walk of [`DominatorTree::union_retained`]: the tree and the groups.
struct UnionWalk<'t, G> {
    tree: &'t DominatorTree,
    offsets: &'t [u32],
    kids: &'t [u32],
    group_of: &'t G,
}

/// What a walk of [`DominatorTree::union_retained`] sums and keeps.
struct UnionState {
    retained: Vec<u64>,
    /// Per group: its open member (NONE: none).
    open: Vec<u32>,
    /// The open members and their groups, innermost last: at most one per group, so never
    /// deeper than there are groups.
    opened: Vec<(u32, u32)>,
    /// (node, index in `kids` of its next child) for the nodes on the path with children left
    /// to visit.
    pending: Vec<(u32, u32)>,
}

impl UnionState {
    fn new(groups: usize) -> Self {
        UnionState { retained: vec![0; groups], open: vec![NONE; groups], opened: Vec::new(), pending: Vec::new() }
    }

    fn enter(&mut self, tree: &DominatorTree, c: u32, g: u32) {
        if g != NONE && self.open[g as usize] == NONE {
            self.retained[g as usize] += tree.retained_pre.get(c as usize);
            self.open[g as usize] = c;
            self.opened.push((c, g));
        }
    }
}

impl<G: Fn(usize) -> u32> UnionWalk<'_, G> {
    /// Adds the members of `start`'s subtree (itself included) that no member of their group
    /// above them in it covers.
    ///
    /// The walk keeps only the nodes with children still to visit, and goes back up through the
    /// immediate dominators: a node's last child needs no entry, and in OCaml's structures the
    /// child that goes on (a list's tail, a bucket's next entry) is the last field, met last by
    /// the graph's DFS, so last in preorder. A stack of the whole path was as deep as the
    /// longest list.
    fn subtree(&self, start: u32, state: &mut UnionState) {
        state.enter(self.tree, start, (self.group_of)(start as usize));
        let (mut p, mut next) = (start, self.offsets[start as usize]);
        loop {
            let end = self.offsets[p as usize + 1];
            if next < end {
                let c = self.kids[next as usize];
                if next + 1 < end {
                    state.pending.push((p, next + 1));
                }
                state.enter(self.tree, c, (self.group_of)(c as usize));
                (p, next) = (c, self.offsets[c as usize]);
                continue;
            }
            // p is done, and so is every node above it up to the one with children left.
            let Some((q, resume)) = state.pending.pop() else { break };
            let mut x = p;
            while x != q {
                if let Some(&(_, g)) = state.opened.last().filter(|&&(member, _)| member == x) {
                    state.open[g as usize] = NONE;
                    state.opened.pop();
                }
                x = self.tree.idom_pre[x as usize];
            }
            (p, next) = (q, resume);
        }
        // The whole subtree is left.
        for (_, g) in state.opened.drain(..) {
            state.open[g as usize] = NONE;
        }
    }
}

/// Per preorder number: the link-eval forest and the results, side by side (the main loop and
/// `eval` touch them together).
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Slot {
    /// The DFS parent, then the forest ancestor once compressed.
    ancestor: u32,
    /// The semi-dominator, once processed.
    semi: u32,
    /// Bucket head until processed, then the eval label.
    label: u32,
    /// Bucket link until drained, then the (relative, then immediate) dominator.
    idom: u32,
}

/// Dominators and retained sizes: `shallow(node)` is a node's own size in bytes.
pub fn dominators_and_retained(graph: Csr<'_>, root: u32, shallow: impl Fn(u32) -> u64 + Sync) -> DominatorTree {
    let mut tree = dominators(graph, root);
    let mut by_pre = vec![0u64; tree.reachable_count()];
    for (v, &p) in tree.pre_of.iter().enumerate() {
        if p != NONE {
            by_pre[p as usize] = shallow(v as u32);
        }
    }
    tree.set_retained(by_pre);
    tree
}

/// Dominators (retained sizes come after, from [`DominatorTree::set_retained`]).
pub fn dominators(graph: Csr<'_>, root: u32) -> DominatorTree {
    dominators_with(graph, root, |_, _| ()).0
}

/// Dominators, and beside them the result of `beside(pre_of, reachable)`: it runs on another
/// core while the semi-dominators are computed, as soon as the DFS has numbered the nodes
/// (`pre_of[node]` is a node's preorder number or [`NONE`]; `reachable` of them are numbered).
/// The semi-dominator loop is sequential; the work that only needs the numbering (gathering
/// shallow sizes by preorder number) is done meanwhile.
pub fn dominators_with<T: Send>(graph: Csr<'_>, root: u32, beside: impl FnOnce(&[u32], usize) -> T + Send) -> (DominatorTree, T) {
    let n = graph.node_count();
    assert!((root as usize) < n, "root {root} is not a node of a graph of {n} nodes");
    assert!(n < NONE as usize, "at most 2^32 - 1 nodes");
    let timer = PhaseTimer::start("dominators");

    // 1. Iterative DFS: preorder numbers and DFS parents. Every reachable edge is seen once;
    //    the non-tree ones (to an already numbered node) are kept: with the DFS parent they
    //    are all the predecessors of "join" nodes, and nodes with no extra predecessor (one
    //    referrer: the parent) need nothing more.
    //    The DFS tests "visited" in a bitset (n / 8 bytes: it stays in cache, where `pre_of`
    //    would not on a real heap's scattered edges) and leaves the lookup of a non-tree edge's
    //    target preorder to `link_extra`, which can prefetch it.
    let mut pre_of: Vec<u32> = Vec::with_capacity(n);
    let mut visited = vec![0u64; n.div_ceil(64)];
    let mut slots: Vec<Slot> = Vec::with_capacity(n);
    // The non-tree edges: (target node, source preorder) until `link_extra`.
    let mut extra: Vec<(u32, u32)> = Vec::with_capacity(graph.targets.len().saturating_sub(n) + n / 64 + 1024);
    // The map from nodes to preorder numbers is initialised on every core; then the DFS runs on
    // one while another faults in the memory the DFS will fill (fresh pages are slow to fault,
    // very slow on a virtual machine).
    pre_of.par_extend(rayon::iter::repeat_n(NONE, n));
    let prefault = Prefault::start(vec![spare_capacity(&mut slots), spare_capacity(&mut extra)]);
    {
        let mut stack: Vec<(u32, u32, u32)> = Vec::new(); // (node, next edge, preorder)
        pre_of[root as usize] = 0;
        visited[root as usize / 64] |= 1 << (root % 64);
        slots.push(Slot { ancestor: 0, semi: NONE, label: NONE, idom: NONE });
        stack.push((root, graph.offsets[root as usize], 0));
        let mut next_report = 0;
        while let Some(top) = stack.last_mut() {
            if slots.len() >= next_report {
                // How far the DFS has got: the prefault keeps a bounded distance ahead.
                prefault.written(0, slots.len() * std::mem::size_of::<Slot>());
                prefault.written(1, extra.len() * std::mem::size_of::<(u32, u32)>());
                next_report = slots.len() + (1 << 16);
            }
            let (u, mut cursor, pu) = *top;
            let end = graph.offsets[u as usize + 1];
            if cursor == graph.offsets[u as usize] {
                // First visit: the DFS comes back for the later successors after the first
                // one's subtree, so start loading their edge offsets.
                for &t in &graph.targets[cursor as usize..end as usize] {
                    prefetch(graph.offsets, t as usize);
                }
            }
            let mut child = NONE;
            while cursor < end {
                let t = graph.targets[cursor as usize];
                cursor += 1;
                let bit = &mut visited[t as usize / 64];
                if *bit & (1 << (t % 64)) == 0 {
                    *bit |= 1 << (t % 64);
                    if graph.offsets[t as usize] == graph.offsets[t as usize + 1] {
                        // A leaf (strings, floats: 4 blocks in 10 in the large-heap sample):
                        // numbered as if pushed and popped at once, without the stack.
                        pre_of[t as usize] = slots.len() as u32;
                        slots.push(Slot { ancestor: pu, semi: NONE, label: NONE, idom: NONE });
                        continue;
                    }
                    child = t;
                    if cursor < end {
                        // The DFS comes back to u's next successor after this child's subtree:
                        // start loading its edges (its offsets were prefetched above).
                        let next = graph.targets[cursor as usize];
                        prefetch(graph.targets, graph.offsets[next as usize] as usize);
                    }
                    break;
                }
                if t != u {
                    extra.push((t, pu));
                }
            }
            top.1 = cursor;
            if child != NONE {
                let p = slots.len() as u32;
                pre_of[child as usize] = p;
                slots.push(Slot { ancestor: pu, semi: NONE, label: NONE, idom: NONE });
                stack.push((child, graph.offsets[child as usize], p));
            } else {
                stack.pop();
            }
        }
    }
    drop((visited, prefault));
    timer.lap("dfs");
    let reachable = slots.len();
    let (words, beside) = rayon::join(
        || {
            link_extra(&pre_of, &mut slots, &mut extra);
            timer.lap("predecessor lists");
            let words = semi_and_idom(slots, extra, &timer);
            timer.lap("idom");
            words
        },
        || beside(&pre_of, reachable),
    );
    let tree = DominatorTree {
        root,
        pre_of,
        idom_pre: words,
        retained_pre: RetainedSizes::Bytes(Vec::new()),
        preorder: std::sync::OnceLock::new(),
        children: std::sync::OnceLock::new(),
    };
    (tree, beside)
}

/// Turns the DFS's non-tree edges, `(target node, source preorder)` in the order met, into one
/// list per target: each entry becomes `(source preorder, next entry)`, with the head in the
/// target's `idom` slot (free until the target is processed). A pass of its own so that its
/// scattered reads and writes can be prefetched: the target's preorder number first, then its
/// slot.
fn link_extra(pre_of: &[u32], slots: &mut [Slot], extra: &mut [(u32, u32)]) {
    for i in 0..extra.len() {
        if let Some(&(far, _)) = extra.get(i + PREFETCH_FAR) {
            prefetch(pre_of, far as usize);
        }
        if let Some(&(near, _)) = extra.get(i + PREFETCH_NEAR) {
            prefetch(slots, pre_of[near as usize] as usize);
        }
        let (target, source) = extra[i];
        let head = &mut slots[pre_of[target as usize] as usize].idom;
        extra[i] = (source, *head);
        *head = i as u32;
    }
}

/// Steps 2 and 3 of [`dominators`], on the DFS's slots and non-tree edges: the immediate
/// dominator of every reachable node, by preorder number.
fn semi_and_idom(mut slots: Vec<Slot>, extra: Vec<(u32, u32)>, timer: &PhaseTimer) -> Vec<u32> {
    let r = slots.len();

    // 2. Semi-dominators and relative dominators, in reverse preorder. Linked vertices are
    //    those above the one being processed; `eval` compresses paths without recursion.
    let mut path: Vec<u32> = Vec::new();
    let eval = |v: u32, cur: u32, slots: &mut [Slot], path: &mut Vec<u32>| -> u32 {
        if v <= cur {
            return v;
        }
        let mut x = v;
        while slots[x as usize].ancestor > cur {
            path.push(x);
            x = slots[x as usize].ancestor;
        }
        // x's ancestor is a forest root: x needs no update; the others, nearest first.
        while let Some(y) = path.pop() {
            let a = slots[y as usize].ancestor as usize;
            let (la, ly) = (slots[a].label, slots[y as usize].label);
            if slots[la as usize].semi < slots[ly as usize].semi {
                slots[y as usize].label = la;
            }
            slots[y as usize].ancestor = slots[a].ancestor;
        }
        slots[v as usize].label
    };
    for w in (0..r as u32).rev() {
        // On real heaps the predecessors are scattered: fetch a later vertex's list entry, and
        // a nearer one's first predecessor and bucket head, before they are needed.
        if let Some(far) = (w as usize).checked_sub(PREFETCH_FAR) {
            prefetch(&extra, slots[far].idom as usize);
        }
        if let Some(near) = (w as usize).checked_sub(PREFETCH_NEAR) {
            if let Some(&(v, _)) = extra.get(slots[near].idom as usize) {
                prefetch(&slots, v as usize);
            }
            prefetch(&slots, slots[near].label as usize);
        }
        // Drain bucket(w): every v whose semi-dominator is w.
        let mut v = slots[w as usize].label;
        while v != NONE {
            let next = slots[v as usize].idom;
            let u = eval(v, w, &mut slots, &mut path);
            slots[v as usize].idom = if slots[u as usize].semi < slots[v as usize].semi { u } else { w };
            v = next;
        }
        slots[w as usize].label = w;
        if w == 0 {
            break;
        }
        let p = slots[w as usize].ancestor;
        let mut entry = slots[w as usize].idom;
        if entry == NONE {
            // One referrer: the DFS parent is the semi-dominator and the immediate dominator.
            slots[w as usize].semi = p;
            slots[w as usize].idom = p;
            continue;
        }
        let mut s = p;
        while entry != NONE {
            let (v, next) = extra[entry as usize];
            entry = next;
            let candidate = if v < w {
                v
            } else {
                let u = eval(v, w, &mut slots, &mut path);
                slots[u as usize].semi
            };
            s = s.min(candidate);
        }
        slots[w as usize].semi = s;
        // Into bucket(s): s < w is not processed yet, so its label is free to hold the head.
        slots[w as usize].idom = slots[s as usize].label;
        slots[s as usize].label = w;
    }
    drop(extra);
    timer.lap("semi-dominators");

    // 3. Immediate dominators, in preorder, written in place over the slots (the u32 at index
    //    w lies in slot w / 4, already consumed) so that the slots' memory is reused.
    let mut words: Vec<u32> = bytemuck::allocation::cast_vec(slots);
    words[0] = 0;
    for w in 1..r {
        let (d, semi) = (words[4 * w + 3], words[4 * w + 1]);
        words[w] = if d != semi { words[d as usize] } else { d };
    }
    words.truncate(r);
    words.shrink_to_fit();
    words
}

/// How far ahead (vertices in [`semi_and_idom`], non-tree edges in [`link_extra`]) the first
/// and the second scattered load of an item are prefetched.
const PREFETCH_FAR: usize = 32;
const PREFETCH_NEAR: usize = 16;

/// Turns per-node values (by preorder number) into sums over each node's dominator subtree, in
/// place: in reverse preorder a node's subtree is complete when it is reached, and is added to
/// its immediate dominator's (which comes earlier).
fn sum_over_subtrees<T: Copy + std::ops::AddAssign>(idom_pre: &[u32], values: &mut [T]) {
    for w in (1..values.len()).rev() {
        let v = values[w];
        values[idom_pre[w] as usize] += v;
    }
}

/// Sum of `value` over each node's dominator subtree, by preorder number: the generic form of
/// retained sizes (e.g. retained object counts).
pub fn subtree_sums(tree: &DominatorTree, value: impl Fn(u32) -> u64 + Sync) -> Vec<u64> {
    let mut sums: Vec<u64> = Vec::new();
    tree.preorder().par_iter().map(|&v| value(v)).collect_into_vec(&mut sums);
    sum_over_subtrees(&tree.idom_pre, &mut sums);
    sums
}

/// One iterative depth-first traversal that only marks nodes: the baseline dominators are
/// measured against. Returns the number of nodes reached.
pub fn dfs_baseline(graph: Csr<'_>, root: u32) -> usize {
    let n = graph.node_count();
    let mut seen = vec![false; n];
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
    let mut seen = vec![false; n];
    let mut queue: Vec<u32> = Vec::with_capacity(n);
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

    #[test]
    fn diamond_and_chain() {
        // 0 -> 1 -> 2 -> 4, 0 -> 3 -> 4, 4 -> 5, 5 -> 4 (cycle)
        let (o, t) = csr_from_edges(7, &[(0, 1), (1, 2), (2, 4), (0, 3), (3, 4), (4, 5), (5, 4)]);
        let tree = dominators_and_retained(Csr { offsets: &o, targets: &t }, 0, |v| u64::from(v) * 10);
        assert_eq!((0..7).map(|v| tree.idom(v)).collect::<Vec<_>>(), vec![NONE, 0, 1, 0, 0, 4, NONE]);
        assert_eq!(tree.retained(4), 40 + 50);
        assert_eq!(tree.retained(1), 10 + 20);
        assert_eq!(tree.retained(0), 10 + 20 + 30 + 40 + 50);
        assert_eq!(tree.retained(6), 0);
        assert!(!tree.is_reachable(6));
    }

    #[test]
    fn edges_not_from_the_immediate_dominator_are_those_idom_names_otherwise() {
        // 0 -> 1 -> 2 -> 4, 0 -> 3 -> 4, 4 -> 5, 5 -> 4, 6 unreachable -> 4, 6 -> 7
        let edges = [(0, 1), (1, 2), (2, 4), (0, 3), (3, 4), (4, 5), (5, 4), (6, 4), (6, 7)];
        let (o, t) = csr_from_edges(8, &edges);
        let tree = dominators(Csr { offsets: &o, targets: &t }, 0);
        // Every pair, in more than one batch, with nodes out of range and the root as a target.
        let pairs: Vec<(u32, u32)> = (0..10).flat_map(|u| (0..10).map(move |t| (u, t))).cycle().take(250).collect();
        let mut differing = Vec::new();
        tree.for_each_not_idom(&pairs, |u, t| differing.push((u, t)));
        let expected: Vec<(u32, u32)> = pairs.iter().copied().filter(|&(u, t)| tree.idom(t) != u).collect();
        assert_eq!(differing, expected);
        // The edges that are their target's immediate dominator are left out, and only they.
        assert!(!differing.contains(&(0, 3)) && !differing.contains(&(0, 4)) && !differing.contains(&(4, 5)));
        assert!(differing.contains(&(2, 4)) && differing.contains(&(6, 7)) && differing.contains(&(5, 4)));
        // The five tree edges, in each of the pairs' two and a half rounds.
        assert_eq!(pairs.len() - differing.len(), 15);
    }

    #[test]
    fn long_list_does_not_overflow() {
        let n = 10_000_000u32;
        let edges: Vec<(u32, u32)> = (0..n - 1).map(|i| (i, i + 1)).chain([(0, n - 1)]).collect();
        let (o, t) = csr_from_edges(n as usize, &edges);
        let tree = dominators(Csr { offsets: &o, targets: &t }, 0);
        assert_eq!(tree.idom(n - 1), 0);
        assert_eq!(tree.idom(n - 2), n - 3);
    }
}
