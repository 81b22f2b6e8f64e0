//! Matching signature tries across snapshots. Shape and root ids are per snapshot; names are
//! not: two trie nodes match when their parents match, their edges are equal and their labels
//! have the same name. The merged trie holds every signature seen in any snapshot, with one
//! column of figures per snapshot (zero where a snapshot lacks it). The labels of typed shapes'
//! fields are kept by shape name, for the steps' texts.

use crate::signatures::classify::EDGE_ANY;
use crate::signatures::classify::{Edge, EDGE_ROOT};
use crate::signatures::trie::{describe_named_chain, labels_by_name, SigTrie, StepText};
use rustc_hash::FxHashMap;

#[derive(Clone, Debug)]
pub struct MergedNode {
    pub parent: u32,
    pub edge: Edge,
    pub name: u32,
    pub folded: bool,
}

pub struct MergedTrie {
    pub nodes: Vec<MergedNode>,
    pub names: Vec<String>,
    name_ids: FxHashMap<String, u32>,
    index: FxHashMap<(u32, Edge, u32), u32>,
    /// `(shape name id, field index)` -> the field's label, for typed shapes.
    field_labels: FxHashMap<(u32, Edge), String>,
    /// Figures by `node * columns + snapshot`.
    pub count: Vec<u64>,
    pub retained: Vec<u64>,
    pub columns: usize,
}

impl MergedTrie {
    pub fn new(columns: usize) -> Self {
        MergedTrie {
            nodes: vec![MergedNode { parent: 0, edge: EDGE_ROOT, name: u32::MAX, folded: false }],
            names: Vec::new(),
            name_ids: FxHashMap::default(),
            index: FxHashMap::default(),
            field_labels: FxHashMap::default(),
            count: vec![0; columns],
            retained: vec![0; columns],
            columns,
        }
    }

