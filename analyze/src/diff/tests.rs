//! The diff on synthetic OCaml 5.3 heaps (written as real snapshots by `heapsnap_testkit::synth`).

use super::*;
use crate::facts::HeapFacts;
use heapsnap_format::{Metadata, SnapshotWriter, Trigger};
use heapsnap_testkit::synth::{Space, SynthHeap, Value};
use std::path::{Path, PathBuf};

/// Bytes of one cache entry: bucket cell {key; entry; next} 32, key "req-NNNNNN" 24, entry
/// record {id; payload; hits} 32, payload of 100 bytes 112.
const ENTRY_BYTES: u64 = 32 + 24 + 32 + 112;

/// Bucket array length of a stdlib Hashtbl holding `n` entries (created with 16, doubled
/// whenever size > 2 * length).
fn buckets_for(n: u64) -> u64 {
    let mut len = 16;
    while n > 2 * len {
        len *= 2;
    }
    len
}

/// A program whose `Leak` module holds a growing Hashtbl (field 0) and a constant list of 50
/// strings (field 1). `garbage` unswept dead blocks and a free slot every `free_every`
/// allocations move every live block to another address.
fn cache_heap(entries: u64, garbage: u64, free_every: u32) -> SynthHeap {
    let mut h = SynthHeap::new();
    h.free_every = free_every;
    for i in 0..garbage {
        let g = h.alloc(Space::Major, 0, &[Value::Int(i as i64), Value::Int(0), Value::Int(0)]);
        h.make_garbage(g);
    }
    let buckets = buckets_for(entries);
    let data = h.alloc(Space::Major, 0, &vec![Value::Int(0); buckets as usize]);
    let mut chains = vec![Value::Int(0); buckets as usize];
    for i in 0..entries {
        let key = h.alloc_string(Space::Major, format!("req-{i:06}").as_bytes());
        let payload = h.alloc_string(Space::Major, &[b'x'; 100]);
        let entry = h.alloc(Space::Major, 0, &[Value::Int(i as i64), Value::Ptr(payload), Value::Int(0)]);
        let b = (i.wrapping_mul(2654435761) % buckets) as usize;
        let cell = h.alloc(Space::Major, 0, &[Value::Ptr(key), Value::Ptr(entry), chains[b]]);
        chains[b] = Value::Ptr(cell);
    }
    for (b, v) in chains.into_iter().enumerate() {
        h.set_field(data, b, v);
    }
    let table = h.alloc(Space::Major, 0, &[Value::Int(entries as i64), Value::Ptr(data), Value::Int(12345), Value::Int(16)]);
    let mut list = Value::Int(0);
    for i in 0..50 {
        let s = h.alloc_string(Space::Major, format!("steady-{i}").as_bytes());
        list = Value::Ptr(h.alloc(Space::Major, 0, &[Value::Ptr(s), list]));
    }
    h.add_module("Leak", &[Value::Ptr(table), list]);
    h
}

fn write(dir: &Path, name: &str, h: &SynthHeap) -> PathBuf {
    let path = dir.join(name);
    h.write(&path).expect("write the synthetic snapshot");
    path
}

fn run(paths: &[PathBuf], opts: &DiffOptions) -> Result<DiffReport, DiffError> {
    let snaps: Vec<Snapshot> = paths.iter().map(|p| Snapshot::open(p).expect("open")).collect();
    let inputs: Vec<Input<'_>> =
        paths.iter().zip(&snaps).map(|(p, s)| Input { name: p.display().to_string(), snap: s, saved: None }).collect();
    diff(&inputs, opts, &Progress::hidden())
}

fn leak_series(dir: &Path) -> Vec<PathBuf> {
    [1000u64, 2000, 3000]
        .iter()
        .enumerate()
        .map(|(i, &n)| write(dir, &format!("leak{i}.heapsnap"), &cache_heap(n, 37 * i as u64, 0)))
        .collect()
}

