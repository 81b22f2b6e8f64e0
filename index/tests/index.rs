//! The index answers as the full analysis does, and never trusts a bad file.

use heapsnap_analyze::{AnalysedHeap, Analysis, GroupBy, HeapFacts, NodeId, PathQuery, Progress};
use heapsnap_format::{RootKind, Snapshot};
use heapsnap_index::file::{Bytes, IndexError, IndexFile, SnapshotId};
use heapsnap_index::store::{beside, open_or_build, open_or_build_for};
use heapsnap_index::{IndexView, Needs};
use heapsnap_testkit::synth::{large_heap_shape, Space, Value};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

/// The large-heap shape (a Hashtbl and a list shared by two globals) plus what else reports must
/// get right: a minor heap, an ephemeron whose data lives, mutually recursive closures (infix
/// pointers), a stack root, a Hashtbl that a global and a stack slot both reach, and an object
/// no root reaches.
fn write_heap(dir: &Path) -> PathBuf {
    let mut h = large_heap_shape(300).heap;
    let mut buckets = vec![Value::Int(0); 16];
    for (i, b) in buckets.iter_mut().enumerate().take(5) {
        let value = h.alloc_string(Space::Major, format!("session-{i}").as_bytes());
        let cell = h.alloc(Space::Major, 0, &[Value::Int(i as i64), Value::Ptr(value), Value::Int(0)]);
        *b = Value::Ptr(cell);
    }
    let data = h.alloc(Space::Major, 0, &buckets);
    let sessions = h.alloc(Space::Major, 0, &[Value::Int(5), Value::Ptr(data), Value::Int(0), Value::Int(16)]);
    h.add_module("Sessions", &[Value::Ptr(sessions)]);
    h.add_root(RootKind::Stack, Value::Ptr(sessions), "serve", 0);
    h.alloc(Space::Major, 0, &[Value::Int(1), Value::Int(2), Value::Int(3)]); // garbage not swept yet
    let key = h.alloc_string(Space::Major, b"key");
    let data = h.alloc(Space::Major, 0, &[Value::Int(7), Value::Ptr(key)]);
    let eph = h.alloc_ephemeron(Some(Value::Ptr(data)), &[Value::Ptr(key)]);
    let young = h.alloc(Space::Minor, 0, &[Value::Ptr(eph), Value::Ptr(key)]);
    let (pair, infix) = h.alloc_closure_pair(Space::Major, [0x1000, 0x2000], &[Value::Ptr(young)]);
    let holder = h.alloc(Space::Major, 1, &[infix, Value::Ptr(pair)]);
    h.add_root(RootKind::Stack, Value::Ptr(holder), "main", 0);
    let path = dir.join("mixed.heapsnap");
    h.write(&path).expect("write the snapshot");
    path
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).expect("serialises")
}

#[test]
fn index_reports_equal_the_full_analysis() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_heap(dir.path());
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let ix = open_or_build(&path, &Progress::hidden()).unwrap();
    assert!(ix.built);
    let view = IndexView::open(&ix.snap, &ix.index, Needs::All).unwrap();

    use heapsnap_analyze::{dominator_report, inspect, paths, summary, top};
    let summary = summary(&a, 10);
    assert_eq!(json(&summary), json(&view.summary(10)));
    // The summary's suspects, saved in the meta data, are those the analysis finds.
    let saved = view.summary_suspects();
    assert!(!saved.suspects.is_empty() && saved.stack_only.is_some(), "{saved:#?}");
    assert_eq!(
        json(&heapsnap_analyze::suspects(&a, heapsnap_analyze::SUMMARY_SUSPECTS_MIN_PERCENT, heapsnap_analyze::SUMMARY_SUSPECTS_SHOWN)),
        json(&saved)
    );
    assert!(summary.unreachable_objects > 0, "the heap has garbage, counted apart");
    // The leak suspects and the stack-only bytes, from the index as from the graph (the heap
    // has a stack root: what only it holds is counted).
    for min_percent in [1.0, 10.0] {
        let full = heapsnap_analyze::suspects(&a, min_percent, 0);
        assert!(!full.suspects.is_empty() && full.stack_only.as_ref().is_some_and(|s| s.bytes > 0), "{full:#?}");
        assert_eq!(json(&full), json(&heapsnap_analyze::suspects(&view, min_percent, 0)), "suspects at {min_percent}%");
    }
    for by in [GroupBy::Reserved, GroupBy::Kind, GroupBy::Closure, GroupBy::Root] {
        for limit in [0, 3] {
            let full = top(&a, by, limit).map(|t| json(&t)).map_err(|e| e.to_string());
            assert_eq!(full, top(&view, by, limit).map(|t| json(&t)).map_err(|e| e.to_string()), "top --by {by:?}");
        }
    }
    // Without reserved header bits, --by tag is refused by both; --by root names each root's share.
    assert!(top(&view, GroupBy::Reserved, 0).is_err());
    let by_root = top(&view, GroupBy::Root, 0).unwrap();
    let shares = by_root.roots.expect("--by root lists the roots");
    assert!(shares.iter().any(|r| r.root == "Sessions.0" && r.alone > 0), "{shares:?}");
    assert!(shares.iter().any(|r| r.shared > 0 && !r.shared_with.is_empty()), "{shares:?}");
    assert!(
        by_root
            .groups
            .iter()
            .any(|g| g.name.contains(" shared by ") && g.roots.len() > 1 && g.roots.iter().all(|r| r.starts_with("Large_heap."))),
        "{:?}",
        by_root.groups
    );
    for (depth, min) in [(4, 1.0), (10, 0.0), (1, 0.0), (3, 2.0)] {
        assert_eq!(
            json(&dominator_report(&a, depth, min, 20)),
            json(&dominator_report(&view, depth, min, 20)),
            "dominators depth {depth} min {min}"
        );
    }
    // Every node's place in the tree, as the analysis has it (the index finds a node's number
    // by walking its cycle, its dominator from the checkpoints, and counts children by kind
    // in chunks).
    for v in 0..a.node_count() as NodeId {
        assert_eq!(
            (view.is_reachable(v), view.retained(v), view.idom(v), view.children(v)),
            (a.is_reachable(v), a.retained(v), a.idom(v), a.children(v)),
            "node {v}"
        );
        assert_eq!(view.tally_children(v, 1), a.tally_children(v, 1), "children of {v} by kind");
    }
    let tree = json(&dominator_report(&view, 4, 1.0, 20));
    assert!(tree.contains("Hashtbl (300 entries)") && tree.contains("\"similar\""), "{tree}");
    let closure = a.group_by(GroupBy::Closure).unwrap()[0].name.clone();
    let mut queries = vec![
        PathQuery::Tag(0),
        PathQuery::Tag(252),
        PathQuery::Kind(closure),
        PathQuery::Kind("string".into()),
        PathQuery::Kind("Hashtbl".into()),
        PathQuery::Kind("list cell".into()),
        PathQuery::Kind("block tag 0 size 3".into()),
    ];
    for q in &queries[4..] {
        assert!(paths(&view, q, 1000, 10).unwrap().targets > 0, "{q:?} matches");
    }
    // Exact names only; the error (with the kinds containing the text) is the same.
    for bad in ["Hashtb", "block tag 0 size"] {
        let q = PathQuery::Kind(bad.into());
        assert_eq!(paths(&a, &q, 10, 10).unwrap_err().to_string(), paths(&view, &q, 10, 10).unwrap_err().to_string());
    }
    // Every block by address: paths and inspect.
    let addresses: Vec<u64> = a.graph.blocks.block_regions().flat_map(|r| a.graph.blocks.region_blocks(r)).map(|b| b.address).collect();
    assert!(addresses.len() > 2000);
    for &x in addresses.iter().step_by(37).chain(addresses.iter().rev().take(12)) {
        queries.push(PathQuery::Address(x));
        assert_eq!(json(&inspect(&a, x, 64).unwrap()), json(&inspect(&view, x, 64).unwrap()), "inspect {x:#x}");
    }
    for q in &queries {
        assert_eq!(json(&paths(&a, q, 1000, 10).unwrap()), json(&paths(&view, q, 1000, 10).unwrap()), "paths {q:?}");
    }
    let stack_and_global = paths(&view, &PathQuery::Kind("Hashtbl".into()), 1000, 10).unwrap();
    assert!(stack_and_global.paths.iter().any(|p| p.root == "Sessions.0"), "{stack_and_global:?}");
    assert!(inspect(&view, 0x10, 64).is_err());
}

