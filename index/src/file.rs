//! The index container: a header, a section table and 8-byte aligned sections, each with its
//! own xxh3-64 checksum (see INDEX.md). Opening checks the header and the table; a section's
//! checksum is checked the first time it is read, so a report touches only what it needs.
//! Nothing in the file is trusted before it is checked.

use std::sync::OnceLock;
use xxhash_rust::xxh3::xxh3_64;

pub const MAGIC: [u8; 8] = *b"HSNAPIDX";
/// Bumped whenever what the index holds, or how it is computed, changes.
pub const INDEX_VERSION: u32 = 14;
pub const HEADER_SIZE: usize = 48;
pub const ENTRY_SIZE: usize = 32;
/// Far more sections than any index holds: a table claiming more is foreign.
const MAX_SECTIONS: u32 = 256;
/// A section table entry's flag: the body is its length once decompressed (`u64`), then
/// those bytes compressed as an LZ4 block (`lz4_flex`). Its checksum is of the body as stored.
pub const COMPRESSED: u32 = 1;
/// The largest decompressed length a section may claim (a hostile length allocates no more).
const MAX_DECOMPRESSED: u64 = 1 << 32;

/// Why an index file was not used (the caller then rebuilds it).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IndexError {
    #[error("not a heapsnap index (bad magic)")]
    Magic,
    #[error("index version {0}, this heapsnap writes {INDEX_VERSION}")]
    Version(u32),
    #[error("the index is of another snapshot")]
    OtherSnapshot,
    #[error("the index is truncated ({0} bytes)")]
    Truncated(usize),
    #[error("the index's section table is corrupt: {0}")]
    Table(String),
    #[error("index section {0} is corrupt (checksum)")]
    Checksum(u32),
    #[error("index section {0} is missing or malformed")]
    Section(u32),
    #[error("index contents are inconsistent: {0}")]
    Inconsistent(String),
}

/// What ties an index to its snapshot: the xxh3-64 of the snapshot's section table (which holds
/// every section's checksum) and the snapshot's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotId {
    pub table_hash: u64,
    pub length: u64,
}

impl SnapshotId {
    pub fn of(snap: &heapsnap_format::Snapshot) -> SnapshotId {
        let table: &[u8] = bytemuck::cast_slice(snap.sections());
        SnapshotId { table_hash: xxh3_64(table), length: snap.bytes().len() as u64 }
    }
}

/// A section's body: borrowed from the analysis, or made for the index (never copied again).
enum Body<'a> {
    Borrowed(&'a [u8]),
    Bytes(Vec<u8>),
    U32(Vec<u32>),
    U64(Vec<u64>),
}

impl Body<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Body::Borrowed(b) => b,
            Body::Bytes(v) => v,
            Body::U32(v) => bytemuck::cast_slice(v),
            Body::U64(v) => bytemuck::cast_slice(v),
        }
    }
}

/// Builds an index file section by section, then writes it: hundreds of megabytes at 10M
/// objects, written from where the sections are (no copy into one buffer).
#[derive(Default)]
pub struct IndexBuilder<'a> {
    /// `(kind, flags, body)`.
    sections: Vec<(u32, u32, Body<'a>)>,
}

/// A body stored [`COMPRESSED`]: its length, then its bytes compressed.
pub fn compress(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&lz4_flex::block::compress(bytes));
    out
}

/// The bytes of a [`COMPRESSED`] body (`None`: not an LZ4 block of the length it claims, or
/// one longer than 4 GiB).
pub fn decompress(body: &[u8]) -> Option<Vec<u8>> {
    let (len, block) = body.split_first_chunk::<8>()?;
    let len = u64::from_le_bytes(*len);
    // LZ4 expands a byte at most 255 times: a longer claim is hostile (and would allocate it).
    if len > MAX_DECOMPRESSED || len > (block.len() as u64).saturating_mul(255).saturating_add(16) {
        return None;
    }
    let bytes = lz4_flex::block::decompress(block, len as usize).ok()?;
    (bytes.len() as u64 == len).then_some(bytes)
}