const CHAINS: &str = "Leak.0 -> Hashtbl -> .1 block tag 0 size >16 -> [*] block tag 0 size 3+";

#[test]
fn a_growing_hashtbl_is_the_top_suspect_with_its_path_and_exact_growth() {
    let dir = tempfile::tempdir().unwrap();
    let paths = leak_series(dir.path());
    let r = run(&paths, &DiffOptions { by: GroupBy::Root, ..Default::default() }).unwrap();
    let top = &r.suspects[0];
    assert_eq!(top.group.name, "Leak.0");
    let retained = |n: u64| 40 + (buckets_for(n) + 1) * 8 + n * ENTRY_BYTES;
    assert_eq!(top.group.retained, vec![retained(1000), retained(2000), retained(3000)]);
    assert_eq!(top.group.delta_retained as u64, retained(3000) - retained(1000));
    assert_eq!(r.suspects.len(), 1, "{:?}", r.suspects.iter().map(|s| &s.group.name).collect::<Vec<_>>());
    // The members gained: 2 blocks per entry in the chains, 2 strings below them.
    let paths: Vec<(&str, i64)> = top.paths.iter().map(|p| (p.signature.as_str(), p.new)).collect();
    assert_eq!(paths[0], (CHAINS, 4000));
    assert!(paths.contains(&(&format!("{CHAINS} -> .0 string")[..], 2000)), "{paths:?}");
    assert!(paths.contains(&(&format!("{CHAINS} -> .1 string")[..], 2000)), "{paths:?}");

    // By kind: the chains' blocks first, then the strings, with the same paths.
    let r = run(&paths_of(dir.path()), &DiffOptions::default()).unwrap();
    let names: Vec<&str> = r.suspects.iter().map(|s| s.group.name.as_str()).collect();
    assert_eq!(names, ["block tag 0 size 3", "string"]);
    assert_eq!(r.suspects[0].group.count, vec![2000, 4000, 6000]);
    assert_eq!(r.suspects[0].paths[0].signature, CHAINS);
    assert_eq!(r.suspects[0].paths[0].count, [2000, 6000]);
    assert!(r.suspects[0].paths[0].description.contains("Hashtbl bucket chains"));

    // The dominator tree: the bucket chains gained 2000 entries' bytes; the bucket array grew.
    let top = &r.growth[0];
    assert_eq!((top.signature.as_str(), top.reason), (CHAINS, "members"));
    assert_eq!(top.delta_retained as u64, 2000 * ENTRY_BYTES);
    assert_eq!(top.delta_count, 4000);
    assert!(top.grew_every_step);
    let own = &r.growth[1];
    assert_eq!((own.signature.as_str(), own.reason), ("Leak.0 -> Hashtbl -> .1 block tag 0 size >16", "own"));
    assert_eq!(own.growth as u64, (buckets_for(3000) - buckets_for(1000)) * 8);
    assert_eq!(r.growth.len(), 2, "{:?}", r.growth.iter().map(|p| &p.signature).collect::<Vec<_>>());
}

fn paths_of(dir: &Path) -> Vec<PathBuf> {
    (0..3).map(|i| dir.join(format!("leak{i}.heapsnap"))).collect()
}

#[test]
fn the_same_heap_at_other_addresses_shows_no_change() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = [(0, 0), (500, 7), (123, 3)]
        .iter()
        .enumerate()
        .map(|(i, &(g, f))| write(dir.path(), &format!("s{i}.heapsnap"), &cache_heap(800, g, f)))
        .collect();
    // (`--by reserved` needs reserved header bits: refused here.)
    assert!(run(&paths, &DiffOptions { by: GroupBy::Reserved, ..Default::default() }).is_err());
    for by in [GroupBy::Kind, GroupBy::Root, GroupBy::Closure] {
        let r = run(&paths, &DiffOptions { by, min_growth: 1, limit: 0, ..Default::default() }).unwrap();
        assert!(r.suspects.is_empty(), "{by:?}");
        assert!(r.growth.is_empty(), "{by:?}: {:?}", r.growth.iter().map(|p| &p.signature).collect::<Vec<_>>());
        assert!(r.groups.iter().all(|g| g.delta_count == 0 && g.delta_retained == 0 && g.delta_shallow == 0), "{by:?}");
        assert!(r.snapshots.windows(2).all(|w| w[0].reachable_bytes == w[1].reachable_bytes));
    }
}