/// `--by reserved` from the index is the full analysis's: the index stores the grouping under the
/// name it reads it back by.
#[test]
fn reserved_groups_from_the_index_equal_the_full_analysis() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = large_heap_shape(50).heap;
    h.reserved_header_bits = 16;
    let tagged: Vec<u64> = (0..3).map(|i| h.alloc(Space::Major, 0, &[Value::Int(i), Value::Int(i + 1)])).collect();
    for &b in &tagged {
        h.set_reserved(b, 42);
    }
    let list = tagged.iter().fold(Value::Int(0), |tail, &b| Value::Ptr(h.alloc(Space::Major, 0, &[Value::Ptr(b), tail])));
    h.add_module("Tagged", &[list]);
    let path = dir.path().join("reserved.heapsnap");
    h.write(&path).unwrap();
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let ix = open_or_build(&path, &Progress::hidden()).unwrap();
    let view = IndexView::open(&ix.snap, &ix.index, Needs::All).unwrap();
    let full = heapsnap_analyze::top(&a, GroupBy::Reserved, 0).unwrap();
    assert!(full.groups.iter().any(|g| g.name == "reserved 42" && g.count == 3), "{:?}", full.groups);
    assert_eq!(json(&heapsnap_analyze::top(&view, GroupBy::Reserved, 0).unwrap()), json(&full));
}

#[test]
fn a_second_open_reads_the_index_written_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = write_heap(dir.path());
    let first = open_or_build(&path, &Progress::hidden()).unwrap();
    assert!(first.built);
    assert_eq!(first.path.as_deref(), Some(beside(&path).as_path()));
    let mode = std::fs::metadata(beside(&path)).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Nothing else was left in the directory (the temporary file was renamed).
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let second = open_or_build(&path, &Progress::hidden()).unwrap();
    assert!(!second.built);
}

#[test]
fn an_index_of_another_snapshot_or_version_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_heap(dir.path());
    open_or_build(&path, &Progress::hidden()).unwrap();
    let index_bytes = std::fs::read(beside(&path)).unwrap();

    // Another snapshot at the same path: the old index is foreign now.
    let mut other = large_heap_shape(40).heap;
    other.add_root(RootKind::Stack, Value::Int(1), "x", 0);
    other.write(&path).unwrap();
    let snap = Snapshot::open(&path).unwrap();
    let err = IndexFile::parse(Bytes::copied(&index_bytes), SnapshotId::of(&snap)).err();
    assert_eq!(err, Some(IndexError::OtherSnapshot));
    let again = open_or_build(&path, &Progress::hidden()).unwrap();
    assert!(again.built, "a stale index must be rebuilt");
    let view = IndexView::open(&again.snap, &again.index, Needs::All).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    assert_eq!(view.reachable_bytes(), a.reachable_bytes());

    // A future version.
    let mut bytes = std::fs::read(beside(&path)).unwrap();
    bytes[8] = 99;
    std::fs::write(beside(&path), &bytes).unwrap();
    assert!(open_or_build(&path, &Progress::hidden()).unwrap().built);
}

/// Opens an index from bytes and uses every part of it its level has; must not panic.
fn use_index(snap: &Snapshot, bytes: &[u8]) -> Result<(), IndexError> {
    let file = IndexFile::parse(Bytes::copied(bytes), SnapshotId::of(snap))?;
    let needs = file.level().ok_or(IndexError::Section(heapsnap_index::sections::META))?;
    let view = IndexView::open(snap, &file, needs)?;
    use heapsnap_analyze::{dominator_report, inspect, paths, top};
    let _ = view.summary(5);
    let _ = view.summary_suspects();
    for by in [GroupBy::Kind, GroupBy::Closure, GroupBy::Root] {
        let _ = top(&view, by, 0);
    }
    if file.has(heapsnap_index::sections::DIFF_META) {
        // The diff's sections, read and compared as three snapshots (suspects need three), by
        // kind and, where the index saves it, by type.
        let diff_view = IndexView::open(snap, &file, Needs::Diff)?;
        let saved = diff_view.diff_profile(GroupBy::Kind).ok_or(IndexError::Section(heapsnap_index::sections::DIFF_META))?;
        let typed = file.has(heapsnap_index::sections::TYPED_DIFF_META).then(|| diff_view.diff_profile(GroupBy::Type));
        for (by, saved) in [(GroupBy::Kind, Some(saved))].into_iter().chain(typed.map(|t| (GroupBy::Type, t))) {
            let saved = saved.ok_or(IndexError::Section(heapsnap_index::sections::TYPED_DIFF_META))?;
            let inputs: Vec<_> = (0..3).map(|i| heapsnap_analyze::diff::Input { name: format!("{i}"), snap, saved: Some(saved) }).collect();
            let opts = heapsnap_analyze::diff::DiffOptions { by, min_growth: 0, ..Default::default() };
            let _ = heapsnap_analyze::diff::diff(&inputs, &opts, &Progress::hidden());
        }
    }
    if needs <= Needs::Diff {
        return Ok(());
    }
    let _ = dominator_report(&view, 6, 0.0, 50);
    if let Some(typing) = view.typing() {
        let _ = typing.labels();
        for v in 0..view.node_count() as NodeId + 3 {
            for (tag, first) in [(0, None), (1, Some(66 << 1 | 1)), (247, None)] {
                let _ = typing.describe(v, tag, first);
                (0..4).for_each(|i| drop(typing.field_name(v, tag, i)));
            }
        }
    }
    for v in (0..view.node_count() as u32 + 3).step_by(7) {
        let _ = view.dominator_chain(v);
        let _ = view.tree_node(v);
        if let Some(x) = view.address(v) {
            let _ = inspect(&view, x, 8);
            let _ = paths(&view, &PathQuery::Address(x), 10, 4);
        }
    }
    for kind in ["closure", "string", "Hashtbl", "list cell"] {
        let _ = paths(&view, &PathQuery::Kind(kind.into()), 100, 4);
    }
    Ok(())
}

