//! The reader. [`Snapshot::open`] maps the file and validates all of it before returning:
//! header, trailer, section table, every section's bounds, alignment and checksum, every record
//! and string reference, region overlaps and the metadata. After that, every accessor is a
//! zero-copy view that cannot fail. No allocation is sized by a length read from the file
//! without first checking that length against the file's size.

use crate::error::{FormatError, SectionProblem};
use crate::layout::*;
use crate::metadata::Metadata;
use crate::symbol_index::{last_address, SymbolIndex};
use bytemuck::Zeroable;
use memmap2::Mmap;
use rayon::prelude::*;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::OnceLock;
use xxhash_rust::xxh3::xxh3_64;

#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Check every section's checksum when opening (reads the whole file once).
    pub verify_checksums: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { verify_checksums: true }
    }
}

enum Backing {
    Mapped(Mmap),
    /// Bytes copied into 8-aligned storage, so records can be viewed in place.
    Owned {
        words: Vec<u64>,
        len: usize,
    },
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(map) => map,
            Backing::Owned { words, len } => &bytemuck::cast_slice(words)[..*len],
        }
    }
}

struct RegionEntry {
    section: usize,
    /// A copy, read once when the snapshot is opened (see [`Snapshot::open_with`]).
    header: RegionHeader,
    /// The region's bytes (after its header) in the file.
    bytes: Range<usize>,
}

/// A validated snapshot.
pub struct Snapshot {
    backing: Backing,
    header: FileHeader,
    sections: Vec<SectionEntry>,
    metadata: Metadata,
    strings: Range<usize>,
    roots: Range<usize>,
    symbols: Range<usize>,
    custom_ops: Range<usize>,
    ephemerons: Range<usize>,
    /// Sorted by base address; no two overlap.
    regions: Vec<RegionEntry>,
    dwarf: Vec<(String, Range<usize>)>,
    /// Built on the first `symbol_at`.
    symbol_index: OnceLock<SymbolIndex>,
}

/// One memory region: its header and its bytes, as they were in the target.
#[derive(Clone, Copy)]
pub struct Region<'a> {
    pub header: &'a RegionHeader,
    pub bytes: &'a [u8],
    /// Index of the region's section in the section table.
    pub section: usize,
}

impl<'a> Region<'a> {
    pub fn kind(&self) -> RegionKind {
        self.header.region_kind()
    }

    pub fn base(&self) -> u64 {
        self.header.base
    }

    /// Exclusive end address.
    pub fn end(&self) -> u64 {
        self.header.base + self.bytes.len() as u64
    }

    pub fn contains(&self, address: u64) -> bool {
        (self.base()..self.end()).contains(&address)
    }

    /// The region's bytes as words (validated to be a whole number of 8-aligned words).
    pub fn words(&self) -> &'a [u64] {
        bytemuck::cast_slice(self.bytes)
    }

    /// The word at target address `address`, if the region holds it and it is word-aligned.
    pub fn word_at(&self, address: u64) -> Option<u64> {
        let offset = address.checked_sub(self.base())?;
        if offset % 8 != 0 {
            return None;
        }
        self.words().get((offset / 8) as usize).copied()
    }
}

/// Reads the file's bytes at an offset into a buffer.
type ReadAt<'a> = dyn Fn(usize, &mut [u8]) -> Result<(), FormatError> + 'a;

fn section_error(index: usize, entry: &SectionEntry, problem: SectionProblem) -> FormatError {
    FormatError::Section { index, kind: entry.section_kind(), offset: entry.offset, problem }
}

impl Snapshot {
    pub fn open(path: impl AsRef<Path>) -> Result<Snapshot, FormatError> {
        Self::open_with(path, &ReadOptions::default())
    }

