//! The heap facts the typing, the retainer labels and the reports read: blocks, where pointers
//! go, names, roots and immediate dominators. Narrow on purpose: the full analysis (`Analysis`) answers
//! them from its graph, the analysis index (crate `heapsnap-index`) from what it saved; what is
//! computed from these facts (groups, root shares, typing) is the analysed-heap trait's.

use crate::blocks::{BlockMap, BlockRef, NodeId, PointsTo};
use crate::error::AnalyzeError;
use crate::model::NodeKind;
use crate::names::Names;
use heapsnap_format::Snapshot;
use heapsnap_values::HeaderLayout;

pub trait HeapFacts<'s> {
    fn snap(&self) -> &'s Snapshot;
    fn names(&self) -> &Names<'s>;
    fn layout(&self) -> &HeaderLayout;
    fn node_count(&self) -> usize;
    fn node_kind(&self, v: NodeId) -> Option<NodeKind>;
    fn block(&self, v: NodeId) -> Option<BlockRef<'s>>;
    /// The module name when the node is a compilation unit's module block.
    fn module_of(&self, v: NodeId) -> Option<&'s str>;
    /// Where a pointer-looking word goes.
    fn resolve(&self, value: u64) -> PointsTo;
    fn is_ephemeron(&self, v: NodeId) -> bool;
    fn idom(&self, v: NodeId) -> Option<NodeId>;
    /// The root records (indices in `Snapshot::roots()`) that point at `v` themselves.
    fn root_records(&self, v: NodeId) -> Vec<u32>;

    /// The blocks, when they were walked (a full analysis): walks on every core use them.
    fn block_map(&self) -> Option<&BlockMap<'s>> {
        None
    }

    /// The block a pointer points at (its first field); `None` for anything else.
    fn block_of_pointer(&self, value: u64) -> Option<BlockRef<'s>> {
        match self.resolve(value) {
            PointsTo::Node(v) => self.block(v).filter(|b| b.address == value),
            _ => None,
        }
    }

    fn address(&self, v: NodeId) -> Option<u64> {
        self.block(v).map(|b| b.address)
    }

    fn shallow(&self, v: NodeId) -> u64 {
        self.block(v).map_or(0, |b| b.header.bytes())
    }

    /// What freeing the node would give back: its shallow size, 0 for static data (and for a
    /// node that is no block).
    fn freeable(&self, v: NodeId) -> u64 {
        match self.node_kind(v) {
            Some(NodeKind::Block(heapsnap_format::RegionKind::Static)) | None => 0,
            Some(_) => self.shallow(v),
        }
    }

    /// The node of the block at `address` (its first field, an infix pointer into it, or its
    /// header).
    fn node_at(&self, address: u64) -> Result<NodeId, AnalyzeError> {
        match (self.resolve(address), address.checked_add(8).map(|x| self.resolve(x))) {
            (PointsTo::Node(n), _) | (_, Some(PointsTo::Node(n))) => Ok(n),
            _ => Err(AnalyzeError::NoBlockAt(address)),
        }
    }
}