struct Fixture {
    _dir: tempfile::TempDir,
    snap: Snapshot,
    bytes: Vec<u8>,
}

/// A small snapshot's index, of the level `needs` (every level has its own shape).
fn fixture(needs: Needs) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut h = large_heap_shape(30).heap;
    let s = h.alloc_string(Space::Major, b"x");
    h.add_root(RootKind::Stack, Value::Ptr(s), "main", 0);
    let path = dir.path().join("small.heapsnap");
    h.write(&path).unwrap();
    let ix = open_or_build_for(&path, needs, &Progress::hidden()).unwrap();
    assert_eq!(ix.index.level(), Some(needs));
    let bytes = std::fs::read(ix.path.unwrap()).unwrap();
    Fixture { snap: Snapshot::open(&path).unwrap(), bytes, _dir: dir }
}

const LEVELS: [Needs; 4] = [Needs::Meta, Needs::Diff, Needs::Tree, Needs::All];

#[test]
fn every_truncation_is_refused() {
    for needs in LEVELS {
        let f = fixture(needs);
        use_index(&f.snap, &f.bytes).expect("the intact index");
        // Past the last section only padding is cut.
        for len in (0..f.bytes.len() - 8).step_by(3) {
            assert!(use_index(&f.snap, &f.bytes[..len]).is_err(), "{needs:?} truncated to {len} bytes");
        }
    }
}

#[test]
fn a_flipped_bit_is_caught_by_a_checksum() {
    for needs in LEVELS {
        let f = fixture(needs);
        for at in (0..f.bytes.len()).step_by(29) {
            let mut b = f.bytes.clone();
            b[at] ^= 0x10;
            // Padding bytes are not checksummed: a flip there may pass, but must not panic.
            let r = use_index(&f.snap, &b);
            if at < table_end(&f.bytes) {
                assert!(r.is_err(), "{needs:?}: flip at {at}");
            }
        }
    }
}

/// Mutates the bytes after the header and table, fixes the checksums up, and uses the index.
fn mutate_and_use(f: &Fixture, edits: Vec<(usize, u8)>) {
    let snap = Snapshot::from_bytes(f.snap.bytes()).unwrap();
    let mut b = f.bytes.clone();
    let header = table_end(&b);
    for (at, byte) in edits {
        let at = header + at % (b.len() - header);
        b[at] = byte;
    }
    let b = reseal(&b);
    let _ = use_index(&snap, &b);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// Hostile indexes whose checksums were fixed up after the mutation: wrong answers at
    /// worst, never a panic or a hang.
    #[test]
    fn mutated_sections_with_valid_checksums_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..20)) {
        FIXTURE.with(|f| mutate_and_use(f, edits));
    }

    /// The same of the indexes of the lower levels (`summary`'s meta data alone, `diff`'s
    /// sections, the tree), and
    /// of an index whose kind ids take two bytes.
    #[test]
    fn mutated_lower_levels_and_wide_kind_ids_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..20), which in 0..4u8) {
        match which {
            0 => TREE_FIXTURE.with(|f| mutate_and_use(f, edits)),
            1 => META_FIXTURE.with(|f| mutate_and_use(f, edits)),
            2 => DIFF_FIXTURE.with(|f| mutate_and_use(f, edits)),
            _ => SHAPES_FIXTURE.with(|f| mutate_and_use(f, edits)),
        }
    }
}

/// Edits only the compact sections (the tree, its checkpoints, the preorder and its inverse's
/// shortcuts, the blocks' places, the referrers:
/// each edit in one of them, chosen by the edit), fixes the checksums up, and uses the index.
fn mutate_compact_and_use(f: &Fixture, edits: Vec<(usize, u8)>) -> Result<(), IndexError> {
    use heapsnap_index::sections::*;
    let snap = Snapshot::from_bytes(f.snap.bytes()).unwrap();
    let mut b = f.bytes.clone();
    let compact = [
        TREE,
        TREE_CHECKPOINTS,
        PREORDER,
        REACHABLE,
        PREORDER_MARKS,
        PREORDER_BACK,
        BLOCK_STEPS,
        BLOCK_FAR,
        BLOCK_CHECKPOINTS,
        PLAIN_REFERRERS,
        REFERRERS,
        REFERRER_CHECKPOINTS,
    ];
    let ranges: Vec<_> = compact.iter().map(|&k| section_range(&b, k)).filter(|r| !r.is_empty()).collect();
    for (at, byte) in edits {
        let range = &ranges[at % ranges.len()];
        b[range.start + (at / ranges.len()) % range.len()] = byte;
    }
    use_index(&snap, &reseal(&b))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    /// The compact sections alone, mutated with valid checksums (of the whole index, and of the one
    /// with kind ids of two bytes): never a panic or a hang.
    #[test]
    fn mutated_compact_sections_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..12), shapes in any::<bool>()) {
        let _ = if shapes { SHAPES_FIXTURE.with(|f| mutate_compact_and_use(f, edits)) } else { FIXTURE.with(|f| mutate_compact_and_use(f, edits)) };
    }

    /// The diff's sections alone, mutated with valid checksums: never a panic or a hang.
    #[test]
    fn mutated_diff_sections_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..12)) {
        let _ = DIFF_FIXTURE.with(|f| mutate_diff_and_use(f, edits));
    }

    /// The compressed sections' contents, mutated and compressed again with valid checksums (of the
    /// whole index with a typing, and of the diff's level): never a panic or a hang.
    #[test]
    fn mutated_compressed_sections_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..12), diff in any::<bool>()) {
        let _ = if diff { DIFF_FIXTURE.with(|f| mutate_compressed_and_use(f, edits)) } else { TYPED_FIXTURE.with(|f| mutate_compressed_and_use(f, edits)) };
    }

    /// A saved typing's node types (1 byte each here) mutated with valid checksums: never a
    /// panic or a hang.
    #[test]
    fn mutated_type_ids_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..12)) {
        use heapsnap_index::sections::TYPE_IDS;
        let _ = TYPED_FIXTURE.with(|f| {
            let snap = Snapshot::from_bytes(f.snap.bytes()).unwrap();
            let b = rewritten(f, |kind, body| {
                for &(at, byte) in &edits {
                    if kind == TYPE_IDS && !body.is_empty() {
                        let len = body.len();
                        body[at % len] = byte;
                    }
                }
            });
            use_index(&snap, &b)
        });
    }
}