impl<'a> IndexBuilder<'a> {
    pub fn add(&mut self, kind: u32, body: Vec<u8>) {
        self.sections.push((kind, 0, Body::Bytes(body)));
    }

    /// A section written [`COMPRESSED`] (read whole, when a report first needs it: JSON, the
    /// diff's tries), compressed here.
    pub fn add_compressed(&mut self, kind: u32, body: &[u8]) {
        self.sections.push((kind, COMPRESSED, Body::Bytes(compress(body))));
    }

    pub fn add_u32(&mut self, kind: u32, values: &'a [u32]) {
        self.sections.push((kind, 0, Body::Borrowed(bytemuck::cast_slice(values))));
    }

    pub fn add_u64(&mut self, kind: u32, values: &'a [u64]) {
        self.sections.push((kind, 0, Body::Borrowed(bytemuck::cast_slice(values))));
    }

    pub fn add_u32_vec(&mut self, kind: u32, values: Vec<u32>) {
        self.sections.push((kind, 0, Body::U32(values)));
    }

    pub fn add_u64_vec(&mut self, kind: u32, values: Vec<u64>) {
        self.sections.push((kind, 0, Body::U64(values)));
    }

    /// The header and the section table, with every body's checksum (hashed on every core).
    fn head(&self, id: SnapshotId) -> Vec<u8> {
        let table_len = self.sections.len() * ENTRY_SIZE;
        let mut at = (HEADER_SIZE + table_len) as u64;
        let mut table = Vec::with_capacity(table_len);
        let hashes: Vec<u64> = {
            use rayon::prelude::*;
            self.sections.par_iter().map(|(_, _, body)| xxh3_64(body.bytes())).collect()
        };
        for ((kind, flags, body), hash) in self.sections.iter().zip(&hashes) {
            let len = body.bytes().len() as u64;
            table.extend_from_slice(&kind.to_le_bytes());
            table.extend_from_slice(&flags.to_le_bytes());
            table.extend_from_slice(&at.to_le_bytes());
            table.extend_from_slice(&len.to_le_bytes());
            table.extend_from_slice(&hash.to_le_bytes());
            at += len.next_multiple_of(8);
        }
        let mut out = Vec::with_capacity(HEADER_SIZE + table_len);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&INDEX_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.sections.len() as u32).to_le_bytes());
        out.extend_from_slice(&id.table_hash.to_le_bytes());
        out.extend_from_slice(&id.length.to_le_bytes());
        out.extend_from_slice(&xxh3_64(&table).to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&table);
        out
    }

    /// Writes the whole file: header, table, sections (each padded to 8 bytes).
    pub fn write_to(&self, w: &mut impl std::io::Write, id: SnapshotId) -> std::io::Result<()> {
        w.write_all(&self.head(id))?;
        for (_, _, body) in &self.sections {
            let bytes = body.bytes();
            w.write_all(bytes)?;
            w.write_all(&[0u8; 8][..bytes.len().next_multiple_of(8) - bytes.len()])?;
        }
        Ok(())
    }

    /// The whole file in memory.
    pub fn finish(&self, id: SnapshotId) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out, id).expect("writing to memory does not fail");
        out
    }
}

struct Entry {
    kind: u32,
    flags: u32,
    offset: usize,
    length: usize,
    checksum: u64,
    checked: OnceLock<bool>,
    /// A [`COMPRESSED`] body once decompressed (`None`: it does not decompress).
    decompressed: OnceLock<Option<Bytes>>,
}

/// The bytes of an index (a mapped file or a vector), validated.
pub enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u64>, usize),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v, len) => &bytemuck::cast_slice(v)[..*len],
        }
    }
}

impl Bytes {
    /// Copies into 8-byte aligned memory (sections are read as `u32`/`u64` slices).
    pub fn copied(bytes: &[u8]) -> Bytes {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Bytes::Owned(words, bytes.len())
    }
}

