//! The leak suspects of one snapshot, what only stack frames hold, and the names of shared
//! memory, on synthetic heaps whose answers are known.

use heapsnap_analyze::{suspects, Analysis, GroupBy, Progress};
use heapsnap_format::RootKind;
use heapsnap_testkit::synth::{ObjId, Space, SynthHeap, Value};

use crate::written::write;

/// A `Hashtbl.t` of `n` entries over 16 buckets, each entry a 200-byte string.
fn hashtbl(h: &mut SynthHeap, n: i64) -> ObjId {
    let mut buckets = vec![Value::Int(0); 16];
    for i in 0..n {
        let key = h.alloc_string(Space::Major, format!("key-{i}").as_bytes());
        let data = h.alloc_string(Space::Major, &[b'x'; 200]);
        let b = (i % 16) as usize;
        buckets[b] = Value::Ptr(h.alloc(Space::Major, 0, &[Value::Ptr(key), Value::Ptr(data), buckets[b]]));
    }
    let data = h.alloc(Space::Major, 0, &buckets);
    h.alloc(Space::Major, 0, &[Value::Int(n), Value::Ptr(data), Value::Int(0), Value::Int(16)])
}

/// A list of `n` cells, each holding a string of `bytes` bytes.
fn list(h: &mut SynthHeap, n: usize, bytes: usize) -> Value {
    let mut l = Value::Int(0);
    for _ in 0..n {
        let s = h.alloc_string(Space::Major, &vec![b'l'; bytes]);
        l = Value::Ptr(h.alloc(Space::Major, 0, &[Value::Ptr(s), l]));
    }
    l
}

/// A balanced `Map` of `2^depth - 1` bindings (5-field nodes `{l; v; d; r; h}`).
fn map(h: &mut SynthHeap, depth: i64) -> Value {
    if depth == 0 {
        return Value::Int(0);
    }
    let (l, r) = (map(h, depth - 1), map(h, depth - 1));
    let d = h.alloc_string(Space::Major, &[b'm'; 100]);
    Value::Ptr(h.alloc(Space::Major, 0, &[l, Value::Int(depth), Value::Ptr(d), r, Value::Int(depth)]))
}

#[test]
fn the_suspect_is_the_table_not_its_holder_nor_its_bucket_array() {
    let mut h = SynthHeap::new();
    let table = hashtbl(&mut h, 400);
    // A record holding the table: the walk goes down through it (it retains ~all of it).
    let holder = h.alloc(Space::Major, 0, &[Value::Ptr(table), Value::Int(3)]);
    let small = h.alloc_string(Space::Major, &[b's'; 64]);
    h.add_module("Cache", &[Value::Ptr(holder), Value::Ptr(small)]);
    let w = write(&h);
    let a = Analysis::new(&w.snap, &Progress::hidden()).unwrap();
    let r = suspects(&a, 10.0, 0);
    assert_eq!(r.suspects.len(), 1, "{r:#?}");
    let s = &r.suspects[0];
    assert_eq!(s.address, format!("{:#x}", h.address_of(table)));
    assert_eq!(s.description, "Hashtbl (400 entries)");
    let e = s.elements.as_ref().unwrap();
    assert_eq!((e.count, e.of.as_str(), e.exact), (400, "Hashtbl entries", true));
    // Where the walk started, and who holds it.
    assert_eq!(s.top_address, format!("{:#x}", h.address_of(holder)));
    assert_eq!(s.held_by, "Cache.0");
    let path = s.path.as_ref().unwrap();
    assert_eq!(path.root, "Cache.0");
    assert_eq!(path.steps.last().unwrap().example, s.address);
    assert_eq!(s.retained, a.retained(a.node_at(h.address_of(table)).unwrap()));
    // A higher threshold than the table's share finds nothing.
    assert!(suspects(&a, 100.0, 0).suspects.len() <= 1);
}