/// The whole index of [`write_shapes`]'s heap (kind ids of two bytes).
fn shapes_fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = write_shapes(dir.path());
    let ix = open_or_build(&path, &Progress::hidden()).unwrap();
    let bytes = std::fs::read(ix.path.unwrap()).unwrap();
    Fixture { snap: Snapshot::open(&path).unwrap(), bytes, _dir: dir }
}

thread_local! {
    static FIXTURE: Fixture = fixture(Needs::All);
    static TREE_FIXTURE: Fixture = fixture(Needs::Tree);
    static META_FIXTURE: Fixture = fixture(Needs::Meta);
    static DIFF_FIXTURE: Fixture = fixture(Needs::Diff);
    static SHAPES_FIXTURE: Fixture = shapes_fixture();
    static TYPED_FIXTURE: Fixture = typed_fixture();
}

/// A `summary` writes the meta data alone (a few kilobytes: its reports read nothing else); the
/// first command that reads more builds the index again, whole; a `dominators` on a fresh
/// snapshot writes the tree without what only paths read; a command that reads less never
/// replaces an index with less.
#[test]
fn an_index_is_built_again_for_the_first_command_that_reads_more() {
    use heapsnap_index::sections::{META, PLAIN_REFERRERS, REFERRERS, TREE};
    use heapsnap_index::store::{build_and_save_for, load};
    let dir = tempfile::tempdir().unwrap();
    let path = write_heap(dir.path());
    let quiet = Progress::hidden();
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &quiet).unwrap();

    let meta = load(&path, Needs::Meta, &quiet).unwrap();
    assert!(meta.built);
    assert_eq!(meta.index.level(), Some(Needs::Meta));
    assert!(meta.index.has(META) && !meta.index.has(TREE));
    let size = std::fs::metadata(beside(&path)).unwrap().len();
    assert!(size < snap.bytes().len() as u64 / 4, "{size} bytes of meta data for a {}-byte snapshot", snap.bytes().len());
    // Its reports are the analysis's.
    let view = meta.view(Needs::Meta).unwrap();
    assert_eq!(json(&heapsnap_analyze::summary(&a, 10)), json(&view.summary(10)));
    assert_eq!(json(&heapsnap_analyze::suspects(&a, 10.0, 5)), json(&view.summary_suspects()));
    for by in [GroupBy::Kind, GroupBy::Closure, GroupBy::Root] {
        assert_eq!(json(&heapsnap_analyze::top(&a, by, 0).unwrap()), json(&heapsnap_analyze::top(&view, by, 0).unwrap()));
    }
    drop(view);
    drop(meta);
    assert!(!load(&path, Needs::Meta, &quiet).unwrap().built, "the meta data serves a second summary");

    // A dominator report after it: the index is built again, whole (a path after it need not
    // analyse a third time).
    let tree = load(&path, Needs::Tree, &quiet).unwrap();
    assert!(tree.built, "a dominator report needs the tree: the index is built again");
    assert_eq!(tree.index.level(), Some(Needs::All));
    let view = tree.view(Needs::Tree).unwrap();
    assert_eq!(json(&heapsnap_analyze::dominator_report(&a, 4, 1.0, 20)), json(&heapsnap_analyze::dominator_report(&view, 4, 1.0, 20)));
    drop(view);
    drop(tree);
    assert!(!load(&path, Needs::Meta, &quiet).unwrap().built, "the whole index serves a summary");
    assert!(!load(&path, Needs::All, &quiet).unwrap().built, "and a path");

    // On a fresh snapshot, a dominator report writes the tree alone; a path after it, everything.
    std::fs::remove_file(beside(&path)).unwrap();
    let tree = load(&path, Needs::Tree, &quiet).unwrap();
    assert!(tree.built);
    assert_eq!(tree.index.level(), Some(Needs::Tree));
    assert!(!tree.index.has(REFERRERS) && !tree.index.has(PLAIN_REFERRERS));
    drop(tree);
    assert!(!load(&path, Needs::Meta, &quiet).unwrap().built, "the tree serves a summary");
    let all = load(&path, Needs::All, &quiet).unwrap();
    assert!(all.built);
    assert_eq!(all.index.level(), Some(Needs::All));
    drop(all);
    // A summary building for itself meanwhile keeps the index of more.
    let again = build_and_save_for(&path, Needs::Meta, &quiet).unwrap();
    assert_eq!(again.index.level(), Some(Needs::All), "an index of more is not replaced by less");
    drop(again);
    assert!(!load(&path, Needs::All, &quiet).unwrap().built);

    // ... unless what the command reads of it is corrupt: a tree section of the whole index.
    let mut bytes = std::fs::read(beside(&path)).unwrap();
    let (offset, length) = section_at(&bytes, TREE);
    assert!(length > 0);
    bytes[offset] ^= 0x40;
    std::fs::write(beside(&path), &bytes).unwrap();
    let tree = load(&path, Needs::Tree, &quiet).unwrap();
    assert!(tree.built, "the corrupt tree is built again");
    assert!(tree.view(Needs::Tree).is_ok());
    assert_eq!(
        json(&heapsnap_analyze::dominator_report(&a, 4, 1.0, 20)),
        json(&heapsnap_analyze::dominator_report(&tree.view(Needs::Tree).unwrap(), 4, 1.0, 20))
    );
}

/// Where section `kind` is in an index file's bytes: its offset and length.
fn section_at(bytes: &[u8], kind: u32) -> (usize, usize) {
    let count = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    (0..count)
        .map(|i| 48 + i * 32)
        .find(|&e| u32::from_le_bytes(bytes[e..e + 4].try_into().unwrap()) == kind)
        .map(|e| {
            let field = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            (field(e + 8), field(e + 16))
        })
        .expect("the section is there")
}

/// Percentages read back from JSON are set again from the bytes: exactly those computed.
#[test]
fn saved_suspects_get_their_percentages_from_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_heap(dir.path());
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let report = heapsnap_analyze::suspects(&a, 1.0, 0);
    let mut read: heapsnap_analyze::SuspectsReport = serde_json::from_str(&json(&report)).unwrap();
    for s in &mut read.suspects {
        s.percent += 1e-9;
    }
    if let Some(st) = &mut read.stack_only {
        st.percent = 0.0;
    }
    read.restore_percents();
    assert_eq!(json(&report), json(&read));
}

