//! The dominator tree as the index keeps it (INDEX.md, sections 3, 24, 31-34), read lazily: a
//! report reads the few nodes it shows, so opening the tree decodes nothing per node.
//!
//! - Preorder number -> node is a mapped `u32` array; the subtree sizes are varints, with a
//!   checkpoint every [`TREE_RUN`] numbers (where the run's first varint is, and how far the
//!   run's subtrees reach, which finds a node's parent without a walk from the root).
//! - Node -> preorder number is the inverse of that permutation, found by walking its cycle
//!   ([`PREORDER_STRIDE`] steps at most each way, a shortcut back every so many steps), with a
//!   small cache of the numbers reports met (children, dominators); a report that asks for
//!   many scattered nodes (allocation sites) gets the whole inverse, made once.
//!
//! Nothing here trusts the file: a number past its array, a varint past its section, a
//! checkpoint that lies, gives `None` or a wrong answer, never a panic, and every walk is
//! bounded.

use crate::compact::{get_varint, put_varint, RankedBits};
use heapsnap_analyze::{NodeId, NO_NODE};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// Preorder numbers per checkpoint of the subtree sizes: a size is at most this many varints
/// from its checkpoint.
pub const TREE_RUN: usize = 64;
/// Runs per upper checkpoint (computed when the tree is opened): a parent is found within a
/// run, then among at most this many runs, then among the upper checkpoints.
const RUNS_PER_GROUP: usize = 64;
/// The cycle walk's stride: every this many elements of a cycle of the preorder's permutation
/// keep a shortcut back as many steps, so that an inverse takes at most twice as many reads.
pub const PREORDER_STRIDE: usize = 32;
/// Lookups of a node's preorder number that the cache did not answer, after which the whole
/// inverse is made (about what it costs in cycle walks).
const WALKS_BEFORE_FULL_INVERSE: usize = 20_000;
/// Entries of the direct-mapped cache of node -> preorder number.
const CACHE_BITS: u32 = 14;

/// The subtree sizes in preorder as varints (INDEX.md, section 24) and their checkpoints
/// (section 31: per [`TREE_RUN`] numbers, where the run's first varint starts and the largest
/// end, number plus size, of the run's subtrees).
pub fn encode_tree(sizes: impl Iterator<Item = u32>) -> (Vec<u8>, Vec<u64>) {
    let (mut out, mut checkpoints) = (Vec::new(), Vec::new());
    for (p, size) in sizes.enumerate() {
        if p % TREE_RUN == 0 {
            checkpoints.extend([out.len() as u64, 0]);
        }
        let end = checkpoints.last_mut().expect("a checkpoint per run");
        *end = (*end).max(p as u64 + u64::from(size));
        put_varint(&mut out, u64::from(size));
    }
    (out, checkpoints)
}

/// Gaps between marks one core walks at once when the index is built.
const GAPS_IN_STEP: usize = 16;

