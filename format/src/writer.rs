//! The streaming writer. Sections go to the file one after another as they come; the section
//! table and the trailer are written last. The file is created owner-only next to its final
//! name and renamed there by [`SnapshotWriter::finish`], so a crash never leaves a half snapshot
//! under the final name (the temporary file is removed when the writer is dropped unfinished).

use crate::error::FormatError;
use crate::layout::*;
use crate::metadata::Metadata;
use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use tempfile::NamedTempFile;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

pub struct SnapshotWriter {
    out: BufWriter<NamedTempFile>,
    final_path: PathBuf,
    position: u64,
    sections: Vec<SectionEntry>,
    strings: Vec<u8>,
    string_ids: HashMap<String, StrId>,
    /// Base and end of every region written, to refuse overlaps before they reach the disk.
    region_spans: Vec<(u64, u64)>,
    /// Names of the DWARF sections written: a name may appear once.
    dwarf_names: Vec<String>,
    /// (load bias, name) of the plugins' DWARF sections written.
    pub(crate) plugin_dwarf: Vec<(u64, String)>,
    /// Set by a failed write: the file's contents are then unknown, so `finish` refuses.
    failed: bool,
}

/// The OS error under one of tempfile's, which appends the temporary file's name
/// (`... at path "DIR/.x.partial"`): errors name the snapshot's path, once.
fn without_temporary_path(err: std::io::Error) -> std::io::Error {
    let os = err.get_ref().and_then(|inner| inner.source()).and_then(|cause| cause.downcast_ref::<std::io::Error>());
    match os.and_then(std::io::Error::raw_os_error) {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => err,
    }
}