#[test]
fn two_snapshots_give_groups_and_places_but_no_suspects() {
    let dir = tempfile::tempdir().unwrap();
    let paths = leak_series(dir.path());
    let r = run(&[paths[0].clone(), paths[2].clone()], &DiffOptions::default()).unwrap();
    assert!(r.suspects.is_empty());
    assert_eq!(r.growth[0].signature, CHAINS);
    let g = r.groups.iter().find(|g| g.name == "block tag 0 size 3").unwrap();
    assert_eq!((g.count.clone(), g.delta_count), (vec![2000, 6000], 4000));
    assert!(g.grew_every_step);
    // Sorted by growth of retained bytes.
    assert!(r.groups.windows(2).all(|w| w[0].delta_retained >= w[1].delta_retained));
}

#[test]
fn a_group_that_dips_is_no_suspect_and_min_growth_filters() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> =
        [1000u64, 900, 3000].iter().enumerate().map(|(i, &n)| write(dir.path(), &format!("d{i}.heapsnap"), &cache_heap(n, 0, 0))).collect();
    let r = run(&paths, &DiffOptions::default()).unwrap();
    assert!(r.suspects.is_empty());
    assert!(!r.growth[0].grew_every_step);
    let r = run(&leak_series(dir.path()), &DiffOptions { min_growth: 1 << 30, ..Default::default() }).unwrap();
    assert!(r.suspects.is_empty() && r.growth.is_empty());
}

#[test]
fn objects_dominated_without_a_direct_pointer_get_a_tilde_edge() {
    // Holder {a; b} -> A, B -> X: X is dominated by the holder, which does not point at it.
    let dir = tempfile::tempdir().unwrap();
    let heap = |xs: u64| {
        let mut h = SynthHeap::new();
        let mut list = Value::Int(0);
        for _ in 0..xs {
            let x = h.alloc_float(Space::Major, 1.5);
            let a = h.alloc(Space::Major, 0, &[Value::Ptr(x)]);
            let b = h.alloc(Space::Major, 0, &[Value::Ptr(x), Value::Int(0)]);
            list = Value::Ptr(h.alloc(Space::Major, 0, &[Value::Ptr(a), Value::Ptr(b), list]));
        }
        h.add_module("M", &[list]);
        h
    };
    let paths: Vec<PathBuf> = (1..4).map(|i| write(dir.path(), &format!("t{i}.heapsnap"), &heap(i * 100))).collect();
    let r = run(&paths, &DiffOptions { min_growth: 1, ..Default::default() }).unwrap();
    let top = &r.growth[0];
    assert_eq!(top.signature, "M.0 -> block tag 0 size 3+");
    let kids: Vec<String> = top.children.iter().map(|c| format!("{} {}", c.step.edge, c.step.shape)).collect();
    assert!(kids.contains(&"~ float".to_string()), "{kids:?}");
    assert!(kids.contains(&".0 ref or Some".to_string()), "{kids:?}");
    // Retainer paths follow references: the floats are reached through A's field 0.
    let floats = r.suspects.iter().find(|s| s.group.name == "float").expect("floats are suspects");
    assert_eq!(floats.paths[0].signature, "M.0 -> block tag 0 size 3+ -> .0 ref or Some -> .0 float");
    assert_eq!(floats.paths[0].new, 200);
}

fn minimal_snapshot(path: &Path, ocaml: &str, executable: Option<&str>, build_id: Option<&str>) {
    minimal_snapshot_of(path, ocaml, executable, build_id, 1, 1);
}