/// Whether number `x` of the completed permutation keeps a shortcut before any is added: one in
/// [`PREORDER_STRIDE`], by a hash, so that the cycles are cut into pieces walked in parallel.
fn hashed_mark(x: usize) -> bool {
    (x as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59 == 0
}

/// The preorder's permutation, completed to all nodes: number `p` below the reachable count is
/// the node `preorder[p]`, and the numbers past it are the unreachable nodes, ascending.
/// Returns a bit per node set when it is reachable (section 32), a bit per number set when it
/// keeps a shortcut (section 33), and each marked number's shortcut, the marked number before
/// it on its cycle, at most [`PREORDER_STRIDE`] steps back (section 34).
pub fn encode_preorder_inverse(preorder: &[NodeId], node_count: usize) -> (Vec<u64>, Vec<u64>, Vec<u32>) {
    use rayon::prelude::*;
    let words = node_count.div_ceil(64);
    let mut reachable = vec![0u64; words];
    for &v in preorder {
        reachable[v as usize / 64] |= 1 << (v % 64);
    }
    let unreachable = (0..node_count as NodeId).filter(|&v| reachable[v as usize / 64] >> (v % 64) & 1 == 0);
    let sigma: Vec<NodeId> = preorder.iter().copied().chain(unreachable).collect();
    let sigma = |x: u32| sigma[x as usize];
    let seen: Vec<AtomicU8> = (0..node_count).into_par_iter().map(|_| AtomicU8::new(0)).collect();
    let see = |x: u32| seen[x as usize].store(1, Relaxed);
    // From each hashed mark to the next on its cycle, on every core: a mark added every stride
    // steps of a longer gap, each mark's shortcut the one before. Each core walks several gaps
    // in step, so that their reads (scattered: a cycle goes anywhere) overlap.
    let hashed: Vec<u32> = (0..node_count as u32).into_par_iter().filter(|&x| hashed_mark(x as usize)).collect();
    let mut shortcuts: Vec<(u32, u32)> = hashed
        .par_chunks(1024)
        .flat_map_iter(|marks| {
            let mut found = Vec::new();
            // Per gap walked: the mark before, where it is, how many steps from its mark.
            let mut lanes: Vec<(u32, u32, usize)> = Vec::with_capacity(GAPS_IN_STEP);
            let mut marks = marks.iter();
            loop {
                while lanes.len() < GAPS_IN_STEP {
                    let Some(&m) = marks.next() else { break };
                    see(m);
                    lanes.push((m, sigma(m), 1));
                }
                if lanes.is_empty() {
                    return found;
                }
                let mut i = 0;
                while i < lanes.len() {
                    let (before, x, steps) = &mut lanes[i];
                    if hashed_mark(*x as usize) {
                        found.push((*x, *before));
                        lanes.swap_remove(i);
                        continue;
                    }
                    see(*x);
                    if *steps % PREORDER_STRIDE == 0 {
                        found.push((*x, *before));
                        *before = *x;
                    }
                    *x = sigma(*x);
                    *steps += 1;
                    i += 1;
                }
            }
        })
        .collect();
    // The cycles without a hashed mark (most are short), one by one.
    let mut cycle = Vec::new();
    let seen: Vec<u8> = seen.into_iter().map(AtomicU8::into_inner).collect();
    let mut seen = seen;
    for start in 0..node_count as u32 {
        if seen[start as usize] == 1 {
            continue;
        }
        cycle.clear();
        let mut x = start;
        while seen[x as usize] == 0 {
            seen[x as usize] = 1;
            cycle.push(x);
            x = sigma(x);
        }
        if cycle.len() > PREORDER_STRIDE {
            let marked: Vec<u32> = cycle.iter().step_by(PREORDER_STRIDE).copied().collect();
            shortcuts.extend(marked.iter().enumerate().map(|(i, &m)| (m, marked[(i + marked.len() - 1) % marked.len()])));
        }
    }
    shortcuts.par_sort_unstable();
    let mut marks = vec![0u64; words];
    for &(m, _) in &shortcuts {
        marks[m as usize / 64] |= 1 << (m % 64);
    }
    (reachable, marks, shortcuts.into_iter().map(|(_, b)| b).collect())
}

/// Moves `*at` past `k` varints (`None`: the bytes end first). A node's next sibling is past
/// its subtree: the dominator report skips millions of sizes.
fn skip_varints(bytes: &[u8], at: &mut usize, mut k: usize) -> Option<()> {
    while k > 0 {
        match bytes.get(*at..*at + 8) {
            // Eight bytes at a time: a varint ends at a byte below 0x80.
            Some(eight) => {
                let mut ends = !u64::from_le_bytes(eight.try_into().expect("8 bytes")) & 0x8080_8080_8080_8080;
                let n = ends.count_ones() as usize;
                if n < k {
                    k -= n;
                    *at += 8;
                } else {
                    for _ in 1..k {
                        ends &= ends - 1;
                    }
                    *at += ends.trailing_zeros() as usize / 8 + 1;
                    k = 0;
                }
            }
            None => {
                if *bytes.get(*at)? < 0x80 {
                    k -= 1;
                }
                *at += 1;
            }
        }
    }
    Some(())
}

/// The dominator tree of an index, read in place.
#[derive(Default)]
pub struct Tree<'s> {
    /// Preorder number -> node.
    pub preorder: &'s [NodeId],
    sizes: &'s [u8],
    /// Per run: `[where its first varint starts, the largest end of its subtrees]`.
    checkpoints: &'s [[u64; 2]],
    /// Per [`RUNS_PER_GROUP`] runs: the largest end of their subtrees.
    group_ends: Vec<u64>,
    reachable: RankedBits<'s>,
    marks: RankedBits<'s>,
    back: &'s [u32],
    node_count: usize,
    /// Node -> preorder number, `(node << 32) | number` per slot (checked against the preorder
    /// when read: a stale or racing entry is a miss).
    cache: Box<[AtomicU64]>,
    walks: AtomicUsize,
    /// The whole inverse ([`NO_NODE`]: unreachable), made once many lookups missed the cache.
    inverse: OnceLock<Vec<u32>>,
}