/// Where the section table ends (the checksummed header and table).
fn table_end(bytes: &[u8]) -> usize {
    48 + 32 * u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize
}

/// Where section `kind`'s body is in an index's bytes.
fn section_range(bytes: &[u8], kind: u32) -> std::ops::Range<usize> {
    let count = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    (0..count)
        .map(|i| 48 + i * 32)
        .find(|&e| u32::from_le_bytes(bytes[e..e + 4].try_into().unwrap()) == kind)
        .map(|e| word(e + 8)..word(e + 8) + word(e + 16))
        .expect("the section is there")
}

/// The index written again with every section's contents (compressed ones decompressed) given to
/// `edit`, compressed sections compressed again: what a hostile writer that knows the format
/// writes.
fn rewritten(f: &Fixture, edit: impl Fn(u32, &mut Vec<u8>)) -> Vec<u8> {
    rewritten_with(f, edit, Vec::new())
}

/// [`rewritten`], with `extra` sections (`(kind, body, compressed)`) after the others.
fn rewritten_with(f: &Fixture, edit: impl Fn(u32, &mut Vec<u8>), extra: Vec<(u32, Vec<u8>, bool)>) -> Vec<u8> {
    use heapsnap_index::file::{decompress, IndexBuilder, COMPRESSED};
    let id = SnapshotId::of(&f.snap);
    let file = IndexFile::parse(Bytes::copied(&f.bytes), id).unwrap();
    let mut builder = IndexBuilder::default();
    for (kind, flags) in file.kinds().collect::<Vec<_>>() {
        let range = section_range(&f.bytes, kind);
        let stored = &f.bytes[range];
        let mut body =
            if flags & COMPRESSED != 0 { decompress(stored).expect("a compressed section decompresses") } else { stored.to_vec() };
        edit(kind, &mut body);
        if flags & COMPRESSED != 0 {
            builder.add_compressed(kind, &body);
        } else {
            builder.add(kind, body);
        }
    }
    for (kind, body, compressed) in extra {
        if compressed {
            builder.add_compressed(kind, &body);
        } else {
            builder.add(kind, body);
        }
    }
    builder.finish(id)
}

/// Six types, one of each way of naming a type's parts, as section 19 saves them.
fn saved_types() -> heapsnap_analyze::SavedTypes {
    use heapsnap_analyze::{PartNames, TypeNames};
    let named = |n: &str| Some(n.to_string());
    let types = vec![
        TypeNames { name: "Server.session".into(), parts: Some(PartNames::Fields(vec![named("id"), None, named("data")])) },
        TypeNames {
            name: "shape".into(),
            parts: Some(PartNames::Variant(vec![("Circle".into(), vec![named("radius")]), ("Square".into(), vec![None, None])])),
        },
        TypeNames { name: "[ `A | `B ]".into(), parts: Some(PartNames::PolyVariant(vec![(65, "A".into()), (66, "B".into())])) },
        TypeNames { name: "int array".into(), parts: Some(PartNames::Array) },
        TypeNames { name: "<fun>".into(), parts: Some(PartNames::Closure { env_start: 2, names: vec![named("cache")] }) },
        TypeNames { name: "string".into(), parts: None },
    ];
    heapsnap_analyze::SavedTypes { types, conflicts: 1, mismatches: 2, typed_objects: 3, typed_bytes: 4 }
}

/// The type id [`typed_fixture`] gives node `v` (none for every seventh node).
fn synthetic_type(v: usize) -> Option<u32> {
    (v % 7 != 6).then_some((v % 7) as u32)
}

/// The whole index of [`fixture`] with a typing (sections 18 and 19) of [`saved_types`]: the
/// synthetic heap has no OCaml names to make one from.
fn typed_fixture() -> Fixture {
    use heapsnap_index::sections::{TYPES, TYPE_IDS};
    let f = fixture(Needs::All);
    let file = IndexFile::parse(Bytes::copied(&f.bytes), SnapshotId::of(&f.snap)).unwrap();
    let n = file.meta().unwrap().node_count as usize;
    let ids: Vec<u8> = (0..n).map(|v| synthetic_type(v).map_or(u8::MAX, |t| t as u8)).collect();
    let types = heapsnap_index::saved_types::encode(&saved_types()).unwrap();
    let bytes = rewritten_with(&f, |_, _| {}, vec![(TYPE_IDS, ids, false), (TYPES, types, false)]);
    Fixture { bytes, ..f }
}

/// A saved typing is read as it is, without the snapshot's OCaml names (this one has none):
/// every node's type, constructor by tag, polymorphic variant by hash, field names, a closure's
/// free variables from its environment's start, the counts.
#[test]
fn a_saved_typing_is_read_without_the_snapshots_names() {
    TYPED_FIXTURE.with(|f| {
        assert!(f.snap.ocaml_names().is_none());
        let file = IndexFile::parse(Bytes::copied(&f.bytes), SnapshotId::of(&f.snap)).unwrap();
        let view = IndexView::open(&f.snap, &file, Needs::All).unwrap();
        let typing = view.typing().expect("the saved typing");
        assert_eq!((typing.conflicts, typing.mismatches, typing.typed_objects, typing.typed_bytes), (1, 2, 3, 4));
        assert_eq!(typing.type_count(), 6);
        for v in 0..view.node_count() as NodeId {
            let want = synthetic_type(v as usize);
            assert_eq!(typing.type_id(v), want.unwrap_or(heapsnap_analyze::NO_TYPE), "node {v}");
            let name = want.map(|t| saved_types().types[t as usize].name.clone());
            assert_eq!(typing.type_name(typing.type_id(v)).map(str::to_string), name, "node {v}");
        }
        let of = |t: u32| (0..view.node_count() as NodeId).find(|&v| synthetic_type(v as usize) == Some(t)).unwrap();
        assert_eq!(typing.describe(of(1), 1, None).as_deref(), Some("Square : shape"));
        assert_eq!(typing.describe(of(2), 0, Some(66 << 1 | 1)).as_deref(), Some("B : [ `A | `B ]"));
        // A type no block was checked against (its parts unknown) describes nothing.
        assert_eq!(typing.describe(of(5), 0, None), None);
        assert_eq!(typing.field_name(of(0), 0, 2).as_deref(), Some("data"));
        assert_eq!(typing.field_name(of(0), 0, 1), None);
        assert_eq!(typing.field_name(of(1), 0, 0).as_deref(), Some("radius"));
        assert_eq!(typing.field_name(of(3), 0, 7).as_deref(), Some("[7]"));
        assert_eq!(typing.field_name(of(4), 247, 2).as_deref(), Some("cache"));
        assert_eq!(typing.field_name(of(4), 247, 1), None);
        assert_eq!(typing.labels(), vec!["cache", "data", "id", "radius"]);
    });
}