#[test]
fn memory_that_fans_out_and_lists_and_maps_are_counted() {
    let mut h = SynthHeap::new();
    // Two lists of 300 and 200 cells under one record: the record is where they fan out.
    let (a_list, b_list) = (list(&mut h, 300, 100), list(&mut h, 200, 100));
    let pair = h.alloc(Space::Major, 0, &[a_list, b_list, Value::Int(0)]);
    // A map of 127 bindings, alone under its global.
    let m = map(&mut h, 7);
    // A list of 400 cells right under a global.
    let l = list(&mut h, 400, 100);
    h.add_module("M", &[Value::Ptr(pair), m, l]);
    let w = write(&h);
    let a = Analysis::new(&w.snap, &Progress::hidden()).unwrap();
    let r = suspects(&a, 10.0, 0);
    let by_root = |root: &str| r.suspects.iter().find(|s| s.held_by == root).unwrap_or_else(|| panic!("{root}: {r:#?}"));
    let fan = by_root("M.0");
    assert_eq!(fan.address, format!("{:#x}", h.address_of(pair)), "the record where the two lists part");
    let e = fan.elements.as_ref().unwrap();
    assert_eq!((e.count, e.of.as_str()), (3, "fields (an untyped block: an array or a record)"));
    let e = by_root("M.1").elements.as_ref().unwrap();
    assert_eq!((e.count, e.of.as_str(), e.exact), (127, "Map bindings", true));
    let e = by_root("M.2").elements.as_ref().unwrap();
    assert_eq!((e.count, e.of.as_str(), e.exact), (400, "list cells", true));
    // Largest first, each at least 10% of the heap.
    assert!(r.suspects.windows(2).all(|w| w[0].retained >= w[1].retained));
    assert!(r.suspects.iter().all(|s| s.percent >= 10.0));
    assert_eq!(suspects(&a, 10.0, 1).suspects.len(), 1, "--limit 1");
}

#[test]
fn bytes_only_stack_frames_hold_are_counted_by_frame() {
    let mut h = SynthHeap::new();
    // Held by one frame only: 100 strings of 1000 bytes in an array.
    let strings: Vec<Value> = (0..100).map(|_| Value::Ptr(h.alloc_string(Space::Major, &[b'f'; 1000]))).collect();
    let table = h.alloc(Space::Major, 0, &strings);
    h.add_root(RootKind::Stack, Value::Ptr(table), "camlMain.loop_12", 0);
    // Held by another frame only.
    let other = h.alloc_string(Space::Major, &[b'o'; 5000]);
    h.add_root(RootKind::Stack, Value::Ptr(other), "camlMain.other_3", 0);
    // Held by a frame and a global: not stack-only.
    let both = h.alloc_string(Space::Major, &[b'b'; 20_000]);
    h.add_root(RootKind::Stack, Value::Ptr(both), "camlMain.loop_12", 0);
    // Held by a frame and a C local root: not stack-only either.
    let local = h.alloc_string(Space::Major, &[b'c'; 7000]);
    h.add_root(RootKind::Stack, Value::Ptr(local), "camlMain.loop_12", 0);
    h.add_root(RootKind::LocalRoot, Value::Ptr(local), "", 0);
    h.add_module("G", &[Value::Ptr(both)]);
    let w = write(&h);
    let a = Analysis::new(&w.snap, &Progress::hidden()).unwrap();
    let node = |id: ObjId| a.node_at(h.address_of(id)).unwrap();
    let r = suspects(&a, 10.0, 0);
    let stack = r.stack_only.expect("stack roots");
    let table_bytes = a.retained(node(table));
    let other_bytes = a.retained(node(other));
    assert_eq!(stack.bytes, table_bytes + other_bytes);
    assert_eq!(stack.not_attributed, 0);
    let frames: Vec<(&str, u64, u64)> = stack.frames.iter().map(|f| (f.function.as_str(), f.bytes, f.objects)).collect();
    assert_eq!(frames, [("Main.loop", table_bytes, 1), ("Main.other", other_bytes, 1)]);
    let reachable = a.reachable_bytes() as f64;
    assert!((stack.percent - (table_bytes + other_bytes) as f64 * 100.0 / reachable).abs() < 1e-9);
    // The frame's table is a suspect, held by its frame, its fields counted.
    let s = r.suspects.iter().find(|s| s.address == format!("{:#x}", h.address_of(table))).expect("the table");
    assert_eq!(s.elements.as_ref().map(|e| e.count), Some(100));
}

#[test]
fn a_heap_without_stack_roots_says_so() {
    let mut h = SynthHeap::new();
    let s = h.alloc_string(Space::Major, &[b'x'; 100]);
    h.add_module("A", &[Value::Ptr(s)]);
    let w = write(&h);
    let a = Analysis::new(&w.snap, &Progress::hidden()).unwrap();
    assert!(suspects(&a, 10.0, 0).stack_only.is_none());
}

