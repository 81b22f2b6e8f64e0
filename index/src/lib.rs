//! The analysis index of a snapshot (`SNAP.hsidx`): the first analysis saves its results —
//! dominators, retained sizes, groups, referrers, shortest-path parents — and every later look
//! opens them instead of rebuilding the graph. The file format is in `INDEX.md`.
//!
//! An index is tied to its snapshot by the hash of the snapshot's section table (which holds
//! every section's checksum) and to [`file::INDEX_VERSION`]; a stale, truncated, corrupt or
//! foreign index is never used: [`store::open_or_build`] rebuilds it.

pub mod build;
pub mod compact;
pub mod diff_profile;
pub mod file;
pub mod reports;
pub mod saved_types;
pub mod sections;
pub mod store;
pub mod tree;
pub mod view;

pub use file::{IndexError, IndexFile, SnapshotId};
pub use store::{open_or_build, Indexed};
pub use view::{IndexView, Needs};
