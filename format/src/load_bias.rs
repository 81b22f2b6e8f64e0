//! The load bias of the target's executable (section kind 9, FORMAT.md §3.9): how far a
//! position-independent executable was moved at load time. Symbols, regions and roots hold
//! target addresses; the copied DWARF sections hold link-time addresses, so a code address is
//! looked up in them as `address - load_bias`.
//!
//! Kind 9 is not a [`SectionKind`](crate::SectionKind) variant: readers that predate it skip
//! it like any unknown, non-required section, and a snapshot without it has a bias of 0.

use crate::error::FormatError;
use crate::reader::Snapshot;
use crate::writer::SnapshotWriter;

/// Section kind code of the load bias: one little-endian `u64`.
pub const SECTION_KIND_LOAD_BIAS: u32 = 9;

impl SnapshotWriter {
    /// Records the executable's load bias (write it at most once).
    pub fn write_load_bias(&mut self, bias: u64) -> Result<(), FormatError> {
        self.write_raw_section(SECTION_KIND_LOAD_BIAS, 0, &bias.to_le_bytes())
    }
}

impl Snapshot {
    /// The executable's load bias; 0 when the snapshot does not record one.
    pub fn load_bias(&self) -> u64 {
        self.sections()
            .iter()
            .find(|s| s.kind == SECTION_KIND_LOAD_BIAS && s.length == 8)
            .and_then(|s| self.bytes().get(s.offset as usize..s.offset as usize + 8))
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
}
