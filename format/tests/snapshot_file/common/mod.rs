//! Test helpers: an encoder written from FORMAT.md independently of the crate's writer (so
//! tests can build files the writer would refuse to), and tools to patch files.
#![allow(dead_code)]

pub mod exercise;
pub mod mutate;

use heapsnap_format::*;
use std::path::PathBuf;
use xxhash_rust::xxh3::xxh3_64;

#[allow(unused_imports)]
pub use exercise::reseal;

pub fn metadata() -> Metadata {
    Metadata {
        ocaml_version: "5.3.0".into(),
        word_size: 8,
        reserved_header_bits: 0,
        colours: ColourEncoding::OCAML5_INITIAL,
        pid: Some(4242),
        executable: Some("/usr/bin/prog".into()),
        build_id: Some("00ff".into()),
        time_unix_ns: 1_700_000_000_000_000_000,
        trigger: Trigger::Synthetic,
        dumper: "heapsnap tests".into(),
        domains: vec![DomainInfo { id: 0, minor_start: 0x10_0000, minor_end: 0x20_0000, young_ptr: 0x18_0000 }],
        compactions: Some(1),
        redacted: false,
        warnings: vec![],
        pools: None,
        forced_version: false,
        bytecode: false,
        layouts_from: None,
        ocaml4_gc: None,
        capture: None,
        probed: None,
        namespaces: None,
        host: None,
    }
}

/// One section to assemble: its kind code, flags and body bytes.
#[derive(Clone, Debug)]
pub struct Sec {
    pub kind: u32,
    pub flags: u32,
    pub body: Vec<u8>,
}

impl Sec {
    pub fn new(kind: SectionKind, body: Vec<u8>) -> Sec {
        let flags = match kind {
            SectionKind::Metadata | SectionKind::Roots | SectionKind::Region => SECTION_FLAG_REQUIRED,
            _ => 0,
        };
        Sec { kind: kind.code(), flags, body }
    }

    pub fn kind(&self) -> SectionKind {
        SectionKind::from_code(self.kind)
    }
}

pub fn metadata_sec(m: &Metadata) -> Sec {
    Sec::new(SectionKind::Metadata, serde_json::to_vec(m).unwrap())
}

pub fn records<T: bytemuck::Pod>(kind: SectionKind, records: &[T]) -> Sec {
    Sec::new(kind, bytemuck::cast_slice(records).to_vec())
}

pub fn region_header(kind: RegionKind, base: u64) -> RegionHeader {
    RegionHeader { kind: kind.code(), domain: 0, flags: 0, base, block_wsize: 0, first_block: 0, owner: 0 }
}

pub fn region_sec(header: RegionHeader, bytes: &[u8]) -> Sec {
    let mut body = bytemuck::bytes_of(&header).to_vec();
    body.extend_from_slice(bytes);
    Sec::new(SectionKind::Region, body)
}

pub fn dwarf_sec(name: &[u8], bytes: &[u8]) -> Sec {
    let mut body = vec![0u8; DWARF_NAME_LEN];
    body[..name.len()].copy_from_slice(name);
    body.extend_from_slice(bytes);
    Sec::new(SectionKind::Dwarf, body)
}

pub fn root(kind: RootKind, value: u64, name: StrId) -> RootRecord {
    RootRecord { kind: kind.code(), domain: 0, flags: 0, thread: 0, slot: 0x5000, value, origin: 0, name, reserved: 0 }
}

pub fn symbol(start: u64, end: u64, name: StrId) -> SymbolRecord {
    SymbolRecord { start, end, name, kind: SymbolKind::Function.code() }
}

/// Strings "camlFoo" at 0 and "caml_bar" at 8.
pub const STRINGS: &[u8] = b"camlFoo\0caml_bar\0";

/// One section of every kind, all valid, in this order:
/// 0 metadata, 1 strings, 2 roots, 3 region (pool), 4 region (large), 5 symbols, 6 dwarf,
/// 7 custom ops, 8 ephemerons.
pub fn baseline() -> Vec<Sec> {
    let pool = RegionHeader { block_wsize: 4, first_block: 16, ..region_header(RegionKind::Pool, 0x1000) };
    vec![
        metadata_sec(&metadata()),
        Sec::new(SectionKind::Strings, STRINGS.to_vec()),
        records(SectionKind::Roots, &[root(RootKind::Global, 0x1018, StrId(0)), root(RootKind::Stack, 0x2008, StrId(8))]),
        region_sec(pool, &[0x11; 64]),
        region_sec(region_header(RegionKind::Large, 0x2000), &[0x22; 32]),
        records(SectionKind::Symbols, &[symbol(0x400000, 0x400100, StrId(0)), symbol(0x400100, 0x400180, StrId(8))]),
        dwarf_sec(b".debug_line", b"line program"),
        records(SectionKind::CustomOps, &[CustomOpsRecord { address: 0x600000, identifier: StrId(8), reserved: 0 }]),
        records(SectionKind::Ephemerons, &[0x1008u64, 0x1028]),
    ]
}

