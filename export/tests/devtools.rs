//! The DevTools export of a synthetic heap, read back as JSON: the format's structure, names,
//! node types, edge types (fields as elements, ephemeron keys weak, root records as
//! properties), ids, self sizes, and the limits.

use heapsnap_analyze::{Analysis, HeapFacts, Progress};
use heapsnap_export::devtools::{export, Limits};
use heapsnap_export::ExportError;
use heapsnap_format::{RootKind, Snapshot};
use heapsnap_testkit::synth::{Space, SynthHeap, Value};
use serde_json::Value as Json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

struct Heap {
    snap: Snapshot,
    addr: std::collections::HashMap<&'static str, u64>,
}

fn heap(dir: &Path) -> Heap {
    let mut h = SynthHeap::new();
    let s = h.alloc_string(Space::Major, b"req-000001");
    let key = h.alloc(Space::Major, 0, &[Value::Int(1), Value::Int(1), Value::Int(1)]);
    let data = h.alloc(Space::Major, 0, &[Value::Int(2), Value::Int(3)]);
    let eph = h.alloc_ephemeron(Some(Value::Ptr(data)), &[Value::Ptr(key)]);
    let record = h.alloc(Space::Major, 0, &[Value::Int(0), Value::Ptr(s), Value::Ptr(eph), Value::Ptr(key)]);
    let young = h.alloc(Space::Minor, 0, &[Value::Ptr(record)]);
    h.add_module("Demo", &[Value::Ptr(young), Value::Int(7)]);
    h.add_root(RootKind::LocalRoot, Value::Ptr(s), "caml_local", 0);
    let long = h.alloc_string(Space::Major, &[b'x'; 300]);
    h.add_root(RootKind::LocalRoot, Value::Ptr(long), "caml_long", 0);
    let path = dir.join("synth.heapsnap");
    h.write(&path).unwrap();
    let mut addr = std::collections::HashMap::new();
    for (name, id) in [("string", s), ("key", key), ("data", data), ("eph", eph), ("record", record), ("young", young)] {
        addr.insert(name, h.address_of(id));
    }
    Heap { snap: Snapshot::open(&path).unwrap(), addr }
}

struct Read {
    json: Json,
    fields: usize,
}

impl Read {
    fn nodes(&self) -> Vec<&[Json]> {
        let n = self.json["nodes"].as_array().unwrap();
        n.chunks(self.fields).collect()
    }
    fn string(&self, i: &Json) -> &str {
        self.json["strings"][i.as_u64().unwrap() as usize].as_str().unwrap()
    }
    fn node_type(&self, n: &[Json]) -> &str {
        self.json["snapshot"]["meta"]["node_types"][0][n[0].as_u64().unwrap() as usize].as_str().unwrap()
    }
    /// `(type, name or index, target node index)` of each node's edges.
    fn edges(&self) -> Vec<Vec<(String, Json, usize)>> {
        let types = self.json["snapshot"]["meta"]["edge_types"][0].as_array().unwrap();
        let edges = self.json["edges"].as_array().unwrap();
        let mut at = 0;
        self.nodes()
            .iter()
            .map(|n| {
                let count = n[4].as_u64().unwrap() as usize;
                let out = edges[at * 3..(at + count) * 3]
                    .chunks(3)
                    .map(|e| {
                        let t = types[e[0].as_u64().unwrap() as usize].as_str().unwrap().to_string();
                        let to = e[2].as_u64().unwrap() as usize;
                        assert_eq!(to % self.fields, 0, "to_node is a node's first number");
                        (t, e[1].clone(), to / self.fields)
                    })
                    .collect();
                at += count;
                out
            })
            .collect()
    }
}

fn read(path: &Path) -> Read {
    let json: Json = serde_json::from_slice(&std::fs::read(path).unwrap()).expect("the export is JSON");
    let fields = json["snapshot"]["meta"]["node_fields"].as_array().unwrap().len();
    Read { json, fields }
}

