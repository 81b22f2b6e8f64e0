//! The object graph: nodes are the super-root, one node per root kind and every live block;
//! edges follow OCaml 5's own scanning rules (see `Header::scanned_fields`). Stored as a CSR (`u32`
//! offsets and targets), built region by region in parallel.
//!
//! Weak references never become edges: the keys of ephemerons and weak arrays are kept apart
//! ([`HeapGraph::weak_edges`]). The data of an ephemeron is live when the ephemeron and all its
//! keys are reachable (as the major GC decides in `ephe_mark`); it then gets an edge from the
//! ephemeron *and from each key*, so that in the dominator tree it hangs under the nearest
//! common dominator of the ephemeron and its keys: a weak table alone never retains it.
//! Those key -> data edges ([`HeapGraph::condition_edges`]) serve dominators only; retainer
//! paths do not follow them.

use crate::blocks::{BadPointer, BlockMap, BlockRef, NodeId, PointsTo};
use crate::error::AnalyzeError;
use crate::progress::{PhaseTimer, Progress};
use heapsnap_format::{RegionKind, RootKind, Snapshot};
use heapsnap_values as ocaml;
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};

pub const SUPER_ROOT: NodeId = 0;

/// How many scanned pointers went where.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PointerCounts {
    pub to_blocks: u64,
    /// Outside every block-holding region (code, C data, atoms...): not OCaml heap.
    pub external: u64,
    /// Into a block-holding region but to no block.
    pub bad: u64,
}

impl PointerCounts {
    fn add(&mut self, o: &PointerCounts) {
        self.to_blocks += o.to_blocks;
        self.external += o.external;
        self.bad += o.bad;
    }
}

/// An ephemeron or weak array listed in the snapshot.
#[derive(Clone, Debug)]
pub struct Ephemeron {
    pub node: NodeId,
    pub data: Option<NodeId>,
    /// Keys that are heap blocks (static and external keys never die).
    pub keys: Vec<NodeId>,
    /// Whether the data was found live (ephemeron and all keys reachable).
    pub data_live: bool,
}

/// A root record that reaches a block.
#[derive(Clone, Copy, Debug)]
pub struct RootEdge {
    pub node: NodeId,
    /// Index in `Snapshot::roots()`.
    pub record: u32,
}

pub struct HeapGraph<'s> {
    pub blocks: BlockMap<'s>,
    /// Kind of root node `1 + i`.
    pub root_kinds: Vec<RootKind>,
    pub offsets: Vec<u32>,
    pub targets: Vec<u32>,
    /// Root records that reach a block, sorted by node.
    pub roots: Vec<RootEdge>,
    pub ephemerons: Vec<Ephemeron>,
    /// `(ephemeron, key)`: references that never retain.
    pub weak_edges: Vec<(NodeId, NodeId)>,
    /// Blocks of roots flagged WEAK (tracked by the runtime without being kept alive).
    pub weak_roots: Vec<NodeId>,
    /// `(key, data)` edges added for dominators only, sorted.
    pub condition_edges: Vec<(NodeId, NodeId)>,
    pub pointers: PointerCounts,
    /// Pointers, by kind of problem, for `verify` (counted on every build).
    pub bad_by_kind: HashMap<BadPointer, u64>,
    /// Continuations whose stack has no `SuspendedStack` records, and records with no continuation.
    pub orphan_stack_records: u64,
    /// Ephemeron list entries that are not abstract blocks.
    pub bad_ephemerons: u64,
    /// Ephemeron list entries naming an ephemeron listed before them (skipped).
    pub repeated_ephemerons: u64,
}

/// Everything a block's edges depend on besides the block itself.
struct EdgeContext<'a, 's> {
    blocks: &'a BlockMap<'s>,
    /// Stack address -> values held by that suspended stack.
    suspended: &'a HashMap<u64, Vec<u64>>,
}

#[derive(Default)]
struct EdgeSink {
    counts: PointerCounts,
    bad: HashMap<BadPointer, u64>,
}

impl EdgeContext<'_, '_> {
    #[inline]
    fn push(&self, v: u64, out: &mut Vec<u32>, sink: &mut EdgeSink) {
        match self.blocks.resolve(v) {
            PointsTo::Node(n) => {
                sink.counts.to_blocks += 1;
                out.push(n);
            }
            PointsTo::External => sink.counts.external += 1,
            PointsTo::Bad(kind) => {
                sink.counts.bad += 1;
                *sink.bad.entry(kind).or_default() += 1;
            }
        }
    }