    fn name_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.name_ids.get(name) {
            return id;
        }
        self.names.push(name.to_string());
        let id = self.names.len() as u32 - 1;
        self.name_ids.insert(name.to_string(), id);
        id
    }

    /// Adds a snapshot's trie: returns the merged id of each of its nodes. With `column`, its
    /// counts and retained bytes go to that column.
    pub fn add(&mut self, t: &SigTrie, column: Option<usize>) -> Vec<u32> {
        let shapes: Vec<u32> = t.shape_names.iter().map(|n| self.name_id(n)).collect();
        let roots: Vec<u32> = t.root_labels.iter().map(|n| self.name_id(n)).collect();
        for (shape, field, label) in labels_by_name(t) {
            let shape = self.name_id(shape);
            self.field_labels.entry((shape, field)).or_insert_with(|| label.to_string());
        }
        let mut map = vec![0u32; t.nodes.len()];
        for (i, n) in t.nodes.iter().enumerate().skip(1) {
            let parent = map[n.parent as usize];
            let name = if n.edge == EDGE_ROOT { roots[n.label as usize] } else { shapes[n.label as usize] };
            let id = match self.index.get(&(parent, n.edge, name)) {
                Some(&id) => id,
                None => {
                    self.nodes.push(MergedNode { parent, edge: n.edge, name, folded: false });
                    self.count.extend(std::iter::repeat_n(0, self.columns));
                    self.retained.extend(std::iter::repeat_n(0, self.columns));
                    let id = self.nodes.len() as u32 - 1;
                    self.index.insert((parent, n.edge, name), id);
                    id
                }
            };
            self.nodes[id as usize].folded |= n.folded;
            if let Some(c) = column {
                self.count[id as usize * self.columns + c] += n.count;
                self.retained[id as usize * self.columns + c] += n.retained;
            }
            map[i] = id;
        }
        map
    }

    pub fn counts(&self, id: u32) -> &[u64] {
        &self.count[id as usize * self.columns..(id as usize + 1) * self.columns]
    }

    pub fn retained_of(&self, id: u32) -> &[u64] {
        &self.retained[id as usize * self.columns..(id as usize + 1) * self.columns]
    }

    /// Trie nodes from the root's node down to `id`.
    pub fn chain(&self, mut id: u32) -> Vec<u32> {
        let mut out = Vec::new();
        while id != 0 {
            out.push(id);
            id = self.nodes[id as usize].parent;
        }
        out.reverse();
        out
    }

    /// The steps of the signature of `id`, named.
    pub fn steps(&self, id: u32) -> Vec<StepText> {
        let chain = self.chain(id);
        let raw: Vec<(Edge, &str, bool, Option<&str>)> = chain
            .iter()
            .map(|&c| {
                let n = &self.nodes[c as usize];
                let parent = &self.nodes[n.parent as usize];
                // The field's label, when the previous step is a typed shape naming it.
                let field = (n.edge < EDGE_ANY && n.parent != 0 && parent.edge != EDGE_ROOT)
                    .then(|| self.field_labels.get(&(parent.name, n.edge)).map(String::as_str))
                    .flatten();
                (n.edge, self.names.get(n.name as usize).map_or("?", String::as_str), n.folded, field)
            })
            .collect();
        describe_named_chain(&raw)
    }

    /// Children of every node (by merged id).
    pub fn children(&self) -> Vec<Vec<u32>> {
        let mut out = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            out[n.parent as usize].push(i as u32);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signatures::classify::EDGE_ANY;

    #[test]
    fn same_structure_matches_through_different_ids() {
        // Snapshot 1 met "list" before "string"; snapshot 2 the other way round.
        let mut t1 = SigTrie::new(vec!["list".into(), "string".into()]);
        let r = t1.root("M.0");
        let l = t1.step(r, 0, 0);
        let s = t1.step(l, 1, 1);
        t1.nodes[s as usize].count = 5;
        let mut t2 = SigTrie::new(vec!["string".into(), "list".into()]);
        let r2 = t2.root("M.0");
        let l2 = t2.step(r2, 0, 1);
        let s2 = t2.step(l2, 1, 0);
        let other = t2.step(l2, EDGE_ANY, 0);
        t2.nodes[s2 as usize].count = 7;
        let mut m = MergedTrie::new(2);
        let m1 = m.add(&t1, Some(0));
        let m2 = m.add(&t2, Some(1));
        assert_eq!(m1[s as usize], m2[s2 as usize]);
        assert_eq!(m.counts(m1[s as usize]), &[5, 7]);
        assert_ne!(m2[other as usize], m1[s as usize], "the edge is part of the signature");
        assert_eq!(m.counts(m2[other as usize]), &[0, 0]);
    }

    #[test]
    fn typed_shapes_name_their_fields_in_the_steps() {
        // Snapshot 1 met the entry type before the cell type; its field labels come by shape.
        let mut t1 = SigTrie::new(vec!["M.entry".into(), "Cons : M.entry list".into(), "string".into()]);
        t1.field_labels = vec![vec![Some("id".into()), Some("payload".into())], vec![None, None], vec![]];
        let r = t1.root("M.items");
        let cell = t1.step(r, 0, 1);
        let entry = t1.step(cell, 0, 0);
        let payload = t1.step(entry, 1, 2);
        let mut t2 = SigTrie::new(vec!["string".into(), "Cons : M.entry list".into(), "M.entry".into()]);
        t2.field_labels = vec![vec![], vec![None, None], vec![Some("id".into()), Some("payload".into())]];
        let r2 = t2.root("M.items");
        let cell2 = t2.step(r2, 0, 1);
        let entry2 = t2.step(cell2, 0, 2);
        let payload2 = t2.step(entry2, 1, 0);
        let mut m = MergedTrie::new(2);
        let m1 = m.add(&t1, Some(0));
        let m2 = m.add(&t2, Some(1));
        assert_eq!(m1[payload as usize], m2[payload2 as usize]);
        let steps = m.steps(m1[payload as usize]);
        let edges: Vec<&str> = steps.iter().map(|s| s.edge.as_str()).collect();
        assert_eq!(edges, ["root", "", ".0", ".payload"], "a tuple's or a constructor's unnamed field stays .N");
        assert_eq!(
            crate::signatures::trie::signature_text(&steps, false),
            "M.items -> Cons : M.entry list -> .0 M.entry -> .payload string"
        );
    }
}
