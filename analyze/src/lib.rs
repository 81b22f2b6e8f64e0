//! Offline analysis of heapsnap snapshots of OCaml heaps: the object graph, the dominator
//! tree, retained sizes per tag, kind, closure and root, retainer paths, and a consistency check.
//!
//! ```no_run
//! use heapsnap_analyze::{Analysis, GroupBy, Progress};
//! let snap = heapsnap_format::Snapshot::open("app.heapsnap")?;
//! let analysis = Analysis::new(&snap, &Progress::stderr())?;
//! for g in analysis.group_by(GroupBy::Kind)?.iter().take(10) {
//!     println!("{:>12} {:>12} {}", g.shallow, g.retained, g.name);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layers, bottom to top; a module imports only from the layers below it:
//! 1. the heap as read: `blocks` (every block of every region gets a `u32` node id; addresses
//!    map back to nodes in constant time), `graph` (the CSR object graph under a super-root
//!    with one node per root kind, edges following OCaml's scanning rules, ephemerons handled
//!    as the GC does), `dominators` (Lengauer-Tarjan with the single-referrer shortcut, retained
//!    sizes), `structures` (what a block's layout says it is), `names`; and `model`: the
//!    vocabulary every layer shares (node kinds, group keys and groupings, structures, root
//!    shares);
//! 2. `facts`: the narrow trait of heap facts ([`HeapFacts`]: blocks, pointers, names, roots,
//!    immediate dominators);
//! 3. `groups`, `retainers`, `typed`, `walks`: the groupings, the roots' labels and shares,
//!    the blocks' OCaml types and the graph walks, written against the facts and the graph;
//! 4. `analysed_heap`: what the reports read ([`AnalysedHeap`]), the facts and what is computed
//!    from them; the analysis index (crate `heapsnap-index`) implements it too;
//! 5. `full_analysis`: the analysis data and its caches ([`Analysis`]), which implements both
//!    traits from the graph;
//! 6. the reports (JSON schemas in `REPORTS.md`): summary, top and dominators, paths, inspect,
//!    [`verify()`] (the consistency check the dumper's tests use), the leak [`suspects()`] of one snapshot, the [`signatures`] of blocks,
//!    the snapshot [`diff`] and the allocation [`sites`] of statmemprof's sampled blocks.
//!
//! This file is the crate's whole surface: the layers' modules are private, and what the other
//! crates use is re-exported here.
// Every unsafe block states the invariant it relies on.
#![warn(clippy::undocumented_unsafe_blocks)]

mod address_index;
mod allocator;
mod analysed_heap;
mod blocks;
mod closures;
mod dominators;
mod error;
mod facts;
mod full_analysis;
mod graph;
mod groups;
mod inspect;
mod kinds;
mod mem;
mod model;
mod names;
mod paths;
mod progress;
mod reports;
mod retainers;
mod structures;
mod suspects;
mod typed;
mod verify;
mod walks;

pub mod diff;
pub mod signatures;
pub mod sites;

/// Facts about OCaml values (the shared `heapsnap-values` crate).
pub use heapsnap_values as ocaml;

// The vocabulary.
pub use model::{Group, GroupBy, GroupKey, NodeKind, Role, RootShare, Structure, NO_TYPE};

// The heap as read.
pub use blocks::{chunk_colour, BadPointer, BadPointerFacts, BlockMap, BlockRef, NodeId, PointsTo, RegionCounts, NO_NODE};
pub use dominators::{
    bfs_baseline, csr_from_edges, dfs_baseline, dominators, dominators_and_retained, subtree_sums, Csr, DominatorTree, NONE,
};
pub use graph::{HeapGraph, PointerCounts, SUPER_ROOT};
pub use names::{module_name, root_label, string_preview, FieldPaths, Names, SavedNames, SourceLines};

// Facts, what is computed from them, and the full analysis.
pub use analysed_heap::{AnalysedHeap, KindTallies, KindTally};
pub use facts::HeapFacts;
pub use full_analysis::{dominator_tree, Analysis};
pub use groups::BlockKinds;
pub use kinds::{key_name, kind_key, shape_key};
pub use retainers::Retainers;
pub use typed::{NodeTypes, PartNames, SavedTypes, TypeNames, Typing};
pub use walks::{bfs_parents, PartialParents, ShortestParents};

// The reports.
pub use inspect::{inspect, Allocation, Field, Inspection};
pub use paths::{paths, MergedPath, PathQuery, PathsReport, Step};
pub use reports::{
    dominator_report, human_bytes, summary, summary_with_suspects, top, RegionTotals, RootKindTotal, Similar, Summary, Top, TreeNode,
};
pub use suspects::{
    element_count, stack_only, suspects, ElementCount, FrameShare, StackOnly, Suspect, SuspectsReport, DOMINANT_CHILD_PERCENT,
    SUMMARY_SUSPECTS_MIN_PERCENT, SUMMARY_SUSPECTS_SHOWN,
};
pub use verify::{verify, verify_with, FloatingGarbage, VerifyProblem, VerifyReport};

// Running an analysis.
pub use allocator::{SplitAllocator, SMALL_BLOCK};
pub use error::AnalyzeError;
pub use mem::tune_allocator;
pub use progress::{PhaseTimer, Progress};