/// `count` globals `M.0`, ... of module `module`, each a ref cell to `target`.
fn refs_to(h: &mut SynthHeap, module: &str, count: usize, target: Value) {
    let cells: Vec<Value> = (0..count).map(|_| Value::Ptr(h.alloc(Space::Major, 0, &[target]))).collect();
    h.add_module(module, &cells);
}

#[test]
fn shared_memory_is_named_by_what_it_is_and_who_shares_it() {
    let mut h = SynthHeap::new();
    // Shared by 5 globals of one module.
    let memo = hashtbl(&mut h, 20);
    refs_to(&mut h, "Build", 5, Value::Ptr(memo));
    // Shared by 9 globals of two modules: more than the 6 names the reach keeps per object.
    let cell = list(&mut h, 1, 3000);
    refs_to(&mut h, "Alpha", 5, cell);
    refs_to(&mut h, "Beta", 4, cell);
    // Two other strings, each shared by 4 globals of one module: named alike but for their
    // roots, which each name then lists.
    let x = h.alloc_string(Space::Major, &[b'x'; 500]);
    let y = h.alloc_string(Space::Major, &[b'y'; 600]);
    let cells: Vec<Value> = (0..8).map(|i| Value::Ptr(h.alloc(Space::Major, 0, &[Value::Ptr(if i < 4 { x } else { y })]))).collect();
    h.add_module("Twice", &cells);
    let w = write(&h);
    let a = Analysis::new(&w.snap, &Progress::hidden()).unwrap();
    let groups = a.group_by(GroupBy::Root).unwrap();
    let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "one group per name: {names:?}");
    let find = |name: &str| groups.iter().find(|g| g.name == name).unwrap_or_else(|| panic!("{name}: {groups:#?}"));
    let memo_group = find("Hashtbl shared by 5 globals of Build");
    assert_eq!(memo_group.roots, ["Build.0", "Build.1", "Build.2", "Build.3", "Build.4"]);
    assert!(!memo_group.roots_incomplete);
    let list_group = find("list cell shared by 9 globals: Alpha (5), Beta (4)");
    assert_eq!(list_group.roots.len(), 9, "every root, past the 6 the reach keeps: {:?}", list_group.roots);
    assert!(list_group.roots.contains(&"Beta.3".to_string()), "{:?}", list_group.roots);
    assert!(!list_group.roots_incomplete);
    let x_group = find("string shared by 4 globals of Twice [Twice.0, Twice.1, Twice.2, Twice.3]");
    assert_eq!(x_group.retained, a.retained(a.node_at(h.address_of(x)).unwrap()));
    let y_group = find("string shared by 4 globals of Twice [Twice.4, Twice.5, Twice.6, Twice.7]");
    assert_eq!(y_group.roots, ["Twice.4", "Twice.5", "Twice.6", "Twice.7"]);
    // The dominator tree names them alike (where a top object's root is shown).
    assert_eq!(a.top_label(a.node_at(h.address_of(memo)).unwrap()), "Hashtbl shared by 5 globals of Build");
}

/// Roots are listed in the order of their names' text, not the order the snapshot lists them
/// in: `Wide.10` before `Wide.2`.
#[test]
fn shared_memory_lists_its_roots_in_text_order() {
    let mut h = SynthHeap::new();
    let z = h.alloc_string(Space::Major, &[b'z'; 300]);
    let u = h.alloc_string(Space::Major, &[b'u'; 400]);
    let v = h.alloc_string(Space::Major, &[b'v'; 500]);
    let mut fields = vec![Value::Int(0); 24];
    for (target, at) in [(z, &[2, 10, 11][..]), (u, &[3, 4, 12, 20]), (v, &[5, 6, 13, 21])] {
        for &i in at {
            fields[i] = Value::Ptr(target);
        }
    }
    h.add_module("Wide", &fields);
    let w = write(&h);
    let a = Analysis::new(&w.snap, &Progress::hidden()).unwrap();
    let groups = a.group_by(GroupBy::Root).unwrap();
    let find = |name: &str| groups.iter().find(|g| g.name == name).unwrap_or_else(|| panic!("{name}: {groups:#?}"));
    assert_eq!(find("string shared by Wide.10, Wide.11, Wide.2").roots, ["Wide.10", "Wide.11", "Wide.2"]);
    // Two sets of four, named alike but for their roots.
    assert_eq!(
        find("string shared by 4 globals of Wide [Wide.12, Wide.20, Wide.3, Wide.4]").roots,
        ["Wide.12", "Wide.20", "Wide.3", "Wide.4"]
    );
    assert_eq!(
        find("string shared by 4 globals of Wide [Wide.13, Wide.21, Wide.5, Wide.6]").roots,
        ["Wide.13", "Wide.21", "Wide.5", "Wide.6"]
    );
}

