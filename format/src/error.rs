use crate::layout::SectionKind;
use std::path::PathBuf;

/// Everything that can be wrong with a snapshot file, or with writing one.
/// Offsets are absolute byte offsets in the file.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },

    #[error("file is {len} bytes long, shorter than the {min} bytes of an empty snapshot (truncated?)")]
    TooShort { len: u64, min: u64 },

    /// The bytes found stay out of the message: a server that opens a file it is asked for
    /// (`heapsnap mcp`) must not hand back what another kind of file holds.
    #[error("not a heapsnap snapshot (bad magic)")]
    BadMagic { found: [u8; 8] },

    #[error("snapshot format version {major}.{minor} is not supported (this reader reads {supported}.x)")]
    UnsupportedVersion { major: u16, minor: u16, supported: u16 },

    #[error("unsupported snapshot layout at offset 8: {0}")]
    UnsupportedLayout(String),

    #[error("no end marker at offset {offset}: the file is truncated or was not finished")]
    BadTrailer { offset: u64 },

    #[error("section table at offset {offset} with {count} entries does not end where the trailer starts (offset {trailer_offset})")]
    BadSectionTable { offset: u64, count: u64, trailer_offset: u64 },

    #[error("section table at offset {offset}: checksum {actual:#018x}, expected {expected:#018x}")]
    TableChecksum { offset: u64, expected: u64, actual: u64 },

    #[error("section {index} ({kind}) at offset {offset}: {problem}")]
    Section { index: usize, kind: SectionKind, offset: u64, problem: SectionProblem },

    #[error("regions overlap: {first_base:#x}..{first_end:#x} (section {first_index}) and {second_base:#x}..{second_end:#x} (section {second_index})")]
    OverlappingRegions { first_index: usize, first_base: u64, first_end: u64, second_index: usize, second_base: u64, second_end: u64 },

    #[error("the snapshot has no {0} section")]
    MissingSection(SectionKind),

    /// The writer was used in a way that would produce an invalid file.
    #[error("cannot write snapshot: {0}")]
    Writer(String),
}

/// What is wrong with one section.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SectionProblem {
    #[error("body of {length} bytes ends past offset {limit}, where the sections end")]
    OutOfBounds { length: u64, limit: u64 },

    #[error("body is not 8-byte aligned")]
    Misaligned,

    #[error("body overlaps the section at offset {other_offset}")]
    OverlapsSection { other_offset: u64 },

    #[error("checksum {actual:#018x}, expected {expected:#018x}")]
    ChecksumMismatch { expected: u64, actual: u64 },

    #[error("appears more than once")]
    Duplicate,

    #[error("is marked required but this reader does not know it (format {major}.{minor} or later?)")]
    UnknownRequired { major: u16, minor: u16 },

    #[error("length {length} is not a whole number of {record_size}-byte records")]
    BadLength { length: u64, record_size: usize },

    #[error("{0}")]
    Invalid(String),

    #[error("record {index} (at offset {offset}): {reason}")]
    BadRecord { index: usize, offset: u64, reason: String },
}
