//! The full analysis of one snapshot: the graph, its dominator tree with retained sizes, and
//! names, with the caches of what the reports compute from them (root labels, block kinds, the
//! dominator tree's children, types, each grouping's groups, the summary's suspects). It answers the heap facts and the analysed-heap trait
//! from the graph.

use crate::analysed_heap::AnalysedHeap;
use crate::blocks::{BlockMap, BlockRef, NodeId, PointsTo, NO_NODE};
use crate::closures::ClosureSweep;
use crate::dominators::{self, Csr, DominatorTree};
use crate::error::AnalyzeError;
use crate::facts::HeapFacts;
use crate::graph::{HeapGraph, SUPER_ROOT};
use crate::groups::{self, BlockKinds};
use crate::mem::Scatter;
use crate::model::{Group, GroupBy, GroupKey, NodeKind, RootShare};
use crate::names::Names;
use crate::progress::{PhaseTimer, Progress};
use crate::retainers::Retainers;
use crate::typed::Typing;
use crate::walks;
use heapsnap_format::{RegionKind, Snapshot};
use heapsnap_values::HeaderLayout;
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::Instant;

pub struct Analysis<'s> {
    pub snap: &'s Snapshot,
    pub graph: HeapGraph<'s>,
    pub tree: DominatorTree,
    pub names: Names<'s>,
    /// Seconds spent in each step.
    pub timings: Vec<(&'static str, f64)>,
    /// Module block address -> module name, from the `global` roots (slot - 8 * field index).
    modules: rustc_hash::FxHashMap<u64, &'s str>,
    /// Which roots retain what, computed when a report first needs it.
    retainers: OnceLock<Retainers>,
    /// Every block's kind, found when a grouping or the index first needs it.
    block_kinds: OnceLock<BlockKinds>,
    /// The blocks' OCaml types, computed when a report first needs them.
    typing: OnceLock<Option<Typing<'static>>>,
    /// The closures swept beside the dominators, until the types take them.
    closure_sweep: std::sync::Mutex<Option<ClosureSweep>>,
    /// Every node's shortest-path parent (one breadth-first search), made when a report needs
    /// them all (the analysis index saves them).
    bfs_parents: OnceLock<walks::ShortestParents>,
    /// Until then, the parents of the nodes asked about, from a search that goes only as deep
    /// as they are ([`walks::PartialParents`]: a first look's suspects are a few levels down).
    partial_parents: std::sync::Mutex<Option<walks::PartialParents>>,
    /// The unreachable blocks and their bytes ([`Analysis::unreachable`]), from a sweep of
    /// their own or the one the kind groups make.
    unreachable: OnceLock<(u64, u64)>,
    /// Each grouping's groups ([`grouping_slot`]), made when first asked for and kept: a report
    /// and the index's completion, in the process that holds a first look's analysis
    /// (`heapsnap-reports`' holder), take the groups the other made, or wait for the ones it is
    /// making, instead of making them again beside it.
    groupings: [OnceLock<Vec<Group>>; GROUPINGS],
    /// The summary's suspects ([`crate::SUMMARY_SUSPECTS_MIN_PERCENT`]), kept for the same reason.
    summary_suspects: OnceLock<crate::SuspectsReport>,
}

/// How many groupings there are ([`GroupBy`]).
const GROUPINGS: usize = 5;

/// Where a grouping's groups are kept in [`Analysis`].
fn grouping_slot(by: GroupBy) -> usize {
    match by {
        GroupBy::Reserved => 0,
        GroupBy::Kind => 1,
        GroupBy::Closure => 2,
        GroupBy::Root => 3,
        GroupBy::Type => 4,
    }
}

