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
/// `u64` per reachable node, by preorder number: retained bytes.
pub const RETAINED: u32 = 5;
/// `u32` per reachable node plus one: where its children start in [`KIDS`].
pub const KID_OFFSETS: u32 = 6;
/// Children in the dominator tree (preorder numbers), largest retained first.
pub const KIDS: u32 = 7;
/// `u64` per node: the address of the block's first field (0: not a block).
pub const ADDRESS: u32 = 8;
/// Block nodes sorted by address.
pub const BY_ADDRESS: u32 = 9;
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
/// `u32` per block node: its kind, an index in [`Meta::kinds`].
pub const KIND_IDS: u32 = 17;
/// `u32` per node: its OCaml type, an index in [`TYPES`] (`u32::MAX`: untyped). Only when the
/// snapshot has OCaml names.
pub const TYPE_IDS: u32 = 18;
/// JSON: the types of [`TYPE_IDS`] and the typing's counts (`heapsnap_analyze::SavedTypes`).
pub const TYPES: u32 = 19;

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Meta {
    pub node_count: u32,
    pub reachable_count: u32,
    pub first_block_node: u32,
    /// The root kind (its code) of each root-kind node.
    pub root_kinds: Vec<u16>,
    /// Every kind some block has (structures recognised), as [`KIND_IDS`] numbers them.
    pub kinds: Vec<GroupKey>,
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