pub struct IndexFile {
    bytes: Bytes,
    entries: Vec<Entry>,
    /// The meta data section, parsed once (each view of the index reads it).
    meta: OnceLock<Result<std::sync::Arc<crate::sections::Meta>, String>>,
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl IndexFile {
    /// Checks the header, that the index belongs to `id`, and the section table.
    pub fn parse(bytes: Bytes, id: SnapshotId) -> Result<IndexFile, IndexError> {
        let b: &[u8] = &bytes;
        if b.len() < HEADER_SIZE {
            return if b.len() >= 8 && b[..8] != MAGIC { Err(IndexError::Magic) } else { Err(IndexError::Truncated(b.len())) };
        }
        if b[..8] != MAGIC {
            return Err(IndexError::Magic);
        }
        let version = le32(b, 8);
        if version != INDEX_VERSION {
            return Err(IndexError::Version(version));
        }
        let count = le32(b, 12);
        if (SnapshotId { table_hash: le64(b, 16), length: le64(b, 24) }) != id {
            return Err(IndexError::OtherSnapshot);
        }
        if le64(b, 40) != 0 {
            return Err(IndexError::Table("reserved header field".into()));
        }
        if count > MAX_SECTIONS {
            return Err(IndexError::Table(format!("{count} sections")));
        }
        let table_end = HEADER_SIZE + count as usize * ENTRY_SIZE;
        if b.len() < table_end {
            return Err(IndexError::Truncated(b.len()));
        }
        let table = &b[HEADER_SIZE..table_end];
        if xxh3_64(table) != le64(b, 32) {
            return Err(IndexError::Table("checksum".into()));
        }
        let mut entries = Vec::with_capacity(count as usize);
        for e in table.chunks_exact(ENTRY_SIZE) {
            let (kind, flags, offset, length, checksum) = (le32(e, 0), le32(e, 4), le64(e, 8), le64(e, 16), le64(e, 24));
            if flags & !COMPRESSED != 0 {
                return Err(IndexError::Table(format!("section {kind} has flags {flags:#x}")));
            }
            let end = offset.checked_add(length).ok_or_else(|| IndexError::Table(format!("section {kind} overflows")))?;
            if offset % 8 != 0 || offset < table_end as u64 {
                return Err(IndexError::Table(format!("section {kind} at {offset}")));
            }
            if end > b.len() as u64 {
                return Err(IndexError::Truncated(b.len()));
            }
            if entries.iter().any(|x: &Entry| x.kind == kind) {
                return Err(IndexError::Table(format!("section {kind} twice")));
            }
            entries.push(Entry {
                kind,
                flags,
                offset: offset as usize,
                length: length as usize,
                checksum,
                checked: OnceLock::new(),
                decompressed: OnceLock::new(),
            });
        }
        Ok(IndexFile { bytes, entries, meta: OnceLock::new() })
    }

    /// Every section's kind and flags, in the table's order.
    pub fn kinds(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.entries.iter().map(|e| (e.kind, e.flags))
    }

    /// Every section's kind and length as stored, in the table's order.
    pub fn sizes(&self) -> impl Iterator<Item = (u32, usize)> + '_ {
        self.entries.iter().map(|e| (e.kind, e.length))
    }

    /// Whether the index has this section (its checksum is not checked here).
    pub fn has(&self, kind: u32) -> bool {
        self.entries.iter().any(|e| e.kind == kind)
    }

    /// Whether the index has every section of `needs` (written by a command that needed as
    /// much, or more).
    pub fn serves(&self, needs: crate::Needs) -> bool {
        needs.sections().iter().all(|&k| self.has(k))
    }

    /// The highest level the index serves (None: not even its meta data).
    pub fn level(&self) -> Option<crate::Needs> {
        [crate::Needs::All, crate::Needs::Paths, crate::Needs::Tree, crate::Needs::Diff, crate::Needs::Meta]
            .into_iter()
            .find(|&n| self.serves(n))
    }

