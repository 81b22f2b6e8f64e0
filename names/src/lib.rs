//! OCaml names and types for heapsnap snapshots, from the program's `.cmt` files.
//!
//! `.cmt` files hold the typed tree of each module, in the compiler's own marshalled format:
//! only compiler-libs of the same OCaml version read them. So heapsnap carries a small OCaml
//! program (`names/ocaml/`), builds it on first use with the user's toolchain ([`reader`]),
//! and runs it on the files [`find`] locates. What it prints (FORMAT.md §3.13) is stored in the
//! snapshot ([`annotate()`]) and parsed by [`model`]; [`types`] resolves type paths through
//! aliases and functors and says what a value of a type looks like in the heap.

pub mod annotate;
pub mod find;
pub mod heap_check;
pub mod model;
pub mod oracle;
pub mod packages;
pub mod reader;
pub mod types;

pub use annotate::{annotate, AnnotateOptions, Annotated};
pub use model::{Program, Ty};
pub use types::{PackageShape, Shape, TypeEnv};

#[derive(Debug, thiserror::Error)]
pub enum NamesError {
    #[error("{0}")]
    Toolchain(String),
    #[error(transparent)]
    Format(#[from] heapsnap_format::FormatError),
    #[error("the .cmt reader's output is not valid: {0}")]
    Output(String),
}

/// How to say that a snapshot has no names, and how to add them (`info`, reports).
pub const MISSING_HINT: &str = "no OCaml names: module globals are numbered and blocks named by shape. \
To name them, build with -bin-annot (dune does) and run `heapsnap annotate SNAP [--cmt DIR...] [--ocaml DIR]`";
