//! What the reports read of an analysed snapshot. The full [`Analysis`] answers it from the
//! graph; the analysis index (crate `heapsnap-index`) answers it from what the first analysis
//! saved. Each report (`dominators`, `path`, `inspect`, `top`) is written once, against this
//! trait, so both give the same answer.

use crate::analysis::{Analysis, NodeKind};
use crate::blocks::{BlockMap, BlockRef, NodeId, Target};
use crate::groups::{Group, GroupBy, GroupKey};
use crate::names::Names;
use crate::ocaml::HeaderLayout;
use crate::retainers::RootShare;
use crate::typed::Typing;
use crate::AnalyzeError;
use heapsnap_format::Snapshot;
use std::borrow::Cow;

pub trait AnalysedHeap<'s> {
    fn snap(&self) -> &'s Snapshot;
    fn names(&self) -> &Names<'s>;
    fn layout(&self) -> &HeaderLayout;
    fn node_count(&self) -> usize;
    fn node_kind(&self, v: NodeId) -> Option<NodeKind>;
    fn block(&self, v: NodeId) -> Option<BlockRef<'s>>;
    /// What a block is ([`crate::groups::kind_key`]: a recognised structure, else its shape).
    fn kind_of(&self, b: &BlockRef<'_>) -> GroupKey;
    /// The kind of a node's block (`None`: not a block).
    fn kind_of_node(&self, v: NodeId) -> Option<GroupKey> {
        self.block(v).map(|b| self.kind_of(&b))
    }

    /// Every kind some block has, reachable or not.
    fn kinds(&self) -> Vec<GroupKey>;
    /// The block nodes `keep` selects, ascending.
    fn blocks_where(&self, keep: &(dyn Fn(&BlockRef<'s>) -> bool + Sync)) -> Vec<NodeId>;
    /// The block nodes of these kinds, ascending.
    fn blocks_of_kinds(&self, kinds: &[GroupKey]) -> Vec<NodeId>;
    /// The module name when the node is a compilation unit's module block.
    fn module_of(&self, v: NodeId) -> Option<&'s str>;
    /// Where a pointer-looking word goes.
    fn resolve(&self, value: u64) -> Target;
    fn is_ephemeron(&self, v: NodeId) -> bool;
    fn retained(&self, v: NodeId) -> u64;
    /// Total heap bytes reachable from the roots (static data excluded).
    fn reachable_bytes(&self) -> u64;
    fn is_reachable(&self, v: NodeId) -> bool;
    fn idom(&self, v: NodeId) -> Option<NodeId>;
    /// Children in the dominator tree, largest retained first (ties by node).
    fn children(&self, v: NodeId) -> Vec<NodeId>;
    /// The name of a top object (right below the super-root or a root kind): its most stable
    /// roots ([`crate::retainers`]).
    fn top_label(&self, v: NodeId) -> String;
    /// The root records (indices in `Snapshot::roots()`) that point at `v` themselves.
    fn root_records(&self, v: NodeId) -> Vec<u32>;
    /// Up to `max` nodes with a strong edge to `v`, ascending.
    fn referrers(&self, v: NodeId, max: usize) -> Vec<NodeId>;
    /// Parents in one breadth-first search from the super-root over strong edges
    /// ([`crate::paths::bfs_parents`]).
    fn bfs_parents(&self) -> Cow<'_, [NodeId]>;
    /// The groups of a grouping, largest retained first ([`crate::groups::groups`]).
    fn groups(&self, by: GroupBy) -> Result<Cow<'_, [Group]>, AnalyzeError>;
    /// Per root: what it retains alone and shared ([`crate::retainers::Retainers`]).
    fn root_shares(&self) -> Cow<'_, [RootShare]>;
    /// Unreachable objects and their bytes ([`crate::reports::unreachable`]).
    fn unreachable(&self) -> (u64, u64);
    /// The blocks' OCaml types ([`crate::typed`]), computed on first use; `None` when the
    /// snapshot has no OCaml names.
    fn typing(&self) -> Option<&Typing>;

    /// A node's OCaml type, as reports show it (`Server.session`, `Cons : int list`); `None`
    /// when untyped, or when the type says no more than the block's own description (strings,
    /// floats, boxed integers).
    fn type_label(&self, v: NodeId) -> Option<String> {
        let b = self.block(v)?;
        if matches!(b.header.tag, crate::ocaml::STRING_TAG | crate::ocaml::DOUBLE_TAG | crate::ocaml::CUSTOM_TAG) {
            return None;
        }
        self.typing()?.describe(v, b.header.tag, b.fields.first().copied())
    }

    /// The name of field `i` of node `v` when its type names it (a record label, `[i]`).
    fn field_label(&self, v: NodeId, i: usize) -> Option<String> {
        if let Some(m) = self.module_of(v) {
            let symbol = format!("caml{m}");
            return self.names().global_field(&symbol, i as u64).map(|f| f.path.clone());
        }
        let b = self.block(v)?;
        self.typing()?.field_name(v, b.header.tag, i)
    }

    /// The block a pointer points at (its first field); `None` for anything else.
    /// The blocks, when they were walked (a full analysis): walks on every core use them.
    fn block_map(&self) -> Option<&BlockMap<'s>> {
        None
    }

    fn block_of_pointer(&self, value: u64) -> Option<BlockRef<'s>> {
        match self.resolve(value) {
            Target::Node(v) => self.block(v).filter(|b| b.address == value),
            _ => None,
        }
    }

    fn address(&self, v: NodeId) -> Option<u64> {
        self.block(v).map(|b| b.address)
    }

    fn shallow(&self, v: NodeId) -> u64 {
        self.block(v).map_or(0, |b| b.header.bytes())
    }

    /// A one-line description of any node: a recognised structure with its size
    /// (`Hashtbl (5000 entries)`), else the block's own description; a module block says so.
    fn describe(&self, v: NodeId) -> String {
        match self.node_kind(v) {
            Some(NodeKind::SuperRoot) => "(all roots)".into(),
            Some(NodeKind::Roots(k)) => format!("({k} roots)"),
            Some(NodeKind::Block(_)) => {
                let Some(b) = self.block(v) else { return format!("(no block for node {v})") };
                let d = match (self.kind_of(&b), self.type_label(v)) {
                    (GroupKey::Structure(s), Some(t)) => format!("{t} ({})", crate::structures::describe(s, &b)),
                    (_, Some(t)) => t,
                    (GroupKey::Structure(s), None) => crate::structures::describe(s, &b),
                    _ => self.names().describe(&b),
                };
                match self.module_of(v) {
                    Some(m) => format!("module {m} ({d})"),
                    None => d,
                }
            }
            None => format!("(no node {v})"),
        }
    }

    /// Describes a node with its address first, as `inspect` lists nodes.
    fn with_address(&self, v: NodeId) -> String {
        match self.address(v) {
            Some(x) => format!("{x:#x} {}", self.describe(v)),
            None => self.describe(v),
        }
    }

    /// The node of the block at `address` (its first field, an infix pointer into it, or its
    /// header).
    fn node_at(&self, address: u64) -> Result<NodeId, AnalyzeError> {
        match (self.resolve(address), address.checked_add(8).map(|x| self.resolve(x))) {
            (Target::Node(n), _) | (_, Some(Target::Node(n))) => Ok(n),
            _ => Err(AnalyzeError::NoBlockAt(address)),
        }
    }
}

impl<'s> AnalysedHeap<'s> for Analysis<'s> {
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

    fn kind_of(&self, b: &BlockRef<'_>) -> GroupKey {
        crate::groups::kind_key(&self.graph.blocks, b)
    }

    fn kinds(&self) -> Vec<GroupKey> {
        use rayon::prelude::*;
        let blocks = &self.graph.blocks;
        let regions: Vec<usize> = blocks.block_regions().collect();
        let keys: rustc_hash::FxHashSet<GroupKey> = regions
            .into_par_iter()
            .flat_map_iter(|r| blocks.region_blocks(r).map(|b| crate::groups::kind_key(blocks, &b)).collect::<rustc_hash::FxHashSet<_>>())
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
        self.blocks_where(&|b| kinds.contains(&crate::groups::kind_key(blocks, b)))
    }

    fn module_of(&self, v: NodeId) -> Option<&'s str> {
        Analysis::module_of(self, v)
    }

    fn resolve(&self, value: u64) -> Target {
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

    fn retained(&self, v: NodeId) -> u64 {
        Analysis::retained(self, v)
    }

    fn reachable_bytes(&self) -> u64 {
        Analysis::reachable_bytes(self)
    }

    fn is_reachable(&self, v: NodeId) -> bool {
        self.tree.is_reachable(v)
    }

    fn idom(&self, v: NodeId) -> Option<NodeId> {
        Analysis::idom(self, v)
    }

    fn children(&self, v: NodeId) -> Vec<NodeId> {
        Analysis::children(self, v)
    }

    fn top_label(&self, v: NodeId) -> String {
        crate::groups::top_label(self, v)
    }

    fn root_records(&self, v: NodeId) -> Vec<u32> {
        self.graph.roots_of(v).iter().map(|r| r.record).collect()
    }

    fn referrers(&self, v: NodeId, max: usize) -> Vec<NodeId> {
        crate::paths::referrers(self, v, max)
    }

    fn bfs_parents(&self) -> Cow<'_, [NodeId]> {
        Cow::Owned(crate::paths::bfs_parents(self))
    }

    fn groups(&self, by: GroupBy) -> Result<Cow<'_, [Group]>, AnalyzeError> {
        crate::groups::groups(self, by).map(Cow::Owned)
    }

    fn root_shares(&self) -> Cow<'_, [RootShare]> {
        Cow::Borrowed(&self.retainers().per_root)
    }

    fn unreachable(&self) -> (u64, u64) {
        crate::reports::unreachable(self)
    }

    fn typing(&self) -> Option<&Typing> {
        self.typing.get_or_init(|| Typing::compute(self)).as_ref()
    }
}
