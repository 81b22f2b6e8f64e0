//! Facts about OCaml values that the dumper and the analyser share, as `gimli::constants` holds
//! DWARF's: block tags, the layout of a header, colours, closure info, and the geometry of the
//! shared heap's pools. Nothing here reads memory or a snapshot; these are the rules applied to
//! the words that are read.
//!
//! What differs between OCaml versions is said here only where it is a fact about values
//! (each version's pool size classes, [`PoolGeometry`]); what differs in the runtime's own
//! structures belongs to the dumper's version modules. Which releases are supported at all is
//! said once, in [`releases`] (the registry every crate and script reads).

mod closure;
mod header;
pub mod ocaml4;
mod pools;
pub mod releases;
mod tags;

pub use closure::{arity_closinfo, make_closinfo, start_env_closinfo};
pub use header::{Colour, ColourEncoding, Header, HeaderFormat, HeaderLayout};
pub use pools::{PoolGeometry, LARGE_ALLOC_HEADER_BYTES};
pub use tags::*;

/// Is this word a pointer the GC would follow? (even and non-zero; OCaml immediates are odd)
#[inline]
pub fn is_pointer(word: u64) -> bool {
    word & 1 == 0 && word != 0
}
