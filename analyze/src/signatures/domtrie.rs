//! The dominator tree aggregated by path signature: every reachable block gets the signature of
//! its chain of dominators (its root, then one step per dominator), and each signature the
//! retained bytes of the objects carrying it or a longer one. The same pass gives each group its
//! retained bytes.
//!
//! One sequential pass in preorder (a dominator comes before the nodes it dominates). The
//! signature of a node extends its immediate dominator's by at most one step, so the objects
//! whose signature lies under trie node `T` are exactly the dominator subtrees of the objects
//! that start `T` (those whose dominator has another signature): `T`'s retained bytes are the
//! sum of their retained sizes.
//!
//! A group's retained bytes are those of the union of its members' dominator subtrees
//! ([`DominatorTree::union_retained`]).

use super::classify::{Classified, EDGE_TOP, NO_CLASS, NO_GROUP};
use super::trie::SigTrie;
use crate::dominators::DominatorTree;
use crate::full_analysis::Analysis;

/// Marks the super-root and root-kind nodes in the signature array.
pub const NOT_A_BLOCK: u32 = u32::MAX;

pub struct DomTrie {
    pub trie: SigTrie,
    /// Signature of every reachable node by preorder number ([`NOT_A_BLOCK`] for the super-root
    /// and root kinds).
    pub sig_pre: Vec<u32>,
    /// Retained bytes of each group of `Classified::groups`.
    pub group_retained: Vec<u64>,
    /// Bytes of the top objects of each root (by root label id), from `Classified::top_bytes`.
    pub root_shallow: Vec<u64>,
}

// `union_retained` skips the nodes whose group is `NONE`.
const _: () = assert!(NO_GROUP == crate::dominators::NONE);

/// Retained bytes of each group of `c` (the union of its members' dominator subtrees).
pub fn group_retained(tree: &DominatorTree, c: &Classified) -> Vec<u64> {
    tree.union_retained(c.groups.keys.len(), |p| match c.class_pre[p] {
        NO_CLASS => NO_GROUP,
        class => c.class_group[class as usize],
    })
}

/// The signature trie and the groups' retained bytes: two sequential passes, run side by side.
pub fn dominator_trie(a: &Analysis<'_>, c: &Classified) -> DomTrie {
    // The analysis is not shareable between threads (its names are not); its tree is. A rayon
    // task, not a thread of its own: the groups' pass runs on every core, and a diff runs this
    // inside rayon's pool, whose threads must not block on a thread that waits for the pool.
    let tree = &a.tree;
    let mut group_retained_bytes = Vec::new();
    let (trie, sig_pre, root_shallow) = rayon::in_place_scope(|s| {
        s.spawn(|_| group_retained_bytes = group_retained(tree, c));
        signatures(a, c)
    });
    DomTrie { trie, sig_pre, group_retained: group_retained_bytes, root_shallow }
}

/// Every reachable block's dominator signature, the trie, and the bytes of each root's top
/// objects (from `Classified::top_bytes`, for `--by root`).
fn signatures(a: &Analysis<'_>, c: &Classified) -> (SigTrie, Vec<u32>, Vec<u64>) {
    let tree = &a.tree;
    let r = tree.reachable_count();
    let mut trie = SigTrie::new(c.shape_names.clone());
    trie.field_labels = c.shape_fields.clone();
    let mut sig_pre = vec![NOT_A_BLOCK; r];
    let preorder = a.preorder();
    let mut root_shallow: Vec<u64> = Vec::new();
    let mut top_bytes = c.top_bytes.iter().peekable();
    for p in 1..r {
        let class = c.class_pre[p];
        if class == NO_CLASS {
            continue; // a root kind
        }
        let shape = c.class_shape[class as usize];
        let d = tree.idom_pre[p] as usize;
        let (s, head) = if sig_pre[d] == NOT_A_BLOCK {
            // A top object (a root kind or the super-root dominates it), named by its roots.
            let root = trie.root(&a.top_label(preorder[p]));
            while top_bytes.next_if(|&&(q, _)| (q as usize) < p).is_some() {}
            if let Some(&(_, bytes)) = top_bytes.next_if(|&&(q, _)| q as usize == p) {
                let label = trie.nodes[root as usize].label as usize;
                if root_shallow.len() <= label {
                    root_shallow.resize(label + 1, 0);
                }
                root_shallow[label] += bytes;
            }
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
        if n.edge == EDGE_TOP {
            let (parent, retained) = (n.parent as usize, n.retained);
            trie.nodes[parent].retained += retained;
        }
    }
    root_shallow.resize(trie.root_labels.len(), 0);
    (trie, sig_pre, root_shallow)
}