/// Edits only the diff's sections (words of its tries and member counts, as they read once
/// decompressed), and uses the index.
fn mutate_diff_and_use(f: &Fixture, edits: Vec<(usize, u8)>) -> Result<(), IndexError> {
    use heapsnap_index::sections::{DIFF_MEMBERS, DIFF_NODES};
    let snap = Snapshot::from_bytes(f.snap.bytes()).unwrap();
    let b = rewritten(f, |kind, body| {
        for &(at, byte) in &edits {
            let mine = if at % 3 == 0 { DIFF_MEMBERS } else { DIFF_NODES };
            if kind == mine && !body.is_empty() {
                let len = body.len();
                body[at % len] = byte;
            }
        }
    });
    use_index(&snap, &b)
}

/// Edits only the compressed sections as they read once decompressed (the JSON of the meta data,
/// the groupings, the roots' shares, the top labels, the types, the diff's strings, and the
/// diff's tries), and uses the index.
fn mutate_compressed_and_use(f: &Fixture, edits: Vec<(usize, u8)>) -> Result<(), IndexError> {
    use heapsnap_index::file::COMPRESSED;
    let snap = Snapshot::from_bytes(f.snap.bytes()).unwrap();
    let id = SnapshotId::of(&f.snap);
    let file = IndexFile::parse(Bytes::copied(&f.bytes), id).unwrap();
    let compressed: Vec<u32> = file.kinds().filter(|&(_, flags)| flags & COMPRESSED != 0).map(|(kind, _)| kind).collect();
    assert!(compressed.len() >= 5, "the fixture has compressed sections: {compressed:?}");
    let b = rewritten(f, |kind, body| {
        for &(at, byte) in &edits {
            if compressed[at % compressed.len()] == kind && !body.is_empty() {
                let len = body.len();
                body[(at / compressed.len()) % len] = byte;
            }
        }
    });
    use_index(&snap, &b)
}

/// The diff's sections of a hostile index: a node whose label, parent or root is past its
/// list, or a member count of a signature past the path trie, is refused (never indexed
/// past a list, never walked up a cycle).
#[test]
fn hostile_diff_sections_are_refused() {
    use heapsnap_index::sections::{DIFF_MEMBERS, DIFF_NODES};
    DIFF_FIXTURE.with(|f| {
        // Node 2 of the dominator trie (its first step below a root): 5 words a node.
        let node = 2 * 40;
        let label_high = node + 4;
        let parent = node;
        let root = node + 8;
        // Member 0's signature: the high half of its first word.
        let signature = 4;
        for (what, kind, at, value) in [
            ("a label past the shapes", DIFF_NODES, label_high, 0xff),
            ("a parent after the node", DIFF_NODES, parent, 0x7f),
            ("a root past the labels", DIFF_NODES, root + 3, 0x40),
            ("a signature past the path trie", DIFF_MEMBERS, signature + 3, 0x40),
        ] {
            let b = rewritten(f, |k, body| {
                if k == kind {
                    assert!(body.len() >= 128, "the fixture has section {k}");
                    body[at] = value;
                }
            });
            let snap = Snapshot::from_bytes(f.snap.bytes()).unwrap();
            let err = use_index(&snap, &b).expect_err(what);
            assert!(err.to_string().contains("diff sections"), "{what}: {err}");
        }
    });
}

/// A section whose flags this heapsnap does not know (a later version's) is refused, and so is
/// a compressed one whose block does not decompress to the length it claims.
#[test]
fn unknown_flags_and_bad_compressed_sections_are_refused() {
    use heapsnap_index::file::COMPRESSED;
    use heapsnap_index::sections::META;
    let f = fixture(Needs::Meta);
    let id = SnapshotId::of(&f.snap);
    let mut b = f.bytes.clone();
    // The first entry's flags.
    b[52..56].copy_from_slice(&(COMPRESSED | 2).to_le_bytes());
    assert!(matches!(IndexFile::parse(Bytes::copied(&reseal(&b)), id), Err(IndexError::Table(_))));
    // The meta data claiming one byte more than its block holds.
    let b = rewritten_with(&f, |_, _| {}, Vec::new());
    let mut b = b;
    let range = section_range(&b, META);
    let claimed = u64::from_le_bytes(b[range.start..range.start + 8].try_into().unwrap()) + 1;
    b[range.start..range.start + 8].copy_from_slice(&claimed.to_le_bytes());
    let file = IndexFile::parse(Bytes::copied(&reseal(&b)), id).unwrap();
    assert_eq!(file.section(META).err(), Some(IndexError::Section(META)));
    assert!(IndexView::open(&f.snap, &file, Needs::Meta).is_err());
}

/// Recomputes every section checksum and the table checksum (as a hostile writer would).
fn reseal(bytes: &[u8]) -> Vec<u8> {
    use xxhash_rust::xxh3::xxh3_64;
    let mut b = bytes.to_vec();
    let count = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    for i in 0..count {
        let e = 48 + i * 32;
        let off = u64::from_le_bytes(b[e + 8..e + 16].try_into().unwrap()) as usize;
        let len = u64::from_le_bytes(b[e + 16..e + 24].try_into().unwrap()) as usize;
        let sum = xxh3_64(&b[off..off + len]);
        b[e + 24..e + 32].copy_from_slice(&sum.to_le_bytes());
    }
    let table = xxh3_64(&b[48..48 + count * 32]);
    b[32..40].copy_from_slice(&table.to_le_bytes());
    b
}

/// A heap of more kinds than a byte numbers: blocks of 150 sizes and two tags, 300 shapes.
fn write_shapes(dir: &Path) -> PathBuf {
    let mut h = large_heap_shape(20).heap;
    let shapes: Vec<Value> = (1..=150u64)
        .flat_map(|size| [0u8, 1].map(|tag| (size, tag)))
        .map(|(size, tag)| Value::Ptr(h.alloc(Space::Major, tag, &vec![Value::Int(size as i64); size as usize])))
        .collect();
    let all = h.alloc(Space::Major, 0, &shapes);
    h.add_module("Shapes", &[Value::Ptr(all)]);
    let path = dir.join("shapes.heapsnap");
    h.write(&path).unwrap();
    path
}