    fn edges_of(&self, block: &BlockRef<'_>, out: &mut Vec<u32>, sink: &mut EdgeSink) {
        if block.header.tag == ocaml::CONT_TAG {
            if let Some(&stack) = block.fields.first() {
                if let Some(values) = self.suspended.get(&(stack & !1)) {
                    for &v in values.iter().filter(|&&v| ocaml::is_pointer(v)) {
                        self.push(v, out, sink);
                    }
                }
            }
            return;
        }
        block.header.scanned_fields(block.fields, |_, v| self.push(v, out, sink));
    }
}

/// What [`root_edges`] finds besides the edges.
struct RootEdges {
    /// The roots that name a block, by block.
    roots: Vec<RootEdge>,
    /// Blocks tracked without being kept alive (Gc.finalise values, memprof samples).
    weak_roots: Vec<NodeId>,
    /// The roots that point outside the heap, or at no block.
    sink: EdgeSink,
}

/// The edges of the super-root and of each root kind, appended to `targets` (their counts in
/// `offsets`, at each node's index + 1): the first part of the graph, before the blocks'.
fn root_edges(snap: &Snapshot, blocks: &BlockMap<'_>, root_kinds: &[RootKind], offsets: &mut [u32], targets: &mut Vec<u32>) -> RootEdges {
    let first_block = 1 + root_kinds.len() as NodeId;
    targets.extend(1..first_block);
    offsets[1] = first_block - 1;
    let mut roots = Vec::new();
    let mut weak_roots = Vec::new();
    let mut sink = EdgeSink::default();
    for (k, kind) in root_kinds.iter().enumerate() {
        let before = targets.len();
        for (i, r) in snap.roots().iter().enumerate().filter(|(_, r)| r.root_kind() == *kind) {
            if !ocaml::is_pointer(r.value) {
                continue;
            }
            if r.is_weak() {
                if let PointsTo::Node(node) = blocks.resolve(r.value) {
                    weak_roots.push(node);
                }
                continue;
            }
            match blocks.resolve(r.value) {
                PointsTo::Node(node) => {
                    targets.push(node);
                    roots.push(RootEdge { node, record: i as u32 });
                }
                PointsTo::External => sink.counts.external += 1,
                PointsTo::Bad(kind) => {
                    sink.counts.bad += 1;
                    *sink.bad.entry(kind).or_default() += 1;
                }
            }
        }
        offsets[k + 2] = (targets.len() - before) as u32;
    }
    roots.sort_by_key(|r| (r.node, r.record));
    RootEdges { roots, weak_roots, sink }
}

/// Suspended stacks no continuation points to (only worth a pass when there are any).
fn orphan_stacks(blocks: &BlockMap<'_>, regions: &[usize], suspended: &HashMap<u64, Vec<u64>>) -> u64 {
    if suspended.is_empty() {
        return 0;
    }
    let cont_stacks: HashSet<u64> = regions
        .iter()
        .flat_map(|&r| blocks.region_blocks(r))
        .filter(|b| b.header.tag == ocaml::CONT_TAG)
        .filter_map(|b| b.fields.first().map(|&f| f & !1))
        .collect();
    suspended.keys().filter(|k| !cont_stacks.contains(k)).count() as u64
}