/// Where a run of subtree sizes was read up to: the varint at byte `at` is number `pre`'s.
#[derive(Clone, Copy)]
pub struct SizeCursor {
    pre: usize,
    at: usize,
}

impl<'s> Tree<'s> {
    /// The tree from its sections, their lengths checked against the counts (their contents
    /// are checked as they are read).
    pub fn new(
        preorder: &'s [NodeId],
        sizes: &'s [u8],
        checkpoints: &'s [u64],
        reachable: &'s [u64],
        marks: &'s [u64],
        back: &'s [u32],
        node_count: usize,
    ) -> Result<Self, String> {
        let r = preorder.len();
        if r > node_count || r == 0 {
            return Err(format!("{r} reachable of {node_count} nodes"));
        }
        let checkpoints: &[[u64; 2]] = bytemuck::cast_slice(checkpoints.get(..checkpoints.len() / 2 * 2).unwrap_or(&[]));
        if checkpoints.len() != r.div_ceil(TREE_RUN) {
            return Err(format!("{} checkpoints for {r} nodes", checkpoints.len()));
        }
        let (reachable, marks) = (RankedBits::new(reachable), RankedBits::new(marks));
        if reachable.words.len() != node_count.div_ceil(64) || marks.words.len() != node_count.div_ceil(64) {
            return Err("bit arrays of another node count".into());
        }
        if reachable.ones() != r || marks.ones() != back.len() {
            return Err(format!("{} reachable bits for {r} nodes, {} shortcuts for {}", reachable.ones(), back.len(), marks.ones()));
        }
        let group_ends = checkpoints.chunks(RUNS_PER_GROUP).map(|c| c.iter().map(|e| e[1]).max().unwrap_or(0)).collect();
        Ok(Tree {
            preorder,
            sizes,
            checkpoints,
            group_ends,
            reachable,
            marks,
            back,
            node_count,
            cache: (0..1usize << CACHE_BITS).map(|_| AtomicU64::new(0)).collect(),
            walks: AtomicUsize::new(0),
            inverse: OnceLock::new(),
        })
    }

    pub fn reachable_count(&self) -> usize {
        self.preorder.len()
    }

    pub fn is_reachable(&self, node: NodeId) -> bool {
        self.reachable.get(node as usize) == Some(true)
    }

    /// A cursor at the start of the tree.
    pub fn cursor(&self) -> SizeCursor {
        SizeCursor { pre: 0, at: 0 }
    }

    /// The size of number `p`'s subtree (at least 1), read from the cursor when `p` is a little
    /// past it, else from `p`'s checkpoint; the cursor then points past it.
    pub fn size_at(&self, p: usize, cursor: &mut SizeCursor) -> Option<usize> {
        if p < cursor.pre || p - cursor.pre > TREE_RUN {
            let &[at, _] = self.checkpoints.get(p / TREE_RUN)?;
            *cursor = SizeCursor { pre: p / TREE_RUN * TREE_RUN, at: usize::try_from(at).ok()? };
        }
        skip_varints(self.sizes, &mut cursor.at, p - cursor.pre)?;
        cursor.pre = p;
        let size = get_varint(self.sizes, &mut cursor.at)?;
        cursor.pre += 1;
        usize::try_from(size).ok().filter(|&s| s >= 1)
    }

    pub fn size(&self, p: usize) -> Option<usize> {
        self.size_at(p, &mut self.cursor())
    }

    /// Number `p`'s immediate dominator's number: the last number before it whose subtree
    /// reaches past it (subtrees nest: those are its ancestors).
    pub fn parent(&self, p: usize) -> Option<usize> {
        if p == 0 || p >= self.reachable_count() {
            return None;
        }
        let reaches = |run: usize, before: usize| -> Option<usize> {
            let mut cursor = self.cursor();
            let mut found = None;
            for q in run * TREE_RUN..before.min((run + 1) * TREE_RUN) {
                if q + self.size_at(q, &mut cursor)? > p {
                    found = Some(q);
                }
            }
            found
        };
        let run = p / TREE_RUN;
        if let Some(q) = reaches(run, p) {
            return Some(q);
        }
        let run_reaches = |b: usize| self.checkpoints.get(b).is_some_and(|e| e[1] > p as u64);
        let group = run / RUNS_PER_GROUP;
        let earlier_in_group = (group * RUNS_PER_GROUP..run).rev();
        let earlier_groups = (0..group).rev().filter(|&g| self.group_ends[g] > p as u64);
        let runs = earlier_in_group.chain(earlier_groups.flat_map(|g| (g * RUNS_PER_GROUP..(g + 1) * RUNS_PER_GROUP).rev()));
        runs.filter(|&b| run_reaches(b)).find_map(|b| reaches(b, p))
    }

