//! The dominator tree aggregated by path signature: every reachable block gets the signature of
//! its chain of dominators (its root, then one step per dominator), and each signature the
//! retained bytes of the objects carrying it or a longer one.
//!
//! One sequential pass in preorder (a dominator comes before the nodes it dominates). The
//! signature of a node extends its immediate dominator's by at most one step, so the objects
//! whose signature lies under trie node `T` are exactly the dominator subtrees of the objects
//! that start `T` (those whose dominator has another signature): `T`'s retained bytes are the
//! sum of their retained sizes.

use super::classify::{Classified, NO_SHAPE};
use super::trie::SigTrie;
use crate::analysis::Analysis;
use crate::blocks::NodeId;
use crate::graph::SUPER_ROOT;
use rustc_hash::FxHashMap;

/// Marks the super-root and root-kind nodes in the signature array.
pub const NOT_A_BLOCK: u32 = u32::MAX;

pub struct DomTrie {
    pub trie: SigTrie,
    /// Signature of every reachable node by preorder number ([`NOT_A_BLOCK`] for the super-root
    /// and root kinds).
    pub sig_pre: Vec<u32>,
}

pub fn dominator_trie(a: &Analysis<'_>, c: &Classified) -> DomTrie {
    let tree = &a.tree;
    let preorder = a.preorder();
    let r = tree.reachable_count();
    let mut trie = SigTrie::new(c.shapes.names.clone());
    let mut sig_pre = vec![NOT_A_BLOCK; r];
    // Root label of a top object that no root record points at directly: it depends only on
    // its dominator (a root kind, or the super-root), so it is named once per dominator.
    let mut shared_roots: FxHashMap<NodeId, u32> = FxHashMap::default();
    for p in 1..r {
        let v = preorder[p];
        let shape = c.shape_pre[p];
        if shape == NO_SHAPE || a.graph.root_kind_of(v).is_some() {
            continue;
        }
        let d = tree.idom_pre[p] as usize;
        let (s, head) = if sig_pre[d] == NOT_A_BLOCK {
            let dn = preorder[d];
            let root = if dn == SUPER_ROOT || a.graph.roots_of(v).is_empty() {
                *shared_roots.entry(dn).or_insert_with(|| trie.root(&crate::groups::top_label(a, v)))
            } else {
                trie.root(&crate::groups::top_label(a, v))
            };
            (trie.step(root, c.edge_pre[p], shape), true)
        } else {
            let parent = sig_pre[d];
            let s = trie.step(parent, c.edge_pre[p], shape);
            (s, s != parent)
        };
        sig_pre[p] = s;
        let node = &mut trie.nodes[s as usize];
        node.count += 1;
        if head {
            node.retained += tree.retained_pre.get(p);
        }
    }
    // A root's node holds what its top objects retain.
    for i in 1..trie.nodes.len() {
        let n = &trie.nodes[i];
        if n.edge == super::classify::EDGE_TOP {
            let (parent, retained) = (n.parent as usize, n.retained);
            trie.nodes[parent].retained += retained;
        }
    }
    DomTrie { trie, sig_pre }
}