impl<'s> HeapGraph<'s> {
    pub fn build(snap: &'s Snapshot, progress: &Progress) -> Result<Self, AnalyzeError> {
        let mut root_kinds: Vec<RootKind> =
            snap.roots().iter().map(|r| r.root_kind()).filter(|k| k.is_root()).collect::<HashSet<_>>().into_iter().collect();
        root_kinds.sort_by_key(|k| k.code());
        let first_block = 1 + root_kinds.len() as NodeId;

        let timer = PhaseTimer::start("graph");
        let step = progress.step("finding blocks", 0);
        let mut blocks = BlockMap::build(snap, first_block)?;
        step.finish();
        timer.lap("blocks");

        let mut suspended: HashMap<u64, Vec<u64>> = HashMap::new();
        for r in snap.roots().iter().filter(|r| r.root_kind() == RootKind::SuspendedStack) {
            suspended.entry(r.origin).or_default().push(r.value);
        }

        let step = progress.step("finding static blocks", 0);
        let statics = discover_static(&blocks, snap, &suspended);
        blocks.static_seeds = Vec::new();
        blocks.add_static_blocks(statics);
        step.finish();
        timer.lap("static blocks");

        let n = blocks.node_count as usize;
        // Refused now, the blocks found, rather than by the kernel once the arrays grow.
        crate::mem::check_room(n as u64 - first_block as u64)?;
        let mut offsets = vec![0u32; n + 1];
        let mut targets: Vec<u32> = Vec::with_capacity(n + n / 2);

        let RootEdges { roots, weak_roots, sink } = root_edges(snap, &blocks, &root_kinds, &mut offsets, &mut targets);

        // Blocks, region by region, in batches of about 8 MiB of region memory (small: the
        // per-region edge vectors of a batch are transient memory).
        let ctx = EdgeContext { blocks: &blocks, suspended: &suspended };
        let mut order: Vec<usize> = blocks.block_regions().collect();
        order.sort_by_key(|&r| blocks.regions[r].nodes.start);
        let step = progress.step("building the graph", order.len() as u64);
        let mut pointers = sink.counts;
        let mut bad_by_kind = sink.bad;
        let mut degree_slices: Vec<&mut [u32]> = Vec::with_capacity(order.len());
        {
            let mut rest: &mut [u32] = &mut offsets[first_block as usize + 1..];
            let mut at = first_block;
            for &r in &order {
                let nodes = blocks.regions[r].nodes.clone();
                let (_, tail) = std::mem::take(&mut rest).split_at_mut((nodes.start - at) as usize);
                let (mine, tail) = tail.split_at_mut(nodes.len());
                rest = tail;
                at = nodes.end;
                degree_slices.push(mine);
            }
        }
        let mut jobs: Vec<(usize, &mut [u32])> = order.iter().copied().zip(degree_slices).collect();
        while !jobs.is_empty() {
            let mut words = 0usize;
            let take = jobs
                .iter()
                .position(|(r, _)| {
                    words += blocks.regions[*r].words.len();
                    words > 1 << 20
                })
                .map_or(jobs.len(), |p| p + 1);
            let batch: Vec<(usize, &mut [u32])> = jobs.drain(..take).collect();
            let results: Vec<(Vec<u32>, EdgeSink)> = batch
                .into_par_iter()
                .map(|(r, degrees)| {
                    let mut out = Vec::new();
                    let mut sink = EdgeSink::default();
                    for (b, d) in blocks.region_blocks(r).zip(degrees.iter_mut()) {
                        let before = out.len();
                        ctx.edges_of(&b, &mut out, &mut sink);
                        *d = (out.len() - before) as u32;
                    }
                    (out, sink)
                })
                .collect();
            for (edges, sink) in results {
                targets.extend_from_slice(&edges);
                pointers.add(&sink.counts);
                for (k, v) in sink.bad {
                    *bad_by_kind.entry(k).or_default() += v;
                }
                step.inc(1);
            }
            if targets.len() >= u32::MAX as usize {
                return Err(AnalyzeError::TooLarge(format!("more than {} edges", u32::MAX)));
            }
        }
        step.finish();
        targets.shrink_to_fit();
        // Degrees sit at offsets[node + 1]: a running sum makes them start offsets.
        let mut total = 0u32;
        for o in offsets.iter_mut() {
            total += *o;
            *o = total;
        }
        debug_assert_eq!(total as usize, targets.len());

        timer.lap("edges");
        let orphan_stack_records = orphan_stacks(&blocks, &order, &suspended);
        timer.lap("continuations");

        let mut graph = HeapGraph {
            blocks,
            root_kinds,
            offsets,
            targets,
            roots,
            ephemerons: Vec::new(),
            weak_edges: Vec::new(),
            weak_roots,
            condition_edges: Vec::new(),
            pointers,
            bad_by_kind,
            orphan_stack_records,
            bad_ephemerons: 0,
            repeated_ephemerons: 0,
        };
        graph.add_ephemerons(snap)?;
        timer.lap(&format!("ephemerons ({} with data)", graph.ephemerons.iter().filter(|e| e.data.is_some()).count()));
        Ok(graph)
    }

