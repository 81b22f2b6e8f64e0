//! Signature tries: objects aggregated by their path signature.
//!
//! A signature is a root's name, then a chain of steps `(edge, shape)`: the field of the
//! previous object that points at the next one (`.N`, or `[*]` for an element of a block of
//! more than 16 fields, `~` when the previous object dominates the next without pointing at it)
//! and the next object's shape. A step whose shape is the previous step's shape is folded into
//! it (whatever its edge): list cells, tree nodes and hash-bucket chains become one step marked
//! `+`. Chains longer than [`MAX_DEPTH`] steps, and new signatures past [`MAX_NODES`], stop
//! growing: deeper objects count at their deepest recorded ancestor.
//!
//! With OCaml names, shapes are types and an edge from a typed block is written by its field's
//! label (`.payload`): the trie keeps field indices, and the labels of each typed shape's fields
//! beside them (one type has the same labels in every snapshot of one build).
//!
//! Each trie node is one signature; its parent is the signature one step shorter. Node 0 is the
//! empty signature (above the roots).

use super::classify::{Edge, EDGE_ANY, EDGE_DOMINATED, EDGE_ROOT, EDGE_TOP};
use crate::model::{Role, Structure};
use rustc_hash::FxHashMap;

/// Steps after the root that a signature records.
pub const MAX_DEPTH: u16 = 48;
/// Signatures a trie records.
pub const MAX_NODES: usize = 1 << 20;

#[derive(Clone, Debug)]
pub struct SigNode {
    pub parent: u32,
    pub edge: Edge,
    /// A shape id, or for [`EDGE_ROOT`] nodes a root label id.
    pub label: u32,
    pub depth: u16,
    /// Some member's parent in the chain had this same signature (a folded run).
    pub folded: bool,
    /// The root label id of the chain.
    pub root: u32,
    /// Objects with exactly this signature.
    pub count: u64,
    /// Bytes of the objects with this signature or a longer one (for dominator tries: retained
    /// bytes; for path tries: unused).
    pub retained: u64,
}

pub struct SigTrie {
    pub nodes: Vec<SigNode>,
    /// Shape names by shape id.
    pub shape_names: Vec<String>,
    /// Field labels of the typed shapes by shape id (`Classified::shape_fields`; empty when
    /// the shape has none).
    pub field_labels: Vec<Vec<Option<String>>>,
    /// Root labels by id.
    pub root_labels: Vec<String>,
    root_ids: FxHashMap<String, u32>,
    index: FxHashMap<u128, u32>,
    /// A direct-mapped cache in front of `index`: most steps repeat a recent one.
    recent: Vec<(u128, u32)>,
}

const RECENT_BITS: u32 = 12;

impl SigTrie {
    pub fn new(shape_names: Vec<String>) -> Self {
        let top = SigNode { parent: 0, edge: EDGE_ROOT, label: u32::MAX, depth: 0, folded: false, root: u32::MAX, count: 0, retained: 0 };
        SigTrie {
            nodes: vec![top],
            shape_names,
            field_labels: Vec::new(),
            root_labels: Vec::new(),
            root_ids: FxHashMap::default(),
            index: FxHashMap::default(),
            recent: vec![(u128::MAX, 0); 1 << RECENT_BITS],
        }
    }

