//! The sections of an index (INDEX.md describes each).

use heapsnap_analyze::{Group, GroupKey, RootShare, Summary, SuspectsReport};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// JSON: [`Meta`].
pub const META: u32 = 1;
/// `u32` per node: its preorder number in the dominator tree (`u32::MAX`: unreachable).
pub const PRE_OF: u32 = 2;
/// `u32` per reachable node, by preorder number: the node.
pub const PREORDER: u32 = 3;
/// `u32` per reachable node, by preorder number: its immediate dominator's preorder number.
pub const IDOM_PRE: u32 = 4;
/// `u32` per reachable node, by preorder number: retained bytes in words (`u32::MAX`: in
/// [`RETAINED_LARGE`]).
pub const RETAINED: u32 = 5;
/// `u32` per reachable node plus one: where its children start in [`KIDS`].
pub const KID_OFFSETS: u32 = 6;
/// Children in the dominator tree (preorder numbers), largest retained first.
pub const KIDS: u32 = 7;
/// `u32` per block node (from `first_block_node`): where its first field is in its region, in
/// words from the region's base (recomputing it from the snapshot would walk every block).
pub const BLOCK_OFFSETS: u32 = 8;
/// `(first node, end node, snapshot region index)` `u32` triples of the regions with blocks,
/// by first node: which region a block node is in (its blocks are a range of nodes, in
/// address order).
pub const BLOCK_REGIONS: u32 = 9;
/// `u32` per node: its parent in one breadth-first search over strong edges (`u32::MAX`: none).
pub const BFS_PARENT: u32 = 10;
/// `u32` per node plus one: where its referrers start in [`REFS`].
pub const REF_OFFSETS: u32 = 11;
/// Nodes with a strong edge to each node, ascending.
pub const REFS: u32 = 12;
/// `(node, root record)` pairs, sorted.
pub const ROOT_EDGES: u32 = 13;

/// The nodes right below the super-root and the root kinds, sorted.
pub const TOP_NODES: u32 = 14;
/// `u32` per top node: its label in [`TOP_LABELS`].
pub const TOP_LABEL_IDS: u32 = 15;
/// JSON: the distinct labels of the top nodes (the root they are attributed to).
pub const TOP_LABELS: u32 = 16;
/// Per block node: its kind, an index in [`Meta::kinds`], in [`Meta::kind_id_bytes`] bytes
/// (1, 2 or 4: the narrowest that numbers every kind; its largest value: no kind).
pub const KIND_IDS: u32 = 17;
/// `u32` per node: its OCaml type, an index in [`TYPES`] (`u32::MAX`: untyped). Only when the
/// snapshot has OCaml names.
pub const TYPE_IDS: u32 = 18;
/// JSON: the types of [`TYPE_IDS`] and the typing's counts (`heapsnap_analyze::SavedTypes`).
pub const TYPES: u32 = 19;
/// `(preorder number, retained bytes)` `u64` pairs, by preorder number: the retained sizes that
/// are no `u32` of words.
pub const RETAINED_LARGE: u32 = 20;
/// JSON: the diff's classification of the snapshot (its grouping, groups, the tries' strings;
/// `crate::diff_profile`).
pub const DIFF_META: u32 = 21;
/// `u64` words: the nodes of the diff's dominator trie, then of its path trie, 4 words each.
pub const DIFF_NODES: u32 = 22;
/// `u64` words: every group's members by path signature, 4 words each.
pub const DIFF_MEMBERS: u32 = 23;

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Meta {
    pub node_count: u32,
    pub reachable_count: u32,
    pub first_block_node: u32,
    /// The root kind (its code) of each root-kind node.
    pub root_kinds: Vec<u16>,
    /// Every kind some block has (structures recognised), as [`KIND_IDS`] numbers them.
    pub kinds: Vec<GroupKey>,
    /// The width of a kind id in [`KIND_IDS`]: 1, 2 or 4 bytes.
    pub kind_id_bytes: u8,
    /// The summary report, without its top groups (the `kind` groups give them).
    pub summary: Summary,
    /// Every group of every grouping (`tag`, `kind`, `closure`, `root`), largest first.
    pub groups: BTreeMap<String, Vec<Group>>,
    /// Per root: what it retains alone and shared (`top --by root`), largest first.
    pub root_shares: Vec<RootShare>,
    /// The leak suspects `summary` lists ([`heapsnap_analyze::SUMMARY_SUSPECTS_MIN_PERCENT`],
    /// at most [`heapsnap_analyze::SUMMARY_SUSPECTS_SHOWN`]), so that a second `summary` reads
    /// this section only. Its percentages are set again from its bytes when read.
    pub summary_suspects: SuspectsReport,
}

/// The narrowest width (1, 2 or 4 bytes) whose values number `kinds` kinds with one left over
/// (the largest: no kind).
pub fn kind_id_bytes(kinds: usize) -> u8 {
    if kinds < u8::MAX as usize {
        1
    } else if kinds < u16::MAX as usize {
        2
    } else {
        4
    }
}