fn minimal_snapshot_of(path: &Path, ocaml: &str, executable: Option<&str>, build_id: Option<&str>, pid: u32, time: u64) {
    let mut w = SnapshotWriter::create(path).unwrap();
    w.write_metadata(&Metadata {
        ocaml_version: ocaml.into(),
        word_size: 8,
        reserved_header_bits: 0,
        colours: heapsnap_format::ColourEncoding::OCAML5_INITIAL,
        pid: Some(pid),
        executable: executable.map(String::from),
        build_id: build_id.map(String::from),
        time_unix_ns: time,
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
        ocaml4_gc: None,
        capture: None,
        probed: None,
        namespaces: None,
        host: None,
    })
    .unwrap();
    w.write_roots(&[]).unwrap();
    w.finish().unwrap();
}

#[test]
fn incompatible_snapshots_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plain = write(d, "plain.heapsnap", &cache_heap(10, 0, 0));
    let mut rhb = cache_heap(10, 0, 0);
    rhb.reserved_header_bits = 16;
    let rhb = write(d, "rhb.heapsnap", &rhb);
    let reason = |paths: &[PathBuf], opts: &DiffOptions| match run(paths, opts) {
        Err(DiffError::Incompatible { reason, .. }) => reason,
        other => panic!("expected a refusal, got {:?}", other.map(|r| r.groups.len())),
    };
    let opts = DiffOptions::default();
    assert_eq!(reason(&[plain.clone(), rhb], &opts), Incompatibility::DifferentReservedBits { first: 0, other: 16 });

    let old = d.join("old.heapsnap");
    minimal_snapshot(&old, "5.2.0", None, None);
    assert!(matches!(reason(&[plain.clone(), old], &opts), Incompatibility::DifferentOcaml { .. }));

    let (a, b, c, e) = (d.join("a.heapsnap"), d.join("b.heapsnap"), d.join("c.heapsnap"), d.join("e.heapsnap"));
    minimal_snapshot(&a, "5.3.0", Some("/bin/app"), Some("aaaa"));
    minimal_snapshot(&b, "5.3.0", Some("/bin/other"), Some("bbbb"));
    minimal_snapshot(&c, "5.3.0", Some("/bin/app"), Some("cccc"));
    minimal_snapshot(&e, "5.3.0", Some("/bin/app"), Some("aaaa"));
    let copy = d.join("copy.heapsnap");
    minimal_snapshot(&copy, "5.3.0", Some("/opt/copy-of-app"), Some("aaaa"));
    assert!(matches!(reason(&[a.clone(), b.clone()], &opts), Incompatibility::DifferentProgram { .. }));
    // The build id identifies the executable: the same build copied elsewhere is the same program.
    assert!(compat::check_pair(&Snapshot::open(&a).unwrap(), &Snapshot::open(&copy).unwrap(), false).is_ok());
    assert!(matches!(reason(&[a.clone(), e.clone(), c.clone()], &opts), Incompatibility::DifferentBuild { .. }));
    assert!(matches!(reason(&[plain.clone(), a.clone()], &opts), Incompatibility::UnknownProgram(_)));
    // The override accepts a rebuild of the same executable, never another program.
    let allow = DiffOptions { allow_rebuilt: true, ..Default::default() };
    assert!(compat::check_pair(&Snapshot::open(&a).unwrap(), &Snapshot::open(&c).unwrap(), true).is_ok());
    assert!(matches!(reason(&[a.clone(), b], &allow), Incompatibility::DifferentProgram { .. }));

    assert!(matches!(run(&[plain], &opts), Err(DiffError::TooFewSnapshots(1))));
}