#[test]
fn structure_names_and_edges() {
    let dir = tempfile::tempdir().unwrap();
    let h = heap(dir.path());
    let a = Analysis::new(&h.snap, &Progress::hidden()).unwrap();
    let out = dir.path().join("x.heapsnapshot");
    let report = export(&a, &out, &Limits::default(), &Progress::hidden()).unwrap();
    assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o600);
    let r = read(&out);
    let nodes = r.nodes();
    assert_eq!(nodes.len() as u64, report.nodes);
    assert_eq!(r.json["snapshot"]["node_count"], report.nodes);
    assert_eq!(r.json["edges"].as_array().unwrap().len() as u64, 3 * report.edges);
    assert_eq!(r.node_type(nodes[0]), "synthetic", "node 0 is the synthetic root");
    // Ids: odd, distinct, below 2^31.
    let mut ids: Vec<u64> = nodes.iter().map(|n| n[2].as_u64().unwrap()).collect();
    assert!(ids.iter().all(|&i| i % 2 == 1 && i < 1 << 31));
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), nodes.len());

    let edges = r.edges();
    let by_name = |name: &str| nodes.iter().position(|n| r.string(&n[1]) == name).unwrap_or_else(|| panic!("no node {name:?}"));
    // The root kinds hang from the root by elements; records are properties named as reports name them.
    let local = by_name("(local_root roots)");
    assert!(edges[0].iter().any(|e| e.0 == "element" && e.2 == local));
    let string = by_name("req-000001");
    assert_eq!(r.node_type(nodes[string]), "string");
    assert!(
        edges[local].iter().any(|e| e.0 == "property" && r.string(&e.1) == "local_root caml_local" && e.2 == string),
        "{:?}",
        edges[local]
    );
    let global = by_name("(global roots)");
    assert!(edges[global].iter().any(|e| e.0 == "property" && r.string(&e.1) == "Demo.0"), "{:?}", edges[global]);
    // Fields are elements with their index.
    let record = by_name("block tag 0 size 4");
    assert_eq!(nodes[record][3], 40);
    let eph = by_name("abstract");
    assert_eq!(r.node_type(nodes[eph]), "hidden");
    let rec_edges: Vec<(String, u64, usize)> = edges[record].iter().map(|e| (e.0.clone(), e.1.as_u64().unwrap(), e.2)).collect();
    let key = by_name("block tag 0 size 3");
    assert_eq!(rec_edges, vec![("element".into(), 1, string), ("element".into(), 2, eph), ("element".into(), 3, key)]);
    // The ephemeron: its key weak, its data an element (field 1), and an internal edge from the key.
    let data = by_name("block tag 0 size 2");
    assert!(edges[eph].iter().any(|e| e.0 == "weak" && e.2 == key), "{:?}", edges[eph]);
    assert!(edges[eph].iter().any(|e| e.0 == "element" && e.1 == 1 && e.2 == data), "{:?}", edges[eph]);
    assert!(edges[key].iter().any(|e| e.0 == "internal" && r.string(&e.1) == "ephemeron data" && e.2 == data));
    assert!(report.largest.windows(2).all(|w| w[0].retained >= w[1].retained));
    assert!(report.largest.iter().any(|e| e.address == format!("{:#x}", h.addr["young"])));
    for e in &report.largest {
        let node = a.node_at(u64::from_str_radix(e.address.trim_start_matches("0x"), 16).unwrap()).unwrap();
        assert_eq!(e.retained, a.retained(node));
        assert_eq!(e.self_size, a.freeable(node));
    }
}

#[test]
fn ids_follow_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let h = heap(dir.path());
    let a = Analysis::new(&h.snap, &Progress::hidden()).unwrap();
    let out = dir.path().join("x.heapsnapshot");
    let report = export(&a, &out, &Limits::default(), &Progress::hidden()).unwrap();
    for e in &report.largest {
        let address = u64::from_str_radix(e.address.trim_start_matches("0x"), 16).unwrap();
        assert_eq!(e.id, 2 * heapsnap_export::devtools::ids::address_hash(address) + 1);
    }
}

#[test]
fn limits_refuse_or_shorten_never_write_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let h = heap(dir.path());
    let a = Analysis::new(&h.snap, &Progress::hidden()).unwrap();
    let out = dir.path().join("x.heapsnapshot");
    let full = export(&a, &out, &Limits::default(), &Progress::hidden()).unwrap();
    assert!(full.string_previews);
    std::fs::remove_file(&out).unwrap();

    // Too many numbers for the loader's arrays: refused, nothing written.
    let tiny = Limits { max_number: full.nodes * 7 - 1, ..Limits::default() };
    match export(&a, &out, &tiny, &Progress::hidden()) {
        Err(ExportError::TooLarge(m)) => assert!(m.contains("nodes"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|r| r.nodes)),
    }
    assert!(!out.exists(), "a refused export writes nothing");

    // Strings past the limit with their contents, within it without: named `string`.
    let shorter = Limits { max_string_chars: full.string_chars - 5, ..Limits::default() };
    let r = export(&a, &out, &shorter, &Progress::hidden()).unwrap();
    assert!(!r.string_previews);
    assert!(r.string_chars <= shorter.max_string_chars);
    let json = read(&out);
    assert!(json.json["strings"].as_array().unwrap().iter().all(|s| s != "req-000001"));
    std::fs::remove_file(&out).unwrap();

    // And past it either way: refused.
    let none = Limits { max_string_chars: 100, ..Limits::default() };
    assert!(matches!(export(&a, &out, &none, &Progress::hidden()), Err(ExportError::TooLarge(_))));
    assert!(!out.exists());
}