    pub fn open_with(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Snapshot, FormatError> {
        let path = path.as_ref();
        let io = |source| FormatError::Io { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; like every mmap reader we rely on the file not being
        // truncated or rewritten while it is open (snapshots are written once and renamed).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        // The regions' headers are read from the file rather than through the map: a real heap
        // has thousands of regions, and touching each header would fault in its page and the
        // kernel would map the pages around it as well, most of a second look's time (and of
        // its exit, which unmaps them).
        let read_header = |offset: usize, header: &mut [u8]| file.read_exact_at(header, offset as u64).map_err(io);
        Self::validate(Backing::Mapped(map), &read_header, options)
    }

    /// Reads a snapshot held in memory (copied once into aligned storage).
    pub fn from_bytes(bytes: &[u8]) -> Result<Snapshot, FormatError> {
        Self::from_bytes_with(bytes, &ReadOptions::default())
    }

    pub fn from_bytes_with(bytes: &[u8], options: &ReadOptions) -> Result<Snapshot, FormatError> {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        let read_header = |offset: usize, header: &mut [u8]| {
            header.copy_from_slice(&bytes[offset..offset + header.len()]);
            Ok(())
        };
        Self::validate(Backing::Owned { words, len: bytes.len() }, &read_header, options)
    }

    /// `read_header(offset, buffer)` fills `buffer` with the file's bytes at `offset` (within
    /// bounds already checked): how region headers are read.
    fn validate(backing: Backing, read_header: &ReadAt<'_>, options: &ReadOptions) -> Result<Snapshot, FormatError> {
        let data = backing.bytes();
        let len = data.len() as u64;
        let min = (FileHeader::SIZE + Trailer::SIZE) as u64;
        if len < FileHeader::SIZE as u64 {
            return Err(FormatError::TooShort { len, min });
        }
        let header: FileHeader = bytemuck::pod_read_unaligned(&data[..FileHeader::SIZE]);
        if header.magic != MAGIC {
            return Err(FormatError::BadMagic { found: header.magic });
        }
        if header.version_major != VERSION_MAJOR {
            return Err(FormatError::UnsupportedVersion {
                major: header.version_major,
                minor: header.version_minor,
                supported: VERSION_MAJOR,
            });
        }
        if header.word_size != WORD_SIZE {
            return Err(FormatError::UnsupportedLayout(format!("word size {} (only 8 is supported)", header.word_size)));
        }
        if header.byte_order != BYTE_ORDER_LITTLE {
            return Err(FormatError::UnsupportedLayout(format!("byte order {} (only 1, little-endian, is supported)", header.byte_order)));
        }
        if header.header_size as usize != FileHeader::SIZE {
            return Err(FormatError::UnsupportedLayout(format!("header size {}", header.header_size)));
        }
        if len < min {
            return Err(FormatError::TooShort { len, min });
        }

        let trailer_offset = len - Trailer::SIZE as u64;
        let trailer: Trailer = bytemuck::pod_read_unaligned(&data[trailer_offset as usize..]);
        if trailer.end_magic != END_MAGIC {
            return Err(FormatError::BadTrailer { offset: trailer_offset });
        }
        let table_ok = trailer.table_offset >= FileHeader::SIZE as u64
            && trailer.table_offset.is_multiple_of(8)
            && trailer.section_count.checked_mul(SectionEntry::SIZE as u64).and_then(|n| n.checked_add(trailer.table_offset))
                == Some(trailer_offset);
        if !table_ok {
            return Err(FormatError::BadSectionTable { offset: trailer.table_offset, count: trailer.section_count, trailer_offset });
        }
        let table_bytes = &data[trailer.table_offset as usize..trailer_offset as usize];
        let actual = xxh3_64(table_bytes);
        if actual != trailer.table_checksum {
            return Err(FormatError::TableChecksum { offset: trailer.table_offset, expected: trailer.table_checksum, actual });
        }
        // The table's size is bounded by the file's, checked just above.
        let sections: Vec<SectionEntry> = bytemuck::cast_slice(table_bytes).to_vec();

        Self::check_section_bounds(&sections, trailer.table_offset)?;
        if options.verify_checksums {
            // find_map_first: when several sections are damaged, always name the first one.
            let mismatch = sections.par_iter().enumerate().find_map_first(|(index, entry)| {
                let body = &data[entry.offset as usize..(entry.offset + entry.length) as usize];
                let actual = xxh3_64(body);
                (actual != entry.checksum)
                    .then(|| section_error(index, entry, SectionProblem::ChecksumMismatch { expected: entry.checksum, actual }))
            });
            if let Some(error) = mismatch {
                return Err(error);
            }
        }

        let metadata = Self::parse_metadata(data, &sections)?;
        let mut snapshot = Snapshot {
            header,
            sections,
            metadata,
            strings: 0..0,
            roots: 0..0,
            symbols: 0..0,
            custom_ops: 0..0,
            ephemerons: 0..0,
            regions: Vec::new(),
            dwarf: Vec::new(),
            symbol_index: OnceLock::new(),
            backing,
        };
        snapshot.index_sections(read_header)?;
        Ok(snapshot)
    }

    /// Every section lies between the file header and the table, 8-aligned, and no two overlap.
    fn check_section_bounds(sections: &[SectionEntry], limit: u64) -> Result<(), FormatError> {
        for (index, entry) in sections.iter().enumerate() {
            if entry.offset % 8 != 0 {
                return Err(section_error(index, entry, SectionProblem::Misaligned));
            }
            let in_bounds =
                entry.offset >= FileHeader::SIZE as u64 && entry.offset.checked_add(entry.length).is_some_and(|end| end <= limit);
            if !in_bounds {
                return Err(section_error(index, entry, SectionProblem::OutOfBounds { length: entry.length, limit }));
            }
        }
        // Sorted by (start, end), a section that starts before the end of any earlier one starts
        // before the end of the one just before it, so checking neighbours is enough. An empty
        // section counts as a point: it may touch another section's ends, not lie inside it.
        let mut order: Vec<usize> = (0..sections.len()).collect();
        order.sort_unstable_by_key(|&i| (sections[i].offset, sections[i].length, i));
        for pair in order.windows(2) {
            let (a, b) = (&sections[pair[0]], &sections[pair[1]]);
            if b.offset < a.offset + a.length {
                return Err(section_error(pair[1], b, SectionProblem::OverlapsSection { other_offset: a.offset }));
            }
        }
        Ok(())
    }

    /// The metadata comes first: other checks depend on it.
    fn parse_metadata(data: &[u8], sections: &[SectionEntry]) -> Result<Metadata, FormatError> {
        let mut found = sections.iter().enumerate().filter(|(_, s)| s.kind == SectionKind::Metadata.code());
        let (index, entry) = found.next().ok_or(FormatError::MissingSection(SectionKind::Metadata))?;
        if let Some((second, entry)) = found.next() {
            return Err(section_error(second, entry, SectionProblem::Duplicate));
        }
        let body = &data[entry.offset as usize..(entry.offset + entry.length) as usize];
        let metadata: Metadata = serde_json::from_slice(body)
            .map_err(|e| section_error(index, entry, SectionProblem::Invalid(format!("metadata is not valid: {e}"))))?;
        if let Some(problem) = metadata.problem() {
            return Err(section_error(index, entry, SectionProblem::Invalid(format!("metadata: {problem}"))));
        }
        Ok(metadata)
    }

    fn index_sections(&mut self, read_header: &ReadAt<'_>) -> Result<(), FormatError> {
        let mut seen_singletons: Vec<SectionKind> = Vec::new();
        for index in 0..self.sections.len() {
            let entry = self.sections[index];
            let kind = entry.section_kind();
            let fail = |problem| section_error(index, &entry, problem);
            if kind.is_singleton() {
                if seen_singletons.contains(&kind) {
                    return Err(fail(SectionProblem::Duplicate));
                }
                seen_singletons.push(kind);
            }
            let body = entry.offset as usize..(entry.offset + entry.length) as usize;
            let records = |size: usize| -> Result<Range<usize>, FormatError> {
                if !entry.length.is_multiple_of(size as u64) {
                    return Err(fail(SectionProblem::BadLength { length: entry.length, record_size: size }));
                }
                Ok(body.clone())
            };
            match kind {
                SectionKind::Metadata => {} // parsed first, by parse_metadata
                SectionKind::Strings => {
                    let bytes = &self.backing.bytes()[body.clone()];
                    if bytes.last().is_some_and(|&b| b != 0) {
                        return Err(fail(SectionProblem::Invalid("strings do not end with NUL".into())));
                    }
                    if let Err(e) = std::str::from_utf8(bytes) {
                        return Err(fail(SectionProblem::Invalid(format!(
                            "string bytes are not UTF-8 at offset {}",
                            entry.offset + e.valid_up_to() as u64
                        ))));
                    }
                    self.strings = body;
                }
                SectionKind::Roots => self.roots = records(RootRecord::SIZE)?,
                SectionKind::Symbols => self.symbols = records(SymbolRecord::SIZE)?,
                SectionKind::CustomOps => self.custom_ops = records(CustomOpsRecord::SIZE)?,
                SectionKind::Ephemerons => self.ephemerons = records(8)?,
                SectionKind::Region => {
                    if entry.length < RegionHeader::SIZE as u64 || !(entry.length - RegionHeader::SIZE as u64).is_multiple_of(8) {
                        return Err(fail(SectionProblem::Invalid(format!(
                            "region section of {} bytes is not a {}-byte header and whole words",
                            entry.length,
                            RegionHeader::SIZE
                        ))));
                    }
                    let mut header = RegionHeader::zeroed();
                    read_header(body.start, bytemuck::bytes_of_mut(&mut header))?;
                    let bytes = body.start + RegionHeader::SIZE..body.end;
                    if !header.base.is_multiple_of(8) || header.base.checked_add(bytes.len() as u64).is_none() {
                        return Err(fail(SectionProblem::Invalid(format!("region base {:#x} is unaligned or its end wraps", header.base))));
                    }
                    if header.first_block as usize > bytes.len() {
                        return Err(fail(SectionProblem::Invalid(format!(
                            "first block offset {} is past the region's {} bytes",
                            header.first_block,
                            bytes.len()
                        ))));
                    }
                    self.regions.push(RegionEntry { section: index, header, bytes });
                }
                SectionKind::Dwarf => {
                    if entry.length < DWARF_NAME_LEN as u64 {
                        return Err(fail(SectionProblem::Invalid("DWARF section shorter than its name".into())));
                    }
                    let name_bytes = &self.backing.bytes()[body.start..body.start + DWARF_NAME_LEN];
                    let name_len = name_bytes.iter().position(|&b| b == 0).unwrap_or(DWARF_NAME_LEN);
                    let name = std::str::from_utf8(&name_bytes[..name_len])
                        .map_err(|_| fail(SectionProblem::Invalid("DWARF section name is not UTF-8".into())))?;
                    if name.is_empty() {
                        return Err(fail(SectionProblem::Invalid("DWARF section name is empty".into())));
                    }
                    if self.dwarf.iter().any(|(n, _)| n == name) {
                        return Err(fail(SectionProblem::Invalid(format!("DWARF section {name} appears twice"))));
                    }
                    self.dwarf.push((name.to_owned(), body.start + DWARF_NAME_LEN..body.end));
                }
                SectionKind::Unknown(_) => {
                    if entry.flags & SECTION_FLAG_REQUIRED != 0 {
                        return Err(fail(SectionProblem::UnknownRequired {
                            major: self.header.version_major,
                            minor: self.header.version_minor,
                        }));
                    }
                }
            }
        }
        self.check_regions()?;
        self.check_records()
    }

    /// Same rule as for sections: sorted by (base, end), an overlap shows between neighbours; an
    /// empty region may touch another's ends but not lie inside it, so lookups stay exact.
    fn check_regions(&mut self) -> Result<(), FormatError> {
        self.regions.sort_unstable_by_key(|r| (r.header.base, r.bytes.len(), r.section));
        for pair in self.regions.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let a_end = a.header.base + a.bytes.len() as u64;
            if a_end > b.header.base {
                return Err(FormatError::OverlappingRegions {
                    first_index: a.section,
                    first_base: a.header.base,
                    first_end: a_end,
                    second_index: b.section,
                    second_base: b.header.base,
                    second_end: b.header.base + b.bytes.len() as u64,
                });
            }
        }
        Ok(())
    }

    /// Every string reference names the start of a string; symbols are sorted.
    fn check_records(&self) -> Result<(), FormatError> {
        let strings = &self.backing.bytes()[self.strings.clone()];
        let string_ok = |id: StrId| id.is_none() || ((id.0 as usize) < strings.len() && (id.0 == 0 || strings[id.0 as usize - 1] == 0));
        let section_of =
            |kind: SectionKind| self.sections.iter().position(|s| s.kind == kind.code()).expect("a section with records exists");
        let bad = |kind: SectionKind, record_size: usize, index: usize, reason: String| {
            let section = section_of(kind);
            let entry = &self.sections[section];
            section_error(section, entry, SectionProblem::BadRecord { index, offset: entry.offset + (index * record_size) as u64, reason })
        };
        if let Some(i) = self.roots().iter().position(|r| !string_ok(r.name)) {
            return Err(bad(SectionKind::Roots, RootRecord::SIZE, i, format!("name {} is not a string", self.roots()[i].name.0)));
        }
        let symbols = self.symbols();
        if let Some(i) = symbols.iter().position(|s| !string_ok(s.name)) {
            return Err(bad(SectionKind::Symbols, SymbolRecord::SIZE, i, format!("name {} is not a string", symbols[i].name.0)));
        }
        if let Some(i) = symbols.iter().position(|s| s.end < s.start) {
            return Err(bad(SectionKind::Symbols, SymbolRecord::SIZE, i, "end before start".into()));
        }
        if let Some(i) = symbols.windows(2).position(|w| (w[1].start, w[1].end) < (w[0].start, w[0].end)) {
            return Err(bad(SectionKind::Symbols, SymbolRecord::SIZE, i + 1, "symbols are not sorted by (start, end)".into()));
        }
        if let Some(i) = self.custom_ops().iter().position(|o| !string_ok(o.identifier)) {
            return Err(bad(SectionKind::CustomOps, CustomOpsRecord::SIZE, i, "identifier is not a string".into()));
        }
        Ok(())
    }

    fn view<T: bytemuck::Pod>(&self, range: &Range<usize>) -> &[T] {
        bytemuck::cast_slice(&self.backing.bytes()[range.clone()])
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    pub fn sections(&self) -> &[SectionEntry] {
        &self.sections
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    pub fn roots(&self) -> &[RootRecord] {
        self.view(&self.roots)
    }

    /// Symbols sorted by start address.
    pub fn symbols(&self) -> &[SymbolRecord] {
        self.view(&self.symbols)
    }

    pub fn custom_ops(&self) -> &[CustomOpsRecord] {
        self.view(&self.custom_ops)
    }

    pub fn ephemerons(&self) -> &[u64] {
        self.view(&self.ephemerons)
    }

    /// The string `id` names; `None` for [`StrId::NONE`] (references were validated on open).
    pub fn string(&self, id: StrId) -> Option<&str> {
        if id.is_none() {
            return None;
        }
        let bytes = &self.backing.bytes()[self.strings.clone()];
        let tail = bytes.get(id.0 as usize..)?;
        let len = tail.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&tail[..len]).ok()
    }

    /// The innermost symbol whose range holds `address` (or that starts there, for sizeless ones).
    /// Innermost means: of the symbols holding `address`, the one that starts last, and of those
    /// starting there, the shortest (the first in the table when several are equal).
    /// O(log n) however symbols nest or overlap.
    pub fn symbol_at(&self, address: u64) -> Option<(&SymbolRecord, &str)> {
        let symbols = self.symbols();
        let last_starting = symbols.partition_point(|s| s.start <= address).checked_sub(1)?;
        let index = self.symbol_index.get_or_init(|| SymbolIndex::new(symbols));
        let reaching = index.last_reaching(last_starting, address)?;
        // Symbols that start where that one does are sorted by end, hence by last address: the
        // first of them that still reaches the address is the innermost.
        let start = symbols[reaching].start;
        let run = symbols[..reaching].partition_point(|s| s.start < start);
        let inner = run + symbols[run..=reaching].partition_point(|s| last_address(s) < address);
        let symbol = &symbols[inner];
        Some((symbol, self.string(symbol.name).unwrap_or("")))
    }

    pub fn region_count(&self) -> usize {
        self.regions.len()
    }

    /// The `index`-th region in address order.
    pub fn region(&self, index: usize) -> Region<'_> {
        let entry = &self.regions[index];
        Region { header: &entry.header, bytes: &self.backing.bytes()[entry.bytes.clone()], section: entry.section }
    }

    /// All regions, in address order.
    pub fn regions(&self) -> impl ExactSizeIterator<Item = Region<'_>> + '_ {
        (0..self.regions.len()).map(|i| self.region(i))
    }

    /// Index (in address order) of the region holding `address`.
    pub fn region_index_of(&self, address: u64) -> Option<usize> {
        let after = self.regions.partition_point(|r| r.header.base <= address);
        let index = after.checked_sub(1)?;
        let r = &self.regions[index];
        (address - r.header.base < r.bytes.len() as u64).then_some(index)
    }

    pub fn region_of(&self, address: u64) -> Option<Region<'_>> {
        self.region_index_of(address).map(|i| self.region(i))
    }

    /// The bytes of a DWARF section the dumper copied, by ELF name (".debug_line", ...).
    pub fn dwarf_section(&self, name: &str) -> Option<&[u8]> {
        self.dwarf.iter().find(|(n, _)| n == name).map(|(_, r)| &self.backing.bytes()[r.clone()])
    }

    pub fn dwarf_section_names(&self) -> impl Iterator<Item = &str> {
        self.dwarf.iter().map(|(n, _)| n.as_str())
    }
}