impl<'s> Analysis<'s> {
    /// Builds the graph, then dominators and retained sizes.
    pub fn new(snap: &'s Snapshot, progress: &Progress) -> Result<Self, AnalyzeError> {
        let mut timings = Vec::new();
        let t = Instant::now();
        let (graph, tree, ocaml, closure_sweep) = std::thread::scope(|scope| {
            // The program's OCaml names (tens of megabytes of JSON on a real program, and a
            // type environment made from them) are parsed on one core, in one piece, and
            // almost every report reads them: they are parsed beside the graph and the
            // dominators, which leave a core idle in their sequential steps.
            let parsing = snap.ocaml_names().is_some().then(|| scope.spawn(|| crate::names::OcamlNames::of(snap)));
            let graph = HeapGraph::build(snap, progress)?;
            timings.push(("graph", t.elapsed().as_secs_f64()));
            // What each closure runs, for their types, needs only the blocks and the snapshot's
            // symbols and line tables: swept on one core beside the dominators, whose
            // sequential steps leave the other idle (only when there are names to type with).
            let (tree, sweep) = std::thread::scope(|beside| {
                let sweeping = parsing.is_some().then(|| beside.spawn(|| ClosureSweep::of_blocks(snap, &graph.blocks, false)));
                let t = Instant::now();
                let step = progress.step("dominators", 0);
                let tree = dominator_tree(&graph);
                step.finish_and_clear();
                timings.push(("dominators", t.elapsed().as_secs_f64()));
                (tree, sweeping.map(join_or_resume))
            });
            let ocaml = parsing.map(join_or_resume);
            Ok::<_, AnalyzeError>((graph, tree, ocaml, sweep))
        })?;
        let modules = snap
            .roots()
            .iter()
            .filter(|r| matches!(r.root_kind(), heapsnap_format::RootKind::Global | heapsnap_format::RootKind::DynGlobal))
            .filter(|r| r.slot != 0)
            .filter_map(|r| Some((r.slot.checked_sub(8 * r.origin)?, crate::names::module_name(snap.string(r.name)?))))
            .collect();
        Ok(Analysis {
            snap,
            names: match ocaml {
                Some(parsed) => Names::new(snap).with_ocaml(parsed),
                None => Names::new(snap),
            },
            graph,
            tree,
            timings,
            modules,
            retainers: Default::default(),
            block_kinds: Default::default(),
            typing: Default::default(),
            closure_sweep: std::sync::Mutex::new(closure_sweep),
            bfs_parents: Default::default(),
            partial_parents: Default::default(),
            unreachable: Default::default(),
            groupings: Default::default(),
            summary_suspects: Default::default(),
        })
    }

    /// The names of the top objects by their most stable roots, and each root's share.
    pub fn retainers(&self) -> &Retainers {
        self.retainers.get_or_init(|| {
            let (kinds, first) = (self.block_kinds(), self.graph.blocks.first_block_node);
            Retainers::compute(self.snap, &self.graph, &self.tree, &self.names, |v| kinds.key(first, v))
        })
    }

    /// Keeps shortest-path parents made elsewhere (another thread, from the graph alone:
    /// [`walks::bfs_parents`]) for the reports that ask for them; parents made already are kept.
    pub fn keep_bfs_parents(&self, parents: Vec<NodeId>) {
        let _ = self.bfs_parents.get_or_init(|| walks::ShortestParents::from_all(&parents, &self.tree));
    }

    /// Every node's shortest-path parent ([`walks::ShortestParents`]), made on first use and
    /// kept.
    pub fn shortest_parents(&self) -> &walks::ShortestParents {
        self.bfs_parents.get_or_init(|| walks::ShortestParents::search(&self.graph, &self.tree))
    }

    /// Node `v`'s shortest-path parent ([`walks::bfs_parents`]; `NO_NODE`: unreachable): from
    /// every node's when they are made ([`Analysis::shortest_parents`]), else from a search that
    /// goes as deep as `v` and is kept for the next question.
    pub fn bfs_parent_of(&self, v: NodeId) -> NodeId {
        if let Some(parents) = self.bfs_parents.get() {
            return parents.get(v, &self.tree);
        }
        let mut partial = self.partial_parents.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        partial.get_or_insert_with(|| walks::PartialParents::new(&self.graph)).parent(v, &self.graph, &self.tree)
    }

    /// Every block's kind ([`BlockKinds`]).
    pub fn block_kinds(&self) -> &BlockKinds {
        self.block_kinds.get_or_init(|| BlockKinds::of(&self.graph.blocks, self.graph.node_count()))
    }

    /// Groups, largest retained first. Errors when the snapshot cannot be grouped so
    /// ([`GroupBy::check`]).
    pub fn group_by(&self, by: GroupBy) -> Result<Vec<Group>, AnalyzeError> {
        self.grouped(by).map(<[Group]>::to_vec)
    }

    /// [`Analysis::group_by`]'s groups where they are kept: made on first use.
    pub fn grouped(&self, by: GroupBy) -> Result<&[Group], AnalyzeError> {
        by.check(self.snap)?;
        Ok(self.groupings[grouping_slot(by)].get_or_init(|| self.make_groups(by)))
    }

