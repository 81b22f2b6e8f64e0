//! OCaml 4.14's heap chunks: blocks one after another, of which the free ones (blue, listed in
//! the free-block section, or fragments) and the ones the GC's phase shows dead get no node,
//! and the colour of the others is read through the GC's phase and sweep pointer.

use heapsnap_analyze::ocaml::ocaml4::{GcPhase, Ocaml4Gc, BLACK, BLUE, WHITE};
use heapsnap_analyze::ocaml::Colour;
use heapsnap_analyze::{verify, Analysis, BadPointer, PointsTo, Progress};
use heapsnap_format::*;

const BASE: u64 = 0x10_0000;
/// 4.14's `heap_chunk_head` (7 words) before the first block.
const HEAD: u64 = 56;

fn header(wosize: u64, colour: u8, tag: u8) -> u64 {
    (wosize << 10) | (u64::from(colour) << 8) | u64::from(tag)
}

/// The chunk's blocks: (header, fields). Returns their first fields' addresses.
fn layout(blocks: &[(u64, Vec<u64>)]) -> (Vec<u64>, Vec<u64>) {
    let mut words = vec![0u64; (HEAD / 8) as usize];
    let mut addresses = Vec::new();
    for (hd, fields) in blocks {
        words.push(*hd);
        addresses.push(BASE + 8 * words.len() as u64);
        words.extend(fields);
    }
    (words, addresses)
}

fn snapshot(path: &std::path::Path, gc: Ocaml4Gc, words: &[u64], root: u64, free: &[u64]) {
    let mut w = SnapshotWriter::create(path).unwrap();
    w.write_metadata(&Metadata {
        ocaml_version: "4.14.0".into(),
        word_size: 8,
        reserved_header_bits: 0,
        colours: ColourEncoding { marked: BLACK, unmarked: WHITE, garbage: 1, not_markable: BLUE },
        pid: Some(1),
        executable: None,
        build_id: None,
        time_unix_ns: 0,
        trigger: Trigger::Manual,
        dumper: "test".into(),
        domains: vec![],
        compactions: None,
        redacted: false,
        warnings: vec![],
        pools: None,
        forced_version: false,
        bytecode: false,
        layouts_from: None,
        ocaml4_gc: Some(gc),
        capture: None,
        probed: None,
        namespaces: None,
        host: None,
    })
    .unwrap();
    let name = w.intern("camlM");
    let root = RootRecord {
        kind: RootKind::Global.code(),
        domain: NO_DOMAIN,
        flags: 0,
        thread: 0,
        slot: 0x9000,
        value: root,
        origin: 0,
        name,
        reserved: 0,
    };
    w.write_roots(&[root]).unwrap();
    let region = RegionHeader {
        kind: RegionKind::HeapChunk.code(),
        domain: NO_DOMAIN,
        flags: 0,
        base: BASE,
        block_wsize: 0,
        first_block: HEAD as u32,
        owner: 0,
    };
    w.write_region(&region, bytemuck_bytes(words)).unwrap();
    w.write_free_blocks(free).unwrap();
    w.finish().unwrap();
}

fn bytemuck_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding; any byte view of it is valid.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), words.len() * 8) }
}

#[test]
fn a_chunk_in_the_sweep_phase() {
    // 0: white, swept (live), points at 3; 1: blue (free); 2: white but on a free list;
    // 3: black (live); 4: white, not yet swept (garbage); 5: a fragment; 6: a black string
    // past the sweep pointer (live), pointed at by nothing.
    let (mut words, at) = layout(&[
        (header(2, WHITE, 0), vec![0, 1]),
        (header(3, BLUE, 0), vec![0, 0, 0]),
        (header(1, WHITE, 0), vec![1]),
        (header(1, BLACK, 0), vec![0x55]),
        (header(2, WHITE, 0), vec![1, 1]),
        (header(0, WHITE, 0), vec![]),
        (header(1, BLACK, 252), vec![0x0700_0000_0000_0000]),
    ]);
    let first_field = (HEAD / 8) as usize + 1;
    words[first_field] = at[3];
    let sweep_pointer = at[4] - 8; // block 4's header: it and what follows are not swept yet
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.heapsnap");
    snapshot(&path, Ocaml4Gc { phase: GcPhase::Sweep, sweep_pointer }, &words, at[0], &[at[2]]);
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let blocks = &a.graph.blocks;
    let c = blocks.regions.iter().find(|r| r.kind == RegionKind::HeapChunk).unwrap().counts;
    assert_eq!((c.live_blocks, c.free_slots, c.garbage_blocks), (3, 3, 1), "{c:?}");
    assert_eq!(c.live_bytes, 24 + 16 + 16);
    let node = |addr| match blocks.resolve(addr) {
        PointsTo::Node(n) => n,
        other => panic!("{addr:#x}: {other:?}"),
    };
    assert_eq!(blocks.block(node(at[0])).unwrap().header.colour, Colour::Unmarked);
    assert_eq!(blocks.block(node(at[3])).unwrap().header.colour, Colour::Marked);
    assert_eq!(blocks.resolve(at[1]), PointsTo::Bad(BadPointer::FreeSlot));
    assert_eq!(blocks.resolve(at[2]), PointsTo::Bad(BadPointer::FreeSlot));
    assert_eq!(blocks.resolve(at[4]), PointsTo::Bad(BadPointer::Garbage));
    assert_eq!(blocks.resolve(at[0] + 8), PointsTo::Bad(BadPointer::Interior));
    // The root reaches 0 and 3; the black string 6 is live but unreachable: strict verify says so.
    assert_eq!(a.reachable_bytes(), 24 + 16);
    let report = verify(&snap, true).unwrap();
    assert_eq!(report.unreachable_major_objects, 1, "{report:#?}");
    assert!(!report.ok);
    assert!(verify(&snap, false).unwrap().ok);
}

#[test]
fn the_phase_decides_what_white_means() {
    let (words, at) = layout(&[(header(1, WHITE, 0), vec![1]), (header(1, WHITE, 0), vec![1])]);
    let dir = tempfile::tempdir().unwrap();
    for (phase, live) in [(GcPhase::Idle, 2), (GcPhase::Mark, 2), (GcPhase::Clean, 0)] {
        let path = dir.path().join(format!("{phase:?}.heapsnap"));
        snapshot(&path, Ocaml4Gc { phase, sweep_pointer: 0 }, &words, at[0], &[]);
        let snap = Snapshot::open(&path).unwrap();
        let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
        let c = a.graph.blocks.regions.iter().find(|r| r.kind == RegionKind::HeapChunk).unwrap().counts;
        assert_eq!(c.live_blocks, live, "{phase:?}: {c:?}");
        assert_eq!(c.garbage_blocks, 2 - live, "{phase:?}: {c:?}");
    }
}