#[test]
fn groups_agree_with_the_analysers_groups() {
    use heapsnap_testkit::synth::addresses::CODE_BASE;
    let dir = tempfile::tempdir().unwrap();
    for reserved in [0u8, 8] {
        let mut h = cache_heap(300, 10, 5);
        h.reserved_header_bits = reserved;
        let code = CODE_BASE + 0x2000;
        h.add_symbol("camlApp.handler_12", code, code + 0x40, heapsnap_format::SymbolKind::Function);
        let mut list = Value::Int(0);
        for i in 0..40 {
            let env = h.alloc_string(Space::Major, b"env");
            let f = h.alloc_closure(Space::Major, code, 1, &[Value::Int(i), Value::Ptr(env)]);
            let c = h.alloc_custom(Space::Major, CODE_BASE + 0x9000, "_bigarr02", &[i as u64 * 8]);
            list = Value::Ptr(h.alloc(Space::Major, 0, &[Value::Ptr(f), Value::Ptr(c), list]));
            if reserved > 0 {
                h.set_reserved(f, (i % 3) as u32);
            }
        }
        // A dominator subtree that is not contiguous in the graph's depth-first order: the
        // search meets Z (dominated by T, shared with B) between A and W, which A dominates.
        let z = h.alloc(Space::Major, 0, &[Value::Int(0)]);
        let w = h.alloc(Space::Major, 0, &[Value::Int(1), Value::Int(2), Value::Int(3)]);
        let a3 = h.alloc(Space::Major, 0, &[Value::Ptr(z), Value::Ptr(w), Value::Int(4)]);
        let b1 = h.alloc(Space::Major, 0, &[Value::Ptr(z)]);
        let t = h.alloc(Space::Major, 0, &[Value::Ptr(a3), Value::Ptr(b1)]);
        let young = h.alloc(Space::Minor, 0, &[list, Value::Ptr(t)]);
        // Unreachable: counted in no group.
        let lost = h.alloc(Space::Major, 0, &[Value::Int(1), Value::Int(2)]);
        let _ = h.alloc(Space::Major, 0, &[Value::Ptr(lost)]);
        h.add_root(heapsnap_format::RootKind::LocalRoot, Value::Ptr(young), "", 0);
        let path = write(dir.path(), &format!("g{reserved}.heapsnap"), &h);
        let snap = Snapshot::open(&path).unwrap();
        let a = crate::full_analysis::Analysis::new(&snap, &Progress::hidden()).unwrap();
        for by in [GroupBy::Kind, GroupBy::Closure, GroupBy::Reserved, GroupBy::Root] {
            let Ok(expected) = a.group_by(by) else {
                assert!(by == GroupBy::Reserved && reserved == 0, "{by:?} refused with {reserved} reserved bits");
                continue;
            };
            let c = crate::signatures::classify::classify(&a, by);
            let dom = crate::signatures::domtrie::dominator_trie(&a, &c);
            let ours = if by == GroupBy::Root { profile::root_group_list(&dom) } else { profile::group_list(&c, &dom.group_retained) };
            assert_eq!(ours, expected, "{by:?} with {reserved} reserved bits");
        }
    }
}

#[test]
fn other_processes_and_reversed_order_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str, pid: u32, time: u64| {
        let path = dir.path().join(name);
        minimal_snapshot_of(&path, "5.3.0", Some("/bin/app"), Some("aa"), pid, time);
        Snapshot::open(&path).unwrap()
    };
    let (a, b, c) = (p("a", 7, 100), p("b", 7, 200), p("c", 8, 300));
    assert!(compat::warnings(&[&a, &b]).is_empty());
    let w = compat::warnings(&[&b, &a]);
    assert!(w.len() == 1 && w[0].contains("snapshot 2 was taken before snapshot 1"), "{w:?}");
    let w = compat::warnings(&[&a, &c]);
    assert!(w.len() == 1 && w[0].contains("different processes"), "{w:?}");
}