    fn make_groups(&self, by: GroupBy) -> Vec<Group> {
        let (blocks, tree) = (&self.graph.blocks, &self.tree);
        match by {
            GroupBy::Root => groups::root_groups(blocks, tree, self.retainers(), self.labelled_tops()),
            GroupBy::Kind | GroupBy::Closure => {
                let (groups, unreachable) = groups::kind_groups(blocks, tree, &self.names, self.block_kinds(), by);
                let _ = self.unreachable.set(unreachable);
                groups
            }
            GroupBy::Type => groups::type_groups(blocks, tree, AnalysedHeap::typing(self)),
            GroupBy::Reserved => groups::reserved_groups(blocks, tree, &self.names),
        }
    }

    /// The suspects `summary` lists ([`crate::SUMMARY_SUSPECTS_MIN_PERCENT`], at most
    /// [`crate::SUMMARY_SUSPECTS_SHOWN`]), made on first use.
    pub fn summary_suspects(&self) -> &crate::SuspectsReport {
        self.summary_suspects.get_or_init(|| crate::suspects(self, crate::SUMMARY_SUSPECTS_MIN_PERCENT, crate::SUMMARY_SUSPECTS_SHOWN))
    }

    /// Every top object (one whose immediate dominator is the super-root or a root kind) with
    /// its label ([`Analysis::top_label`]), by preorder number: `(preorder number, label id)`
    /// pairs, ascending, and the distinct labels.
    pub fn labelled_tops(&self) -> (Vec<(u32, u32)>, Vec<String>) {
        groups::labelled_tops(self.retainers(), &self.tree, self.graph.blocks.first_block_node, |v| self.describe(v))
    }

    /// The label of a top node (one whose immediate dominator is the super-root or a root
    /// kind): its most stable roots ([`Retainers`]): `Module.field` for a global, what it is
    /// and who shares it (`list cell shared by A.0, B.0`) when several roots of the same
    /// stability reach it; else its description.
    pub fn top_label(&self, v: NodeId) -> String {
        match self.retainers().label(&self.tree, v) {
            Some(label) => label.to_string(),
            None => self.describe(v),
        }
    }

    /// Live blocks no root reaches (garbage of a collection cycle that has not swept them yet),
    /// and their bytes: counted apart from every group.
    pub fn unreachable(&self) -> (u64, u64) {
        *self.unreachable.get_or_init(|| self.count_unreachable())
    }

    fn count_unreachable(&self) -> (u64, u64) {
        // The unreachable nodes from the preorder numbers (a scan of one array on every core),
        // then their blocks: found in log time each when they are few, else by a sweep of the
        // regions (a busy program's heap mid-cycle holds many that are not swept yet).
        let blocks = &self.graph.blocks;
        let first = blocks.first_block_node as usize;
        let pre_of = self.tree.pre_of.get(first..).unwrap_or(&[]);
        let count = pre_of.par_iter().filter(|&&p| p == NO_NODE).count();
        if count < pre_of.len() / 64 {
            return pre_of
                .par_iter()
                .enumerate()
                .filter(|&(_, &p)| p == NO_NODE)
                .filter_map(|(i, _)| blocks.block((first + i) as NodeId))
                .map(|b| (1u64, b.header.bytes()))
                .reduce(|| (0, 0), |x, y| (x.0 + y.0, x.1 + y.1));
        }
        let tree = &self.tree;
        let regions: Vec<usize> = blocks.block_regions().collect();
        regions
            .par_iter()
            .map(|&r| {
                blocks
                    .region_blocks(r)
                    .filter(|b| !tree.is_reachable(b.node))
                    .fold((0u64, 0u64), |(n, bytes), b| (n + 1, bytes + b.header.bytes()))
            })
            .reduce(|| (0, 0), |x, y| (x.0 + y.0, x.1 + y.1))
    }

    /// Children in the dominator tree, largest retained first (ties by node).
    pub fn children(&self, node: NodeId) -> Vec<NodeId> {
        self.children_retaining_at_least(node, 0)
    }

    /// The children retaining at least `min` bytes, in [`Analysis::children`]' order: sorted
    /// with the sizes the child lists give, not looked up again at each comparison.
    fn children_retaining_at_least(&self, node: NodeId, min: u64) -> Vec<NodeId> {
        let mut out: Vec<(NodeId, u64)> = self.unordered_children(node).filter(|&(_, r)| r >= min).collect();
        out.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        out.into_iter().map(|(c, _)| c).collect()
    }

