//! One analysed snapshot: the graph, its dominator tree with retained sizes, and names.

use crate::analysed::AnalysedHeap;
use crate::blocks::{NodeId, NO_NODE};
use crate::dominators::{self, Csr, DominatorTree};
use crate::graph::{HeapGraph, SUPER_ROOT};
use crate::mem::Scatter;
use crate::names::Names;
use crate::progress::{PhaseTimer, Progress};
use crate::AnalyzeError;
use heapsnap_format::{RegionKind, Snapshot};
use rayon::prelude::*;
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
    retainers: std::sync::OnceLock<crate::retainers::Retainers>,
    /// Every block's kind, found when a grouping or the index first needs it.
    block_kinds: std::sync::OnceLock<crate::groups::BlockKinds>,
    /// The dominator tree's children (offsets and preorder numbers, by preorder number),
    /// computed when a report first walks the tree.
    children: std::sync::OnceLock<(Vec<u32>, Vec<u32>)>,
    /// The blocks' OCaml types, computed when a report first needs them.
    pub(crate) typing: std::sync::OnceLock<Option<crate::typed::Typing>>,
}

/// What a node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    SuperRoot,
    Roots(heapsnap_format::RootKind),
    Block(RegionKind),
}

impl<'s> Analysis<'s> {
    /// Builds the graph, then dominators and retained sizes.
    pub fn new(snap: &'s Snapshot, progress: &Progress) -> Result<Self, AnalyzeError> {
        let mut timings = Vec::new();
        let t = Instant::now();
        let graph = HeapGraph::build(snap, progress)?;
        timings.push(("graph", t.elapsed().as_secs_f64()));
        let t = Instant::now();
        let step = progress.step("dominators", 0);
        let tree = dominator_tree(&graph);
        step.finish_and_clear();
        timings.push(("dominators", t.elapsed().as_secs_f64()));
        let modules = snap
            .roots()
            .iter()
            .filter(|r| matches!(r.root_kind(), heapsnap_format::RootKind::Global | heapsnap_format::RootKind::DynGlobal))
            .filter(|r| r.slot != 0)
            .filter_map(|r| Some((r.slot.checked_sub(8 * r.origin)?, crate::names::module_name(snap.string(r.name)?))))
            .collect();
        Ok(Analysis {
            snap,
            names: Names::new(snap),
            graph,
            tree,
            timings,
            modules,
            retainers: Default::default(),
            block_kinds: Default::default(),
            children: Default::default(),
            typing: Default::default(),
        })
    }

    /// The names of the top objects by their most stable roots, and each root's share.
    pub fn retainers(&self) -> &crate::retainers::Retainers {
        self.retainers.get_or_init(|| crate::retainers::Retainers::compute(self))
    }

    /// Every block's kind ([`crate::groups::BlockKinds`]).
    pub fn block_kinds(&self) -> &crate::groups::BlockKinds {
        self.block_kinds.get_or_init(|| crate::groups::BlockKinds::of(&self.graph.blocks, self.graph.node_count()))
    }

    /// Children in the dominator tree, largest retained first (ties by node).
    pub fn children(&self, node: NodeId) -> Vec<NodeId> {
        let (offsets, kids) = self.children.get_or_init(|| self.tree.children_pre());
        let Some(&p) = self.tree.pre_of.get(node as usize).filter(|&&p| p != NO_NODE) else { return Vec::new() };
        let preorder = self.preorder();
        let mut out: Vec<NodeId> =
            kids[offsets[p as usize] as usize..offsets[p as usize + 1] as usize].iter().map(|&c| preorder[c as usize]).collect();
        out.sort_by(|&x, &y| self.retained(y).cmp(&self.retained(x)).then(x.cmp(&y)));
        out
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

    /// What freeing the node would give back: its shallow size, 0 for static data.
    pub fn freeable(&self, node: NodeId) -> u64 {
        match self.node_kind(node) {
            Some(NodeKind::Block(RegionKind::Static)) | None => 0,
            Some(_) => self.shallow(node),
        }
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
            crate::blocks::Target::Node(n) => Ok(n),
            _ => {
                // Accept the header's address, too.
                match self.graph.blocks.resolve(address + 8) {
                    crate::blocks::Target::Node(n) => Ok(n),
                    _ => Err(AnalyzeError::NoBlockAt(address)),
                }
            }
        }
    }
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