impl SnapshotWriter {
    /// Starts a snapshot that [`finish`](Self::finish) will rename to `path`.
    /// The file is created with mode 0600: a snapshot holds a process's memory.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, FormatError> {
        let final_path = path.as_ref().to_path_buf();
        let dir = match final_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = final_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        // tempfile creates the file with O_EXCL and mode 0600.
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".partial")
            .tempfile_in(&dir)
            .map_err(|source| FormatError::Io { path: final_path.clone(), source: without_temporary_path(source) })?;
        let mut writer = SnapshotWriter {
            out: BufWriter::with_capacity(1 << 20, tmp),
            final_path,
            position: 0,
            sections: Vec::new(),
            strings: Vec::new(),
            string_ids: HashMap::new(),
            region_spans: Vec::new(),
            dwarf_names: Vec::new(),
            plugin_dwarf: Vec::new(),
            failed: false,
        };
        writer.put(bytemuck::bytes_of(&FileHeader::current()))?;
        Ok(writer)
    }

    /// The id of `s` in the strings section, adding it on first use.
    pub fn intern(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        // NUL ends a string in the table, so a name cannot hold one.
        let clean: String = s.chars().filter(|&c| c != '\0').collect();
        let id = StrId(self.strings.len() as u32);
        self.strings.extend_from_slice(clean.as_bytes());
        self.strings.push(0);
        self.string_ids.insert(s.to_owned(), id);
        id
    }

    pub fn write_metadata(&mut self, metadata: &Metadata) -> Result<(), FormatError> {
        if let Some(problem) = metadata.problem() {
            return Err(FormatError::Writer(format!("invalid metadata: {problem}")));
        }
        let json = serde_json::to_vec(metadata).map_err(|e| FormatError::Writer(e.to_string()))?;
        self.write_section(SectionKind::Metadata, SECTION_FLAG_REQUIRED, &[&json])
    }

    pub fn write_roots(&mut self, roots: &[RootRecord]) -> Result<(), FormatError> {
        self.check_names(roots.iter().map(|r| r.name))?;
        self.write_section(SectionKind::Roots, SECTION_FLAG_REQUIRED, &[bytemuck::cast_slice(roots)])
    }

    /// Writes a region whose bytes are at hand.
    pub fn write_region(&mut self, header: &RegionHeader, bytes: &[u8]) -> Result<(), FormatError> {
        let mut stream = self.begin_region(header)?;
        stream.write(bytes)?;
        stream.finish()
    }

    /// Starts a region whose bytes come in pieces; the region ends at [`RegionStream::finish`].
    pub fn begin_region(&mut self, header: &RegionHeader) -> Result<RegionStream<'_>, FormatError> {
        let mut stream = RegionStream { base: header.base, section: self.begin_section(SectionKind::Region, SECTION_FLAG_REQUIRED)? };
        stream.section.write(bytemuck::bytes_of(header))?;
        Ok(stream)
    }

    /// Symbols are sorted by start address here, as the format requires.
    pub fn write_symbols(&mut self, symbols: &mut [SymbolRecord]) -> Result<(), FormatError> {
        if let Some(s) = symbols.iter().find(|s| s.end < s.start) {
            return Err(FormatError::Writer(format!("symbol at {:#x} ends before it starts", s.start)));
        }
        self.check_names(symbols.iter().map(|s| s.name))?;
        symbols.sort_unstable_by_key(|s| (s.start, s.end));
        self.write_section(SectionKind::Symbols, 0, &[bytemuck::cast_slice(symbols)])
    }

    /// Copies one of the executable's DWARF sections (e.g. ".debug_line") so that source lines
    /// can be found without the executable.
    pub fn write_dwarf(&mut self, name: &str, bytes: &[u8]) -> Result<(), FormatError> {
        if name.is_empty() || name.len() > DWARF_NAME_LEN || name.contains('\0') {
            return Err(FormatError::Writer(format!("bad DWARF section name {name:?}")));
        }
        if self.dwarf_names.iter().any(|n| n == name) {
            return Err(FormatError::Writer(format!("the DWARF section {name} can only be written once")));
        }
        let mut header = [0u8; DWARF_NAME_LEN];
        header[..name.len()].copy_from_slice(name.as_bytes());
        self.write_section(SectionKind::Dwarf, 0, &[&header, bytes])?;
        self.dwarf_names.push(name.to_owned());
        Ok(())
    }

    pub fn write_custom_ops(&mut self, ops: &[CustomOpsRecord]) -> Result<(), FormatError> {
        self.check_names(ops.iter().map(|o| o.identifier))?;
        self.write_section(SectionKind::CustomOps, 0, &[bytemuck::cast_slice(ops)])
    }

    /// Addresses (OCaml values) of every ephemeron and weak array the runtime knows.
    pub fn write_ephemerons(&mut self, values: &[u64]) -> Result<(), FormatError> {
        self.write_section(SectionKind::Ephemerons, 0, &[bytemuck::cast_slice(values)])
    }

    /// Writes a section of a kind this version does not know, e.g. one a later version defines
    /// (set [`SECTION_FLAG_REQUIRED`] if a reader must not skip it). Known kinds are refused:
    /// their typed methods validate what they write.
    pub fn write_raw_section(&mut self, kind: u32, flags: u32, body: &[u8]) -> Result<(), FormatError> {
        let kind = SectionKind::from_code(kind);
        if !matches!(kind, SectionKind::Unknown(_)) {
            return Err(FormatError::Writer(format!("the {kind} section cannot be written raw: use its own method")));
        }
        self.write_section(kind, flags, &[body])
    }

    /// Writes the strings, the section table and the trailer, flushes everything to disk and
    /// renames the file to its final name. Returns that name.
    pub fn finish(mut self) -> Result<PathBuf, FormatError> {
        if self.failed {
            return Err(FormatError::Writer("an earlier write failed; the snapshot is incomplete".into()));
        }
        if !self.sections.iter().any(|s| s.kind == SectionKind::Metadata.code()) {
            return Err(FormatError::Writer("no metadata section was written".into()));
        }
        let mut spans = std::mem::take(&mut self.region_spans);
        spans.sort_unstable();
        if let Some(w) = spans.windows(2).find(|w| w[1].0 < w[0].1) {
            return Err(FormatError::Writer(format!("region {:#x}..{:#x} overlaps region {:#x}..{:#x}", w[0].0, w[0].1, w[1].0, w[1].1)));
        }
        let strings = std::mem::take(&mut self.strings);
        self.write_section(SectionKind::Strings, 0, &[&strings])?;

        let table_offset = self.position;
        let table: &[u8] = bytemuck::cast_slice(&self.sections);
        let trailer =
            Trailer { table_offset, section_count: self.sections.len() as u64, table_checksum: xxh3_64(table), end_magic: END_MAGIC };
        let table = table.to_vec();
        self.put(&table)?;
        self.put(bytemuck::bytes_of(&trailer))?;

        let path = self.final_path.clone();
        let io = |source| FormatError::Io { path: path.clone(), source };
        let tmp = self.out.into_inner().map_err(|e| io(e.into_error()))?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(&path).map_err(|e| io(e.error))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Make the rename itself durable; failure here leaves a complete file, so ignore it.
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(path)
    }

    fn check_names(&self, ids: impl Iterator<Item = StrId>) -> Result<(), FormatError> {
        for id in ids {
            if !id.is_none() && (id.0 as usize >= self.strings.len() || (id.0 > 0 && self.strings[id.0 as usize - 1] != 0)) {
                return Err(FormatError::Writer(format!("string id {} was not made by intern()", id.0)));
            }
        }
        Ok(())
    }

    pub(crate) fn write_section(&mut self, kind: SectionKind, flags: u32, parts: &[&[u8]]) -> Result<(), FormatError> {
        let mut section = self.begin_section(kind, flags)?;
        for part in parts {
            section.write(part)?;
        }
        section.finish()?;
        Ok(())
    }

    fn begin_section(&mut self, kind: SectionKind, flags: u32) -> Result<SectionStream<'_>, FormatError> {
        if kind.is_singleton() && self.sections.iter().any(|s| s.kind == kind.code()) {
            return Err(FormatError::Writer(format!("the {kind} section can only be written once")));
        }
        // A region stream dropped or refused mid-way leaves unaligned bytes that no section owns;
        // pad them so this section still starts on a multiple of 8.
        let padding = (8 - (self.position % 8) as usize) % 8;
        self.put(&[0u8; 8][..padding])?;
        let offset = self.position;
        Ok(SectionStream { writer: self, kind, flags, offset, hasher: Xxh3::new() })
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), FormatError> {
        if let Err(source) = self.out.write_all(bytes) {
            self.failed = true;
            return Err(FormatError::Io { path: self.final_path.clone(), source });
        }
        self.position += bytes.len() as u64;
        Ok(())
    }
}