/// More kinds than a byte numbers: kind ids of two bytes, read back as the analysis names them.
#[test]
fn kind_ids_of_two_bytes_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_shapes(dir.path());
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let ix = open_or_build(&path, &Progress::hidden()).unwrap();
    let view = IndexView::open(&ix.snap, &ix.index, Needs::All).unwrap();
    assert!(view.meta.kinds.len() > 300, "{} kinds", view.meta.kinds.len());
    assert_eq!(view.meta.kind_id_bytes, 2);
    assert_eq!(ix.index.section(heapsnap_index::sections::KIND_IDS).unwrap().len(), 2 * view.block_nodes().len());
    use heapsnap_analyze::{dominator_report, paths, top};
    assert_eq!(json(&top(&a, GroupBy::Kind, 0).unwrap()), json(&top(&view, GroupBy::Kind, 0).unwrap()));
    assert_eq!(json(&dominator_report(&a, 3, 0.0, 400)), json(&dominator_report(&view, 3, 0.0, 400)));
    for q in ["block tag 1 size 149", "block tag 0 size 3", "Hashtbl"] {
        let q = PathQuery::Kind(q.into());
        assert_eq!(json(&paths(&a, &q, 100, 10).unwrap()), json(&paths(&view, &q, 100, 10).unwrap()), "{q:?}");
    }
    for v in view.block_nodes() {
        assert_eq!(view.kind_of_node(v), a.kind_of_node(v), "node {v}");
    }
}

/// Retained sizes that are no `u32` of words (past 32 GiB) are read from their own list.
#[test]
fn large_retained_sizes_are_read_from_their_list() {
    use heapsnap_index::file::IndexBuilder;
    use heapsnap_index::sections::{RETAINED, RETAINED_LARGE};
    let f = fixture(Needs::Tree);
    let file = IndexFile::parse(Bytes::copied(&f.bytes), SnapshotId::of(&f.snap)).unwrap();
    let view = IndexView::open(&f.snap, &file, Needs::Tree).unwrap();
    let (total, top) = (view.retained(0), view.children(0)[0]);
    assert!(total > view.retained(top) && view.retained(top) > 0);
    // The same index, the super-root's size and its largest child's (as more than 32 GiB)
    // moved to the list.
    let preorder = file.u32s(heapsnap_index::sections::PREORDER).unwrap();
    let moved = preorder.iter().position(|&v| v == top).unwrap() as u64;
    let huge = (u32::MAX as u64 + 5) * 8;
    let mut words = file.u32s(RETAINED).unwrap().to_vec();
    words[0] = u32::MAX;
    words[moved as usize] = u32::MAX;
    let mut b = IndexBuilder::default();
    for kind in 1..=34 {
        if kind == RETAINED {
            b.add_u32_vec(RETAINED, words.clone());
        } else if kind == RETAINED_LARGE {
            b.add_u64_vec(RETAINED_LARGE, vec![0, total, moved, huge]);
        } else if file.has(kind) {
            b.add(kind, file.section(kind).unwrap().to_vec());
        }
    }
    let bytes = b.finish(SnapshotId::of(&f.snap));
    let edited = IndexFile::parse(Bytes::copied(&bytes), SnapshotId::of(&f.snap)).unwrap();
    let v2 = IndexView::open(&f.snap, &edited, Needs::Tree).unwrap();
    assert_eq!(v2.retained(0), total);
    assert_eq!(v2.retained(top), huge);
    // Every other size is as it was.
    for v in view.block_nodes().filter(|&v| v != top) {
        assert_eq!(v2.retained(v), view.retained(v), "node {v}");
    }
}

/// A diff's report as JSON without its timings (wall-clock seconds, and which steps ran).
fn diff_json(r: &heapsnap_analyze::diff::DiffReport) -> serde_json::Value {
    let mut v = serde_json::to_value(r).expect("serialises");
    v.as_object_mut().expect("an object").remove("timings");
    v
}

/// A diff of indexed snapshots reads their saved classification instead of analysing them, and
/// reports exactly what the diff that analyses them does: groups, places, suspects with their
/// paths, their counts and example members. A grouping the index does not save analyses.
#[test]
fn a_diff_over_indexes_equals_the_diff_that_analyses() {
    use heapsnap_analyze::diff::{diff, DiffOptions, Input};
    use heapsnap_index::store::load;
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = [200u64, 260, 330]
        .iter()
        .map(|&items| {
            let mut h = large_heap_shape(items).heap;
            // A stack root and a second Hashtbl, so that a suspect has paths from two roots.
            let s = h.alloc_string(Space::Major, format!("grows-{items}").as_bytes());
            h.add_root(RootKind::Stack, Value::Ptr(s), "main", 0);
            let path = dir.path().join(format!("grow-{items}.heapsnap"));
            h.write(&path).unwrap();
            path
        })
        .collect();
    let snaps: Vec<Snapshot> = paths.iter().map(|p| Snapshot::open(p).unwrap()).collect();
    let quiet = Progress::hidden();
    let indexed: Vec<_> = paths.iter().map(|p| load(p, Needs::Diff, &quiet).unwrap()).collect();
    assert!(indexed.iter().all(|ix| ix.index.level() == Some(Needs::Diff)), "a first diff saves the meta data and its own sections");
    let views: Vec<IndexView<'_>> = indexed.iter().map(|ix| ix.view(Needs::Diff).unwrap()).collect();
    for (k, by) in [(3, GroupBy::Kind), (2, GroupBy::Kind), (3, GroupBy::Root), (3, GroupBy::Closure)] {
        let opts = DiffOptions { by, min_growth: 64, max_paths: 20, ..Default::default() };
        let inputs = |saved: bool| -> Vec<Input<'_>> {
            (0..k)
                .map(|i| Input {
                    name: paths[i].display().to_string(),
                    snap: &snaps[i],
                    saved: views[i].diff_profile(heapsnap_analyze::GroupBy::Kind).filter(|_| saved),
                })
                .collect()
        };
        let analysed = diff(&inputs(false), &opts, &quiet).unwrap();
        let compared = diff(&inputs(true), &opts, &quiet).unwrap();
        assert_eq!(diff_json(&analysed), diff_json(&compared), "{k} snapshots by {by:?}");
        let read = compared.timings.iter().filter(|t| t.step.ends_with(": read from the index")).count();
        assert_eq!(read, if by == GroupBy::Kind { k } else { 0 }, "by {by:?}: {:?}", compared.timings);
        // Any grouping's classification, made from an analysis (as the provider makes it when it
        // builds an index for the sites), gives the same report.
        let analyses: Vec<Analysis<'_>> = snaps[..k].iter().map(|s| Analysis::new(s, &quiet).unwrap()).collect();
        let made: Vec<_> = analyses.iter().map(|a| heapsnap_analyze::diff::saved_profile(a, by)).collect();
        let made_inputs: Vec<Input<'_>> =
            (0..k).map(|i| Input { name: paths[i].display().to_string(), snap: &snaps[i], saved: Some(&made[i]) }).collect();
        let from_made = diff(&made_inputs, &opts, &quiet).unwrap();
        assert_eq!(diff_json(&analysed), diff_json(&from_made), "{k} snapshots by {by:?}, classified beforehand");
        assert!(from_made.timings.iter().filter(|t| t.step.ends_with(": read from the index")).count() == k);
        if k == 3 && by == GroupBy::Kind {
            assert!(compared.timings.iter().all(|t| !t.step.ends_with(": analysis")), "{:?}", compared.timings);
            let s = &compared.suspects;
            assert!(s.len() >= 3 && s.iter().all(|s| !s.paths.is_empty()), "{s:#?}");
            assert!(s.iter().flat_map(|s| &s.paths).all(|p| p.new > 0 && p.example.is_some()), "{s:#?}");
            assert!(!compared.growth.is_empty());
        }
    }
}