    /// Children in the dominator tree with what each retains, in preorder.
    fn unordered_children(&self, node: NodeId) -> impl Iterator<Item = (NodeId, u64)> + use<'_, 's> {
        let (offsets, kids) = self.tree.children_csr();
        let range = match self.tree.pre_of.get(node as usize) {
            Some(&p) if p != NO_NODE => offsets[p as usize] as usize..offsets[p as usize + 1] as usize,
            _ => 0..0,
        };
        let preorder = self.preorder();
        kids[range].iter().map(move |&c| (preorder[c as usize], self.tree.retained_pre.get(c as usize)))
    }

    pub fn node_kind(&self, node: NodeId) -> Option<NodeKind> {
        if node == SUPER_ROOT {
            return Some(NodeKind::SuperRoot);
        }
        if let Some(k) = self.graph.root_kind_of(node) {
            return Some(NodeKind::Roots(k));
        }
        let r = self.graph.blocks.region_of_node(node)?;
        Some(NodeKind::Block(self.graph.blocks.regions[r as usize].kind))
    }

    pub fn address(&self, node: NodeId) -> Option<u64> {
        self.graph.blocks.block(node).map(|b| b.address)
    }

    pub fn shallow(&self, node: NodeId) -> u64 {
        self.graph.blocks.block(node).map_or(0, |b| b.header.bytes())
    }

    pub fn retained(&self, node: NodeId) -> u64 {
        self.tree.retained(node)
    }

    pub fn idom(&self, node: NodeId) -> Option<NodeId> {
        Some(self.tree.idom(node)).filter(|&d| d != NO_NODE)
    }

    /// Reachable nodes in preorder (root first, dominators before the nodes they dominate).
    pub fn preorder(&self) -> &[NodeId] {
        self.tree.preorder()
    }

    /// Total heap bytes reachable from the roots (static data excluded).
    pub fn reachable_bytes(&self) -> u64 {
        self.retained(SUPER_ROOT)
    }

    /// Blocks reachable from the roots (static data included).
    pub fn reachable_objects(&self) -> u64 {
        let blocks = &self.graph.blocks;
        self.tree.pre_of.iter().enumerate().filter(|&(v, &p)| p != NO_NODE && blocks.is_block(v as NodeId)).count() as u64
    }

    /// A one-line description of any node ([`AnalysedHeap::describe`]).
    pub fn describe(&self, node: NodeId) -> String {
        AnalysedHeap::describe(self, node)
    }

    /// The module name when the node is a compilation unit's module block (the block whose
    /// fields the `global` roots are).
    pub fn module_of(&self, node: NodeId) -> Option<&'s str> {
        let address = self.graph.blocks.block(node)?.address;
        self.modules.get(&address).copied()
    }

    /// The node of the block at `address` (its first field, or any address inside it).
    pub fn node_at(&self, address: u64) -> Result<NodeId, AnalyzeError> {
        match self.graph.blocks.resolve(address) {
            PointsTo::Node(n) => Ok(n),
            _ => {
                // Accept the header's address, too.
                match self.graph.blocks.resolve(address + 8) {
                    PointsTo::Node(n) => Ok(n),
                    _ => Err(AnalyzeError::NoBlockAt(address)),
                }
            }
        }
    }
}

impl<'s> HeapFacts<'s> for Analysis<'s> {
    fn snap(&self) -> &'s Snapshot {
        self.snap
    }

    fn names(&self) -> &Names<'s> {
        &self.names
    }

    fn layout(&self) -> &HeaderLayout {
        &self.graph.blocks.layout
    }

    fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    fn node_kind(&self, v: NodeId) -> Option<NodeKind> {
        Analysis::node_kind(self, v)
    }

    fn block(&self, v: NodeId) -> Option<BlockRef<'s>> {
        self.graph.blocks.block(v)
    }

    fn module_of(&self, v: NodeId) -> Option<&'s str> {
        Analysis::module_of(self, v)
    }

    fn resolve(&self, value: u64) -> PointsTo {
        self.graph.blocks.resolve(value)
    }

    fn block_of_pointer(&self, value: u64) -> Option<BlockRef<'s>> {
        self.graph.blocks.block_of_pointer(value)
    }

    fn block_map(&self) -> Option<&BlockMap<'s>> {
        Some(&self.graph.blocks)
    }

    fn is_ephemeron(&self, v: NodeId) -> bool {
        self.graph.ephemerons.iter().any(|e| e.node == v)
    }

    fn idom(&self, v: NodeId) -> Option<NodeId> {
        Analysis::idom(self, v)
    }

    fn root_records(&self, v: NodeId) -> Vec<u32> {
        self.graph.roots_of(v).iter().map(|r| r.record).collect()
    }
}

