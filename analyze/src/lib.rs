//! Offline analysis of heapsnap snapshots of OCaml heaps: the object graph, the dominator
//! tree, retained sizes per tag, kind, closure and root, retainer paths, and a consistency check.
//!
//! ```no_run
//! use heapsnap_analyze::{Analysis, Progress, groups::{groups, GroupBy}};
//! let snap = heapsnap_format::Snapshot::open("app.heapsnap")?;
//! let analysis = Analysis::new(&snap, &Progress::stderr())?;
//! for g in groups(&analysis, GroupBy::Kind)?.iter().take(10) {
//!     println!("{:>12} {:>12} {}", g.shallow, g.retained, g.name);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layers, each reusable on its own (the snapshot diff builds on them):
//! * [`blocks`]: every block of every region gets a `u32` node id; addresses map back to nodes
//!   in constant time; free slots and garbage are counted apart.
//! * [`graph`]: the CSR object graph under a super-root with one node per root kind, edges
//!   following OCaml's scanning rules, ephemerons handled as the GC does.
//! * [`dominators`]: Lengauer-Tarjan with the single-referrer shortcut, retained sizes.
//! * [`analysis`], [`groups`], [`reports`], [`paths`], [`inspect`], [`mod@verify`]: the reports
//!   (JSON schemas in `REPORTS.md`); [`verify()`] is the consistency check the dumper's tests use.
//! * [`sites`]: allocation sites of statmemprof's sampled blocks (memtrace traces or stored
//!   call stacks), grouped and joined with retained sizes.
//! * [`synth`]: synthetic OCaml 5.3 heaps written as real snapshots, for tests and benchmarks.

mod address_index;
pub mod analysed;
pub mod analysis;
pub mod blocks;
pub mod diff;
pub mod dominators;
mod error;
pub mod graph;
pub mod groups;
pub mod inspect;
pub mod mem;
pub mod names;
/// Facts about OCaml values (the shared `heapsnap-values` crate).
pub use heapsnap_values as ocaml;
pub mod paths;
pub mod progress;
pub mod reports;
pub mod retainers;
pub mod sites;
pub mod structures;
pub mod synth;
pub mod typed;
pub mod verify;

pub use analysed::AnalysedHeap;
pub use analysis::Analysis;
pub use error::AnalyzeError;
pub use progress::Progress;
pub use verify::{verify, VerifyReport};
