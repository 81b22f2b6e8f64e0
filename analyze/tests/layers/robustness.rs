//! Corrupted heaps (random words overwritten in the regions and roots of a valid snapshot, whose
//! checksums are then not checked): every report runs to the end without panicking or hanging,
//! and `verify` notices.

use heapsnap_analyze::{paths, verify, Analysis, GroupBy, PathQuery, Progress};
use heapsnap_format::{ReadOptions, RootKind, Snapshot};
use heapsnap_testkit::synth::{addresses, Space, SynthHeap, Value};
use proptest::prelude::*;
use std::sync::OnceLock;

/// A heap with a bit of everything, as snapshot bytes, and the file ranges of its regions.
fn base() -> &'static (Vec<u8>, Vec<std::ops::Range<usize>>) {
    static BASE: OnceLock<(Vec<u8>, Vec<std::ops::Range<usize>>)> = OnceLock::new();
    BASE.get_or_init(|| {
        let mut h = SynthHeap::new();
        h.free_every = 4;
        let mut list = Value::Int(0);
        for i in 0..200 {
            let s = h.alloc_string(Space::Major, format!("s{i}").as_bytes());
            let c = h.alloc_closure(Space::Major, addresses::CODE_BASE, 1, &[Value::Ptr(s)]);
            list = Value::Ptr(h.alloc(Space::Major, 0, &[Value::Ptr(c), list]));
        }
        let young = h.alloc(Space::Minor, 0, &[list, Value::Int(3)]);
        let big = h.alloc(Space::Major, 0, &vec![list; 200]);
        let (_, g) = h.alloc_closure_pair(Space::Static, [addresses::CODE_BASE, addresses::CODE_BASE + 8], &[Value::Int(0)]);
        let key = h.alloc_string(Space::Major, b"key");
        let eph = h.alloc_ephemeron(Some(list), &[Value::Ptr(key)]);
        let k = h.alloc_continuation(0x5555_7000_0000, &[Value::Ptr(young)]);
        let garbage = h.alloc(Space::Major, 0, &[Value::Int(1)]);
        h.make_garbage(garbage);
        h.add_module("R", &[Value::Ptr(big), g, Value::Ptr(eph), Value::Ptr(k), Value::Ptr(key)]);
        h.add_root(RootKind::Stack, Value::Ptr(young), "camlR.f_1", 0x1234);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.heapsnap");
        h.write(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let snap = Snapshot::open(&path).unwrap();
        let start = snap.bytes().as_ptr() as usize;
        let ranges = snap
            .regions()
            .map(|r| {
                let at = r.bytes.as_ptr() as usize - start;
                at..at + r.bytes.len()
            })
            .collect();
        (bytes, ranges)
    })
}

fn run_everything(snap: &Snapshot) {
    let report = verify(snap, true).unwrap();
    let _ = report.ok;
    let a = Analysis::new(snap, &Progress::hidden()).unwrap();
    for by in [GroupBy::Reserved, GroupBy::Kind, GroupBy::Closure, GroupBy::Root] {
        let _ = a.group_by(by);
    }
    let _ = heapsnap_analyze::summary(&a, 5);
    let _ = heapsnap_analyze::dominator_report(&a, 6, 0.0, 10);
    let _ = paths(&a, &PathQuery::Kind("string".into()), 50, 5).unwrap();
    let _ = paths(&a, &PathQuery::Tag(0), 50, 5).unwrap();
    for &n in a.preorder().iter().take(50) {
        if let Some(x) = a.address(n) {
            let _ = heapsnap_analyze::inspect(&a, x, 16).unwrap();
            let _ = paths(&a, &PathQuery::Address(x), 10, 3).unwrap();
        }
    }
}

#[test]
fn the_base_heap_is_consistent() {
    let (bytes, _) = base();
    let snap = Snapshot::from_bytes(bytes).unwrap();
    assert!(verify(&snap, true).unwrap().ok);
    run_everything(&snap);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn corrupted_words_never_panic(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u64>(), 0u8..4), 1..40)) {
        let (bytes, ranges) = base();
        let mut bytes = bytes.clone();
        for (region, word, value, how) in edits {
            let r = &ranges[region.index(ranges.len())];
            let words = r.len() / 8;
            if words == 0 {
                continue;
            }
            let at = r.start + 8 * word.index(words);
            let old = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            let new = match how {
                0 => value,                       // anything
                1 => old ^ (1 << (value % 64)),   // one bit
                2 => (old & !0xff) | (value & 0xff), // the tag byte
                _ => value & !7,                  // a pointer-looking word
            };
            bytes[at..at + 8].copy_from_slice(&new.to_le_bytes());
        }
        let snap = Snapshot::from_bytes_with(&bytes, &ReadOptions { verify_checksums: false }).unwrap();
        run_everything(&snap);
    }
}
