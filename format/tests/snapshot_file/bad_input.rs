//! Every class of bad input gets its precise error, naming the section and offset.
//! Files are built with the spec encoder in `common` and then broken in one way each.

use crate::common::*;
use heapsnap_format::*;
use xxhash_rust::xxh3::xxh3_64;

fn valid() -> Vec<u8> {
    assemble(&baseline())
}

fn expect_err(bytes: &[u8]) -> FormatError {
    match read(bytes) {
        Err(e) => e,
        Ok(_) => panic!("the file was accepted"),
    }
}

fn invalid_message(problem: SectionProblem) -> String {
    match problem {
        SectionProblem::Invalid(message) => message,
        other => panic!("expected SectionProblem::Invalid, got {other:?}"),
    }
}

fn with_section(index: usize, sec: Sec) -> Vec<u8> {
    let mut sections = baseline();
    sections[index] = sec;
    assemble(&sections)
}

#[test]
fn the_baseline_is_valid() {
    let snapshot = read(&valid()).unwrap();
    assert_eq!(snapshot.sections().len(), BASELINE_KINDS.len());
    for (entry, kind) in snapshot.sections().iter().zip(BASELINE_KINDS) {
        assert_eq!(entry.section_kind(), kind);
    }
}

// ---- truncation ----

#[test]
fn truncated_at_every_length() {
    let file = valid();
    for len in 0..file.len() {
        match expect_err(&file[..len]) {
            FormatError::TooShort { len: l, min } => {
                assert!(len < 64, "TooShort for a {len}-byte file");
                assert_eq!((l, min), (len as u64, 64));
            }
            FormatError::BadTrailer { offset } => {
                assert!(len >= 64, "BadTrailer for a {len}-byte file");
                assert_eq!(offset, len as u64 - 32);
            }
            other => panic!("truncated to {len} bytes: unexpected {other:?}"),
        }
    }
}

#[test]
fn truncated_files_on_disk_and_empty_file() {
    let file = valid();
    let (_dir, path) = temp_path();
    for len in [0, 7, 31, 32, 63, 64, 100, file.len() / 2, file.len() - 32, file.len() - 1] {
        std::fs::write(&path, &file[..len]).unwrap();
        match Snapshot::open(&path) {
            Err(FormatError::TooShort { len: l, .. }) => assert!(len < 64 && l == len as u64),
            Err(FormatError::BadTrailer { offset }) => assert!(len >= 64 && offset == len as u64 - 32),
            Err(other) => panic!("{len} bytes: unexpected {other:?}"),
            Ok(_) => panic!("{len} bytes: accepted"),
        }
    }
}

