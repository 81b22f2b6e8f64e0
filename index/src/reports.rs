//! What the index adds to the reports of `heapsnap-analyze`: the `summary` saved at build time,
//! and one row of the dominator tree for the web UI's lazily expanded view. Every other report
//! (`top`, `dominators`, `path`, `inspect`) is the analysis's own function, run on the
//! [`IndexView`] through [`AnalysedHeap`].

use crate::view::IndexView;
use heapsnap_analyze::{AnalysedHeap, GroupBy, HeapFacts, NodeId, NodeKind, Summary, SuspectsReport, TreeNode};
use heapsnap_format::RegionKind;

/// The bytes of the typed blocks, `(heap, static data)` (`None`: no typing): the walk's own
/// count (`Typing::typed_bytes`) includes static data, which reachable bytes leave out. Every
/// block is looked at: saved in the meta data ([`crate::sections::Meta::typed_bytes`]), so
/// that `info` need not look again.
pub fn typed_bytes<'s>(a: &impl AnalysedHeap<'s>) -> Option<(u64, u64)> {
    let typing = a.typing()?;
    let (mut heap_bytes, mut static_bytes) = (0u64, 0u64);
    for v in 0..a.node_count() as NodeId {
        if typing.type_name(typing.type_id(v)).is_none() {
            continue;
        }
        let bytes = a.block(v).map_or(0, |b| b.header.bytes());
        match a.node_kind(v) {
            Some(NodeKind::Block(RegionKind::Static)) => static_bytes += bytes,
            Some(NodeKind::Block(_)) => heap_bytes += bytes,
            _ => {}
        }
    }
    Some((heap_bytes, static_bytes))
}

impl IndexView<'_> {
    /// The `summary` report: saved whole, but for its `top` largest groups, by OCaml type when
    /// the snapshot has names, else by kind.
    pub fn summary(&self, top: usize) -> Summary {
        let mut s = self.meta.summary.clone();
        let by =
            if self.snap.ocaml_names().is_some() && self.has_section(crate::sections::GROUPS_TYPE) { GroupBy::Type } else { GroupBy::Kind };
        s.top_groups = self.groups(by).map(|g| g.iter().take(top).cloned().collect()).unwrap_or_default();
        s.top_groups_by = by.name().to_string();
        s
    }

    /// The leak suspects `summary` lists, as the first analysis found them
    /// (`heapsnap_analyze::suspects` at [`heapsnap_analyze::SUMMARY_SUSPECTS_MIN_PERCENT`], at
    /// most [`heapsnap_analyze::SUMMARY_SUSPECTS_SHOWN`]): read from the meta data alone.
    pub fn summary_suspects(&self) -> SuspectsReport {
        let mut s = self.meta.summary_suspects.clone();
        s.restore_percents();
        s
    }

    /// One node of the dominator tree, without children (as `dominators` shows a node that
    /// stands for itself alone).
    pub fn tree_node(&self, v: NodeId) -> TreeNode {
        let total = self.reachable_bytes().max(1);
        let below_roots = self.idom(v).is_some_and(|d| matches!(self.node_kind(d), Some(NodeKind::SuperRoot | NodeKind::Roots(_))));
        let root = (below_roots && matches!(self.node_kind(v), Some(NodeKind::Block(_)))).then(|| self.top_label(v));
        TreeNode {
            node: v,
            address: self.address(v).map(|x| format!("{x:#x}")),
            description: self.describe(v),
            root,
            shallow: self.shallow(v),
            retained: self.retained(v),
            percent: self.retained(v) as f64 * 100.0 / total as f64,
            similar: None,
            children: Vec::new(),
            omitted_children: 0,
            omitted_retained: 0,
        }
    }
}
