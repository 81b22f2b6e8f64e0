//! The sections of an index (INDEX.md describes each).

use heapsnap_analyze::{GroupBy, GroupKey, Summary, SuspectsReport};
use serde::{Deserialize, Serialize};

/// JSON: [`Meta`].
pub const META: u32 = 1;
/// `u32` per reachable node, by preorder number (the tree's own: [`TREE`]): the node.
pub const PREORDER: u32 = 3;
/// `u32` per reachable node, by preorder number: retained bytes in words (`u32::MAX`: in
/// [`RETAINED_LARGE`]).
pub const RETAINED: u32 = 5;
/// `(first node, end node, snapshot region index)` `u32` triples of the regions with blocks,
/// by first node: which region a block node is in (its blocks are a range of nodes, in
/// address order).
pub const BLOCK_REGIONS: u32 = 9;
/// `(node, root record)` pairs, sorted.
pub const ROOT_EDGES: u32 = 13;

/// The nodes right below the super-root and the root kinds, sorted.
pub const TOP_NODES: u32 = 14;
/// Per top node: its label in [`TOP_LABELS`], in 1, 2 or 4 bytes (the section's length over the
/// top nodes' count; the narrowest that numbers the labels).
pub const TOP_LABEL_IDS: u32 = 15;
/// JSON: the distinct labels of the top nodes (the root they are attributed to).
pub const TOP_LABELS: u32 = 16;
/// Per block node: its kind, an index in [`Meta::kinds`], in [`Meta::kind_id_bytes`] bytes
/// (1, 2 or 4: the narrowest that numbers every kind; its largest value: no kind).
pub const KIND_IDS: u32 = 17;
/// Per node: its OCaml type, an index in [`TYPES`], in 1, 2 or 4 bytes (the section's length
/// over the node count: the narrowest that numbers the types; its largest value: untyped).
/// Only when the snapshot has OCaml names.
pub const TYPE_IDS: u32 = 18;
/// The types of [`TYPE_IDS`] (each its name and its parts' names, as JSON apart) and the
/// typing's counts (`heapsnap_analyze::SavedTypes`), laid out as [`crate::saved_types`] says.
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
/// The dominator tree in its own preorder (children largest retained first, ties by node), as
/// varints: per reachable node, the size of its subtree (`crate::compact::encode_tree`); the
/// nodes are [`PREORDER`]. Preorder numbers are these.
pub const TREE: u32 = 24;
/// A byte per block node: the step from the block before it in its region to its first field,
/// in words (a region's first block: its offset from the base; 255: in [`BLOCK_FAR`]).
pub const BLOCK_STEPS: u32 = 25;
/// `(block index, offset in words)` `u32` pairs, by block index: the places a step cannot give.
pub const BLOCK_FAR: u32 = 26;
/// `u32` per 32 block nodes: the offset of every 32nd block (a lookup sums 31 steps at most).
pub const BLOCK_CHECKPOINTS: u32 = 27;
/// A bit per node (`u64` words): set when the node's only referrer is its immediate dominator,
/// its shortest-path parent too.
pub const PLAIN_REFERRERS: u32 = 28;
/// Varints: the referrers and shortest-path parent of every other node, in node order
/// (`crate::compact::encode_referrers`).
pub const REFERRERS: u32 = 29;
/// `u64` per 16 entries of [`REFERRERS`]: where every 16th starts.
pub const REFERRER_CHECKPOINTS: u32 = 30;
/// `u64` pairs per 64 preorder numbers (`crate::tree::TREE_RUN`): where the first of their
/// varints in [`TREE`] starts, and the largest end (number plus subtree size) of their subtrees.
pub const TREE_CHECKPOINTS: u32 = 31;
/// A bit per node (`u64` words): set when the node is reachable (it has a preorder number).
pub const REACHABLE: u32 = 32;
/// A bit per number of the preorder's permutation completed to every node (`u64` words): set
/// when it keeps a shortcut back along its cycle (`crate::tree::encode_preorder_inverse`).
pub const PREORDER_MARKS: u32 = 33;
/// `u32` per set bit of [`PREORDER_MARKS`], in order: the number 32 steps before it on its cycle.
pub const PREORDER_BACK: u32 = 34;