    pub fn node_count(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn edge_count(&self) -> usize {
        self.targets.len()
    }

    #[inline]
    pub fn successors(&self, node: NodeId) -> &[u32] {
        &self.targets[self.offsets[node as usize] as usize..self.offsets[node as usize + 1] as usize]
    }

    /// The root kind a node stands for, when it is a root-kind node.
    pub fn root_kind_of(&self, node: NodeId) -> Option<RootKind> {
        node.checked_sub(1).and_then(|i| self.root_kinds.get(i as usize)).copied()
    }

    /// Root records reaching `node`.
    pub fn roots_of(&self, node: NodeId) -> &[RootEdge] {
        let start = self.roots.partition_point(|r| r.node < node);
        let end = self.roots.partition_point(|r| r.node <= node);
        &self.roots[start..end]
    }

    pub fn is_condition_edge(&self, from: NodeId, to: NodeId) -> bool {
        self.condition_edges.binary_search(&(from, to)).is_ok()
    }

    /// Reads the ephemeron list, decides which data is live and adds its edges.
    fn add_ephemerons(&mut self, snap: &Snapshot) -> Result<(), AnalyzeError> {
        if snap.ephemerons().is_empty() {
            return Ok(());
        }
        // A runtime lists each ephemeron once; a snapshot listing one again would add its
        // edges again, as many times as it is listed.
        let mut listed = HashSet::with_capacity(snap.ephemerons().len());
        for &value in snap.ephemerons() {
            let PointsTo::Node(node) = self.blocks.resolve(value) else {
                self.bad_ephemerons += 1;
                continue;
            };
            let Some(block) = self.blocks.block(node) else { continue };
            if block.header.tag != ocaml::ABSTRACT_TAG || block.fields.len() < ocaml::EPHE_FIRST_KEY_FIELD {
                self.bad_ephemerons += 1;
                continue;
            }
            if !listed.insert(node) {
                self.repeated_ephemerons += 1;
                continue;
            }
            let heap_node = |v: u64| -> Result<Option<NodeId>, ()> {
                if !ocaml::is_pointer(v) {
                    return Ok(None);
                }
                match self.blocks.resolve(v) {
                    PointsTo::Node(n) => {
                        let r = self.blocks.region_of_node(n).map(|r| self.blocks.regions[r as usize].kind);
                        Ok((r != Some(RegionKind::Static)).then_some(n))
                    }
                    PointsTo::External => Ok(None),
                    PointsTo::Bad(_) => Err(()),
                }
            };
            let mut keys = Vec::new();
            let mut dead_key = false;
            for &k in &block.fields[ocaml::EPHE_FIRST_KEY_FIELD..] {
                match heap_node(k) {
                    Ok(Some(n)) => keys.push(n),
                    Ok(None) => {}
                    Err(()) => dead_key = true,
                }
            }
            // A key held twice is one key (and one edge to the data).
            keys.sort_unstable();
            keys.dedup();
            let data_word = block.fields[ocaml::EPHE_DATA_FIELD];
            let data = match self.blocks.resolve(data_word) {
                PointsTo::Node(n) if ocaml::is_pointer(data_word) => Some(n),
                _ => None,
            };
            for &k in &keys {
                self.weak_edges.push((node, k));
            }
            self.ephemerons.push(Ephemeron { node, data: if dead_key { None } else { data }, keys, data_live: false });
        }
        self.weak_edges.sort_unstable();
        if self.ephemerons.iter().all(|e| e.data.is_none()) {
            // Weak arrays and sets only (OCaml 5's `Weak` is ephemerons without data): no data
            // becomes live through them, so the heap need not be walked to find out.
            return Ok(());
        }

        // Data becomes live when its ephemeron and all its keys are reached, which may reach
        // more keys and ephemerons. Each ephemeron with data counts the conditions (itself and
        // its distinct keys) not yet reached; reaching a node counts down every ephemeron
        // waiting on it, so the search is one pass however long a chain of ephemerons is. It
        // follows the graph's own edges only: an added edge leads from a reached ephemeron or
        // key to data that is marked and searched from as it becomes live.
        let n = self.node_count();
        let mut waiting_on: Vec<(NodeId, u32)> = Vec::new();
        for (i, e) in self.ephemerons.iter().enumerate().filter(|(_, e)| e.data.is_some()) {
            waiting_on.push((e.node, i as u32));
            waiting_on.extend(e.keys.iter().map(|&k| (k, i as u32)));
        }
        // Sorted by node; an ephemeron that is its own key waits on it twice and is counted
        // down twice when it is reached.
        waiting_on.sort_unstable();
        let mut unreached = vec![0u32; self.ephemerons.len()];
        for &(_, i) in &waiting_on {
            unreached[i as usize] += 1;
        }
        let mut is_condition = vec![false; n];
        for &(node, _) in &waiting_on {
            is_condition[node as usize] = true;
        }
        let mut search =
            ConditionalSearch { reached: vec![false; n], queue: Vec::new(), waiting_on, is_condition, unreached, live: Vec::new() };
        search.reach(SUPER_ROOT);
        while let Some(u) = search.queue.pop() {
            for &t in self.successors(u) {
                if !search.reached[t as usize] {
                    search.reach(t);
                }
            }
            while let Some(i) = search.live.pop() {
                let e = &mut self.ephemerons[i as usize];
                e.data_live = true;
                let d = e.data.expect("only ephemerons with data wait");
                if !search.reached[d as usize] {
                    search.reach(d);
                }
            }
        }
        // `(from, data)` in the list's order; each node's after its own edges.
        let mut extra: Vec<(NodeId, NodeId)> = Vec::new();
        for e in self.ephemerons.iter().filter(|e| e.data_live) {
            let d = e.data.expect("live data");
            extra.push((e.node, d));
            for &k in &e.keys {
                extra.push((k, d));
                self.condition_edges.push((k, d));
            }
        }
        self.condition_edges.sort_unstable();
        self.condition_edges.dedup();
        if extra.is_empty() {
            return Ok(());
        }
        if self.targets.len() + extra.len() >= u32::MAX as usize {
            return Err(AnalyzeError::TooLarge(format!("more than {} edges with the ephemerons' data", u32::MAX)));
        }
        insert_edges(&mut self.offsets, &mut self.targets, extra);
        Ok(())
    }

    /// Bytes held by the graph (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.offsets.capacity() * 4 + self.targets.capacity() * 4 + self.blocks.heap_bytes() + self.roots.capacity() * 8
    }
}

