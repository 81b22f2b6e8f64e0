//! The writer refuses to produce an invalid file, and never leaves a partial one under the
//! final name (nor a temporary file once it is gone).

use crate::common::*;
use heapsnap_format::*;
use std::os::unix::fs::PermissionsExt;

fn writer_error<T: std::fmt::Debug>(result: Result<T, FormatError>) -> String {
    match result {
        Err(FormatError::Writer(message)) => message,
        other => panic!("expected FormatError::Writer, got {other:?}"),
    }
}

fn started() -> (tempfile::TempDir, std::path::PathBuf, SnapshotWriter) {
    let (dir, path) = temp_path();
    let mut w = SnapshotWriter::create(&path).unwrap();
    w.write_metadata(&metadata()).unwrap();
    (dir, path, w)
}

fn pool(base: u64) -> RegionHeader {
    region_header(RegionKind::Pool, base)
}

#[test]
fn duplicate_singletons_are_refused() {
    let (_dir, path, mut w) = started();
    let message = writer_error(w.write_metadata(&metadata()));
    assert!(message.contains("metadata section can only be written once"), "{message}");
    w.write_roots(&[]).unwrap();
    assert!(writer_error(w.write_roots(&[])).contains("roots"));
    w.write_symbols(&mut []).unwrap();
    assert!(writer_error(w.write_symbols(&mut [])).contains("symbols"));
    w.write_custom_ops(&[]).unwrap();
    assert!(writer_error(w.write_custom_ops(&[])).contains("custom_ops"));
    w.write_ephemerons(&[]).unwrap();
    assert!(writer_error(w.write_ephemerons(&[])).contains("ephemerons"));
    // Known kinds go through their typed, validating methods, never raw.
    for kind in SectionKind::ALL {
        let message = writer_error(w.write_raw_section(kind.code(), 0, b""));
        assert!(message.contains("raw"), "{message}");
    }
    w.write_dwarf(".debug_line", b"a").unwrap();
    assert!(writer_error(w.write_dwarf(".debug_line", b"b")).contains(".debug_line"));
    // The refusals wrote nothing: the file is still valid.
    w.finish().unwrap();
    let s = Snapshot::open(&path).unwrap();
    assert_eq!(s.dwarf_section(".debug_line"), Some(&b"a"[..]));
}

#[test]
fn finish_without_metadata_leaves_nothing() {
    let (dir, path) = temp_path();
    let mut w = SnapshotWriter::create(&path).unwrap();
    w.write_region(&pool(0x1000), &[0; 64]).unwrap();
    let message = writer_error(w.finish());
    assert!(message.contains("no metadata"), "{message}");
    assert!(files_in(dir.path()).is_empty(), "left behind: {:?}", files_in(dir.path()));
}

#[test]
fn overlapping_regions_are_refused_at_finish() {
    let (dir, _path, mut w) = started();
    w.write_region(&pool(0x1000), &[0; 64]).unwrap();
    w.write_region(&pool(0x2000), &[0; 8]).unwrap();
    w.write_region(&pool(0x1038), &[0; 16]).unwrap();
    let message = writer_error(w.finish());
    assert!(message.contains("0x1038") && message.contains("0x1000"), "{message}");
    assert!(files_in(dir.path()).is_empty());
}

#[test]
fn empty_regions_follow_the_readers_overlap_rule() {
    // Touching an edge is fine...
    let (_dir, path, mut w) = started();
    w.write_region(&pool(0x1000), &[0; 64]).unwrap();
    w.write_region(&pool(0x1040), &[]).unwrap();
    w.write_region(&pool(0x1000), &[]).unwrap();
    w.finish().unwrap();
    assert_eq!(Snapshot::open(&path).unwrap().region_count(), 3);
    // ...lying inside another region is not.
    let (_dir, _path, mut w) = started();
    w.write_region(&pool(0x1000), &[0; 64]).unwrap();
    w.write_region(&pool(0x1010), &[]).unwrap();
    writer_error(w.finish());
}

#[test]
fn region_of_non_word_length_is_refused_and_the_writer_stays_usable() {
    let (_dir, path, mut w) = started();
    let message = writer_error(w.write_region(&pool(0x1000), &[0; 12]));
    assert!(message.contains("12 bytes is not a whole number of words"), "{message}");
    let mut stream = w.begin_region(&pool(0x2000)).unwrap();
    stream.write(&[1; 5]).unwrap();
    writer_error(stream.finish());
    // Later sections still start 8-aligned, and the refused regions are not in the file.
    w.write_region(&pool(0x3000), &[7; 16]).unwrap();
    w.write_ephemerons(&[0x3008]).unwrap();
    w.finish().unwrap();
    let s = Snapshot::open(&path).unwrap();
    assert_eq!(s.regions().map(|r| r.base()).collect::<Vec<_>>(), vec![0x3000]);
    assert_eq!(s.ephemerons(), &[0x3008]);
}

