//! The reports agree with each other (issue 18): a structure is named alike by `top`,
//! `dominators`, `path` and `inspect`; many small siblings of one kind are one line; retention
//! is named by the most stable roots; flags and errors say one thing each. On synthetic
//! snapshots (`heapsnap_testkit::synth`), through the binary.

use heapsnap_format::RootKind;
use heapsnap_testkit::synth::{ObjId, Space, SynthHeap, Value};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn heapsnap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heapsnap")).args(args).output().expect("run heapsnap")
}

fn json(args: &[&str], snapshot: &Path) -> Json {
    let mut all: Vec<&str> = vec![args[0], snapshot.to_str().unwrap()];
    all.extend(&args[1..]);
    all.push("--json");
    let out = heapsnap(&all);
    assert!(out.status.success(), "heapsnap {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn write(dir: &Path, name: &str, h: &SynthHeap) -> PathBuf {
    let path = dir.join(name);
    h.write(&path).unwrap();
    path
}

/// A stdlib `Hashtbl` of `n` string keys (to 3-field bucket cells), in a 16-bucket array.
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

#[test]
fn a_hashtbl_is_named_alike_by_every_report() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = SynthHeap::new();
    let table = hashtbl(&mut h, 400);
    h.add_module("Cache", &[Value::Ptr(table)]);
    let path = write(dir.path(), "t.heapsnap", &h);
    let address = format!("{:#x}", h.address_of(table));

    let top = json(&["top"], &path);
    let names: Vec<&str> = top["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"Hashtbl"), "{names:?}");
    assert!(!names.contains(&"block tag 0 size 4"), "{names:?}");

    let inspect = json(&["inspect", &address], &path);
    assert_eq!(inspect["description"], "Hashtbl (400 entries)");

    let tree = json(&["dominators", "--depth", "4"], &path);
    let node = &tree["children"][0]["children"][0];
    assert_eq!(node["description"], "Hashtbl (400 entries)");
    let data = &node["children"][0];
    assert!(data["description"].as_str().unwrap().starts_with("Hashtbl data: "), "{data:#}");
    // 16 chains of 25 entries, each ~1/16 of the heap: above 1%, shown one by one, named.
    assert!(data["children"][0]["description"].as_str().unwrap().starts_with("Hashtbl bucket chain: "), "{data:#}");

    let paths = json(&["path", "--kind", "Hashtbl"], &path);
    assert_eq!(paths["targets"], 1);
    let chains = json(&["path", "--kind", "string", "--limit", "1"], &path);
    let labels: Vec<&str> = chains["paths"][0]["steps"].as_array().unwrap().iter().map(|s| s["label"].as_str().unwrap()).collect();
    assert_eq!(labels[0], "Hashtbl");
    assert!(labels[1].starts_with("Hashtbl data"), "{labels:?}");
    assert!(labels[2].starts_with("Hashtbl bucket chain"), "{labels:?}");
}

#[test]
fn stdlib_structures_are_recognised() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = SynthHeap::new();
    // Set.Make(Int): a node with two leaves.
    let leaf = |h: &mut SynthHeap, v| h.alloc(Space::Major, 0, &[Value::Int(0), Value::Int(v), Value::Int(0), Value::Int(1)]);
    let (l, r) = (leaf(&mut h, 1), leaf(&mut h, 3));
    let set = h.alloc(Space::Major, 0, &[Value::Ptr(l), Value::Int(2), Value::Ptr(r), Value::Int(2)]);
    // Map.Make(Int): one binding.
    let map = h.alloc(Space::Major, 0, &[Value::Int(0), Value::Int(1), Value::Int(5), Value::Int(0), Value::Int(1)]);
    // Queue with two cells; Stack of one element; Buffer.
    let last = h.alloc(Space::Major, 0, &[Value::Int(2), Value::Int(0)]);
    let first = h.alloc(Space::Major, 0, &[Value::Int(1), Value::Ptr(last)]);
    let queue = h.alloc(Space::Major, 0, &[Value::Int(2), Value::Ptr(first), Value::Ptr(last)]);
    let cell = h.alloc(Space::Major, 0, &[Value::Int(9), Value::Int(0)]);
    let stack = h.alloc(Space::Major, 0, &[Value::Ptr(cell), Value::Int(1)]);
    let bytes = h.alloc_string(Space::Major, &[0; 16]);
    let inner = h.alloc(Space::Major, 0, &[Value::Ptr(bytes), Value::Int(16)]);
    let buffer = h.alloc(Space::Major, 0, &[Value::Ptr(inner), Value::Int(0), Value::Ptr(bytes)]);
    let lazy = h.alloc(Space::Major, 246, &[Value::Int(0)]);
    let some = h.alloc(Space::Major, 0, &[Value::Int(3)]);
    let list = [set, map, queue, stack, buffer, lazy, some].iter().map(|&o| Value::Ptr(o)).collect::<Vec<_>>();
    h.add_module("S", &list);
    let path = write(dir.path(), "s.heapsnap", &h);
    let top = json(&["top", "--limit", "0"], &path);
    let names: Vec<&str> = top["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    for name in ["Set node", "Map node", "Queue", "Stack", "Buffer", "lazy", "ref or Some", "list cell"] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }
    let set_nodes = top["groups"].as_array().unwrap().iter().find(|g| g["name"] == "Set node").unwrap();
    assert_eq!(set_nodes["count"], 3);
    let inspect = json(&["inspect", &format!("{:#x}", h.address_of(queue))], &path);
    assert_eq!(inspect["description"], "Queue (2 elements)");
}

#[test]
fn many_small_siblings_of_one_kind_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = SynthHeap::new();
    // 500 records of 1 KiB strings under one array: each is 0.2% of the heap.
    let items: Vec<Value> = (0..500)
        .map(|i| {
            let s = h.alloc_string(Space::Major, &vec![b'a'; 1000 + i]);
            Value::Ptr(h.alloc(Space::Major, 0, &[Value::Int(i as i64), Value::Ptr(s), Value::Int(0)]))
        })
        .collect();
    let array = h.alloc(Space::Major, 0, &items);
    h.add_module("Registry", &[Value::Ptr(array)]);
    let path = write(dir.path(), "r.heapsnap", &h);
    let tree = json(&["dominators", "--depth", "5"], &path);
    let array_node = &tree["children"][0]["children"][0];
    let summary = &array_node["children"][0];
    let similar = &summary["similar"];
    assert_eq!(similar["count"], 500, "{array_node:#}");
    assert_eq!(similar["kind"], "block tag 0 size 3");
    assert_eq!(similar["largest"], summary["retained"]);
    assert_eq!(similar["retained"].as_u64().unwrap() + 8 * 501, array_node["retained"].as_u64().unwrap());
    assert_eq!(array_node["omitted_children"], 0);
    // The example is expanded: its string is shown below it.
    assert_eq!(summary["children"][0]["description"].as_str().unwrap().split(' ').next(), Some("string"));
}

