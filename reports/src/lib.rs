//! heapsnap's reports, each in one place: its name, its arguments (a `clap::Args` struct), its
//! JSON result, its human text and the index sections it reads. One list,
//! [`registry::REPORTS`], drives the command line, the web UI's API and the MCP server, so
//! they cannot drift apart.
//!
//! Every report answers from the snapshot's analysis index (`SNAP.hsidx`, built on first use)
//! through a [`Loader`], except `verify`, `info` and `diff`, which read snapshots whole.
// Every unsafe block states the invariant it relies on.
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod allocation_sites;
mod args;
pub mod diff;
pub mod dominators;
pub mod handover;
pub mod held;
pub mod info;
pub mod inspect;
pub mod json_args;
pub mod loader;
pub mod path;
pub mod registry;
pub mod report;
pub mod sites;
pub mod summary;
pub mod suspects;
mod text;
pub mod top;
pub mod verify;

pub use loader::{open_snapshot, Files, Loaded, Loader};
pub use report::{Answer, Entry, Format, Report};
