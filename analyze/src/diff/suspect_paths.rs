//! Retainer paths of the members of suspect groups, merged by path signature.
//!
//! One breadth-first search from the roots over strong references (as `heapsnap path` does)
//! gives every reachable object a shortest path; its signature (root, then fields and shapes,
//! folded as in [`crate::signatures::trie`]) is built as the search discovers it. Members of the suspect
//! groups are counted per signature. Done on the first and the last snapshot, the counts say
//! how many members each chain gained: objects cannot be matched by address across snapshots,
//! so "new objects" of a chain are the growth of its member count.

use crate::blocks::{BlockRef, NodeId, NO_NODE};
use crate::full_analysis::Analysis;
use crate::graph::SUPER_ROOT;
use crate::mem::prefetch;
use crate::model::GroupBy;
use crate::signatures::classify::{edge_to, Classified, EDGE_DOMINATED, EDGE_ROOT, EDGE_TOP, NO_CLASS, NO_GROUP};
use crate::signatures::trie::SigTrie;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

pub const NOT_MEMBER: u32 = u32::MAX;

/// Members of some groups, counted by the signature of their shortest path.
pub struct MemberChains {
    pub trie: SigTrie,
    /// `(group index, signature)` -> (members, when the first member was met in the search,
    /// its address).
    pub counts: FxHashMap<(u32, u32), Member>,
}

/// The members of one group with one signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub count: u64,
    /// The search's visit number of the first member met (the example).
    pub first: u64,
    /// Its address.
    pub address: u64,
}

/// The suspect index of every reachable block, by preorder number. `dom` is the dominator
/// signature of each preorder number and its trie (needed for `root`, whose groups are the
/// roots of the dominator chains).
pub fn membership(c: &Classified, dom: Option<(&[u32], &SigTrie)>, by: GroupBy, suspects: &[String]) -> Vec<u32> {
    let index: FxHashMap<&str, u32> = suspects.iter().enumerate().map(|(i, s)| (s.as_str(), i as u32)).collect();
    if by == GroupBy::Root {
        let Some((sig_pre, trie)) = dom else { return vec![NOT_MEMBER; c.class_pre.len()] };
        let by_root: Vec<u32> = trie.root_labels.iter().map(|l| index.get(l.as_str()).copied().unwrap_or(NOT_MEMBER)).collect();
        return sig_pre
            .par_iter()
            .map(|&s| match trie.nodes.get(s as usize) {
                Some(n) if s != 0 => by_root.get(n.root as usize).copied().unwrap_or(NOT_MEMBER),
                _ => NOT_MEMBER,
            })
            .collect();
    }
    let by_group: Vec<u32> = c.groups.names.iter().map(|n| index.get(n.as_str()).copied().unwrap_or(NOT_MEMBER)).collect();
    let by_class: Vec<u32> = c.class_group.iter().map(|&g| if g == NO_GROUP { NOT_MEMBER } else { by_group[g as usize] }).collect();
    c.class_pre.par_iter().map(|&k| if k == NO_CLASS { NOT_MEMBER } else { by_class[k as usize] }).collect()
}

/// The group of every reachable block, by preorder number, as indices in `Classified`'s
/// group table (`--by root`: in the dominator trie's root labels): every group's members, for
/// [`member_chains`] to count once and the diff to pick its suspects from later.
pub fn every_group(c: &Classified, dom: Option<(&[u32], &SigTrie)>, by: GroupBy) -> Vec<u32> {
    if by == GroupBy::Root {
        let Some((sig_pre, trie)) = dom else { return vec![NOT_MEMBER; c.class_pre.len()] };
        return sig_pre
            .par_iter()
            .map(|&s| match trie.nodes.get(s as usize) {
                Some(n) if s != 0 => n.root,
                _ => NOT_MEMBER,
            })
            .collect();
    }
    c.class_pre.par_iter().map(|&k| if k == NO_CLASS { NOT_MEMBER } else { c.class_group[k as usize] }).collect()
}