    /// A trie made elsewhere (read back from the analysis index): its nodes, shape names, the
    /// typed shapes' field labels and root labels. Only read after: its lookup tables are empty.
    pub fn from_parts(
        nodes: Vec<SigNode>,
        shape_names: Vec<String>,
        field_labels: Vec<Vec<Option<String>>>,
        root_labels: Vec<String>,
    ) -> Self {
        SigTrie { nodes, field_labels, root_labels, ..SigTrie::new(shape_names) }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// The trie node of a root (created on first use).
    pub fn root(&mut self, label: &str) -> u32 {
        let id = match self.root_ids.get(label) {
            Some(&id) => id,
            None => {
                self.root_labels.push(label.to_string());
                let id = self.root_labels.len() as u32 - 1;
                self.root_ids.insert(label.to_string(), id);
                id
            }
        };
        self.child(0, EDGE_ROOT, id).expect("roots are always recorded")
    }

    /// The signature `parent` extended by one step; `None` when the trie is full or the chain
    /// too deep (the caller then keeps `parent`).
    pub fn child(&mut self, parent: u32, edge: Edge, label: u32) -> Option<u32> {
        let key = (u128::from(parent) << 64) | (u128::from(edge) << 32) | u128::from(label);
        let slot = ((key as u64 ^ (key >> 64) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - RECENT_BITS)) as usize;
        if self.recent[slot].0 == key {
            return Some(self.recent[slot].1);
        }
        if let Some(&id) = self.index.get(&key) {
            self.recent[slot] = (key, id);
            return Some(id);
        }
        let p = &self.nodes[parent as usize];
        let depth = if edge == EDGE_ROOT { 0 } else { p.depth + 1 };
        if edge != EDGE_ROOT && (depth > MAX_DEPTH || self.nodes.len() >= MAX_NODES) {
            return None;
        }
        let root = if edge == EDGE_ROOT { label } else { p.root };
        self.nodes.push(SigNode { parent, edge, label, depth, folded: false, root, count: 0, retained: 0 });
        let id = self.nodes.len() as u32 - 1;
        self.index.insert(key, id);
        self.recent[slot] = (key, id);
        Some(id)
    }

    /// The signature of an object whose chain parent has signature `parent`, reached through
    /// `edge`, of shape `shape`: folded into `parent` when the shapes agree.
    #[inline]
    pub fn step(&mut self, parent: u32, edge: Edge, shape: u32) -> u32 {
        let p = &self.nodes[parent as usize];
        if p.edge != EDGE_ROOT && p.label == shape {
            self.nodes[parent as usize].folded = true;
            return parent;
        }
        let edge = if p.edge == EDGE_ROOT { EDGE_TOP } else { edge };
        self.child(parent, edge, shape).unwrap_or(parent)
    }

    /// The chain of trie nodes from the root's node down to `id` (node 0 excluded).
    pub fn chain(&self, mut id: u32) -> Vec<u32> {
        let mut out = Vec::new();
        while id != 0 {
            out.push(id);
            id = self.nodes[id as usize].parent;
        }
        out.reverse();
        out
    }

    /// The name of a node's label: its root label or shape name.
    pub fn label_name(&self, id: u32) -> &str {
        let n = &self.nodes[id as usize];
        if n.edge == EDGE_ROOT {
            self.root_labels.get(n.label as usize).map_or("?", String::as_str)
        } else {
            self.shape_names.get(n.label as usize).map_or("?", String::as_str)
        }
    }
}

/// The fields' labels of a trie's shapes, by shape name and field index, as a merged trie
/// keeps them.
pub fn labels_by_name(t: &SigTrie) -> impl Iterator<Item = (&str, Edge, &str)> {
    t.field_labels.iter().enumerate().flat_map(move |(shape, fields)| {
        let name = t.shape_names.get(shape).map_or("?", String::as_str);
        fields.iter().enumerate().filter_map(move |(i, l)| Some((name, i as Edge, l.as_deref()?)))
    })
}

/// How an edge is written in a signature.
pub fn edge_text(edge: Edge) -> String {
    match edge {
        EDGE_ANY => "[*]".into(),
        EDGE_DOMINATED => "~".into(),
        EDGE_ROOT => "root".into(),
        EDGE_TOP => "".into(),
        i => format!(".{i}"),
    }
}

/// One step of a signature as the reports show it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct StepText {
    /// `root` for the root, `""` for the object the root holds, then `.N` (`.label` for a
    /// typed block's named field), `[*]` or `~`.
    pub edge: String,
    /// The shape (or the root's name): what the signature is made of.
    pub shape: String,
    /// A friendlier name where one is known (`Hashtbl data`, `Hashtbl bucket chains`), else
    /// the shape.
    pub label: String,
    /// A folded run of objects of this shape.
    pub folded: bool,
}

