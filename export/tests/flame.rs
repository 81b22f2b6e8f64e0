//! The flame graph by path signature from the analysis index equals the one the analysis makes.

use heapsnap_analyze::{Analysis, GroupBy, Progress};
use heapsnap_export::flame::{folded, folded_saved};
use heapsnap_format::{RootKind, Snapshot};
use heapsnap_index::Needs;
use heapsnap_testkit::synth::{large_heap_shape, Space, Value};

/// The large-heap shape, a stack root, a minor-heap block and garbage: every stack the
/// analysis makes, from the saved dominator trie and each signature's own bytes.
#[test]
fn flame_stacks_from_the_index_equal_the_analysis() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = large_heap_shape(120).heap;
    let young = h.alloc(Space::Minor, 0, &[Value::Int(1), Value::Int(2)]);
    let s = h.alloc_string(Space::Major, b"held by a frame");
    let pair = h.alloc(Space::Major, 0, &[Value::Ptr(s), Value::Ptr(young)]);
    h.add_root(RootKind::Stack, Value::Ptr(pair), "main", 0);
    h.alloc(Space::Major, 0, &[Value::Int(7)]); // garbage not swept yet
    let path = dir.path().join("flame.heapsnap");
    h.write(&path).unwrap();

    let snap = Snapshot::open(&path).unwrap();
    let analysis = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let full = folded(&analysis, GroupBy::Root);
    assert!(full.stacks.len() > 5 && full.total_bytes > 0);

    let ix = heapsnap_index::store::load(&path, Needs::Diff, &Progress::hidden()).unwrap();
    let view = ix.view(Needs::Diff).unwrap();
    let saved = folded_saved(view.diff_profile(heapsnap_analyze::GroupBy::Kind).expect("the diff's sections")).expect("saved by kind");
    assert_eq!(saved.lines(), full.lines());
    assert_eq!((saved.by, saved.total_bytes), (GroupBy::Root, full.total_bytes));
    // Another grouping's classification does not make these stacks.
    let by_root = heapsnap_analyze::diff::saved_profile(&analysis, GroupBy::Root);
    assert!(folded_saved(&by_root).is_none());
}