#[test]
fn globals_name_what_a_stack_slot_also_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = SynthHeap::new();
    let table = hashtbl(&mut h, 50);
    // A global and a stack frame hold the table: it hangs from the super-root.
    h.add_module("Leaky", &[Value::Ptr(table)]);
    h.add_root(RootKind::Stack, Value::Ptr(table), "camlMain.loop_12", 0);
    // Two globals share a list.
    let shared = h.alloc_string(Space::Major, &[b's'; 4000]);
    let cell = h.alloc(Space::Major, 0, &[Value::Ptr(shared), Value::Int(0)]);
    let a = h.alloc(Space::Major, 0, &[Value::Ptr(cell)]);
    let b = h.alloc(Space::Major, 0, &[Value::Ptr(cell)]);
    h.add_module("A", &[Value::Ptr(a)]);
    h.add_module("B", &[Value::Ptr(b)]);
    let path = write(dir.path(), "g.heapsnap", &h);

    let top = json(&["top", "--by", "root", "--limit", "0"], &path);
    let groups = top["groups"].as_array().unwrap();
    let names: Vec<&str> = groups.iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(names[0], "Leaky.0", "{names:?}");
    // Named by what the shared memory is and who shares it; the JSON lists every root.
    assert!(names.contains(&"list cell shared by A.0, B.0"), "{names:?}");
    let shared_group = groups.iter().find(|g| g["name"] == "list cell shared by A.0, B.0").unwrap();
    assert_eq!(shared_group["roots"], serde_json::json!(["A.0", "B.0"]));
    assert!(!names.iter().any(|n| n.contains("several")), "{names:?}");
    let roots = top["roots"].as_array().unwrap();
    let a0 = roots.iter().find(|r| r["root"] == "A.0").unwrap();
    assert_eq!(a0["alone"], 16, "A's own ref cell");
    assert_eq!(a0["shared"], 24 + 4008 + 8);
    assert_eq!(a0["shared_with"][0], "B.0");

    let tree = json(&["dominators"], &path);
    let top_node = tree["children"].as_array().unwrap().iter().find(|n| n["description"].as_str().unwrap().starts_with("Hashtbl")).unwrap();
    assert_eq!(top_node["root"], "Leaky.0");

    // path names the roots holding the chain's first object, as inspect does.
    let address = format!("{:#x}", h.address_of(table));
    let p = json(&["path", &address], &path);
    let inspect = json(&["inspect", &address], &path);
    assert_eq!(p["paths"][0]["root"], "Leaky.0");
    assert!(inspect["roots"].as_array().unwrap().contains(&Json::from("Leaky.0")));
}