#[test]
fn a_chain_of_blocks_of_one_kind_is_a_suspect_at_its_head() {
    let mut h = SynthHeap::new();
    // 2000 links of a constructor of tag 15 (a compiler's sequence), each holding 100 bytes:
    // every link retains nearly all of the next, so only the head stands for the chain.
    let mut chain = Value::Int(0);
    let mut links = Vec::new();
    for _ in 0..2000 {
        let s = h.alloc_string(Space::Major, &[b'c'; 100]);
        let link = h.alloc(Space::Major, 15, &[Value::Ptr(s), chain]);
        links.push(link);
        chain = Value::Ptr(link);
    }
    let holder = h.alloc(Space::Major, 0, &[chain, Value::Int(1), Value::Int(2)]);
    h.add_module("Seq", &[Value::Ptr(holder)]);
    let w = write(&h);
    let a = Analysis::new(&w.snap, &Progress::hidden()).unwrap();
    let r = suspects(&a, 10.0, 0);
    assert_eq!(r.suspects.len(), 1, "{r:#?}");
    let s = &r.suspects[0];
    assert_eq!(s.address, format!("{:#x}", h.address_of(*links.last().unwrap())), "the chain's head");
    let e = s.elements.as_ref().unwrap();
    assert_eq!((e.count, e.of.as_str(), e.exact), (2000, "linked blocks of its kind (a chain)", true));
}

/// The suspects ask the analysis for a node's big children and for its first child of a kind
/// without ordering all of them: the answers are those of the ordered children (largest
/// retained first, ties by node), on a heap where many children retain the same.
#[test]
fn big_children_and_first_child_of_a_kind_are_those_of_the_ordered_children() {
    use heapsnap_analyze::{AnalysedHeap, NodeId};
    let mut h = SynthHeap::new();
    let equal: Vec<Value> = (0..40).map(|i| Value::Ptr(h.alloc_string(Space::Major, format!("{:08}", i % 4).as_bytes()))).collect();
    let lists: Vec<Value> = (1..6).map(|n| list(&mut h, n * 3, 40)).collect();
    let holder = h.alloc(Space::Major, 0, &equal);
    let table = hashtbl(&mut h, 30);
    let mut fields = vec![Value::Ptr(holder), Value::Ptr(table)];
    fields.extend(lists);
    h.add_module("Mixed", &fields);
    let w = write(&h);
    let a = Analysis::new(&w.snap, &Progress::hidden()).unwrap();
    let mut checked = 0;
    for v in 0..a.graph.node_count() as NodeId {
        let ordered = a.children(v);
        if ordered.len() < 2 {
            continue;
        }
        checked += 1;
        let sizes: Vec<u64> = ordered.iter().map(|&c| a.retained(c)).collect();
        for min in sizes.iter().copied().chain([0, u64::MAX]) {
            let big: Vec<NodeId> = ordered.iter().copied().filter(|&c| a.retained(c) >= min).collect();
            assert_eq!(AnalysedHeap::children_retaining(&a, v, min), big, "node {v}, at least {min}");
        }
        for kind in ordered.iter().map(|&c| a.kind_of_node(c)) {
            let first = ordered.iter().copied().find(|&c| a.kind_of_node(c) == kind);
            assert_eq!(AnalysedHeap::first_child_where(&a, v, &|c| a.kind_of_node(c) == kind), first, "node {v}");
        }
        assert_eq!(AnalysedHeap::first_child_where(&a, v, &|_| true), ordered.first().copied());
        assert_eq!(AnalysedHeap::first_child_where(&a, v, &|_| false), None);
    }
    // The module's node, the holder of 40 strings, the lists' cells, the table's buckets.
    assert!(checked >= 3, "{checked} nodes with several children");
}
