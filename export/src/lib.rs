//! `heapsnap export`: an analysed snapshot in formats other tools read.
//!
//! * [`devtools`]: V8's heap snapshot JSON (`.heapsnapshot`), which Chrome DevTools' Memory
//!   panel and memlab load: OCaml names and DevTools node types, a synthetic root with one child
//!   per root kind, fields as `element` edges, weak references as `weak` edges, odd node ids
//!   derived from addresses (stable while a block does not move), or, with a baseline snapshot,
//!   the ids its objects have in the baseline's export ([`devtools::matching`]).
//! * [`flame`]: retained sizes as folded stacks (the dominator tree collapsed to the path
//!   signatures `diff` uses, or to groups), and [`svg`] draws them with inferno.
//! * [`parquet`]: what the reports compute (totals, groups, suspects, the dominator trie by path
//!   signature, allocation sites) as Parquet tables, one set per snapshot, for query engines.
//!
//! Files are written through [`output::AtomicFile`]: owner-only, to a temporary file renamed
//! into place, so a reader never sees half a file.

pub mod devtools;
pub mod flame;
pub mod output;
pub mod parquet;
pub mod svg;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The snapshot is past what V8's heap snapshot loader can read.
    #[error("{0}")]
    TooLarge(String),
    #[error("flame graph: {0}")]
    Flame(String),
    #[error("parquet: {0}")]
    Parquet(String),
}