    /// The permutation completed to every node: number -> node, the numbers past the reachable
    /// count the unreachable nodes, ascending.
    fn sigma(&self, x: usize) -> Option<usize> {
        match self.preorder.get(x) {
            Some(&v) => Some(v as usize).filter(|&v| v < self.node_count),
            None => self.reachable.select_zero(x.checked_sub(self.reachable_count())?).filter(|&v| v < self.node_count),
        }
    }

    /// Node -> preorder number (`None`: unreachable).
    pub fn pre(&self, node: NodeId) -> Option<usize> {
        if !self.is_reachable(node) {
            return None;
        }
        if let Some(inverse) = self.inverse.get() {
            return inverse.get(node as usize).filter(|&&p| p != NO_NODE).map(|&p| p as usize);
        }
        let slot = &self.cache[(node.wrapping_mul(0x9E37_79B9) >> (32 - CACHE_BITS)) as usize];
        let e = slot.load(Relaxed);
        if (e >> 32) as NodeId == node && self.preorder.get(e as u32 as usize) == Some(&node) {
            return Some(e as u32 as usize);
        }
        if self.walks.fetch_add(1, Relaxed) >= WALKS_BEFORE_FULL_INVERSE {
            let inverse = self.inverse.get_or_init(|| self.full_inverse());
            return inverse.get(node as usize).filter(|&&p| p != NO_NODE).map(|&p| p as usize);
        }
        let p = self.walk_back(node as usize)?;
        self.remember(node, p);
        Some(p)
    }

    /// Notes a node's number (one a report met on its way: a child, a dominator).
    pub fn remember(&self, node: NodeId, p: usize) {
        let slot = &self.cache[(node.wrapping_mul(0x9E37_79B9) >> (32 - CACHE_BITS)) as usize];
        slot.store(u64::from(node) << 32 | p as u64, Relaxed);
    }

    /// The number before `i` on its cycle: forward until a mark, back to the mark before it,
    /// forward to `i` (marks are at most the stride apart, and a cycle without one is no longer
    /// than the stride).
    fn walk_back(&self, i: usize) -> Option<usize> {
        let mut j = i;
        let mut jumped = false;
        for _ in 0..2 * PREORDER_STRIDE + 2 {
            let next = self.sigma(j)?;
            if next == i {
                return (j < self.reachable_count()).then_some(j);
            }
            if !jumped && self.marks.get(j)? {
                j = *self.back.get(self.marks.rank(j)?)? as usize;
                jumped = true;
            } else {
                j = next;
            }
        }
        None
    }

