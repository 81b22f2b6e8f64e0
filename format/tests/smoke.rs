use heapsnap_format::*;

#[test]
fn smoke_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.heapsnap");
    let mut w = SnapshotWriter::create(&path).unwrap();
    let meta = Metadata {
        ocaml_version: "5.3.0".into(), word_size: 8, reserved_header_bits: 0,
        colours: ColourEncoding::OCAML5_INITIAL, pid: Some(1), executable: None, build_id: None,
        time_unix_ns: 5, trigger: Trigger::Synthetic, dumper: "t".into(), domains: vec![],
        compactions: None, redacted: false, warnings: vec![],
    };
    w.write_metadata(&meta).unwrap();
    let name = w.intern("camlFoo");
    w.write_roots(&[RootRecord { kind: RootKind::Global.code(), domain: 0, flags: 0, thread: 0, slot: 8, value: 0x1008, origin: 0, name, reserved: 0 }]).unwrap();
    let h = RegionHeader { kind: RegionKind::Pool.code(), domain: 0, flags: 0, base: 0x1000, block_wsize: 2, first_block: 0, owner: 0 };
    w.write_region(&h, &[1u8; 64]).unwrap();
    w.write_dwarf(".debug_line", b"abc").unwrap();
    w.finish().unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let s = Snapshot::open(&path).unwrap();
    assert_eq!(s.metadata(), &meta);
    assert_eq!(s.roots().len(), 1);
    assert_eq!(s.string(s.roots()[0].name), Some("camlFoo"));
    assert_eq!(s.region_count(), 1);
    assert_eq!(s.region_of(0x1010).unwrap().word_at(0x1010), Some(0x0101010101010101));
    assert_eq!(s.dwarf_section(".debug_line"), Some(&b"abc"[..]));
}