/// A node with more children than one core counts at once (the index counts them in chunks on
/// every core, while the children are walked): its children by kind, from any first child, and
/// the dominator report that summarises them, as the analysis has them.
#[test]
fn many_children_are_counted_by_kind_as_the_analysis_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = large_heap_shape(10).heap;
    let fields: Vec<Value> = (0..40_000i64)
        .map(|i| match i % 7 {
            0 => Value::Ptr(h.alloc_string(Space::Major, b"s")),
            1 | 2 => Value::Ptr(h.alloc(Space::Major, 0, &[Value::Int(i)])),
            _ => Value::Ptr(h.alloc(Space::Major, 0, &[Value::Int(i), Value::Int(1)])),
        })
        .collect();
    h.add_module("Many", &fields);
    let path = dir.path().join("many.heapsnap");
    h.write(&path).unwrap();
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let ix = open_or_build(&path, &Progress::hidden()).unwrap();
    let view = ix.view(Needs::All).unwrap();
    let (v, count) = (0..a.node_count() as NodeId).map(|v| (v, a.children(v).len())).max_by_key(|&(_, n)| n).unwrap();
    assert!(count >= 40_000, "{count} children");
    for skip in [0, 1, 20, 20_000, 39_999, 50_000] {
        assert_eq!(view.tally_children(v, skip), a.tally_children(v, skip), "from child {skip}");
    }
    assert!(a.tally_children(v, 0).len() >= 3, "the three kinds of the module's fields at least");
    use heapsnap_analyze::dominator_report;
    for (depth, min) in [(4, 1.0), (3, 0.0)] {
        assert_eq!(json(&dominator_report(&a, depth, min, 20)), json(&dominator_report(&view, depth, min, 20)), "depth {depth}");
    }
}

/// A closure is named by the source line the index saved for its code (section 42), not from
/// the line tables (this snapshot has none, so the index saves every closure code without a
/// line); a section that does not parse names them as the line tables would.
#[test]
fn closures_are_named_by_the_source_lines_the_index_saved() {
    use heapsnap_analyze::{GroupKey, SavedNames};
    use heapsnap_index::sections::SOURCE_LINES;
    let f = fixture(Needs::All);
    let id = SnapshotId::of(&f.snap);
    let file = IndexFile::parse(Bytes::copied(&f.bytes), id).unwrap();
    let saved = file.source_lines().expect("the closures' source lines");
    let view = IndexView::open(&f.snap, &file, Needs::All).unwrap();
    let closures: Vec<(NodeId, u64)> = (0..view.node_count() as NodeId)
        .filter_map(|v| match view.kind_of(&view.block(v)?) {
            GroupKey::Closure(code) => Some((v, code)),
            _ => None,
        })
        .collect();
    assert!(!closures.is_empty(), "the fixture has closures");
    let mut codes: Vec<u64> = closures.iter().map(|&(_, code)| code).collect();
    codes.sort_unstable();
    codes.dedup();
    let mut saved_codes: Vec<u64> = saved.keys().copied().collect();
    saved_codes.sort_unstable();
    assert_eq!(saved_codes, codes, "every closure code, once");
    assert!(saved.values().all(Option::is_none), "no line tables, no line");
    let unnamed = view.describe(closures[0].0);
    assert!(!unnamed.contains(".ml:"), "{unnamed}");

    let lines: Vec<(u64, Option<String>)> = codes.iter().map(|&code| (code, Some(format!("saved.ml:{}", code % 97)))).collect();
    let b = rewritten(&f, |kind, body| {
        if kind == SOURCE_LINES {
            *body = serde_json::to_vec(&lines).unwrap();
        }
    });
    let file = IndexFile::parse(Bytes::copied(&b), id).unwrap();
    let view = IndexView::open(&f.snap, &file, Needs::All).unwrap();
    for &(v, code) in &closures {
        let named = view.describe(v);
        assert!(named.ends_with(&format!("(saved.ml:{})", code % 97)), "node {v}: {named}");
    }

    let b = rewritten(&f, |kind, body| {
        if kind == SOURCE_LINES {
            *body = b"[[1, 2, 3]".to_vec();
        }
    });
    let file = IndexFile::parse(Bytes::copied(&b), id).unwrap();
    assert!(file.source_lines().is_none());
    let view = IndexView::open(&f.snap, &file, Needs::All).unwrap();
    assert_eq!(view.describe(closures[0].0), unnamed);
}

/// A completion saves the index in stages: the meta level as soon as its sections are made,
/// then the tree's, then the whole index, each at the index's place by a rename; each stage, as
/// saved, answers as the analysis does.
#[test]
fn a_completion_saves_each_level_before_the_next() {
    use heapsnap_index::store::save_analysed_in_stages;
    let dir = tempfile::tempdir().unwrap();
    let path = write_heap(dir.path());
    let quiet = Progress::hidden();
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &quiet).unwrap();
    let mut stages = Vec::new();
    let saved = save_analysed_in_stages(&path, &snap, &a, Needs::All, &quiet, &mut |level| {
        // The stage as saved: the file at the index's place, read back.
        let bytes = std::fs::read(beside(&path)).expect("a stage saved");
        let index = IndexFile::parse(Bytes::copied(&bytes), SnapshotId::of(&snap)).expect("a stage that parses");
        assert_eq!(index.level(), Some(level), "the {level:?} stage");
        let view = IndexView::open(&snap, &index, level).expect("a stage that opens");
        assert_eq!(json(&heapsnap_analyze::summary(&a, 10)), json(&view.summary(10)));
        assert_eq!(
            json(&heapsnap_analyze::top(&a, GroupBy::Root, 0).unwrap()),
            json(&heapsnap_analyze::top(&view, GroupBy::Root, 0).unwrap())
        );
        if level >= Needs::Tree {
            assert_eq!(
                json(&heapsnap_analyze::dominator_report(&a, 4, 1.0, 20)),
                json(&heapsnap_analyze::dominator_report(&view, 4, 1.0, 20))
            );
        }
        stages.push(level);
    })
    .expect("saved");
    assert_eq!(saved, beside(&path));
    assert_eq!(stages, [Needs::Meta, Needs::Paths], "the levels saved ahead of the whole index");
    let ix = open_or_build_for(&path, Needs::All, &quiet).unwrap();
    assert!(!ix.built && ix.index.level() == Some(Needs::All), "the whole index, saved last");
}