/// A label names its six smallest roots; its group's `roots` lists every one, found up the
/// graph of subtrees: through two shared cells that point at each other (a cycle, so the
/// names go round it), through an object two globals share (whose own label names all of its
/// roots), and not from a stack frame (a shorter-lived root than the globals).
#[test]
fn a_label_naming_some_of_its_roots_lists_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = SynthHeap::new();
    let payload = h.alloc_string(Space::Major, &[b'p'; 3000]);
    let first = h.alloc(Space::Major, 0, &[Value::Ptr(payload), Value::Int(0)]);
    let second = h.alloc(Space::Major, 0, &[Value::Int(0), Value::Ptr(first)]);
    h.set_field(first, 1, Value::Ptr(second));
    // M1-M5 hold the first cell, M5-M9 the second, each through a block of its own.
    for i in 1..=9 {
        let cell = if i <= 5 { first } else { second };
        let own = h.alloc(Space::Major, 0, &[Value::Ptr(cell)]);
        h.add_module(&format!("M{i}"), &[Value::Ptr(own)]);
        if i == 5 {
            let both = h.alloc(Space::Major, 0, &[Value::Ptr(second)]);
            h.add_module("M5b", &[Value::Ptr(both)]);
        }
    }
    // M10 and M11 share a pair that points at the second cell.
    let pair = h.alloc(Space::Major, 0, &[Value::Ptr(second), Value::Int(1)]);
    h.add_module("M10", &[Value::Ptr(pair)]);
    h.add_module("M11", &[Value::Ptr(pair)]);
    // A stack frame holds a block of its own that points at the first cell.
    let framed = h.alloc(Space::Major, 0, &[Value::Ptr(first), Value::Int(2)]);
    h.add_root(RootKind::Stack, Value::Ptr(framed), "camlMain.loop_12", 0);
    let path = write(dir.path(), "shared.heapsnap", &h);

    let top = json(&["top", "--by", "root", "--limit", "0"], &path);
    let groups = top["groups"].as_array().unwrap();
    let shared: Vec<&Json> = groups.iter().filter(|g| g["roots"].as_array().is_some_and(|r| r.len() > 6)).collect();
    assert_eq!(shared.len(), 1, "one label for both cells: {groups:#?}");
    let mut expected: Vec<String> = (1..=11).map(|i| format!("M{i}.0")).chain(["M5b.0".to_string()]).collect();
    expected.sort();
    assert_eq!(shared[0]["roots"], serde_json::json!(expected), "{:#}", shared[0]);
    assert_ne!(shared[0]["roots_incomplete"], true, "the list is whole");
    assert_eq!(shared[0]["count"], 3, "both cells and the payload: {:#}", shared[0]);
    let pair_group = groups.iter().find(|g| g["roots"] == serde_json::json!(["M10.0", "M11.0"])).unwrap();
    assert_eq!(pair_group["count"], 1, "{pair_group:#}");
}

