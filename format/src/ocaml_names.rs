//! The program's OCaml names and types (section kind 13, FORMAT.md §3.13): what heapsnap's
//! `.cmt` reader printed for the compilation units the snapshot holds, kept in the snapshot so
//! that it analyses with names on another machine.
//!
//! Kind 13 is not a [`SectionKind`](crate::SectionKind) variant: readers that predate it skip
//! it like any unknown, non-required section. A snapshot written without names gets them later
//! with [`replace_ocaml_names`] (`heapsnap annotate`).

use crate::error::FormatError;
use crate::layout::{FileHeader, SectionEntry, Trailer, END_MAGIC, VERSION_MINOR};
use crate::reader::Snapshot;
use crate::writer::SnapshotWriter;
use std::io::Write;
use std::path::Path;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// Section kind code of the OCaml names: a UTF-8 JSON document (FORMAT.md §3.13).
pub const SECTION_KIND_OCAML_NAMES: u32 = 13;

impl SnapshotWriter {
    /// Records the program's OCaml names (the JSON of FORMAT.md §3.13).
    pub fn write_ocaml_names(&mut self, json: &str) -> Result<(), FormatError> {
        self.write_raw_section(SECTION_KIND_OCAML_NAMES, 0, json.as_bytes())
    }
}

impl Snapshot {
    /// The OCaml names the snapshot carries (the last such section), when it has them and they
    /// are UTF-8. The JSON inside is not validated here: its reader must expect anything.
    pub fn ocaml_names(&self) -> Option<&str> {
        let s = self.sections().iter().rev().find(|s| s.kind == SECTION_KIND_OCAML_NAMES)?;
        let body = self.bytes().get(s.offset as usize..(s.offset + s.length) as usize)?;
        std::str::from_utf8(body).ok()
    }
}

/// Rewrites the snapshot at `path` with `json` as its OCaml names, replacing any it had: every
/// other section is copied as it is, the file's minor version becomes at least 2. Like a new
/// snapshot, the file is written owner-only to a temporary file beside it, synced and renamed
/// over the old one; the old one is left untouched on any error.
pub fn replace_ocaml_names(path: &Path, json: &str) -> Result<(), FormatError> {
    let snap = Snapshot::open(path)?;
    let io = |source| FormatError::Io { path: path.to_path_buf(), source };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".partial").tempfile_in(&dir).map_err(io)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, tmp);
    let mut header = *snap.header();
    header.version_minor = header.version_minor.max(VERSION_MINOR);
    out.write_all(bytemuck::bytes_of(&header)).map_err(io)?;
    let mut position = FileHeader::SIZE as u64;
    let mut table: Vec<SectionEntry> = Vec::with_capacity(snap.sections().len() + 1);
    let mut put = |out: &mut std::io::BufWriter<tempfile::NamedTempFile>, entry: SectionEntry, body: &[u8]| {
        out.write_all(body)?;
        let padding = (8 - body.len() % 8) % 8;
        out.write_all(&[0u8; 8][..padding])?;
        table.push(SectionEntry { offset: position, ..entry });
        position += (body.len() + padding) as u64;
        Ok::<(), std::io::Error>(())
    };
    for entry in snap.sections().iter().filter(|s| s.kind != SECTION_KIND_OCAML_NAMES) {
        let body = &snap.bytes()[entry.offset as usize..(entry.offset + entry.length) as usize];
        put(&mut out, *entry, body).map_err(io)?;
    }
    let mut hasher = Xxh3::new();
    hasher.update(json.as_bytes());
    let names = SectionEntry { kind: SECTION_KIND_OCAML_NAMES, flags: 0, offset: 0, length: json.len() as u64, checksum: hasher.digest() };
    put(&mut out, names, json.as_bytes()).map_err(io)?;
    let table_bytes: &[u8] = bytemuck::cast_slice(&table);
    let trailer =
        Trailer { table_offset: position, section_count: table.len() as u64, table_checksum: xxh3_64(table_bytes), end_magic: END_MAGIC };
    out.write_all(table_bytes).map_err(io)?;
    out.write_all(bytemuck::bytes_of(&trailer)).map_err(io)?;
    let tmp = out.into_inner().map_err(|e| io(e.into_error()))?;
    tmp.as_file().sync_all().map_err(io)?;
    drop(snap);
    tmp.persist(path).map_err(|e| io(e.error))?;
    let _ = std::fs::File::open(&dir).and_then(|d| d.sync_all());
    Ok(())
}