/// A depth-first search from the super-root that also counts down the conditions each
/// ephemeron's data waits on (its ephemeron and keys reached).
struct ConditionalSearch {
    reached: Vec<bool>,
    queue: Vec<NodeId>,
    /// `(condition node, ephemeron index)`, sorted.
    waiting_on: Vec<(NodeId, u32)>,
    is_condition: Vec<bool>,
    /// Per ephemeron, its conditions not reached yet.
    unreached: Vec<u32>,
    /// Ephemerons whose conditions were all just reached: their data is live.
    live: Vec<u32>,
}

impl ConditionalSearch {
    fn reach(&mut self, node: NodeId) {
        self.reached[node as usize] = true;
        self.queue.push(node);
        if self.is_condition[node as usize] {
            let from = self.waiting_on.partition_point(|&(n, _)| n < node);
            for &(_, i) in self.waiting_on[from..].iter().take_while(|&&(n, _)| n == node) {
                self.unreached[i as usize] -= 1;
                if self.unreached[i as usize] == 0 {
                    self.live.push(i);
                }
            }
        }
    }
}

/// Adds `(from, to)` edges to a CSR (`offsets`, `targets`), each after `from`'s own edges
/// and, at one node, in the order given; in place: the targets after each source move up by
/// the edges added before them (a few ephemerons' data on a heap of millions of edges: one
/// move of the tail, not a rebuild).
fn insert_edges(offsets: &mut [u32], targets: &mut Vec<u32>, mut extra: Vec<(NodeId, NodeId)>) {
    // Stable: a node's added edges keep their order.
    extra.sort_by_key(|&(from, _)| from);
    let old_len = targets.len();
    targets.resize(old_len + extra.len(), 0);
    // From the last source down: the targets after its edges move up by the edges added
    // at it and at every source after it, then its own added edges go in behind its own.
    let mut end = old_len;
    let mut shift = extra.len();
    let mut i = extra.len();
    while i > 0 {
        let from = extra[i - 1].0;
        let first = extra[..i].partition_point(|&(f, _)| f < from);
        let own_end = offsets[from as usize + 1] as usize;
        targets.copy_within(own_end..end, own_end + shift);
        shift -= i - first;
        for (slot, &(_, to)) in targets[own_end + shift..].iter_mut().zip(&extra[first..i]) {
            *slot = to;
        }
        end = own_end;
        i = first;
    }
    // Node v's edges end after the edges added at every source up to v.
    let mut added = 0u32;
    let mut next = extra.iter().peekable();
    for (v, end) in offsets.iter_mut().skip(1).enumerate() {
        while next.next_if(|&&(from, _)| from as usize <= v).is_some() {
            added += 1;
        }
        *end += added;
    }
}