#[test]
fn bytes_lost_in_the_middle_move_the_table() {
    let file = valid();
    let t = trailer(&file);
    // Drop 64 bytes of the first region, keep everything after (table and trailer intact).
    let cut = table(&file)[3].offset as usize + 40;
    let mut damaged = file[..cut].to_vec();
    damaged.extend_from_slice(&file[cut + 64..]);
    match expect_err(&damaged) {
        FormatError::BadSectionTable { offset, count, trailer_offset } => {
            assert_eq!((offset, count), (t.table_offset, t.section_count));
            assert_eq!(trailer_offset, damaged.len() as u64 - 32);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn missing_trailer() {
    let file = valid();
    let without = &file[..file.len() - 32];
    assert!(matches!(expect_err(without), FormatError::BadTrailer { offset } if offset == without.len() as u64 - 32));
    let mut bad_magic = file.clone();
    let n = bad_magic.len();
    bad_magic[n - 1] = b'X';
    assert!(matches!(expect_err(&bad_magic), FormatError::BadTrailer { offset } if offset == n as u64 - 32));
}

#[test]
fn missing_file_and_directory_are_io_errors() {
    let (dir, path) = temp_path();
    assert!(matches!(Snapshot::open(&path), Err(FormatError::Io { path: p, .. }) if p == path));
    assert!(matches!(Snapshot::open(dir.path()), Err(FormatError::Io { .. })));
}

// ---- header ----

#[test]
fn wrong_magic() {
    let mut file = valid();
    file[7] = b'Q';
    assert!(matches!(expect_err(&file), FormatError::BadMagic { found } if &found == b"HEAPSNAQ"));
    let elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0\x3e\0\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
    assert!(matches!(expect_err(elf), FormatError::BadMagic { found } if &found[..4] == b"\x7fELF"));
}

#[test]
fn unsupported_major_version() {
    for major in [0, 2, u16::MAX] {
        let mut file = valid();
        edit_header(&mut file, |h| {
            h.version_major = major;
            h.version_minor = 5;
        });
        match expect_err(&file) {
            FormatError::UnsupportedVersion { major: m, minor, supported } => {
                assert_eq!((m, minor, supported), (major, 5, VERSION_MAJOR))
            }
            other => panic!("major {major}: unexpected {other:?}"),
        }
    }
}

#[test]
fn newer_minor_version_is_accepted() {
    let mut file = valid();
    edit_header(&mut file, |h| h.version_minor = VERSION_MINOR + 7);
    let snapshot = read(&file).unwrap();
    assert_eq!(snapshot.header().version_minor, VERSION_MINOR + 7);
    assert_eq!(snapshot.roots().len(), 2);
}

#[test]
fn wrong_word_size_byte_order_or_header_size() {
    type Edit = fn(&mut FileHeader);
    let cases: [(Edit, &str); 3] =
        [(|h| h.word_size = 4, "word size 4"), (|h| h.byte_order = 2, "byte order 2"), (|h| h.header_size = 48, "header size 48")];
    for (edit, expected) in cases {
        let mut file = valid();
        edit_header(&mut file, edit);
        match expect_err(&file) {
            FormatError::UnsupportedLayout(message) => assert!(message.contains(expected), "{message}"),
            other => panic!("unexpected {other:?}"),
        }
    }
}

// ---- trailer and section table ----

fn bad_table(file: &[u8]) -> (u64, u64, u64) {
    match expect_err(file) {
        FormatError::BadSectionTable { offset, count, trailer_offset } => (offset, count, trailer_offset),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn section_table_out_of_range() {
    let file = valid();
    let t = trailer(&file);
    let trailer_offset = file.len() as u64 - 32;
    let cases = [
        Trailer { table_offset: trailer_offset + 32, ..t },
        Trailer { table_offset: u64::MAX - 7, ..t },
        Trailer { table_offset: 0, section_count: trailer_offset / 32, ..t },
        Trailer { table_offset: 8, section_count: (trailer_offset - 8) / 32, ..t },
        Trailer { table_offset: t.table_offset + 4, ..t },
        Trailer { section_count: t.section_count + 1, ..t },
        Trailer { section_count: t.section_count - 1, ..t },
        Trailer { section_count: 0, ..t },
    ];
    for case in cases {
        let mut damaged = file.clone();
        set_trailer(&mut damaged, &case);
        assert_eq!(bad_table(&damaged), (case.table_offset, case.section_count, trailer_offset), "{case:?}");
    }
}

#[test]
fn absurd_section_counts_are_refused_without_allocating() {
    let file = valid();
    let t = trailer(&file);
    let trailer_offset = file.len() as u64 - 32;
    // A count whose byte size wraps around u64 back onto the right end offset.
    let wrapping = (((1u128 << 64) + (trailer_offset - t.table_offset) as u128) / 32) as u64;
    assert_eq!(wrapping.wrapping_mul(32).wrapping_add(t.table_offset), trailer_offset);
    for count in [1u64 << 60, u64::MAX, wrapping] {
        let mut damaged = file.clone();
        set_trailer(&mut damaged, &Trailer { section_count: count, ..t });
        assert_eq!(bad_table(&damaged), (t.table_offset, count, trailer_offset));
    }
}

#[test]
fn table_checksum_mismatch() {
    let mut file = valid();
    let t = trailer(&file);
    let at = t.table_offset as usize + 3 * SectionEntry::SIZE + 24; // entry 3's checksum field
    file[at] ^= 1;
    let actual = xxh3_64(&file[t.table_offset as usize..file.len() - 32]);
    match expect_err(&file) {
        FormatError::TableChecksum { offset, expected, actual: a } => {
            assert_eq!((offset, expected, a), (t.table_offset, t.table_checksum, actual))
        }
        other => panic!("unexpected {other:?}"),
    }
}

// ---- section bounds ----

#[test]
fn section_offset_or_length_out_of_range() {
    let file = valid();
    let t = trailer(&file);
    let region = table(&file)[3];
    let cases: [(u64, u64); 6] = [
        (t.table_offset, region.length),     // starts at the table
        (t.table_offset - 8, region.length), // runs into the table
        (region.offset, u64::MAX),           // length overflows u64
        (u64::MAX - 7, region.length),       // offset + length overflows u64
        (0, region.length),                  // inside the file header
        (t.table_offset + 64, 0),            // empty, but past the table
    ];
    for (offset, length) in cases {
        let mut damaged = file.clone();
        edit_entry(&mut damaged, 3, |e| {
            e.offset = offset;
            e.length = length;
        });
        let (index, kind, at, problem) = section_failure(read(&damaged));
        assert_eq!((index, kind, at), (3, SectionKind::Region, offset), "offset {offset}, length {length}");
        assert_eq!(problem, SectionProblem::OutOfBounds { length, limit: t.table_offset });
    }
}

#[test]
fn misaligned_section() {
    let mut file = valid();
    let entry = table(&file)[5];
    edit_entry(&mut file, 5, |e| e.offset += 4);
    let (index, kind, offset, problem) = section_failure(read(&file));
    assert_eq!((index, kind, offset, problem), (5, SectionKind::Symbols, entry.offset + 4, SectionProblem::Misaligned));
}

#[test]
fn overlapping_sections() {
    let file = valid();
    let region = table(&file)[3];
    // Section 4 starts inside section 3.
    let mut damaged = file.clone();
    edit_entry(&mut damaged, 4, |e| {
        e.offset = region.offset + 8;
        e.length = 16;
    });
    let (index, kind, offset, problem) = section_failure(read(&damaged));
    assert_eq!((index, kind, offset), (4, SectionKind::Region, region.offset + 8));
    assert_eq!(problem, SectionProblem::OverlapsSection { other_offset: region.offset });

    // An empty section lying strictly inside another, with a third one behind it: still caught.
    let mut damaged = file.clone();
    edit_entry(&mut damaged, 8, |e| {
        e.offset = region.offset + 16;
        e.length = 0;
    });
    edit_entry(&mut damaged, 7, |e| {
        e.offset = region.offset + 24;
        e.length = 16;
    });
    let (index, _, _, problem) = section_failure(read(&damaged));
    assert_eq!((index, problem), (8, SectionProblem::OverlapsSection { other_offset: region.offset }));

    // Two sections sharing the same bytes.
    let mut damaged = file;
    edit_entry(&mut damaged, 4, |e| *e = SectionEntry { kind: e.kind, ..region });
    let (index, _, _, problem) = section_failure(read(&damaged));
    assert_eq!(index, 4);
    assert_eq!(problem, SectionProblem::OverlapsSection { other_offset: region.offset });
}

#[test]
fn empty_sections_may_touch_others() {
    let mut sections = baseline();
    sections[2].body.clear(); // no roots
    sections[8].body.clear(); // no ephemerons
    sections[7].body.clear(); // no custom ops
    let snapshot = read(&assemble(&sections)).unwrap();
    assert!(snapshot.roots().is_empty() && snapshot.ephemerons().is_empty() && snapshot.custom_ops().is_empty());
}

// ---- checksums ----

#[test]
fn checksum_mismatch_in_each_section_kind() {
    let file = valid();
    for (index, entry) in table(&file).iter().enumerate() {
        let mut damaged = file.clone();
        let at = (entry.offset + entry.length / 2) as usize;
        damaged[at] ^= 0x40;
        let actual = xxh3_64(&damaged[entry.offset as usize..(entry.offset + entry.length) as usize]);
        let (i, kind, offset, problem) = section_failure(read(&damaged));
        assert_eq!((i, kind, offset), (index, BASELINE_KINDS[index], entry.offset));
        assert_eq!(problem, SectionProblem::ChecksumMismatch { expected: entry.checksum, actual });

        // Without verification the flipped byte is served as is (regions), or caught by what
        // parses the section (metadata JSON, records): never a checksum error.
        let unverified = Snapshot::from_bytes_with(&damaged, &ReadOptions { verify_checksums: false });
        if let Err(FormatError::Section { problem: SectionProblem::ChecksumMismatch { .. }, .. }) = unverified {
            panic!("checksum checked although verification is off");
        }
        if BASELINE_KINDS[index] == SectionKind::Region {
            let snapshot = unverified.unwrap();
            assert!(snapshot.regions().any(|r| r.bytes.contains(&(damaged[at]))));
        }
    }
}

#[test]
fn the_first_damaged_section_is_named() {
    let mut file = valid();
    let entries = table(&file);
    for i in [6, 2, 4] {
        file[entries[i].offset as usize] ^= 1;
    }
    let (index, _, _, problem) = section_failure(read(&file));
    assert_eq!(index, 2);
    assert!(matches!(problem, SectionProblem::ChecksumMismatch { .. }));
}

// ---- singletons and the metadata ----

#[test]
fn duplicate_singleton_sections() {
    for (index, kind) in BASELINE_KINDS.iter().enumerate() {
        if !kind.is_singleton() {
            continue;
        }
        let mut sections = baseline();
        sections.push(sections[index].clone());
        let file = assemble(&sections);
        let offset = table(&file)[9].offset;
        let failure = section_failure(read(&file));
        assert_eq!(failure, (9, *kind, offset, SectionProblem::Duplicate), "{kind}");
    }
}

#[test]
fn repeated_regions_and_dwarf_sections_are_allowed() {
    let mut sections = baseline();
    sections.push(region_sec(region_header(RegionKind::Static, 0x9000), &[0; 8]));
    sections.push(dwarf_sec(b".debug_info", b"info"));
    let snapshot = read(&assemble(&sections)).unwrap();
    assert_eq!(snapshot.region_count(), 3);
    assert_eq!(snapshot.dwarf_section(".debug_info"), Some(&b"info"[..]));
}

#[test]
fn missing_metadata() {
    let mut sections = baseline();
    sections.remove(0);
    assert!(matches!(expect_err(&assemble(&sections)), FormatError::MissingSection(SectionKind::Metadata)));
}

fn metadata_failure(body: Vec<u8>) -> String {
    let file = with_section(0, Sec::new(SectionKind::Metadata, body));
    let (index, kind, offset, problem) = section_failure(read(&file));
    assert_eq!((index, kind, offset), (0, SectionKind::Metadata, 32));
    invalid_message(problem)
}

#[test]
fn bad_metadata_json() {
    let mut missing_field = serde_json::to_value(metadata()).unwrap();
    missing_field.as_object_mut().unwrap().remove("dumper");
    let mut wrong_type = serde_json::to_value(metadata()).unwrap();
    wrong_type["pid"] = "many".into();
    let mut unknown_trigger = serde_json::to_value(metadata()).unwrap();
    unknown_trigger["trigger"] = "moon_phase".into();
    for body in [
        b"{not json".to_vec(),
        Vec::new(),
        b"null".to_vec(),
        b"[1,2,3]".to_vec(),
        serde_json::to_vec(&missing_field).unwrap(),
        serde_json::to_vec(&wrong_type).unwrap(),
        serde_json::to_vec(&unknown_trigger).unwrap(),
        [b"[".repeat(100_000), b"]".repeat(100_000)].concat(), // deep nesting: no stack overflow
    ] {
        let message = metadata_failure(body);
        assert!(message.starts_with("metadata is not valid"), "{message}");
    }
}

#[test]
fn invalid_metadata_values() {
    let colours = |marked, unmarked, garbage, not_markable| ColourEncoding { marked, unmarked, garbage, not_markable };
    let cases: Vec<(Metadata, &str)> = vec![
        (Metadata { colours: colours(0, 0, 2, 3), ..metadata() }, "colours"),
        (Metadata { colours: colours(0, 1, 2, 4), ..metadata() }, "colours"),
        (Metadata { reserved_header_bits: 32, ..metadata() }, "reserved_header_bits 32"),
        (Metadata { word_size: 4, ..metadata() }, "word_size 4"),
        (
            Metadata { domains: vec![DomainInfo { id: 3, minor_start: 0x2000, minor_end: 0x1000, young_ptr: 0x1000 }], ..metadata() },
            "domain 3",
        ),
        (
            Metadata { domains: vec![DomainInfo { id: 1, minor_start: 0x1000, minor_end: 0x2000, young_ptr: 0x2008 }], ..metadata() },
            "domain 1",
        ),
    ];
    for (m, expected) in cases {
        let message = metadata_failure(serde_json::to_vec(&m).unwrap());
        assert!(message.starts_with("metadata: ") && message.contains(expected), "{message}");
    }
}

#[test]
fn metadata_is_open_to_new_fields_and_optional_ones_may_be_absent() {
    let mut value = serde_json::to_value(metadata()).unwrap();
    value["field_from_the_future"] = serde_json::json!({"x": [1, 2]});
    for optional in ["compactions", "redacted", "warnings", "pid", "executable", "build_id"] {
        value.as_object_mut().unwrap().remove(optional);
    }
    value["reserved_header_bits"] = 31.into();
    value["colours"] = serde_json::json!({"marked": 3, "unmarked": 2, "garbage": 1, "not_markable": 0});
    let file = with_section(0, Sec::new(SectionKind::Metadata, serde_json::to_vec(&value).unwrap()));
    let m = read(&file).unwrap().metadata().clone();
    assert_eq!((m.compactions, m.redacted, m.warnings.len(), m.pid), (None, false, 0, None));
    assert_eq!(m.reserved_header_bits, 31);
}

// ---- regions ----

#[test]
fn overlapping_regions() {
    let file = with_section(4, region_sec(region_header(RegionKind::Large, 0x1030), &[0; 32]));
    match expect_err(&file) {
        FormatError::OverlappingRegions { first_index, first_base, first_end, second_index, second_base, second_end } => {
            assert_eq!((first_index, first_base, first_end), (3, 0x1000, 0x1040));
            assert_eq!((second_index, second_base, second_end), (4, 0x1030, 0x1050));
        }
        other => panic!("unexpected {other:?}"),
    }
    // The same region twice.
    let file = with_section(4, baseline()[3].clone());
    assert!(matches!(expect_err(&file), FormatError::OverlappingRegions { first_base: 0x1000, second_base: 0x1000, .. }));
    // An empty region strictly inside another.
    let file = with_section(4, region_sec(region_header(RegionKind::Other, 0x1008), &[]));
    assert!(matches!(expect_err(&file), FormatError::OverlappingRegions { first_index: 3, second_index: 4, .. }));
}

#[test]
fn adjacent_and_empty_regions_at_edges_are_fine() {
    let mut sections = baseline();
    sections[4] = region_sec(region_header(RegionKind::Large, 0x1040), &[0x22; 8]);
    sections.push(region_sec(region_header(RegionKind::Other, 0x1000), &[]));
    sections.push(region_sec(region_header(RegionKind::Other, 0x1048), &[]));
    let snapshot = read(&assemble(&sections)).unwrap();
    assert_eq!(snapshot.region_count(), 4);
    assert_eq!(snapshot.region_of(0x1000).unwrap().section, 3);
    assert_eq!(snapshot.region_of(0x1040).unwrap().section, 4);
    assert!(snapshot.region_of(0x1048).is_none());
}

fn region_failure(header: RegionHeader, body_after_header: &[u8]) -> String {
    let mut body = bytemuck::bytes_of(&header).to_vec();
    body.extend_from_slice(body_after_header);
    let file = with_section(3, Sec::new(SectionKind::Region, body));
    let offset = table(&file)[3].offset;
    let (index, kind, at, problem) = section_failure(read(&file));
    assert_eq!((index, kind, at), (3, SectionKind::Region, offset));
    invalid_message(problem)
}

#[test]
fn malformed_region_sections() {
    let header = region_header(RegionKind::Pool, 0x1000);
    // Too short to hold its header.
    let file = with_section(3, Sec::new(SectionKind::Region, vec![0; 16]));
    let message = invalid_message(section_failure(read(&file)).3);
    assert!(message.contains("16 bytes"), "{message}");
    // Not whole words.
    let message = region_failure(header, &[0; 12]);
    assert!(message.contains("44 bytes"), "{message}");
    // First block past the end.
    let message = region_failure(RegionHeader { first_block: 65, ..header }, &[0; 64]);
    assert!(message.contains("first block offset 65"), "{message}");
    // Unaligned base, and an end that wraps around the address space.
    let message = region_failure(RegionHeader { base: 0x1004, ..header }, &[0; 64]);
    assert!(message.contains("0x1004"), "{message}");
    let message = region_failure(RegionHeader { base: u64::MAX - 63, ..header }, &[0; 64]);
    assert!(message.contains("wraps"), "{message}");
    // A first block exactly at the end is an empty pool, not an error.
    let file = with_section(3, region_sec(RegionHeader { first_block: 64, ..header }, &[0; 64]));
    assert!(read(&file).is_ok());
}

// ---- strings and records ----

fn bad_record(file: &[u8]) -> (usize, SectionKind, usize, u64, String) {
    let entries = table(file);
    match section_failure(read(file)) {
        (section, kind, offset, SectionProblem::BadRecord { index, offset: record_offset, reason }) => {
            assert_eq!(offset, entries[section].offset);
            (section, kind, index, record_offset, reason)
        }
        (_, _, _, other) => panic!("expected BadRecord, got {other:?}"),
    }
}

#[test]
fn bad_string_references() {
    let roots_at = table(&valid())[2].offset;
    for name in [StrId(STRINGS.len() as u32), StrId(3), StrId(u32::MAX - 1), StrId(9)] {
        let file = with_section(2, records(SectionKind::Roots, &[root(RootKind::Global, 1, StrId(0)), root(RootKind::Global, 1, name)]));
        let (section, kind, index, offset, reason) = bad_record(&file);
        assert_eq!((section, kind, index, offset), (2, SectionKind::Roots, 1, roots_at + 48));
        assert!(reason.contains(&name.0.to_string()), "{reason}");
    }
    let file = with_section(5, records(SectionKind::Symbols, &[symbol(0x10, 0x20, StrId(0)), symbol(0x20, 0x30, StrId(4))]));
    let (section, kind, index, offset, _) = bad_record(&file);
    assert_eq!((section, kind, index, offset), (5, SectionKind::Symbols, 1, table(&file)[5].offset + 24));
    let file = with_section(7, records(SectionKind::CustomOps, &[CustomOpsRecord { address: 1, identifier: StrId(100), reserved: 0 }]));
    let (section, kind, index, _, _) = bad_record(&file);
    assert_eq!((section, kind, index), (7, SectionKind::CustomOps, 0));
    // No strings section at all: every name is out of range.
    let mut sections = baseline();
    sections.remove(1);
    let (section, kind, index, _, _) = bad_record(&assemble(&sections));
    assert_eq!((section, kind, index), (1, SectionKind::Roots, 0));
}

#[test]
fn absent_names_are_fine_without_strings() {
    let mut sections = baseline();
    sections.remove(1);
    sections[1] = records(SectionKind::Roots, &[root(RootKind::Global, 1, StrId::NONE)]);
    sections[4] = records(SectionKind::Symbols, &[symbol(1, 2, StrId::NONE)]);
    sections[6] = records(SectionKind::CustomOps, &[CustomOpsRecord { address: 1, identifier: StrId::NONE, reserved: 0 }]);
    let snapshot = read(&assemble(&sections)).unwrap();
    assert_eq!(snapshot.string(snapshot.roots()[0].name), None);
    assert_eq!(snapshot.symbol_at(1).map(|(_, name)| name), Some(""));
}

#[test]
fn strings_not_nul_terminated_or_not_utf8() {
    let file = with_section(1, Sec::new(SectionKind::Strings, b"camlFoo\0caml_bar".to_vec()));
    let (index, kind, _, problem) = section_failure(read(&file));
    assert_eq!((index, kind), (1, SectionKind::Strings));
    assert!(invalid_message(problem).contains("NUL"));

    let file = with_section(1, Sec::new(SectionKind::Strings, b"caml\xffoo\0caml_bar\0".to_vec()));
    let strings_at = table(&file)[1].offset;
    let (index, _, _, problem) = section_failure(read(&file));
    assert_eq!(index, 1);
    let message = invalid_message(problem);
    assert!(message.contains("UTF-8") && message.contains(&(strings_at + 4).to_string()), "{message}");
}

#[test]
fn bad_symbols() {
    // Not sorted by start.
    let file = with_section(5, records(SectionKind::Symbols, &[symbol(0x30, 0x40, StrId(0)), symbol(0x10, 0x20, StrId(0))]));
    let (_, kind, index, _, reason) = bad_record(&file);
    assert_eq!((kind, index), (SectionKind::Symbols, 1));
    assert!(reason.contains("sorted"));
    // Same start, not sorted by end.
    let file = with_section(
        5,
        records(SectionKind::Symbols, &[symbol(0, 1, StrId(0)), symbol(0x10, 0x40, StrId(0)), symbol(0x10, 0x20, StrId(0))]),
    );
    assert_eq!(bad_record(&file).2, 2);
    // Ends before it starts.
    let file = with_section(5, records(SectionKind::Symbols, &[symbol(0x10, 0x8, StrId(0))]));
    let (_, _, index, _, reason) = bad_record(&file);
    assert_eq!(index, 0);
    assert!(reason.contains("end before start"));
}

#[test]
fn record_sections_of_the_wrong_length() {
    for (index, record_size) in [(2, RootRecord::SIZE), (5, SymbolRecord::SIZE), (7, CustomOpsRecord::SIZE), (8, 8)] {
        let mut sections = baseline();
        sections[index].body.pop();
        let length = sections[index].body.len() as u64;
        let (i, kind, _, problem) = section_failure(read(&assemble(&sections)));
        assert_eq!((i, kind), (index, BASELINE_KINDS[index]));
        assert_eq!(problem, SectionProblem::BadLength { length, record_size });
    }
}

// ---- unknown sections ----

#[test]
fn unknown_required_section_is_rejected() {
    let mut sections = baseline();
    sections.push(Sec { kind: 99, flags: SECTION_FLAG_REQUIRED, body: b"from the future".to_vec() });
    let mut file = assemble(&sections);
    edit_header(&mut file, |h| h.version_minor = 3);
    let offset = table(&file)[9].offset;
    let failure = section_failure(read(&file));
    assert_eq!(failure, (9, SectionKind::Unknown(99), offset, SectionProblem::UnknownRequired { major: 1, minor: 3 }));
}

#[test]
fn unknown_optional_section_is_skipped() {
    let mut sections = baseline();
    sections.insert(3, Sec { kind: 1000, flags: 0, body: b"ignore me".to_vec() });
    sections.push(Sec { kind: 1000, flags: 0x8000_0000, body: Vec::new() });
    let snapshot = read(&assemble(&sections)).unwrap();
    assert_eq!(snapshot.sections()[3].section_kind(), SectionKind::Unknown(1000));
    assert_eq!(snapshot.region_count(), 2);
    assert_eq!(snapshot.roots().len(), 2);
}

// ---- DWARF ----

#[test]
fn malformed_dwarf_sections() {
    let cases: [(Sec, &str); 3] = [
        (Sec::new(SectionKind::Dwarf, vec![b'.'; 10]), "shorter than its name"),
        (dwarf_sec(b"", b"x"), "empty"),
        (dwarf_sec(b".debug_\xff", b"x"), "UTF-8"),
    ];
    for (sec, expected) in cases {
        let file = with_section(6, sec);
        let (index, kind, _, problem) = section_failure(read(&file));
        assert_eq!((index, kind), (6, SectionKind::Dwarf));
        let message = invalid_message(problem);
        assert!(message.contains(expected), "{message}");
    }
    let mut sections = baseline();
    sections.push(dwarf_sec(b".debug_line", b"again"));
    let (index, _, _, problem) = section_failure(read(&assemble(&sections)));
    assert_eq!(index, 9);
    assert!(invalid_message(problem).contains("twice"));
}

#[test]
fn dwarf_name_of_exactly_32_bytes() {
    let name = b".debug_abcdefghijklmnopqrstuvwxy";
    assert_eq!(name.len(), DWARF_NAME_LEN);
    let file = with_section(6, dwarf_sec(name, b"body"));
    let snapshot = read(&file).unwrap();
    assert_eq!(snapshot.dwarf_section(std::str::from_utf8(name).unwrap()), Some(&b"body"[..]));
}
