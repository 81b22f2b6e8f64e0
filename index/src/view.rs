//! Reading an analysed snapshot through its index: the same questions [`Analysis`] answers
//! (retained sizes, dominators, children, names, referrers), without the graph.
//!
//! Every array comes from a checked section; every lookup is bounds-checked, so a hostile but
//! well-formed index gives wrong answers at worst, never a panic or an endless loop.
//!
//! [`Analysis`]: heapsnap_analyze::Analysis

use crate::file::{IndexError, IndexFile};
use crate::sections::*;
use heapsnap_analyze::blocks::{BlockRef, NodeId, NO_NODE};
use heapsnap_analyze::names::Names;
use heapsnap_analyze::ocaml::{self, HeaderLayout};
use heapsnap_format::{RegionKind, RootKind, Snapshot};
use rustc_hash::FxHashMap as HashMap;

/// Which sections a caller reads: they are checked when the view opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Totals and groups only.
    Meta,
    /// The dominator tree too.
    Tree,
    /// Everything: objects, referrers, paths.
    All,
}

impl Needs {
    fn sections(self) -> &'static [u32] {
        match self {
            Needs::Meta => &[META],
            Needs::Tree => &[META, PRE_OF, PREORDER, IDOM_PRE, RETAINED, KID_OFFSETS, KIDS, ADDRESS, TOP_NODES, TOP_LABEL_IDS, TOP_LABELS],
            Needs::All => &[
                META,
                PRE_OF,
                PREORDER,
                IDOM_PRE,
                RETAINED,
                KID_OFFSETS,
                KIDS,
                ADDRESS,
                BY_ADDRESS,
                BFS_PARENT,
                REF_OFFSETS,
                REFS,
                ROOT_EDGES,
                TOP_NODES,
                TOP_LABEL_IDS,
                TOP_LABELS,
            ],
        }
    }
}

pub struct IndexView<'s> {
    pub snap: &'s Snapshot,
    pub meta: Meta,
    pub names: Names<'s>,
    pub layout: HeaderLayout,
    pre_of: &'s [u32],
    preorder: &'s [u32],
    idom_pre: &'s [u32],
    retained_pre: &'s [u64],
    kid_offsets: &'s [u32],
    kids: &'s [u32],
    address: &'s [u64],
    by_address: &'s [u32],
    bfs_parent: &'s [u32],
    ref_offsets: &'s [u32],
    refs: &'s [u32],
    root_edges: &'s [u32],
    top_nodes: &'s [u32],
    top_label_ids: &'s [u32],
    top_labels: Vec<String>,
    modules: HashMap<u64, &'s str>,
}

/// What a node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    SuperRoot,
    Roots(usize),
    Block,
}

impl<'s> IndexView<'s> {
    pub fn open(snap: &'s Snapshot, file: &'s IndexFile, needs: Needs) -> Result<Self, IndexError> {
        let meta: Meta = serde_json::from_slice(file.section(META)?).map_err(|e| IndexError::Inconsistent(format!("meta data: {e}")))?;
        let wanted = needs.sections();
        let u32s = |k: u32| if wanted.contains(&k) { file.u32s(k) } else { Ok(&[][..]) };
        let u64s = |k: u32| if wanted.contains(&k) { file.u64s(k) } else { Ok(&[][..]) };
        let n = meta.node_count as usize;
        let r = meta.reachable_count as usize;
        let view = IndexView {
            snap,
            names: Names::new(snap),
            layout: HeaderLayout::new(snap.metadata().reserved_header_bits, snap.metadata().colours),
            pre_of: u32s(PRE_OF)?,
            preorder: u32s(PREORDER)?,
            idom_pre: u32s(IDOM_PRE)?,
            retained_pre: u64s(RETAINED)?,
            kid_offsets: u32s(KID_OFFSETS)?,
            kids: u32s(KIDS)?,
            address: u64s(ADDRESS)?,
            by_address: u32s(BY_ADDRESS)?,
            bfs_parent: u32s(BFS_PARENT)?,
            ref_offsets: u32s(REF_OFFSETS)?,
            refs: u32s(REFS)?,
            root_edges: u32s(ROOT_EDGES)?,
            top_nodes: u32s(TOP_NODES)?,
            top_label_ids: u32s(TOP_LABEL_IDS)?,
            top_labels: if wanted.contains(&TOP_LABELS) {
                serde_json::from_slice(file.section(TOP_LABELS)?).map_err(|e| IndexError::Inconsistent(format!("top labels: {e}")))?
            } else {
                Vec::new()
            },
            modules: snap
                .roots()
                .iter()
                .filter(|r| matches!(r.root_kind(), RootKind::Global | RootKind::DynGlobal))
                .filter(|r| r.slot != 0)
                .filter_map(|r| Some((r.slot.checked_sub(8 * r.origin)?, heapsnap_analyze::names::module_name(snap.string(r.name)?))))
                .collect(),
            meta,
        };
        let lengths: [(&str, usize, usize, u32); 11] = [
            ("top labels", view.top_label_ids.len(), view.top_nodes.len(), TOP_LABEL_IDS),
            ("preorder numbers", view.pre_of.len(), n, PRE_OF),
            ("preorder", view.preorder.len(), r, PREORDER),
            ("dominators", view.idom_pre.len(), r, IDOM_PRE),
            ("retained sizes", view.retained_pre.len(), r, RETAINED),
            ("children offsets", view.kid_offsets.len(), r + 1, KID_OFFSETS),
            ("children", view.kids.len(), r.saturating_sub(1), KIDS),
            ("addresses", view.address.len(), n, ADDRESS),
            ("parents", view.bfs_parent.len(), n, BFS_PARENT),
            ("referrer offsets", view.ref_offsets.len(), n + 1, REF_OFFSETS),
            ("root edges", view.root_edges.len() % 2, 0, ROOT_EDGES),
        ];
        for (what, got, want, kind) in lengths {
            if wanted.contains(&kind) && got != want {
                return Err(IndexError::Inconsistent(format!("{what}: {got} entries for {want}")));
            }
        }
        if view.meta.root_kinds.len() + 1 > view.meta.first_block_node as usize || view.meta.first_block_node as usize > n {
            return Err(IndexError::Inconsistent("root kinds".into()));
        }
        Ok(view)
    }