/// A section being written: its checksum is computed as the bytes go by.
struct SectionStream<'w> {
    writer: &'w mut SnapshotWriter,
    kind: SectionKind,
    flags: u32,
    offset: u64,
    hasher: Xxh3,
}

impl SectionStream<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), FormatError> {
        self.hasher.update(bytes);
        self.writer.put(bytes)
    }

    fn finish(self) -> Result<u64, FormatError> {
        let length = self.writer.position - self.offset;
        self.writer.sections.push(SectionEntry {
            kind: self.kind.code(),
            flags: self.flags,
            offset: self.offset,
            length,
            checksum: self.hasher.digest(),
        });
        let padding = (8 - (length % 8) as usize) % 8;
        // The padding is not part of the section: put() bypasses the hasher.
        self.writer.put(&[0u8; 8][..padding])?;
        Ok(length)
    }
}

/// A region whose bytes are streamed in pieces (e.g. straight from a batched memory read).
pub struct RegionStream<'w> {
    base: u64,
    section: SectionStream<'w>,
}

impl RegionStream<'_> {
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), FormatError> {
        self.section.write(bytes)
    }

    pub fn finish(self) -> Result<(), FormatError> {
        let base = self.base;
        let payload = self.section.writer.position - self.section.offset - RegionHeader::SIZE as u64;
        if !payload.is_multiple_of(8) {
            return Err(FormatError::Writer(format!("region at {base:#x}: {payload} bytes is not a whole number of words")));
        }
        let end =
            base.checked_add(payload).ok_or_else(|| FormatError::Writer(format!("region at {base:#x} wraps around the address space")))?;
        self.section.writer.region_spans.push((base, end));
        self.section.finish()?;
        Ok(())
    }
}
