//! Free blocks that their colour does not show (section kind 11, FORMAT.md §3.11): OCaml
//! 4.14's best-fit allocator keeps its small free blocks white, like live ones, on free lists;
//! the dumper lists them so that no reader counts them as objects.
//!
//! Kind 11 is not a [`SectionKind`](crate::SectionKind) variant: readers that predate it skip
//! it like any unknown, non-required section.

use crate::error::FormatError;
use crate::reader::Snapshot;
use crate::writer::SnapshotWriter;

/// Section kind code of the free-block list: little-endian `u64` addresses of the blocks' first
/// fields, sorted.
pub const SECTION_KIND_FREE_BLOCKS: u32 = 11;

impl SnapshotWriter {
    /// Records the free blocks `addresses` (first fields; written sorted, at most once).
    pub fn write_free_blocks(&mut self, addresses: &[u64]) -> Result<(), FormatError> {
        let mut sorted = addresses.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let bytes: Vec<u8> = sorted.iter().flat_map(|a| a.to_le_bytes()).collect();
        self.write_raw_section(SECTION_KIND_FREE_BLOCKS, 0, &bytes)
    }
}

impl Snapshot {
    /// The free blocks the snapshot lists (addresses of their first fields), sorted; empty when
    /// there is no such section or it is not a whole number of words.
    pub fn free_blocks(&self) -> Vec<u64> {
        let Some(s) = self.sections().iter().find(|s| s.kind == SECTION_KIND_FREE_BLOCKS && s.length % 8 == 0) else {
            return Vec::new();
        };
        let Some(body) = self.bytes().get(s.offset as usize..(s.offset + s.length) as usize) else { return Vec::new() };
        let mut out: Vec<u64> = body.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))).collect();
        out.sort_unstable();
        out
    }
}