    /// The meta data section, parsed on first use.
    pub fn meta(&self) -> Result<std::sync::Arc<crate::sections::Meta>, IndexError> {
        if let Some(parsed) = self.meta.get() {
            return parsed.clone().map_err(IndexError::Inconsistent);
        }
        // The section's own error (a bad checksum) as it is; a parse error kept for later views.
        let bytes = self.section(crate::sections::META)?;
        let parsed = serde_json::from_slice(bytes).map(std::sync::Arc::new).map_err(|e| format!("meta data: {e}"));
        self.meta.get_or_init(|| parsed).clone().map_err(IndexError::Inconsistent)
    }

    /// A section's bytes, its checksum checked on first use (a [`COMPRESSED`] one decompressed then,
    /// once).
    pub fn section(&self, kind: u32) -> Result<&[u8], IndexError> {
        let e = self.entry(kind)?;
        let stored = self.stored(e)?;
        if e.flags & COMPRESSED == 0 {
            return Ok(stored);
        }
        // Copied into 8-byte aligned memory: the diff's tries are read as `u64`s.
        e.decompressed.get_or_init(|| decompress(stored).map(|b| Bytes::copied(&b))).as_deref().ok_or(IndexError::Section(kind))
    }

    fn entry(&self, kind: u32) -> Result<&Entry, IndexError> {
        self.entries.iter().find(|e| e.kind == kind).ok_or(IndexError::Section(kind))
    }

    /// A section's body as stored, its checksum checked on first use.
    fn stored(&self, e: &Entry) -> Result<&[u8], IndexError> {
        let body = &self.bytes[e.offset..e.offset + e.length];
        if *e.checked.get_or_init(|| {
            // One call maps the section's pages (a page fault per few pages costs more than
            // the hashing); an older kernel without MADV_POPULATE_READ faults them in instead.
            if let Bytes::Mapped(m) = &self.bytes {
                let _ = m.advise_range(memmap2::Advice::PopulateRead, e.offset, e.length);
            }
            xxh3_64(body) == e.checksum
        }) {
            Ok(body)
        } else {
            Err(IndexError::Checksum(e.kind))
        }
    }

    pub fn u32s(&self, kind: u32) -> Result<&[u32], IndexError> {
        bytemuck::try_cast_slice(self.section(kind)?).map_err(|_| IndexError::Section(kind))
    }

    pub fn u64s(&self, kind: u32) -> Result<&[u64], IndexError> {
        bytemuck::try_cast_slice(self.section(kind)?).map_err(|_| IndexError::Section(kind))
    }

    /// Checks the checksums of these sections now, on every core (a report on a 10M-object
    /// snapshot reads hundreds of megabytes). Sections the index lacks are left to
    /// [`IndexFile::section`] to report.
    pub fn check(&self, kinds: &[u32]) -> Result<(), IndexError> {
        use rayon::prelude::*;
        // Largest first, so that the cores finish together.
        let mut present: Vec<&Entry> = self.entries.iter().filter(|e| kinds.contains(&e.kind)).collect();
        present.sort_by_key(|e| std::cmp::Reverse(e.length));
        present.par_iter().with_max_len(1).try_for_each(|e| self.stored(e).map(|_| ()))
    }

    /// Checks every section's checksum now, and that every compressed one decompresses.
    pub fn verify_all(&self) -> Result<(), IndexError> {
        self.entries.iter().try_for_each(|e| self.section(e.kind).map(|_| ()))
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// The module blocks' field paths saved (`sections::FIELD_PATHS`): labels without parsing the
/// snapshot's OCaml names; the closures' source lines (`sections::SOURCE_LINES`): closures
/// named without parsing the line tables. A section that does not parse is none (the names or
/// the line tables are read).
impl heapsnap_analyze::SavedNames for IndexFile {
    fn field_paths(&self) -> Option<heapsnap_analyze::FieldPaths> {
        serde_json::from_slice(self.section(crate::sections::FIELD_PATHS).ok()?).ok()
    }

    fn source_lines(&self) -> Option<heapsnap_analyze::SourceLines> {
        let lines: Vec<(u64, Option<String>)> = serde_json::from_slice(self.section(crate::sections::SOURCE_LINES).ok()?).ok()?;
        Some(lines.into_iter().collect())
    }
}