#[test]
fn unreachable_objects_are_counted_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = SynthHeap::new();
    let kept = h.alloc_string(Space::Major, b"kept");
    for _ in 0..10 {
        h.alloc_string(Space::Major, &[b'x'; 64]); // unreachable, not swept yet
    }
    h.add_module("M", &[Value::Ptr(kept)]);
    let path = write(dir.path(), "u.heapsnap", &h);
    let top = json(&["top"], &path);
    let strings = top["groups"].as_array().unwrap().iter().find(|g| g["name"] == "string").unwrap();
    assert_eq!(strings["count"], 1);
    assert_eq!(top["unreachable_objects"], 10);
    assert_eq!(top["unreachable_bytes"], 10 * 80);
}

#[test]
fn kinds_match_exactly_and_groupings_refuse_what_they_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = SynthHeap::new();
    let six = h.alloc(Space::Major, 0, &[Value::Int(1); 6]);
    let sixty_five = h.alloc(Space::Major, 0, &[Value::Int(1); 65]);
    h.add_module("K", &[Value::Ptr(six), Value::Ptr(sixty_five)]);
    let path = write(dir.path(), "k.heapsnap", &h);
    let p = json(&["path", "--kind", "block tag 0 size 6"], &path);
    assert_eq!(p["targets"], 1);
    // A part of a name matches nothing, and says what would.
    let out = heapsnap(&["path", path.to_str().unwrap(), "--kind", "size 6"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("block tag 0 size 6"));

    // --by reserved without reserved header bits would put every block in one group: refused,
    // pointing to --by kind.
    let out = heapsnap(&["top", path.to_str().unwrap(), "--by", "reserved"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--by kind"));
    // --help lists the groupings (clap's ValueEnum).
    let help = String::from_utf8_lossy(&heapsnap(&["top", "--help"]).stdout).to_string();
    for by in ["reserved", "kind", "closure", "root"] {
        assert!(help.contains(&format!("- {by}:")), "{help}");
    }
}

#[test]
fn errors_are_said_once_and_as_json_with_json() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.heapsnap");
    let out = heapsnap(&["summary", missing.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert!(err.starts_with("heapsnap: error: ") && err.contains("missing.heapsnap"), "{err}");

    let out = heapsnap(&["top", dir.path().to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let doc: Json = serde_json::from_slice(&out.stdout).expect("a JSON error on stdout");
    assert!(doc["error"]["message"].as_str().unwrap().contains("is a directory, not a snapshot file"), "{doc}");
    assert!(doc["error"]["kind"].is_string());

    let mut h = SynthHeap::new();
    let s = h.alloc_string(Space::Major, b"x");
    h.add_module("M", &[Value::Ptr(s)]);
    let path = write(dir.path(), "e.heapsnap", &h);
    let out = heapsnap(&["inspect", path.to_str().unwrap(), "0x10", "--json"]);
    let doc: Json = serde_json::from_slice(&out.stdout).expect("a JSON error on stdout");
    assert_eq!(doc["error"]["kind"], "no_block");
}

/// One flag, one meaning (REPORTS.md, "Flags"): "tag" is the block tag and "reserved" the
/// reserved header bits, everywhere; `-o` is a file; `--strict` is `verify`'s.
#[test]
fn each_flag_means_one_thing() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = SynthHeap::new();
    h.reserved_header_bits = 16;
    let strings: Vec<Value> = (0..3).map(|i| Value::Ptr(h.alloc_string(Space::Major, format!("s{i}").as_bytes()))).collect();
    let marked = h.alloc(Space::Major, 0, &[Value::Int(1)]);
    h.set_reserved(marked, 252);
    h.add_module("M", &[strings[0], strings[1], strings[2], Value::Ptr(marked)]);
    let path = write(dir.path(), "r.heapsnap", &h);

    // --tag is the block tag even when the runtime has reserved bits: the three strings.
    let by_tag = json(&["path", "--tag", "252"], &path);
    assert_eq!(by_tag["targets"], 3, "{by_tag}");
    // --reserved is the reserved bits' value: the one marked block.
    let by_reserved = json(&["path", "--reserved", "252"], &path);
    assert_eq!(by_reserved["targets"], 1, "{by_reserved}");
    let top = json(&["top", "--by", "reserved"], &path);
    assert_eq!(top["by"], "reserved");
    assert!(top["groups"].as_array().unwrap().iter().any(|g| g["name"] == "reserved 252"), "{top}");
    // `--by tag` is no grouping: the error lists the ones there are.
    let out = heapsnap(&["top", path.to_str().unwrap(), "--by", "tag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values: reserved, kind, closure, root"));

    // Without reserved bits, --reserved is refused, pointing to --tag; --tag still works.
    let mut plain = SynthHeap::new();
    let s = plain.alloc_string(Space::Major, b"x");
    plain.add_module("M", &[Value::Ptr(s)]);
    let plain = write(dir.path(), "p.heapsnap", &plain);
    assert_eq!(json(&["path", "--tag", "252"], &plain)["targets"], 1);
    let out = heapsnap(&["path", plain.to_str().unwrap(), "--reserved", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use --tag"));

    // `run` writes into a directory, `--dir`; `-o` names a file, and run has none.
    let out = heapsnap(&["run", "--at-exit", "-o", dir.path().to_str().unwrap(), "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option -o before the program"));
    // `dump`'s refusal of an inconsistent stop is --require-consistent; --strict is verify's.
    let out = heapsnap(&["dump", "--pid", "1", "--strict"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--strict'"));
    let help = String::from_utf8_lossy(&heapsnap(&["dump", "--help"]).stdout).to_string();
    assert!(help.contains("--require-consistent") && !help.contains("--strict"), "{help}");
    assert!(String::from_utf8_lossy(&heapsnap(&["verify", "--help"]).stdout).contains("--strict"));
}

/// Result limits (REPORTS.md, "Result limits"): `--limit N` caps the rows of a report's list,
/// `--max-ITEMS N` its other lists, `--sample N` the objects `path` follows; 0 is no limit.
#[test]
fn zero_is_no_limit_for_every_result_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = SynthHeap::new();
    // 30 strings of distinct sizes under one module, 10 more in a list under another, and
    // a 100-field block.
    let direct: Vec<Value> = (0..30).map(|i| Value::Ptr(h.alloc_string(Space::Major, &vec![b'a'; 8 * (i + 1)]))).collect();
    let mut list = Value::Int(0);
    for i in 0..10 {
        let s = h.alloc_string(Space::Major, format!("l{i}").as_bytes());
        list = Value::Ptr(h.alloc(Space::Major, 0, &[Value::Ptr(s), list]));
    }
    let wide = h.alloc(Space::Major, 0, &vec![Value::Int(7); 100]);
    let mut fields = direct.clone();
    fields.push(list);
    fields.push(Value::Ptr(wide));
    h.add_module("A", &fields);
    let path = write(dir.path(), "l.heapsnap", &h);
    let rows = |v: &Json, key: &str| v[key].as_array().unwrap().len();

    // summary: --limit (formerly --top) caps the top groups.
    let all_groups = json(&["top", "--limit", "0"], &path)["total_groups"].as_u64().unwrap() as usize;
    assert!(all_groups > 2);
    assert_eq!(rows(&json(&["summary", "--limit", "2"], &path), "top_groups"), 2);
    assert_eq!(rows(&json(&["summary", "--limit", "0"], &path), "top_groups"), all_groups);

    // dominators: --max-children 0 keeps every child (the 30 strings, the list, the block).
    let find_global = |tree: &Json| -> Json {
        tree["children"].as_array().unwrap().iter().find(|c| c["description"] == "(global roots)").cloned().expect("global roots")
    };
    let tree = json(&["dominators", "--min-percent", "0", "--depth", "2", "--max-children", "0"], &path);
    assert_eq!(rows(&find_global(&tree), "children"), 32, "{tree:#}");
    let tree = json(&["dominators", "--min-percent", "0", "--depth", "2", "--max-children", "5"], &path);
    assert_eq!(rows(&find_global(&tree), "children"), 5);

    // inspect: --max-fields 0 lists them all.
    let wide_address = format!("{:#x}", h.address_of(wide));
    let i = json(&["inspect", &wide_address, "--max-fields", "0"], &path);
    assert_eq!((rows(&i, "fields"), i["more_fields"].as_u64()), (100, Some(0)));

    // path: --sample picks the objects followed, --limit the paths listed.
    let p = json(&["path", "--kind", "string", "--limit", "1"], &path);
    assert_eq!((p["targets"].as_u64(), p["sampled"].as_u64(), rows(&p, "paths")), (Some(40), Some(40), 1), "{p:#}");
    let p = json(&["path", "--kind", "string", "--sample", "5", "--limit", "0"], &path);
    assert_eq!(p["sampled"], 5);
    let p = json(&["path", "--kind", "string", "--sample", "0", "--limit", "0"], &path);
    assert_eq!(p["sampled"], 40);
    assert!(rows(&p, "paths") >= 2, "direct strings and list strings: {p:#}");

    // A negative or non-numeric limit is a usage error that says what a limit is.
    let out = heapsnap(&["top", path.to_str().unwrap(), "--limit", "all"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("0 for no limit"));
}

/// One shape for every grouping (REPORTS.md, "Groups"): whatever `--by` is, `top`'s rows
/// have `name`, `count`, `shallow` and `retained`. Every value `--by` takes is run (`type`
/// needs OCaml names: tests/mcp.rs runs it on a named snapshot; here it must be refused).
#[test]
fn every_grouping_has_the_same_row_keys() {
    use heapsnap_memtrace::write::TraceWriter;
    use heapsnap_memtrace::{AllocSource, Location, TraceInfo};
    let dir = tempfile::tempdir().unwrap();
    let (pid, exe) = (777, "/opt/app/server");
    let mut h = SynthHeap::new();
    h.reserved_header_bits = 16;
    h.process = Some((pid, exe.into()));
    let payload = h.alloc(Space::Major, 0, &[Value::Int(1); 10]);
    let session = h.alloc(Space::Major, 0, &[Value::Ptr(payload), Value::Int(0)]);
    h.set_reserved(session, 7);
    let closure = h.alloc_closure(Space::Major, 0x1000, 1, &[Value::Ptr(session)]);
    h.add_module("Server", &[Value::Ptr(closure)]);
    h.track(session, Value::Int(0), 1, 0.01);
    let snapshot = write(dir.path(), "g.heapsnap", &h);
    let info = TraceInfo {
        version: 3,
        sample_rate: 0.01,
        word_size: 64,
        executable_name: exe.into(),
        host_name: "host".into(),
        ocaml_runtime_params: String::new(),
        pid: pid.into(),
        initial_domain: 0,
        start_time: 1_700_000_000_000_000,
        context: None,
    };
    let mut w = TraceWriter::new(&info);
    let at = |line| vec![Location { filename: "server.ml".into(), line, start_char: 0, end_char: 5, defname: "Server.open_".into() }];
    w.define_location(1, at(12));
    w.alloc(1_700_000_000_000_100, 3, 1, AllocSource::Minor, &[1]);
    let trace = dir.path().join("g.ctf");
    std::fs::write(&trace, w.finish()).unwrap();

    let help = String::from_utf8(heapsnap(&["top", "--help"]).stdout).unwrap();
    let values = help.split("Possible values:").nth(1).expect("--by lists its values");
    let by: Vec<&str> = values.lines().filter_map(|l| l.trim().strip_prefix("- ")).map(|l| l.split(':').next().unwrap()).collect();
    assert!(by.contains(&"site") && by.contains(&"kind") && by.len() >= 6, "{by:?}");
    for by in by {
        let mut args = vec!["top", "--by", by];
        if by == "site" {
            args.extend(["--memtrace", trace.to_str().unwrap()]);
        }
        if by == "type" {
            let mut all = vec!["top", snapshot.to_str().unwrap()];
            all.extend(&args[1..]);
            assert_eq!(heapsnap(&all).status.code(), Some(2), "--by type needs names");
            continue;
        }
        let top = json(&args, &snapshot);
        let rows = top["groups"].as_array().unwrap();
        assert!(!rows.is_empty(), "--by {by}: {top}");
        for row in rows {
            assert!(row["name"].is_string(), "--by {by}: {row}");
            for key in ["count", "shallow", "retained"] {
                assert!(row[key].is_u64(), "--by {by}: no {key} in {row}");
            }
        }
    }
}