    /// Node -> number for every node, on every core.
    fn full_inverse(&self) -> Vec<u32> {
        use rayon::prelude::*;
        let inverse: Vec<AtomicU32> = (0..self.node_count).into_par_iter().map(|_| AtomicU32::new(NO_NODE)).collect();
        self.preorder.par_iter().enumerate().for_each(|(p, &v)| {
            if let Some(slot) = inverse.get(v as usize) {
                slot.store(p as u32, Relaxed);
            }
        });
        inverse.into_iter().map(AtomicU32::into_inner).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 0 -> {1 -> {3}, 2}, as nodes 7, 4, 9, 5 in preorder 7, 4, 5, 9, of 10 nodes.
    fn small() -> (Vec<u8>, Vec<u64>, Vec<NodeId>) {
        let (sizes, checkpoints) = encode_tree([4, 2, 1, 1].into_iter());
        (sizes, checkpoints, vec![7, 4, 5, 9])
    }

    #[test]
    fn a_small_tree_reads_back() {
        let (sizes, checkpoints, preorder) = small();
        assert_eq!(checkpoints, [0, 4]);
        let (reachable, marks, back) = encode_preorder_inverse(&preorder, 10);
        let t = Tree::new(&preorder, &sizes, &checkpoints, &reachable, &marks, &back, 10).unwrap();
        assert_eq!((0..4).map(|p| t.size(p).unwrap()).collect::<Vec<_>>(), [4, 2, 1, 1]);
        assert_eq!((0..4).map(|p| t.parent(p)).collect::<Vec<_>>(), [None, Some(0), Some(1), Some(0)]);
        let pre: Vec<Option<usize>> = (0..10).map(|v| t.pre(v)).collect();
        assert_eq!(pre, [None, None, None, None, Some(1), Some(2), None, Some(0), None, Some(3)]);
    }

    /// A random tree of `n` reachable nodes among `n + n / 3`, numbered at random, checked
    /// against what a plain walk says: sizes, parents and every node's number (cycles long
    /// enough for shortcuts, runs past the checkpoints, parents many runs back).
    #[test]
    fn a_large_tree_reads_back_its_parents_and_numbers() {
        let n = 12_000usize;
        let nodes = n + n / 3;
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut rand = move |m: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m as u64) as usize
        };
        // Parents before children, some nodes with many children (the root: every 50th).
        let parent: Vec<usize> = (0..n).map(|p| if p % 50 == 0 { 0 } else { p - 1 - rand(p.min(5)) }).collect();
        let mut kids = vec![Vec::new(); n];
        for p in 1..n {
            kids[parent[p]].push(p);
        }
        let (mut order, mut stack) = (Vec::new(), vec![0]);
        while let Some(p) = stack.pop() {
            order.push(p);
            stack.extend(kids[p].iter().rev());
        }
        let mut size = vec![1usize; n];
        for p in (1..n).rev() {
            size[parent[p]] += size[p];
        }
        let mut number = vec![0; n];
        order.iter().enumerate().for_each(|(q, &p)| number[p] = q);
        let mut ids: Vec<NodeId> = (0..nodes as NodeId).collect();
        for i in (1..nodes).rev() {
            ids.swap(i, rand(i + 1));
        }
        let preorder: Vec<NodeId> = order.iter().map(|&p| ids[p]).collect();
        let (sizes, checkpoints) = encode_tree(order.iter().map(|&p| size[p] as u32));
        let (reachable, marks, back) = encode_preorder_inverse(&preorder, nodes);
        assert!(!back.is_empty(), "some cycle is long enough for a shortcut");
        let t = Tree::new(&preorder, &sizes, &checkpoints, &reachable, &marks, &back, nodes).unwrap();
        for p in 0..n {
            let q = number[p];
            assert_eq!(t.size(q), Some(size[p]), "size of {q}");
            assert_eq!(t.parent(q), (p != 0).then(|| number[parent[p]]), "parent of {q}");
        }
        for (p, &v) in ids.iter().enumerate() {
            assert_eq!(t.pre(v), (p < n).then(|| number[p]), "node {v}");
        }
        assert!(t.inverse.get().is_none(), "{n} lookups walked their cycles");
        // Many more lookups than the cache holds: the whole inverse is made, and agrees.
        for _ in 0..2 {
            t.cache.iter().for_each(|e| e.store(0, Relaxed));
            for (p, &v) in ids.iter().enumerate() {
                assert_eq!(t.pre(v), (p < n).then(|| number[p]), "node {v}");
            }
        }
        assert!(t.inverse.get().is_some(), "the whole inverse after many lookups");
    }

    #[test]
    fn varints_are_skipped_eight_bytes_at_a_time_and_one_by_one() {
        let values: Vec<u64> = (0..200u64).map(|i| [1, 200, 70_000, 5, 1 << 40][i as usize % 5] + i).collect();
        let mut bytes = Vec::new();
        values.iter().for_each(|&x| put_varint(&mut bytes, x));
        for from in 0..values.len() {
            for k in 0..values.len() - from {
                let mut at = 0;
                skip_varints(&bytes, &mut at, from).unwrap();
                skip_varints(&bytes, &mut at, k).unwrap();
                assert_eq!(get_varint(&bytes, &mut at), Some(values[from + k]), "{k} after {from}");
            }
        }
        assert_eq!(skip_varints(&bytes, &mut 0, values.len() + 1), None, "past the end");
    }

    #[test]
    fn sections_of_other_counts_are_refused() {
        let (sizes, checkpoints, preorder) = small();
        let (reachable, marks, back) = encode_preorder_inverse(&preorder, 10);
        assert!(Tree::new(&preorder, &sizes, &checkpoints, &reachable, &marks, &back, 10).is_ok());
        assert!(Tree::new(&preorder, &sizes, &[0, 4, 0, 4], &reachable, &marks, &back, 10).is_err(), "checkpoints");
        assert!(Tree::new(&preorder, &sizes, &checkpoints, &[0b1], &marks, &back, 10).is_err(), "reachable bits");
        let one_more = [back.clone(), vec![0]].concat();
        assert!(Tree::new(&preorder, &sizes, &checkpoints, &reachable, &marks, &one_more, 10).is_err(), "shortcuts");
        assert!(Tree::new(&preorder, &sizes, &checkpoints, &reachable, &marks, &back, 200).is_err(), "node count");
    }
}
