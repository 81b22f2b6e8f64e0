//! One analysed snapshot: the graph, its dominator tree with retained sizes, and names.

use crate::blocks::{NodeId, NO_NODE};
use crate::dominators::{self, Csr, DominatorTree};
use crate::graph::{HeapGraph, SUPER_ROOT};
use crate::names::Names;
use crate::progress::Progress;
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
        Ok(Analysis { snap, names: Names::new(snap), graph, tree, timings })
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
        self.tree.retained.get(node as usize).copied().unwrap_or(0)
    }

    pub fn idom(&self, node: NodeId) -> Option<NodeId> {
        self.tree.idom.get(node as usize).copied().filter(|&d| d != NO_NODE)
    }

    /// Total bytes reachable from the roots.
    pub fn reachable_bytes(&self) -> u64 {
        self.retained(SUPER_ROOT)
    }

    /// A one-line description of any node.
    pub fn describe(&self, node: NodeId) -> String {
        match self.node_kind(node) {
            Some(NodeKind::SuperRoot) => "(all roots)".into(),
            Some(NodeKind::Roots(k)) => format!("({k} roots)"),
            Some(NodeKind::Block(_)) => {
                let b = self.graph.blocks.block(node).expect("block node");
                let mut d = self.names.describe(&b);
                if let Some(m) = self.module_of(node) {
                    d = format!("module {m} ({d})");
                }
                d
            }
            None => format!("(no node {node})"),
        }
    }

    /// The module name when the node is a module block reached by a global root.
    pub fn module_of(&self, node: NodeId) -> Option<String> {
        self.graph.roots_of(node).iter().find_map(|r| {
            let rec = &self.snap.roots()[r.record as usize];
            matches!(rec.root_kind(), heapsnap_format::RootKind::Global | heapsnap_format::RootKind::DynGlobal)
                .then(|| self.snap.string(rec.name).map(|n| crate::names::module_name(n).to_string()))
                .flatten()
        })
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
    let shallow = shallow_words(graph);
    dominators::dominators_and_retained(
        Csr { offsets: &graph.offsets, targets: &graph.targets },
        SUPER_ROOT,
        |v| u64::from(shallow[v as usize]) * 8,
    )
}

/// Words (header included) of every block node; 0 for the super-root and root-kind nodes.
pub fn shallow_words(graph: &HeapGraph<'_>) -> Vec<u32> {
    let blocks = &graph.blocks;
    let mut shallow = crate::mem::filled(graph.node_count(), 0u32);
    let mut slices: Vec<(usize, &mut [u32])> = Vec::new();
    let mut order: Vec<usize> = blocks.block_regions().collect();
    order.sort_by_key(|&r| blocks.regions[r].nodes.start);
    let mut rest: &mut [u32] = &mut shallow;
    let mut at = 0u32;
    for r in order {
        let nodes = blocks.regions[r].nodes.clone();
        let (_, tail) = std::mem::take(&mut rest).split_at_mut((nodes.start - at) as usize);
        let (mine, tail) = tail.split_at_mut(nodes.len());
        rest = tail;
        at = nodes.end;
        slices.push((r, mine));
    }
    slices.into_par_iter().for_each(|(r, out)| {
        for (b, o) in blocks.region_blocks(r).zip(out.iter_mut()) {
            *o = (b.header.wosize + 1).min(u64::from(u32::MAX)) as u32;
        }
    });
    shallow
}