    pub fn node_count(&self) -> usize {
        self.meta.node_count as usize
    }

    pub fn reachable_bytes(&self) -> u64 {
        self.meta.summary.reachable_bytes
    }

    fn pre(&self, node: NodeId) -> Option<usize> {
        self.pre_of.get(node as usize).filter(|&&p| p != NO_NODE).map(|&p| p as usize)
    }

    pub fn is_reachable(&self, node: NodeId) -> bool {
        self.pre(node).is_some()
    }

    pub fn retained(&self, node: NodeId) -> u64 {
        self.pre(node).and_then(|p| self.retained_pre.get(p)).copied().unwrap_or(0)
    }

    pub fn idom(&self, node: NodeId) -> Option<NodeId> {
        let p = self.pre(node).filter(|&p| p != 0)?;
        self.preorder.get(*self.idom_pre.get(p)? as usize).copied()
    }

    /// Children in the dominator tree, largest retained first.
    pub fn children(&self, node: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        let range = self.pre(node).and_then(|p| Some(*self.kid_offsets.get(p)? as usize..*self.kid_offsets.get(p + 1)? as usize));
        let kids = range.and_then(|r| self.kids.get(r)).unwrap_or(&[]);
        kids.iter().filter_map(|&p| self.preorder.get(p as usize).copied())
    }

    pub fn children_count(&self, node: NodeId) -> usize {
        self.pre(node)
            .and_then(|p| Some((*self.kid_offsets.get(p + 1)? as usize).saturating_sub(*self.kid_offsets.get(p)? as usize)))
            .unwrap_or(0)
    }

    pub fn node_kind(&self, node: NodeId) -> Option<NodeKind> {
        if node == 0 {
            Some(NodeKind::SuperRoot)
        } else if node < self.meta.first_block_node {
            Some(NodeKind::Roots(node as usize - 1)).filter(|_| (node as usize) <= self.meta.root_kinds.len())
        } else if (node as usize) < self.node_count() {
            Some(NodeKind::Block)
        } else {
            None
        }
    }

    /// The root kind a root-kind node stands for (its label).
    pub fn root_kind_label(&self, node: NodeId) -> Option<&str> {
        match self.node_kind(node)? {
            NodeKind::Roots(k) => self.meta.root_kinds.get(k).map(|k| k.label.as_str()),
            _ => None,
        }
    }

    pub fn address(&self, node: NodeId) -> Option<u64> {
        self.address.get(node as usize).copied().filter(|&a| a != 0)
    }

