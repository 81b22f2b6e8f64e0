//! Statmemprof's tracked blocks (section kind 12, FORMAT.md §3.12): for each entry of the
//! runtime's tracking tables (OCaml 5.3 and later), the sampled block, what the program's
//! tracker returned for it, and how it was sampled. The block is a weak reference: it never
//! keeps anything alive in an analysis.
//!
//! Kind 12 is not a [`SectionKind`](crate::SectionKind) variant: readers that predate it skip
//! it like any unknown, non-required section.

use crate::error::FormatError;
use crate::reader::Snapshot;
use crate::writer::SnapshotWriter;
use bytemuck::{Pod, Zeroable};

/// Section kind code of the memprof entries: [`MemprofRecord`]s.
pub const SECTION_KIND_MEMPROF: u32 = 12;

/// Section kind code of the frame descriptors that tracked blocks' call stacks name:
/// [`FrameDescrRecord`]s.
pub const SECTION_KIND_MEMPROF_FRAMES: u32 = 14;

/// `source` values (`CAML_MEMPROF_SRC_*`).
pub const MEMPROF_SOURCE_NORMAL: u8 = 0;
pub const MEMPROF_SOURCE_MARSHAL: u8 = 1;
pub const MEMPROF_SOURCE_CUSTOM: u8 = 2;

/// `flags` bits.
pub const MEMPROF_ALLOC_YOUNG: u8 = 1;
pub const MEMPROF_PROMOTED: u8 = 2;
pub const MEMPROF_DEALLOCATED: u8 = 4;
/// `block` is not yet a block but an offset into a combined allocation (the entry's allocation
/// callback is running).
pub const MEMPROF_OFFSET: u8 = 8;
pub const MEMPROF_DELETED: u8 = 16;

/// Which table an entry is in (`table`).
pub const MEMPROF_TABLE_DOMAIN: u8 = 0;
pub const MEMPROF_TABLE_THREAD: u8 = 1;
pub const MEMPROF_TABLE_ORPHAN: u8 = 2;

/// One tracked block, 56 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct MemprofRecord {
    /// The sampled block (the value), as the table held it.
    pub block: u64,
    /// What the tracker's last callback returned for it (an OCaml value), or, before the
    /// allocation callback ran, the call stack as memprof keeps it.
    pub user_data: u64,
    /// How many samples the block holds.
    pub samples: u64,
    /// The block's size in words, header excluded.
    pub wosize: u64,
    /// The profile: the address of its configuration block (a heap block of the snapshot).
    pub profile: u64,
    /// The profile's sampling rate (`Gc.Memprof.start ~sampling_rate`), samples per word.
    pub sampling_rate: f64,
    /// Owning domain, or `0xFFFF` for orphaned tables.
    pub domain: u16,
    pub table: u8,
    pub source: u8,
    pub flags: u8,
    pub reserved: [u8; 3],
}

impl MemprofRecord {
    pub const SIZE: usize = 56;
}

/// A frame descriptor (`frame_descr`, in the program's frametables) and the return address it
/// describes, 16 bytes. An OCaml 5 raw backtrace (`Printexc.raw_backtrace`, what
/// `Gc.Memprof`'s `callstack` is) holds descriptor addresses, not code addresses: these
/// records let a reader turn them into source lines.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct FrameDescrRecord {
    pub descriptor: u64,
    pub return_address: u64,
}

impl FrameDescrRecord {
    pub const SIZE: usize = 16;
}

impl SnapshotWriter {
    /// Records statmemprof's entries (at most once).
    pub fn write_memprof(&mut self, records: &[MemprofRecord]) -> Result<(), FormatError> {
        self.write_raw_section(SECTION_KIND_MEMPROF, 0, bytemuck::cast_slice(records))
    }
}

impl SnapshotWriter {
    /// Records the frame descriptors tracked blocks' call stacks name (at most once; sorted
    /// by descriptor).
    pub fn write_memprof_frames(&mut self, records: &[FrameDescrRecord]) -> Result<(), FormatError> {
        let mut sorted = records.to_vec();
        sorted.sort_unstable_by_key(|r| r.descriptor);
        sorted.dedup();
        self.write_raw_section(SECTION_KIND_MEMPROF_FRAMES, 0, bytemuck::cast_slice(&sorted))
    }
}

impl Snapshot {
    /// The frame descriptors tracked blocks' call stacks name, sorted by descriptor; empty when
    /// there is no such section (or it is not a whole number of records).
    pub fn memprof_frames(&self) -> Vec<FrameDescrRecord> {
        let Some(s) = self.sections().iter().find(|s| s.kind == SECTION_KIND_MEMPROF_FRAMES) else { return Vec::new() };
        let Some(body) = self.bytes().get(s.offset as usize..(s.offset + s.length) as usize) else { return Vec::new() };
        if body.len() % FrameDescrRecord::SIZE != 0 {
            return Vec::new();
        }
        let mut out: Vec<FrameDescrRecord> = body.chunks_exact(FrameDescrRecord::SIZE).map(bytemuck::pod_read_unaligned).collect();
        out.sort_unstable_by_key(|r| r.descriptor);
        out
    }

    /// Statmemprof's entries; `None` when the snapshot has no such section (a runtime without
    /// statmemprof, or a dumper that predates it), or when it is not a whole number of records.
    pub fn memprof(&self) -> Option<Vec<MemprofRecord>> {
        let s = self.sections().iter().find(|s| s.kind == SECTION_KIND_MEMPROF)?;
        let body = self.bytes().get(s.offset as usize..(s.offset + s.length) as usize)?;
        if body.len() % MemprofRecord::SIZE != 0 {
            return None;
        }
        Some(body.chunks_exact(MemprofRecord::SIZE).map(bytemuck::pod_read_unaligned).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_56_bytes_without_padding() {
        assert_eq!(std::mem::size_of::<MemprofRecord>(), MemprofRecord::SIZE);
        assert_eq!(std::mem::size_of::<FrameDescrRecord>(), FrameDescrRecord::SIZE);
    }
}