impl<'s> AnalysedHeap<'s> for Analysis<'s> {
    fn kind_of(&self, b: &BlockRef<'_>) -> GroupKey {
        crate::kinds::kind_key(&self.graph.blocks, b)
    }

    fn kinds(&self) -> Vec<GroupKey> {
        use rayon::prelude::*;
        let blocks = &self.graph.blocks;
        let regions: Vec<usize> = blocks.block_regions().collect();
        let keys: rustc_hash::FxHashSet<GroupKey> = regions
            .into_par_iter()
            .flat_map_iter(|r| blocks.region_blocks(r).map(|b| crate::kinds::kind_key(blocks, &b)).collect::<rustc_hash::FxHashSet<_>>())
            .collect();
        keys.into_iter().collect()
    }

    fn blocks_where(&self, keep: &(dyn Fn(&BlockRef<'s>) -> bool + Sync)) -> Vec<NodeId> {
        use rayon::prelude::*;
        let blocks = &self.graph.blocks;
        let mut regions: Vec<usize> = blocks.block_regions().collect();
        regions.sort_by_key(|&r| blocks.regions[r].nodes.start);
        regions.into_par_iter().flat_map_iter(|r| blocks.region_blocks(r).filter(|b| keep(b)).map(|b| b.node).collect::<Vec<_>>()).collect()
    }

    fn blocks_of_kinds(&self, kinds: &[GroupKey]) -> Vec<NodeId> {
        let blocks = &self.graph.blocks;
        self.blocks_where(&|b| kinds.contains(&crate::kinds::kind_key(blocks, b)))
    }

    fn retained(&self, v: NodeId) -> u64 {
        Analysis::retained(self, v)
    }

    fn reachable_bytes(&self) -> u64 {
        Analysis::reachable_bytes(self)
    }

    fn is_reachable(&self, v: NodeId) -> bool {
        self.tree.is_reachable(v)
    }

    fn children(&self, v: NodeId) -> Vec<NodeId> {
        Analysis::children(self, v)
    }

    fn children_retaining(&self, v: NodeId, min: u64) -> Vec<NodeId> {
        self.children_retaining_at_least(v, min)
    }

    fn first_child_where(&self, v: NodeId, keep: &dyn Fn(NodeId) -> bool) -> Option<NodeId> {
        // The first in `children`' order: the largest, the smallest node among equals.
        self.unordered_children(v).filter(|&(c, _)| keep(c)).max_by(|x, y| x.1.cmp(&y.1).then(y.0.cmp(&x.0))).map(|(c, _)| c)
    }

    fn top_label(&self, v: NodeId) -> String {
        Analysis::top_label(self, v)
    }

    fn referrers(&self, v: NodeId, max: usize) -> Vec<NodeId> {
        walks::referrers(&self.graph, v, max)
    }

    fn bfs_parent(&self, v: NodeId) -> Option<NodeId> {
        Some(self.bfs_parent_of(v)).filter(|&p| p != NO_NODE)
    }

    fn groups(&self, by: GroupBy) -> Result<Cow<'_, [Group]>, AnalyzeError> {
        self.grouped(by).map(Cow::Borrowed)
    }

    fn root_shares(&self) -> Cow<'_, [RootShare]> {
        Cow::Borrowed(&self.retainers().per_root)
    }

    fn unreachable(&self) -> (u64, u64) {
        Analysis::unreachable(self)
    }

    fn typing(&self) -> Option<&Typing<'_>> {
        self.typing
            .get_or_init(|| {
                let sweep = self.closure_sweep.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                Typing::compute_swept(self, sweep)
            })
            .as_ref()
    }

    fn typed_bytes_dominated_by(&self, v: NodeId) -> Option<u64> {
        let typing = self.typing()?;
        let start = self.tree.pre_of.get(v as usize).copied().filter(|&p| p != NO_NODE)? as usize;
        let order = self.tree.preorder();
        let retained = &self.tree.retained_pre;
        let is_typed = |p: usize| typing.type_id(order[p]) != crate::model::NO_TYPE;
        // What freeing a node gives back ([`HeapFacts::freeable`]) is what it retains less what
        // its children in the tree retain (static data retains nothing). Summed over the typed
        // nodes `v` dominates, that is their retained bytes less those of the nodes whose
        // immediate dominator is typed: the tree's arrays read in order, where each node's own
        // size would be read from its header, scattered through the snapshot.
        //
        // What `v` dominates comes after it in preorder, each node after its immediate
        // dominator: one pass marks them, and which of them are typed (a bit each: a heap of
        // 300M objects needs 38 MB for each).
        let words = (order.len() - start).div_ceil(64);
        let (mut inside, mut typed) = (vec![0u64; words], vec![0u64; words]);
        let bit = |bits: &[u64], i: usize| bits[i / 64] >> (i % 64) & 1 == 1;
        let set = |bits: &mut [u64], i: usize| bits[i / 64] |= 1 << (i % 64);
        set(&mut inside, 0);
        let (mut typed_retained, mut below_typed) = (0u64, 0u64);
        if is_typed(start) {
            set(&mut typed, 0);
            typed_retained = retained.get(start);
        }
        for p in start + 1..order.len() {
            let Some(idom) = (self.tree.idom_pre[p] as usize).checked_sub(start).filter(|&i| bit(&inside, i)) else { continue };
            set(&mut inside, p - start);
            if bit(&typed, idom) {
                below_typed += retained.get(p);
            }
            if is_typed(p) {
                set(&mut typed, p - start);
                typed_retained += retained.get(p);
            }
        }
        Some(typed_retained.saturating_sub(below_typed))
    }
}