/// Static blocks are found through the pointers that reach them: from roots, from heap blocks,
/// from ephemerons, and from static blocks already found. Returns, per static region, the
/// sorted first-field word indices of its blocks.
fn discover_static(blocks: &BlockMap<'_>, snap: &Snapshot, suspended: &HashMap<u64, Vec<u64>>) -> Vec<(usize, Vec<u64>)> {
    let statics: Vec<usize> = (0..blocks.regions.len()).filter(|&i| blocks.regions[i].kind == RegionKind::Static).collect();
    if statics.is_empty() {
        return Vec::new();
    }
    let lo = blocks.regions[statics[0]].base;
    let hi = blocks.regions[*statics.last().expect("not empty")].end();
    let in_static = |v: u64| -> Option<usize> {
        if v < lo || v >= hi || !ocaml::is_pointer(v) {
            return None;
        }
        blocks.region_index_of(v).filter(|&r| blocks.regions[r].kind == RegionKind::Static)
    };
    // Seeds from the heap (collected while its blocks were walked), roots, stacks, ephemerons.
    let mut seeds: Vec<u64> = blocks.static_seeds.clone();
    seeds.extend(snap.roots().iter().map(|r| r.value).filter(|&v| in_static(v).is_some()));
    seeds.extend(suspended.values().flatten().copied().filter(|&v| in_static(v).is_some()));
    for &e in snap.ephemerons() {
        if let PointsTo::Node(n) = blocks.resolve(e) {
            if let Some(b) = blocks.block(n) {
                seeds.extend(b.fields.iter().skip(1).copied().filter(|&v| in_static(v).is_some()));
            }
        }
    }
    seeds.sort_unstable();
    seeds.dedup();

    let mut found: HashSet<(usize, u64)> = HashSet::new();
    let mut pending = seeds;
    while let Some(v) = pending.pop() {
        let Some(r) = in_static(v) else { continue };
        let Ok(w) = blocks.static_block_at(r, v) else { continue };
        if !found.insert((r, w)) {
            continue;
        }
        let rb = &blocks.regions[r];
        let header = blocks.layout.decode(rb.words[w as usize - 1]);
        let fields = &rb.words[w as usize..(w + header.wosize) as usize];
        header.scanned_fields(fields, |_, v| {
            if in_static(v).is_some() {
                pending.push(v);
            }
        });
    }
    let mut per_region: HashMap<usize, Vec<u64>> = HashMap::new();
    for (r, w) in found {
        per_region.entry(r).or_default().push(w);
    }
    let mut out: Vec<(usize, Vec<u64>)> = per_region.into_iter().collect();
    out.sort_by_key(|(r, _)| *r);
    for (r, words) in out.iter_mut() {
        words.sort_unstable();
        // A "block" whose header lies inside the block before it is an interior pointer that
        // happened to follow a header-looking word: keep the outer block only.
        let rb = &blocks.regions[*r];
        let mut kept: Vec<u64> = Vec::with_capacity(words.len());
        let mut end = 0u64;
        for &w in words.iter() {
            if w - 1 < end {
                continue;
            }
            end = w + blocks.layout.wosize(rb.words[w as usize - 1]);
            kept.push(w);
        }
        *words = kept;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::insert_edges;
    use proptest::prelude::*;

    /// The CSR rebuilt from scratch: each node's own edges, then those added at it, in order.
    fn rebuilt(offsets: &[u32], targets: &[u32], extra: &[(u32, u32)]) -> (Vec<u32>, Vec<u32>) {
        let (mut new_offsets, mut new_targets) = (vec![0u32], Vec::new());
        for v in 0..offsets.len() - 1 {
            new_targets.extend_from_slice(&targets[offsets[v] as usize..offsets[v + 1] as usize]);
            new_targets.extend(extra.iter().filter(|&&(from, _)| from as usize == v).map(|&(_, to)| to));
            new_offsets.push(new_targets.len() as u32);
        }
        (new_offsets, new_targets)
    }

    proptest! {
        #[test]
        fn edges_inserted_in_place_are_the_csr_rebuilt(
            degrees in proptest::collection::vec(0u32..4, 1..40),
            extra_at in proptest::collection::vec((0usize..1000, 0u32..1000), 0..12),
        ) {
            let mut offsets = vec![0u32];
            for d in &degrees {
                offsets.push(offsets.last().unwrap() + d);
            }
            let targets: Vec<u32> = (0..*offsets.last().unwrap()).map(|t| 7 * t % 97).collect();
            let nodes = degrees.len();
            let extra: Vec<(u32, u32)> = extra_at.iter().map(|&(from, to)| ((from % nodes) as u32, to)).collect();
            let expected = rebuilt(&offsets, &targets, &extra);
            let (mut offsets, mut targets) = (offsets, targets);
            insert_edges(&mut offsets, &mut targets, extra);
            prop_assert_eq!((offsets, targets), expected);
        }
    }
}