/// Counts the members of groups by the signature of their shortest path; `member` is the
/// group of each preorder number ([`NOT_MEMBER`]: in none of them).
pub fn member_chains(a: &Analysis<'_>, c: &Classified, member: &[u32]) -> MemberChains {
    let g = &a.graph;
    let tree = &a.tree;
    let blocks = &g.blocks;
    let mut trie = SigTrie::new(c.shape_names.clone());
    trie.field_labels = c.shape_fields.clone();
    let mut counts: FxHashMap<(u32, u32), Member> = FxHashMap::default();
    let mut visits = 0u64;
    const UNSEEN: u32 = u32::MAX;
    const NOT_BLOCK: u32 = u32::MAX - 1;
    let mut sig = vec![UNSEEN; g.node_count()];
    sig[SUPER_ROOT as usize] = NOT_BLOCK;
    // The block of the last referrer whose fields were needed (a BFS meets its children in a row).
    let mut ublock: Option<(NodeId, Option<BlockRef<'_>>)> = None;
    let mut pts: Vec<u32> = Vec::new();
    // Each discovery reads words scattered over several arrays, each load depending on the one
    // before (the node's preorder number, then its class, edge, group): the loads of a whole
    // batch are started, a step at a time, before the first is used.
    crate::walks::strong_bfs_batches(&a.graph, |found| {
        for &(u, t) in found {
            prefetch(&tree.pre_of, t as usize);
            prefetch(&tree.pre_of, u as usize);
            prefetch(&sig, u as usize);
        }
        pts.clear();
        pts.extend(found.iter().map(|&(_, t)| tree.pre_of[t as usize]));
        for &pt in &pts {
            prefetch(&c.class_pre, pt as usize);
            prefetch(&tree.idom_pre, pt as usize);
            prefetch(&c.edge_pre, pt as usize);
            prefetch(member, pt as usize);
        }
        for (&(u, t), &pt) in found.iter().zip(&pts) {
            let shape = if pt == NO_NODE { NO_CLASS } else { c.shape(pt as usize) };
            if u == SUPER_ROOT || shape == NO_CLASS {
                sig[t as usize] = NOT_BLOCK;
                continue;
            }
            let su = sig[u as usize];
            let s = if let Some(kind) = g.root_kind_of(u) {
                let root = trie.root(&crate::retainers::held_by(a, kind, t));
                trie.step(root, EDGE_TOP, shape)
            } else if su == NOT_BLOCK {
                // A block reached from a non-block that is no root kind: cannot happen.
                let root = trie.root("?");
                trie.step(root, EDGE_TOP, shape)
            } else {
                let parent = &trie.nodes[su as usize];
                let folds = parent.edge != EDGE_ROOT && parent.label == shape;
                let edge = if folds {
                    EDGE_DOMINATED // unused: the step folds into the parent's
                } else if tree.idom_pre[pt as usize] == tree.pre_of[u as usize] && c.edge_pre[pt as usize] != EDGE_DOMINATED {
                    c.edge_pre[pt as usize]
                } else {
                    if ublock.as_ref().is_none_or(|(v, _)| *v != u) {
                        ublock = Some((u, blocks.block(u)));
                    }
                    match ublock.as_ref().and_then(|(_, b)| b.as_ref()) {
                        Some(b) => edge_to(blocks, b, t, c.edge_mode(tree.pre_of[u as usize] as usize)),
                        None => EDGE_DOMINATED,
                    }
                };
                trie.step(su, edge, shape)
            };
            sig[t as usize] = s;
            visits += 1;
            let m = member[pt as usize];
            if m != NOT_MEMBER {
                let e = counts.entry((m, s)).or_insert_with(|| Member { count: 0, first: visits, address: a.address(t).unwrap_or(0) });
                e.count += 1;
            }
        }
    });
    MemberChains { trie, counts }
}