/// A scoped thread's result, or its panic resumed here.
fn join_or_resume<T>(thread: std::thread::ScopedJoinHandle<'_, T>) -> T {
    thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Dominators and retained sizes of a graph, from the super-root.
pub fn dominator_tree(graph: &HeapGraph<'_>) -> DominatorTree {
    let timer = PhaseTimer::start("retained sizes");
    // Shallow sizes straight from the headers, region by region, into preorder slots, gathered
    // on another core while the dominators' sequential semi-dominator loop runs. Static data is
    // never freed, so it retains nothing (its blocks stay nodes, with a size of 0 here).
    let gather = |pre_of: &[u32], reachable: usize| {
        let shallow = ShallowWords::gather(graph, pre_of, reachable);
        timer.lap("shallow sizes");
        shallow
    };
    let (mut tree, shallow) = dominators::dominators_with(Csr { offsets: &graph.offsets, targets: &graph.targets }, SUPER_ROOT, gather);
    timer.lap("dominators done");
    // In words (u32) when the whole heap's words fit one, else in bytes.
    let total_words: u64 = graph.blocks.regions.iter().map(|r| r.counts.live_bytes / 8).sum();
    if total_words < u64::from(u32::MAX) {
        let fits = tree.set_retained_words(shallow.widen(|w| w as u32));
        debug_assert!(fits);
    } else {
        tree.set_retained(shallow.widen(|w| w * 8));
    }
    timer.lap("sums");
    tree
}

/// Shallow sizes in words by preorder number, one byte each while the dominators still need
/// their memory (the peak of the analysis): sizes of [`ShallowWords::LARGE`] words and more,
/// rare, are listed apart.
struct ShallowWords {
    small: Vec<u8>,
    large: Vec<(u32, u64)>,
}

impl ShallowWords {
    const LARGE: u64 = u8::MAX as u64;

    fn gather(graph: &HeapGraph<'_>, pre_of: &[u32], reachable: usize) -> ShallowWords {
        let blocks = &graph.blocks;
        let mut small = vec![0u8; reachable];
        let out = Scatter(small.as_mut_ptr());
        let heap_regions: Vec<usize> = blocks.block_regions().filter(|&r| blocks.regions[r].kind != RegionKind::Static).collect();
        let large = heap_regions
            .par_iter()
            .flat_map_iter(|&r| {
                let mut large = Vec::new();
                for b in blocks.region_blocks(r) {
                    let p = pre_of[b.node as usize];
                    if p != NO_NODE {
                        let words = b.header.wosize + 1;
                        // SAFETY: preorder numbers are distinct and below `reachable`.
                        unsafe { out.write(p as usize, words.min(Self::LARGE) as u8) };
                        if words >= Self::LARGE {
                            large.push((p, words));
                        }
                    }
                }
                large
            })
            .collect();
        ShallowWords { small, large }
    }

    /// The sizes by preorder number, each as `convert(words)`.
    fn widen<T: Send + Copy>(self, convert: impl Fn(u64) -> T + Sync) -> Vec<T> {
        let mut wide = Vec::new();
        self.small.par_iter().map(|&w| convert(u64::from(w))).collect_into_vec(&mut wide);
        for (p, words) in self.large {
            wide[p as usize] = convert(words);
        }
        wide
    }
}