pub const BASELINE_KINDS: [SectionKind; 9] = [
    SectionKind::Metadata,
    SectionKind::Strings,
    SectionKind::Roots,
    SectionKind::Region,
    SectionKind::Region,
    SectionKind::Symbols,
    SectionKind::Dwarf,
    SectionKind::CustomOps,
    SectionKind::Ephemerons,
];

/// Lays sections out as FORMAT.md says: header, each body padded with zeros to a multiple of 8,
/// the table, the trailer.
pub fn assemble_with(header: FileHeader, sections: &[Sec]) -> Vec<u8> {
    let mut out = bytemuck::bytes_of(&header).to_vec();
    let mut table = Vec::new();
    for s in sections {
        table.push(SectionEntry {
            kind: s.kind,
            flags: s.flags,
            offset: out.len() as u64,
            length: s.body.len() as u64,
            checksum: xxh3_64(&s.body),
        });
        out.extend_from_slice(&s.body);
        out.resize(out.len().next_multiple_of(8), 0);
    }
    let table_bytes: &[u8] = bytemuck::cast_slice(&table);
    let trailer = Trailer {
        table_offset: out.len() as u64,
        section_count: table.len() as u64,
        table_checksum: xxh3_64(table_bytes),
        end_magic: END_MAGIC,
    };
    out.extend_from_slice(table_bytes);
    out.extend_from_slice(bytemuck::bytes_of(&trailer));
    out
}

pub fn assemble(sections: &[Sec]) -> Vec<u8> {
    assemble_with(FileHeader::current(), sections)
}

pub fn trailer(bytes: &[u8]) -> Trailer {
    bytemuck::pod_read_unaligned(&bytes[bytes.len() - Trailer::SIZE..])
}

pub fn set_trailer(bytes: &mut [u8], trailer: &Trailer) {
    let at = bytes.len() - Trailer::SIZE;
    bytes[at..].copy_from_slice(bytemuck::bytes_of(trailer));
}

pub fn table(bytes: &[u8]) -> Vec<SectionEntry> {
    let t = trailer(bytes);
    (0..t.section_count as usize)
        .map(|i| {
            let at = t.table_offset as usize + i * SectionEntry::SIZE;
            bytemuck::pod_read_unaligned(&bytes[at..at + SectionEntry::SIZE])
        })
        .collect()
}

/// Rewrites table entry `index` with `edit` and recomputes the table checksum, so that only
/// what the edit breaks is broken.
pub fn edit_entry(bytes: &mut [u8], index: usize, edit: impl FnOnce(&mut SectionEntry)) {
    let t = trailer(bytes);
    let at = t.table_offset as usize + index * SectionEntry::SIZE;
    let mut entry: SectionEntry = bytemuck::pod_read_unaligned(&bytes[at..at + SectionEntry::SIZE]);
    edit(&mut entry);
    bytes[at..at + SectionEntry::SIZE].copy_from_slice(bytemuck::bytes_of(&entry));
    reseal_table(bytes);
}

/// Recomputes only the table checksum.
pub fn reseal_table(bytes: &mut [u8]) {
    let mut t = trailer(bytes);
    let table_end = bytes.len() - Trailer::SIZE;
    t.table_checksum = xxh3_64(&bytes[t.table_offset as usize..table_end]);
    set_trailer(bytes, &t);
}

/// Edits the file header in place.
pub fn edit_header(bytes: &mut [u8], edit: impl FnOnce(&mut FileHeader)) {
    let mut header: FileHeader = bytemuck::pod_read_unaligned(&bytes[..FileHeader::SIZE]);
    edit(&mut header);
    bytes[..FileHeader::SIZE].copy_from_slice(bytemuck::bytes_of(&header));
}

/// The section-level error's parts, or a panic naming what came instead.
pub fn section_failure(result: Result<Snapshot, FormatError>) -> (usize, SectionKind, u64, SectionProblem) {
    match result {
        Err(FormatError::Section { index, kind, offset, problem }) => (index, kind, offset, problem),
        Err(other) => panic!("expected a section error, got {other:?}"),
        Ok(_) => panic!("expected a section error, the file was accepted"),
    }
}

pub fn read(bytes: &[u8]) -> Result<Snapshot, FormatError> {
    Snapshot::from_bytes(bytes)
}

/// A temporary directory and a snapshot path inside it.
pub fn temp_path() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("test.heapsnap");
    (dir, path)
}

/// The names of the files in `dir`.
pub fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Writes a snapshot with the crate's writer through `fill`, returns the file's bytes.
pub fn written(fill: impl FnOnce(&mut SnapshotWriter)) -> Vec<u8> {
    let (_dir, path) = temp_path();
    let mut w = SnapshotWriter::create(&path).unwrap();
    fill(&mut w);
    w.finish().unwrap();
    std::fs::read(&path).unwrap()
}

/// Copies bytes (of any alignment) into records.
pub fn pod_vec<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
    bytes.chunks_exact(std::mem::size_of::<T>()).map(bytemuck::pod_read_unaligned).collect()
}