#[test]
fn a_dropped_region_stream_leaves_a_valid_file() {
    let (_dir, path, mut w) = started();
    {
        let mut stream = w.begin_region(&pool(0x1000)).unwrap();
        stream.write(&[1; 13]).unwrap();
    }
    w.write_roots(&[root(RootKind::Global, 1, StrId::NONE)]).unwrap();
    w.finish().unwrap();
    let s = Snapshot::open(&path).unwrap();
    assert_eq!((s.region_count(), s.roots().len()), (0, 1));
}

#[test]
fn region_wrapping_the_address_space_is_refused() {
    let (_dir, _path, mut w) = started();
    let message = writer_error(w.write_region(&pool(u64::MAX - 7), &[0; 16]));
    assert!(message.contains("wraps"), "{message}");
}

#[test]
fn bad_records_are_refused() {
    let (_dir, _path, mut w) = started();
    let id = w.intern("camlFoo");
    for bad in [StrId(id.0 + 1), StrId(1000)] {
        assert!(writer_error(w.write_roots(&[root(RootKind::Global, 1, bad)])).contains("intern"));
        assert!(writer_error(w.write_symbols(&mut [symbol(0, 1, bad)])).contains("intern"));
        let op = CustomOpsRecord { address: 1, identifier: bad, reserved: 0 };
        assert!(writer_error(w.write_custom_ops(&[op])).contains("intern"));
    }
    assert!(writer_error(w.write_symbols(&mut [symbol(0x20, 0x10, id)])).contains("ends before it starts"));
    for name in ["", "a\0b", ".debug_this_name_is_longer_than_32_bytes"] {
        assert!(writer_error(w.write_dwarf(name, b"")).contains("bad DWARF section name"));
    }
}

#[test]
fn invalid_metadata_is_refused() {
    let (_dir, path) = temp_path();
    let mut w = SnapshotWriter::create(&path).unwrap();
    let bad = Metadata { reserved_header_bits: 40, ..metadata() };
    assert!(writer_error(w.write_metadata(&bad)).contains("reserved_header_bits 40"));
    let bad = Metadata { colours: ColourEncoding { marked: 1, ..ColourEncoding::OCAML5_INITIAL }, ..metadata() };
    assert!(writer_error(w.write_metadata(&bad)).contains("colours"));
    // Refused metadata was not written: a valid one still can be.
    w.write_metadata(&metadata()).unwrap();
    w.finish().unwrap();
}

#[test]
fn creating_in_a_missing_directory_is_an_io_error() {
    let (dir, _path) = temp_path();
    let missing = dir.path().join("no/such/dir/x.heapsnap");
    assert!(matches!(SnapshotWriter::create(&missing), Err(FormatError::Io { .. })));
}

#[test]
fn an_unfinished_writer_leaves_no_file() {
    let (dir, path) = temp_path();
    let mut w = SnapshotWriter::create(&path).unwrap();
    w.write_metadata(&metadata()).unwrap();
    w.write_region(&pool(0x1000), &vec![5u8; 3 << 20]).unwrap();
    // While writing: one owner-only temporary file beside the final name, nothing under it.
    let names = files_in(dir.path());
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with(".test.heapsnap.") && names[0].ends_with(".partial"), "{names:?}");
    let mode = std::fs::metadata(dir.path().join(&names[0])).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(!path.exists());
    drop(w);
    assert!(files_in(dir.path()).is_empty(), "left behind: {:?}", files_in(dir.path()));
}

#[test]
fn finish_replaces_an_existing_file_atomically() {
    let (dir, path) = temp_path();
    std::fs::write(&path, b"old snapshot").unwrap();
    let mut w = SnapshotWriter::create(&path).unwrap();
    w.write_metadata(&metadata()).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"old snapshot", "the final name changed before finish");
    assert_eq!(w.finish().unwrap(), path);
    assert!(Snapshot::open(&path).is_ok());
    assert_eq!(files_in(dir.path()), vec!["test.heapsnap".to_string()]);
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_relative_path_in_the_current_directory_works() {
    // `create("x.heapsnap")` has an empty parent: the temporary file goes in ".".
    let (dir, _path) = temp_path();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "writer_errors::relative_path_child", "--include-ignored"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(child.status.success(), "{}", String::from_utf8_lossy(&child.stdout));
    assert_eq!(files_in(dir.path()), vec!["relative.heapsnap".to_string()]);
}

/// Run by `a_relative_path_in_the_current_directory_works` in its own directory.
#[test]
#[ignore = "run by a_relative_path_in_the_current_directory_works"]
fn relative_path_child() {
    let mut w = SnapshotWriter::create("relative.heapsnap").unwrap();
    w.write_metadata(&metadata()).unwrap();
    w.finish().unwrap();
    Snapshot::open("relative.heapsnap").unwrap();
}
