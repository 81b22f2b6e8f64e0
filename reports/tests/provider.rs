//! The provider analyses a snapshot once per process, even when its index cannot be saved.

use heapsnap_index::Needs;
use heapsnap_reports::{Files, Loader};
use heapsnap_testkit::synth::large_heap_shape;

/// With no writable place for the index (a directory where the index file would go, a cache
/// under a regular file), the index built in memory is kept: a second report on the snapshot
/// reads it, until the snapshot changes.
#[test]
fn an_index_that_cannot_be_saved_is_kept_for_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_directory = dir.path().join("cache");
    std::fs::write(&not_a_directory, b"a file").unwrap();
    // This test binary's only test: nothing else reads the variable.
    std::env::set_var("XDG_CACHE_HOME", &not_a_directory);
    std::env::set_var("HEAPSNAP_INDEX_IN_BACKGROUND", "0");
    let path = dir.path().join("kept.heapsnap");
    large_heap_shape(50).heap.write(&path).unwrap();
    let in_the_way = heapsnap_index::store::beside(&path);
    std::fs::create_dir(&in_the_way).unwrap();
    std::fs::write(in_the_way.join("x"), b"").unwrap();

    let first = Files.indexed(&path, Needs::Meta).unwrap();
    assert!(first.built && first.path.is_none(), "built in memory");
    let second = Files.indexed(&path, Needs::Meta).unwrap();
    assert!(std::ptr::eq(&*first, &*second), "the second report reads the index the first built");
    assert_eq!(second.view(Needs::Meta).unwrap().meta.node_count, first.view(Needs::Meta).unwrap().meta.node_count);
    // More than it holds: built again (whole, as with a saved index of a lower level).
    let all = Files.indexed(&path, Needs::All).unwrap();
    assert!(!std::ptr::eq(&*first, &*all));
    assert!(std::ptr::eq(&*all, &*Files.indexed(&path, Needs::Tree).unwrap()), "the whole index serves the tree");

    // Another snapshot at the same path: not the one the kept index was built from.
    large_heap_shape(60).heap.write(&path).unwrap();
    let rewritten = Files.indexed(&path, Needs::Meta).unwrap();
    assert!(!std::ptr::eq(&*all, &*rewritten));
    let snap = heapsnap_format::Snapshot::open(&path).unwrap();
    let nodes = heapsnap_analyze::Analysis::new(&snap, &heapsnap_analyze::Progress::hidden()).unwrap().graph.node_count();
    assert_eq!(rewritten.view(Needs::Meta).unwrap().meta.node_count as usize, nodes, "the new snapshot's index");
    assert_ne!(all.view(Needs::Meta).unwrap().meta.node_count as usize, nodes);
}