    /// The block behind a node, read from the snapshot.
    pub fn block(&self, node: NodeId) -> Option<BlockRef<'s>> {
        let address = self.address(node)?;
        let r = self.snap.region_index_of(address)?;
        let region = self.snap.region(r);
        let words = region.words();
        let w = ((address - region.base()) / 8) as usize;
        let header = self.layout.decode(*words.get(w.checked_sub(1)?)?);
        let end = (w as u64 + header.wosize).min(words.len() as u64) as usize;
        Some(BlockRef { node, address, header, fields: words.get(w..end)?, region: r as u32 })
    }

    pub fn shallow(&self, node: NodeId) -> u64 {
        self.block(node).map_or(0, |b| b.header.bytes())
    }

    pub fn region_kind(&self, node: NodeId) -> Option<RegionKind> {
        let b = self.block(node)?;
        Some(self.snap.region(b.region as usize).kind())
    }

    pub fn module_of(&self, node: NodeId) -> Option<&'s str> {
        self.modules.get(&self.address(node)?).copied()
    }

    /// A one-line description, as `Analysis::describe` gives it.
    pub fn describe(&self, node: NodeId) -> String {
        match self.node_kind(node) {
            Some(NodeKind::SuperRoot) => "(all roots)".into(),
            Some(NodeKind::Roots(k)) => format!("({} roots)", self.meta.root_kinds.get(k).map_or("?", |k| k.display.as_str())),
            Some(NodeKind::Block) => match self.block(node) {
                Some(b) => {
                    let d = self.names.describe(&b);
                    match self.module_of(node) {
                        Some(m) => format!("module {m} ({d})"),
                        None => d,
                    }
                }
                None => format!("(no block for node {node})"),
            },
            None => format!("(no node {node})"),
        }
    }

    /// The root a node right below the roots is attributed to.
    pub fn top_label(&self, node: NodeId) -> String {
        let found = self.top_nodes.binary_search(&node).ok().and_then(|i| self.top_label_ids.get(i));
        match found.and_then(|&l| self.top_labels.get(l as usize)) {
            Some(label) => label.clone(),
            None => self.describe(node),
        }
    }

    /// The node of the block at `address` (its first field, or its header).
    pub fn node_at(&self, address: u64) -> Option<NodeId> {
        self.exact(address).or_else(|| self.exact(address.checked_add(8)?))
    }

    fn exact(&self, address: u64) -> Option<NodeId> {
        let i = self.by_address.partition_point(|&v| self.address.get(v as usize).copied().unwrap_or(0) < address);
        self.by_address.get(i).copied().filter(|&v| self.address(v) == Some(address))
    }

    /// Where a pointer goes: a node (infix pointers resolve to their closure), `None` outside
    /// every block (`Err(true)` when it lies in a block-holding region).
    pub fn resolve(&self, value: u64) -> Result<NodeId, bool> {
        if let Some(v) = self.exact(value) {
            return Ok(v);
        }
        let Some(r) = self.snap.region_index_of(value) else { return Err(false) };
        let region = self.snap.region(r);
        if !matches!(region.kind(), RegionKind::Pool | RegionKind::MinorHeap | RegionKind::Large | RegionKind::Static) {
            return Err(false);
        }
        let w = (value - region.base()) / 8;
        if value.is_multiple_of(8) && w > 0 {
            if let Some(&hd) = region.words().get(w as usize - 1) {
                let h = self.layout.decode(hd);
                if h.tag == ocaml::INFIX_TAG {
                    if let Some(v) = w.checked_sub(h.wosize).and_then(|s| self.exact(region.base() + s * 8)) {
                        return Ok(v);
                    }
                }
            }
        }
        Err(true)
    }

    /// Nodes with a strong edge to `node`, ascending.
    pub fn referrers(&self, node: NodeId) -> &[u32] {
        let range = (|| Some(*self.ref_offsets.get(node as usize)? as usize..*self.ref_offsets.get(node as usize + 1)? as usize))();
        range.and_then(|r| self.refs.get(r)).unwrap_or(&[])
    }

    pub fn bfs_parent(&self, node: NodeId) -> NodeId {
        self.bfs_parent.get(node as usize).copied().unwrap_or(NO_NODE)
    }

    /// Root records reaching `node` (indices in `Snapshot::roots()`).
    pub fn roots_of(&self, node: NodeId) -> Vec<u32> {
        let pairs: &[[u32; 2]] = bytemuck::cast_slice(&self.root_edges[..self.root_edges.len() / 2 * 2]);
        let start = pairs.partition_point(|p| p[0] < node);
        pairs[start..].iter().take_while(|p| p[0] == node).map(|p| p[1]).collect()
    }

    /// The chain of dominators from the super-root down to `node` (bounded: a corrupt index
    /// cannot make it loop).
    pub fn dominator_chain(&self, node: NodeId) -> Vec<NodeId> {
        let mut chain = vec![node];
        let mut x = node;
        while let Some(d) = self.idom(x) {
            if chain.len() > self.node_count() {
                break;
            }
            chain.push(d);
            x = d;
        }
        chain.reverse();
        chain
    }

    /// Block nodes, in node order.
    pub fn block_nodes(&self) -> std::ops::Range<NodeId> {
        self.meta.first_block_node..self.meta.node_count
    }
}