/// JSON: every group of one grouping, largest first (`top --json`'s groups), one section per
/// grouping ([`groups_section`]); `reserved` only when the runtime has reserved header bits,
/// `type` only when the snapshot has OCaml names. Each is read by the report that asks for it.
pub const GROUPS_RESERVED: u32 = 35;
pub const GROUPS_KIND: u32 = 36;
pub const GROUPS_CLOSURE: u32 = 37;
pub const GROUPS_ROOT: u32 = 38;
pub const GROUPS_TYPE: u32 = 39;
/// JSON: per root, what it retains alone and shared (`top --by root`), largest first.
pub const ROOT_SHARES: u32 = 40;

/// JSON: by compilation unit, its module block's field paths by index
/// (`heapsnap_analyze::FieldPaths`): the roots' and module blocks' labels, without
/// parsing the snapshot's OCaml names. Only when they parse.
pub const FIELD_PATHS: u32 = 41;

/// JSON: `[[code address, "file:line" or null], ...]`, ascending: the source line of every
/// closure kind's code pointer, as `heapsnap_analyze::Names::source_line` gives it, so that
/// naming a closure does not parse the executable's line tables. Only when some block is a
/// closure; a section that does not parse is none (the line tables are read).
pub const SOURCE_LINES: u32 = 42;

/// [`DIFF_META`], [`DIFF_NODES`] and [`DIFF_MEMBERS`] of the diff's classification by OCaml
/// type (`diff`'s default when every snapshot has OCaml names). Only when the snapshot's
/// OCaml names parse.
pub const TYPED_DIFF_META: u32 = 43;
pub const TYPED_DIFF_NODES: u32 = 44;
pub const TYPED_DIFF_MEMBERS: u32 = 45;

/// The section of a grouping's groups.
pub fn groups_section(by: GroupBy) -> u32 {
    match by {
        GroupBy::Reserved => GROUPS_RESERVED,
        GroupBy::Kind => GROUPS_KIND,
        GroupBy::Closure => GROUPS_CLOSURE,
        GroupBy::Root => GROUPS_ROOT,
        GroupBy::Type => GROUPS_TYPE,
    }
}

/// The totals and what `summary` reads (every grouping's groups and the roots' shares are
/// sections of their own, read by the reports that list them).
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
    /// The leak suspects `summary` lists ([`heapsnap_analyze::SUMMARY_SUSPECTS_MIN_PERCENT`],
    /// at most [`heapsnap_analyze::SUMMARY_SUSPECTS_SHOWN`]), so that a second `summary` reads
    /// this section only. Its percentages are set again from its bytes when read.
    pub summary_suspects: SuspectsReport,
    /// What the snapshot's OCaml names section holds, as `info` and `diff` read it (so that
    /// they need not parse it: tens of megabytes on a real program).
    pub ocaml_names: NamesDigest,
    /// The typed blocks' bytes, `[heap, static data]` (`info`'s typed share; `None`: no
    /// typing): `crate::reports::typed_bytes`, which looks at every block.
    pub typed_bytes: Option<[u64; 2]>,
}

/// The snapshot's OCaml names section, digested.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum NamesDigest {
    /// The snapshot has no names section.
    Absent,
    /// The section does not parse (the snapshot then analyses as one without names): why.
    Damaged(String),
    /// It parses: the names' OCaml version, compilation units, module-block fields, and the
    /// units left out when annotating (`(file, why)`).
    Parsed { ocaml_version: String, units: usize, fields: usize, refused: Vec<(String, String)> },
}

impl NamesDigest {
    /// The digest of a snapshot's names section (parsed again: the analysis keeps only part
    /// of it).
    pub fn of(snap: &heapsnap_format::Snapshot) -> NamesDigest {
        let Some(json) = snap.ocaml_names() else { return NamesDigest::Absent };
        match heapsnap_names::Program::parse(json) {
            Ok(program) => NamesDigest::Parsed {
                ocaml_version: program.ocaml_version,
                units: program.units.len(),
                fields: program.units.iter().map(|u| u.fields.len()).sum(),
                refused: program.refused.into_iter().map(|r| (r.file, r.message)).collect(),
            },
            Err(e) => NamesDigest::Damaged(e.to_string()),
        }
    }

    /// Whether the names parse (the analysis uses them).
    pub fn parsed(&self) -> bool {
        matches!(self, NamesDigest::Parsed { .. })
    }
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
