//! The edges of each exported node, as DevTools types them: a block's pointer fields are
//! `element` edges with the field's index (a stdlib `Hashtbl`'s bucket array the `data`
//! property; with OCaml names, a record's or inline record's field a property named by its
//! label), the keys of an ephemeron `weak` edges, the data it keeps alive while its keys live
//! an `internal` edge from each key (`ephemeron data`: the analyser adds those edges for its
//! dominators, so DevTools' dominators agree), a continuation's stack values `internal` edges.
//! The synthetic root has an `element` edge to each root-kind node, and those a `property` edge
//! per root record, named as reports name roots (`Cache_leak.1`), `weak` for weak roots.

use super::strings::StringTable;
use heapsnap_analyze::{ocaml, AnalysedHeap, Analysis, BlockRef, HeapGraph, NodeId, PointsTo, Typing, SUPER_ROOT};
use rustc_hash::FxHashMap;

/// DevTools' edge types, in V8's order (`snapshot.meta.edge_types[0]`).
pub const EDGE_TYPES: [&str; 7] = ["context", "element", "property", "internal", "hidden", "shortcut", "weak"];
pub const ELEMENT: u8 = 1;
pub const PROPERTY: u8 = 2;
pub const INTERNAL: u8 = 3;
pub const WEAK: u8 = 6;

/// Marks a node that is not exported.
pub const NO_SLOT: u32 = u32::MAX;

/// A root record that reaches a block: its name (string id) and target.
#[derive(Clone, Copy)]
struct RootRef {
    label: u32,
    target: NodeId,
}

/// Everything edges are made from.
pub struct Edges<'a, 's> {
    graph: &'a HeapGraph<'s>,
    /// Slot of every node in the export ([`NO_SLOT`]: not exported).
    slot_of: &'a [u32],
    /// By slot: whether the node is a stdlib `Hashtbl` (recognised when naming nodes).
    hashtbl: &'a [bool],
    /// Per root kind: its records that reach a block, strong and weak, in the graph's order.
    strong_roots: Vec<Vec<RootRef>>,
    weak_roots: Vec<Vec<RootRef>>,
    ephemeron_key: u32,
    ephemeron_data: u32,
    stack: u32,
    reference: u32,
    hashtbl_data: u32,
    /// The blocks' OCaml types (when the snapshot has names), and each field label's string id:
    /// a typed block's labelled field is a `property` edge named by its label.
    typing: Option<&'a Typing<'a>>,
    labels: FxHashMap<&'a str, u32>,
}

impl<'a, 's> Edges<'a, 's> {
    /// Interns the edge names in `table`.
    pub fn new(a: &'a Analysis<'s>, slot_of: &'a [u32], hashtbl: &'a [bool], table: &mut StringTable) -> Self {
        let kinds = &a.graph.root_kinds;
        let mut strong_roots = vec![Vec::new(); kinds.len()];
        let mut weak_roots = vec![Vec::new(); kinds.len()];
        for r in a.snap.roots() {
            let Some(k) = kinds.iter().position(|&k| k == r.root_kind()) else { continue };
            if !ocaml::is_pointer(r.value) {
                continue;
            }
            if let PointsTo::Node(target) = a.graph.blocks.resolve(r.value) {
                let root = RootRef { label: table.intern(&a.names.root_label(r)), target };
                if r.is_weak() {
                    weak_roots[k].push(root);
                } else {
                    strong_roots[k].push(root);
                }
            }
        }
        let typing = a.typing();
        let labels = typing.map(|t| t.labels().into_iter().map(|l| (l, table.intern(l))).collect()).unwrap_or_default();
        Edges {
            typing,
            labels,
            graph: &a.graph,
            slot_of,
            hashtbl,
            strong_roots,
            weak_roots,
            ephemeron_key: table.intern("ephemeron key"),
            ephemeron_data: table.intern("ephemeron data"),
            stack: table.intern("stack"),
            reference: table.intern("reference"),
            hashtbl_data: table.intern("data"),
        }
    }