#[test]
fn longer_series_need_growth_at_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let series = |name: &str, sizes: &[u64]| -> Vec<PathBuf> {
        sizes.iter().enumerate().map(|(i, &n)| write(dir.path(), &format!("{name}{i}.heapsnap"), &cache_heap(n, 0, 0))).collect()
    };
    // Four and five snapshots: the middle ones are analysed two at a time, or one alone.
    for sizes in [&[100u64, 200, 300, 400][..], &[100, 200, 300, 400, 500]] {
        let r = run(&series("up", sizes), &DiffOptions { by: GroupBy::Root, ..Default::default() }).unwrap();
        assert_eq!(r.snapshots.len(), sizes.len());
        assert_eq!(r.suspects[0].group.name, "Leak.0");
        let counts: Vec<u64> = r.suspects[0].group.count.clone();
        assert!(counts.windows(2).all(|w| w[1] > w[0]), "{counts:?}");
        assert_eq!(r.suspects[0].paths[0].new as u64, 2 * (sizes[sizes.len() - 1] - sizes[0]));
    }
    // A dip in the middle: not a suspect, though the last snapshot is the largest.
    let r = run(&series("dip", &[100, 200, 150, 400]), &DiffOptions::default()).unwrap();
    assert!(r.suspects.is_empty());
    assert!(r.growth.iter().all(|p| !p.grew_every_step));
}

/// The saved profile's bytes by dominator signature, swept block by block, are each reachable
/// block's freeable bytes summed by its signature (static data 0), as a walk of the preorder
/// counts them: on a heap of major, minor, static and unreachable blocks.
#[test]
fn own_bytes_by_dominator_signature_are_the_blocks_freeable_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = cache_heap(200, 10, 7);
    let young = h.alloc(Space::Minor, 0, &[Value::Int(1), Value::Int(2)]);
    let constant = h.alloc(Space::Static, 0, &[Value::Ptr(young)]);
    h.add_module("Young", &[Value::Ptr(constant)]);
    let path = write(dir.path(), "own.heapsnap", &h);
    let snap = Snapshot::open(&path).unwrap();
    let a = crate::full_analysis::Analysis::new(&snap, &Progress::hidden()).unwrap();
    for by in [GroupBy::Kind, GroupBy::Root] {
        let saved = saved::saved_profile(&a, by);
        let c = crate::signatures::classify::classify_with_types(&a, by, crate::analysed_heap::AnalysedHeap::typing(&a));
        let dom = crate::signatures::domtrie::dominator_trie(&a, &c);
        let mut expected = vec![0u64; dom.trie.len()];
        for (p, &sig) in dom.sig_pre.iter().enumerate() {
            if sig != crate::signatures::domtrie::NOT_A_BLOCK {
                expected[sig as usize] += a.freeable(a.preorder()[p]);
            }
        }
        assert!(expected.iter().sum::<u64>() > 200 * ENTRY_BYTES, "{by:?}: the entries' bytes are counted");
        assert_eq!(saved.dom_own_bytes, expected, "{by:?}");
    }
}

/// The classes of the diff's classification are numbered by the lowest node of each, whichever
/// thread met them first, so that the shapes and signatures numbered from them (which an
/// index saves) are the same every time: on a heap of many regions, every block reachable.
#[test]
fn classes_are_numbered_by_their_lowest_node() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "classes.heapsnap", &heapsnap_testkit::synth::large_heap_shape(60_000).heap);
    let snap = Snapshot::open(&path).unwrap();
    let a = crate::full_analysis::Analysis::new(&snap, &Progress::hidden()).unwrap();
    assert!(a.graph.blocks.regions.len() > 8, "several regions to classify on every core");
    for by in [GroupBy::Kind, GroupBy::Closure, GroupBy::Root] {
        for _ in 0..5 {
            let c = crate::signatures::classify::classify(&a, by);
            let mut lowest = vec![u32::MAX; c.class_shape.len()];
            for (p, &k) in c.class_pre.iter().enumerate() {
                if k != crate::signatures::classify::NO_CLASS {
                    lowest[k as usize] = lowest[k as usize].min(a.preorder()[p]);
                }
            }
            assert!(lowest.len() > 3 && lowest.iter().all(|&n| n != u32::MAX), "{by:?}: every class has reachable blocks: {lowest:?}");
            assert!(lowest.windows(2).all(|w| w[0] < w[1]), "{by:?}: classes out of node order: {lowest:?}");
        }
    }
}
