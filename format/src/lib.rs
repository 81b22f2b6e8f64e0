//! The heapsnap snapshot file format.
//!
//! A snapshot is written once by [`SnapshotWriter`] (streaming, checksummed, atomically renamed,
//! owner-only) and read by [`Snapshot`], which maps the file, validates all of it up front and
//! then hands out zero-copy slices and typed views. `FORMAT.md` beside this crate is the
//! specification; this crate is its reference implementation.

#[cfg(target_endian = "big")]
compile_error!("heapsnap-format reads and writes little-endian records in place; big-endian hosts are not supported");

mod error;
mod free_blocks;
mod layout;
mod load_bias;
mod memprof;
mod metadata;
mod ocaml_names;
mod plugin_dwarf;
mod reader;
mod symbol_index;
mod writer;

pub use error::{FormatError, SectionProblem};
pub use free_blocks::SECTION_KIND_FREE_BLOCKS;
pub use heapsnap_values::{ColourEncoding, PoolGeometry};
pub use layout::{
    CustomOpsRecord, FileHeader, RegionHeader, RegionKind, RootKind, RootRecord, SectionEntry, SectionKind, StrId, SymbolKind,
    SymbolRecord, Trailer, BYTE_ORDER_LITTLE, DWARF_NAME_LEN, END_MAGIC, MAGIC, NO_DOMAIN, ROOT_FLAG_BINDING, ROOT_FLAG_CONSERVATIVE,
    ROOT_FLAG_WEAK, SECTION_FLAG_REQUIRED, VERSION_MAJOR, VERSION_MINOR, WORD_SIZE,
};
pub use load_bias::SECTION_KIND_LOAD_BIAS;
pub use memprof::*;
pub use metadata::{CaptureInfo, DomainInfo, Metadata, Namespaces, ProbedFact, ProbedRuntime, Trigger};
pub use ocaml_names::{replace_ocaml_names, SECTION_KIND_OCAML_NAMES};
pub use plugin_dwarf::{PluginDwarf, SECTION_KIND_PLUGIN_DWARF};
pub use reader::{ReadOptions, Region, Snapshot};
pub use writer::{RegionStream, SnapshotWriter};