    fn slot(&self, v: NodeId) -> Option<u32> {
        self.slot_of.get(v as usize).copied().filter(|&s| s != NO_SLOT)
    }

    /// Calls `f(type, name_or_index, target slot)` for each edge of `v` (its block `block`, if
    /// it is one), in a fixed order; `fields` is scratch space.
    pub fn each(&self, v: NodeId, block: Option<&BlockRef<'_>>, fields: &mut Vec<(u32, NodeId)>, mut f: impl FnMut(u8, u32, u32)) {
        let g = self.graph;
        let succ = g.successors(v);
        if v == SUPER_ROOT {
            for (i, &t) in succ.iter().enumerate() {
                if let Some(s) = self.slot(t) {
                    f(ELEMENT, i as u32, s);
                }
            }
            return;
        }
        if let Some(k) = v.checked_sub(1).map(|k| k as usize).filter(|&k| k < g.root_kinds.len()) {
            let records = &self.strong_roots[k];
            for (i, &t) in succ.iter().enumerate() {
                let Some(s) = self.slot(t) else { continue };
                match records.get(i) {
                    Some(r) if r.target == t => f(PROPERTY, r.label, s),
                    _ => f(ELEMENT, i as u32, s),
                }
            }
            for r in &self.weak_roots[k] {
                if let Some(s) = self.slot(r.target) {
                    f(WEAK, r.label, s);
                }
            }
            return;
        }
        let Some(b) = block else { return };
        let tag = b.header.tag;
        fields.clear();
        if tag != ocaml::CONT_TAG {
            b.header.scanned_fields(b.fields, |i, w| {
                if let PointsTo::Node(t) = g.blocks.resolve(w) {
                    fields.push((i as u32, t));
                }
            });
        }
        let hashtbl = self.slot(v).is_some_and(|s| self.hashtbl.get(s as usize) == Some(&true));
        let conditions = !g.condition_edges.is_empty();
        let mut next = 0;
        for &t in succ {
            let Some(s) = self.slot(t) else { continue };
            if let Some(&(i, _)) = fields.get(next).filter(|&&(_, ft)| ft == t) {
                next += 1;
                let label = self.typing.and_then(|ty| ty.field_label(v, tag, i as usize)).and_then(|l| self.labels.get(l));
                if let Some(&label) = label {
                    f(PROPERTY, label, s);
                } else if hashtbl && i == 1 {
                    f(PROPERTY, self.hashtbl_data, s);
                } else {
                    f(ELEMENT, i, s);
                }
            } else if tag == ocaml::CONT_TAG {
                f(INTERNAL, self.stack, s);
            } else if conditions && g.is_condition_edge(v, t) {
                f(INTERNAL, self.ephemeron_data, s);
            } else if let Some(i) = (tag == ocaml::ABSTRACT_TAG)
                .then(|| b.fields.iter().position(|&w| ocaml::is_pointer(w) && g.blocks.resolve(w) == PointsTo::Node(t)))
                .flatten()
            {
                f(ELEMENT, i as u32, s);
            } else {
                f(INTERNAL, self.reference, s);
            }
        }
        if !g.weak_edges.is_empty() {
            let start = g.weak_edges.partition_point(|&(e, _)| e < v);
            for &(_, key) in g.weak_edges[start..].iter().take_while(|&&(e, _)| e == v) {
                if let Some(s) = self.slot(key) {
                    f(WEAK, self.ephemeron_key, s);
                }
            }
        }
    }
}

/// The exported nodes (reachable from the roots), in node order, and each node's slot.
pub fn exported_nodes(a: &Analysis<'_>) -> (Vec<NodeId>, Vec<u32>) {
    let n = a.graph.node_count();
    let mut order = Vec::with_capacity(a.tree.reachable_count());
    let mut slot_of = vec![NO_SLOT; n];
    for v in 0..n as NodeId {
        if a.tree.is_reachable(v) {
            slot_of[v as usize] = order.len() as u32;
            order.push(v);
        }
    }
    debug_assert!(order.first() == Some(&SUPER_ROOT));
    (order, slot_of)
}
