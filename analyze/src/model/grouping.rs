//! How blocks are grouped (`--by`), the key of a group, and what a report lists of a group.

use super::Structure;
use crate::error::AnalyzeError;

/// How blocks are grouped (`--by`; `--help` lists these from the doc comments).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The value of the reserved header bits (only for runtimes configured with them).
    Reserved,
    /// What a block is: a known structure (Hashtbl, list cell, ...), else its block tag and size, closure function or custom type.
    Kind,
    /// Closures only, by function.
    Closure,
    /// The roots that retain the objects.
    Root,
    /// The OCaml type of each block (snapshots with OCaml names: `heapsnap annotate`); untyped blocks are in no group.
    Type,
}

impl GroupBy {
    /// The name given on the command line and in JSON (`kind`).
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Reserved => "reserved",
            GroupBy::Kind => "kind",
            GroupBy::Closure => "closure",
            GroupBy::Root => "root",
            GroupBy::Type => "type",
        }
    }

    /// The grouping named `name` (as `--by` takes it).
    pub fn from_name(name: &str) -> Option<GroupBy> {
        [GroupBy::Reserved, GroupBy::Kind, GroupBy::Closure, GroupBy::Root, GroupBy::Type].into_iter().find(|b| b.name() == name)
    }

    /// Refuses a grouping the snapshot cannot give: `reserved` without reserved header bits
    /// would put every block in one group.
    pub fn check(self, snap: &heapsnap_format::Snapshot) -> Result<(), AnalyzeError> {
        if self == GroupBy::Reserved && snap.metadata().reserved_header_bits == 0 {
            return Err(AnalyzeError::BadQuery(
                "--by reserved groups by the reserved header bits, and this snapshot's runtime has none: use --by kind (block tags and structures)".into(),
            ));
        }
        if self == GroupBy::Type && snap.ocaml_names().is_none() {
            return Err(AnalyzeError::BadQuery(format!(
                "--by type needs OCaml names, and this snapshot has {}",
                heapsnap_names::MISSING_HINT
            )));
        }
        Ok(())
    }
}

/// One group of a report.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Group {
    pub name: String,
    /// Blocks in the group (for `root`: blocks the root retains).
    pub count: u64,
    /// Their own bytes, headers included (for `root`: the bytes of the objects the root points at).
    pub shallow: u64,
    /// Bytes freed if every member became unreachable.
    pub retained: u64,
    /// `root` groups of memory several roots share: every root the name stands for, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roots: Vec<String>,
    /// True when `roots` lists only the roots known (the walk to the roots ran out of budget).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub roots_incomplete: bool,
}

/// What a block is, for grouping. Cheap to hash; named only once per group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum GroupKey {
    Reserved(u32),
    /// A standard-library structure, recognised from the block's layout.
    Structure(Structure),
    Block {
        tag: u8,
        size: u64,
    },
    Tagged(u8),
    Closure(u64),
    Custom(u64),
    /// An OCaml type, by its id in the snapshot's typing (`diff --by type`; named by the caller,
    /// which has the typing).
    Type(u32),
}