/// The steps of a chain given as `(edge, shape name, folded, field label)`, with context names
/// for the parts of a `Hashtbl`; an edge whose field the previous step's type names (its label)
/// is written `.label`.
pub fn describe_named_chain(steps: &[(Edge, &str, bool, Option<&str>)]) -> Vec<StepText> {
    let mut out: Vec<StepText> = Vec::with_capacity(steps.len());
    let (mut prev_structure, mut prev_role) = (None, None);
    for (i, &(edge, shape, folded, field_label)) in steps.iter().enumerate() {
        let field = (edge < EDGE_ANY).then_some(edge as usize);
        let role = Role::of_child(prev_structure, prev_role, field).filter(|_| i > 0);
        let label = match role {
            Some(r) => format!("{} ({shape})", r.plural()),
            None => shape.to_string(),
        };
        prev_structure = Structure::from_name(shape);
        prev_role = role;
        let edge = match field_label {
            Some(l) if edge < EDGE_ANY => format!(".{l}"),
            _ => edge_text(edge),
        };
        out.push(StepText { edge, shape: shape.to_string(), label, folded });
    }
    out
}

/// The canonical text of a signature: `ROOT -> SHAPE -> EDGE SHAPE ...`, `+` after a folded run.
pub fn signature_text(steps: &[StepText], use_labels: bool) -> String {
    let mut s = String::new();
    for (i, st) in steps.iter().enumerate() {
        if i > 0 {
            s.push_str(" -> ");
        }
        if !st.edge.is_empty() && st.edge != "root" {
            s.push_str(&st.edge);
            s.push(' ');
        }
        s.push_str(if use_labels { &st.label } else { &st.shape });
        if st.folded {
            s.push('+');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_and_text() {
        let mut t = SigTrie::new(vec!["Hashtbl".into(), "block tag 0 size >16".into(), "block tag 0 size 3".into(), "string".into()]);
        let r = t.root("Cache.0");
        let h = t.step(r, 0, 0);
        let data = t.step(h, 1, 1);
        let chain = t.step(data, EDGE_ANY, 2);
        assert_eq!(t.step(chain, 2, 2), chain, "same shape folds");
        assert_eq!(t.step(chain, 1, 2), chain, "whatever the field");
        let s = t.step(chain, 1, 3);
        assert_ne!(s, chain);
        assert_eq!(t.step(chain, 1, 3), s, "interned");
        let names: Vec<(Edge, String, bool)> =
            t.chain(s).iter().map(|&id| (t.nodes[id as usize].edge, t.label_name(id).to_string(), t.nodes[id as usize].folded)).collect();
        let steps: Vec<(Edge, &str, bool, Option<&str>)> = names.iter().map(|(e, n, f)| (*e, n.as_str(), *f, None)).collect();
        let text = describe_named_chain(&steps);
        assert_eq!(signature_text(&text, false), "Cache.0 -> Hashtbl -> .1 block tag 0 size >16 -> [*] block tag 0 size 3+ -> .1 string");
        assert_eq!(
            signature_text(&text, true),
            "Cache.0 -> Hashtbl -> .1 Hashtbl data (block tag 0 size >16) -> [*] Hashtbl bucket chains (block tag 0 size 3)+ -> .1 string"
        );
    }

    #[test]
    fn depth_is_capped() {
        let mut t = SigTrie::new(vec!["a".into(), "b".into()]);
        let mut s = t.root("R");
        for i in 0..200u32 {
            s = t.step(s, 0, i % 2);
        }
        assert_eq!(t.nodes[s as usize].depth, MAX_DEPTH);
        assert!(t.len() <= MAX_DEPTH as usize + 2);
    }
}
