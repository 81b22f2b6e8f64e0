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
//! A group's retained bytes are those of the union of its members' dominator subtrees: a
//! member counts unless another member dominates it. The preorder numbers are those of the
//! graph's depth-first search, in which a dominator subtree need not be contiguous, so
//! [`group_retained`] numbers the nodes in a preorder of the dominator tree itself, where each
//! subtree is an interval `[i, i + size)`: walking that order, a member starts a new part of
//! the union exactly when it lies past the end of the last member of its group that did.

use super::classify::{Classified, EDGE_TOP, NO_CLASS, NO_GROUP};
use super::trie::SigTrie;
use crate::analysis::Analysis;
use crate::blocks::{NodeId, NO_NODE};
use crate::graph::SUPER_ROOT;
use rustc_hash::FxHashMap;

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

/// Number of nodes in each dominator subtree, by preorder number.
fn subtree_sizes(idom_pre: &[u32]) -> Vec<u32> {
    let mut size = vec![1u32; idom_pre.len()];
    for p in (1..idom_pre.len()).rev() {
        size[idom_pre[p] as usize] += size[p];
    }
    size
}

/// Retained bytes of each group of `c` (the union of its members' dominator subtrees).
pub fn group_retained(a: &Analysis<'_>, c: &Classified) -> Vec<u64> {
    let tree = &a.tree;
    let idom = &tree.idom_pre;
    let r = idom.len();
    let size = subtree_sizes(idom);
    // A preorder of the dominator tree: a node's children are laid out after it, one subtree
    // after the other. `next[d]` is where d's next child goes (dominators come first).
    let mut order = vec![0u32; r];
    {
        let mut next = vec![0u32; r];
        if r > 0 {
            next[0] = 1;
        }
        for p in 1..r {
            let d = idom[p] as usize;
            let at = next[d];
            next[d] += size[p];
            next[p] = at + 1;
            order[at as usize] = p as u32;
        }
    }
    let groups = c.groups.keys.len();
    let mut retained = vec![0u64; groups];
    let mut end = vec![0u32; groups];
    for (i, &p) in order.iter().enumerate().skip(1) {
        let class = c.class_pre[p as usize];
        if class == NO_CLASS {
            continue;
        }
        let g = c.class_group[class as usize];
        if g != NO_GROUP && i as u32 >= end[g as usize] {
            retained[g as usize] += tree.retained_pre.get(p as usize);
            end[g as usize] = i as u32 + size[p as usize];
        }
    }
    retained
}

pub fn dominator_trie(a: &Analysis<'_>, c: &Classified) -> DomTrie {
    let tree = &a.tree;
    let preorder = a.preorder();
    let r = tree.reachable_count();
    let mut trie = SigTrie::new(c.shape_names.clone());
    let mut sig_pre = vec![NOT_A_BLOCK; r];
    // Root label of a top object that no root record points at directly: it depends only on
    // its dominator (a root kind, or the super-root), so it is named once per dominator.
    let mut shared_roots: FxHashMap<NodeId, u32> = FxHashMap::default();
    // Preorder numbers of the objects root records point at, ascending: the loop meets them in
    // that order, so a cursor tells whether a top object is one of them.
    let mut rooted: Vec<u32> = a.graph.roots.iter().map(|r| tree.pre_of[r.node as usize]).filter(|&p| p != NO_NODE).collect();
    rooted.sort_unstable();
    rooted.dedup();
    let mut next_rooted = 0usize;
    let mut root_shallow: Vec<u64> = Vec::new();
    let mut next_top = 0usize;
    for p in 1..r {
        let class = c.class_pre[p];
        if class == NO_CLASS {
            continue; // a root kind
        }
        let shape = c.class_shape[class as usize];
        let d = tree.idom_pre[p] as usize;
        let (s, head) = if sig_pre[d] == NOT_A_BLOCK {
            while next_rooted < rooted.len() && (rooted[next_rooted] as usize) < p {
                next_rooted += 1;
            }
            let has_roots = rooted.get(next_rooted) == Some(&(p as u32));
            let (v, dn) = (preorder[p], preorder[d]);
            let root = if dn == SUPER_ROOT || !has_roots {
                *shared_roots.entry(dn).or_insert_with(|| trie.root(&crate::groups::top_label(a, v)))
            } else {
                trie.root(&crate::groups::top_label(a, v))
            };
            while next_top < c.top_bytes.len() && (c.top_bytes[next_top].0 as usize) < p {
                next_top += 1;
            }
            if let Some(&(q, bytes)) = c.top_bytes.get(next_top) {
                if q as usize == p {
                    let label = trie.nodes[root as usize].label as usize;
                    if root_shallow.len() <= label {
                        root_shallow.resize(label + 1, 0);
                    }
                    root_shallow[label] += bytes;
                }
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
    DomTrie { trie, sig_pre, group_retained: group_retained(a, c), root_shallow }
}
