//! `heapsnap export` on a real dump of the cache_leak sample: memlab (from the npm registry,
//! installed by export/scripts/install-memlab.sh) loads the DevTools export and computes the
//! same retained sizes as heapsnap for the biggest dominators; the flame graphs show the
//! cache's Hashtbl as the widest tower; bad input is refused cleanly.

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::dump_support::{dump_ok, heapsnap, repo, samples_dir, Sample};

fn cache_leak_snapshot(dir: &Path) -> PathBuf {
    let mut sample = Sample::start(&samples_dir().join("cache_leak"), &[]);
    sample.wait_ready(1);
    sample.release();
    sample.wait_ready(2);
    let out = dir.join("cache.heapsnap");
    dump_ok(sample.pid(), &out, &[]);
    out
}

fn heapsnap_json(args: &[&str]) -> Value {
    let out = Command::new(heapsnap()).args(args).arg("--json").output().expect("run heapsnap");
    assert!(out.status.success(), "heapsnap {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn memlab(file: &Path, top: usize, ids: &[u64]) -> Value {
    let script = repo().join("export/scripts/install-memlab.sh");
    let install = Command::new("bash").arg(&script).output().expect("run install-memlab.sh");
    assert!(install.status.success(), "install-memlab.sh: {}", String::from_utf8_lossy(&install.stderr));
    let dir = PathBuf::from(String::from_utf8(install.stdout).unwrap().trim());
    let out = Command::new("node")
        .env("NODE_PATH", dir.join("node_modules"))
        .arg(repo().join("export/scripts/memlab-retained.js"))
        .arg(file)
        .arg(top.to_string())
        .args(ids.iter().map(u64::to_string))
        .output()
        .expect("run node");
    assert!(out.status.success(), "memlab failed to load {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("memlab-retained.js prints JSON")
}

/// Address -> retained bytes of every node of `heapsnap dominators --json`.
fn dominators(tree: &Value, out: &mut std::collections::HashMap<String, u64>) {
    if let Some(a) = tree["address"].as_str() {
        out.insert(a.to_string(), tree["retained"].as_u64().unwrap());
    }
    for c in tree["children"].as_array().into_iter().flatten() {
        dominators(c, out);
    }
}

#[test]
fn memlab_loads_the_devtools_export_and_agrees_on_retained_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let snap = cache_leak_snapshot(dir.path());
    let file = dir.path().join("cache.heapsnapshot");
    let report = heapsnap_json(&["export", snap.to_str().unwrap(), "--format", "devtools", "-o", file.to_str().unwrap()]);
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(report["bytes"].as_u64().unwrap(), std::fs::metadata(&file).unwrap().len());
    let largest = report["largest"].as_array().unwrap();
    assert_eq!(largest[0]["name"], "Hashtbl", "the cache's table retains most: {largest:?}");

    // heapsnap's own dominator report gives the same retained sizes for those addresses.
    let mut ours = std::collections::HashMap::new();
    dominators(&heapsnap_json(&["dominators", snap.to_str().unwrap(), "--depth", "4", "--min-percent", "0"]), &mut ours);
    assert_eq!(ours.get(largest[0]["address"].as_str().unwrap()), largest[0]["retained"].as_u64().as_ref());

    // memlab: same nodes, same order, same retained sizes, to the byte.
    let top = 10;
    let ids: Vec<u64> = largest.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    let m = memlab(&file, top, &ids);
    assert_eq!(m["nodes"], report["nodes"]);
    assert_eq!(m["edges"], report["edges"]);
    for (i, e) in largest.iter().enumerate() {
        let theirs = &m["asked"][i];
        assert_eq!(theirs["id"], e["id"]);
        assert_eq!(theirs["retained"].as_u64(), e["retained"].as_u64(), "memlab's retained size of {e} is {theirs}");
        assert_eq!(theirs["self_size"], e["self_size"]);
        assert_eq!(theirs["name"], e["name"]);
    }
    let memlab_top: Vec<u64> = m["largest"].as_array().unwrap().iter().map(|n| n["retained"].as_u64().unwrap()).collect();
    let heapsnap_top: Vec<u64> = largest.iter().take(top).map(|e| e["retained"].as_u64().unwrap()).collect();
    assert_eq!(memlab_top, heapsnap_top, "the biggest dominators by memlab and by heapsnap");
    let reachable = heapsnap_json(&["summary", snap.to_str().unwrap()])["reachable_bytes"].as_u64().unwrap();
    assert_eq!(m["root_retained"].as_u64(), Some(reachable), "memlab's root retains every reachable byte");
}

#[test]
fn flame_graphs_show_the_cache_tower() {
    let dir = tempfile::tempdir().unwrap();
    let snap = cache_leak_snapshot(dir.path());
    let s = snap.to_str().unwrap();
    let reachable = heapsnap_json(&["summary", s])["reachable_bytes"].as_u64().unwrap();
    let folded = dir.path().join("cache.folded");
    let report = heapsnap_json(&["export", s, "--format", "folded", "-o", folded.to_str().unwrap()]);
    assert_eq!(report["total_bytes"].as_u64(), Some(reachable), "the stacks add up to the reachable bytes");
    let text = std::fs::read_to_string(&folded).unwrap();
    let mut under_cache = 0u64;
    let mut total = 0u64;
    for line in text.lines() {
        let (stack, bytes) = line.rsplit_once(' ').expect("`stack bytes` lines");
        let bytes: u64 = bytes.parse().unwrap();
        total += bytes;
        let frames: Vec<&str> = stack.split(';').collect();
        if frames.len() >= 2 && frames[0] == "Cache_leak.1" && frames[1] == "Hashtbl" {
            under_cache += bytes;
        }
    }
    assert_eq!(total, reachable);
    assert!(under_cache * 10 >= total * 9, "the Cache_leak.1 -> Hashtbl tower holds {under_cache} of {total} bytes:\n{text}");
    assert!(text.contains("Hashtbl bucket chains"), "{text}");

    let svg = dir.path().join("cache.svg");
    let report = heapsnap_json(&["export", s, "--format", "svg", "--by", "kind", "-o", svg.to_str().unwrap()]);
    assert_eq!(report["total_bytes"].as_u64(), Some(reachable));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<?xml") && drawn.contains("<svg"), "an SVG");
    assert!(drawn.contains("block tag 0 size 3"), "frames named by kind");
    assert_eq!(std::fs::metadata(&svg).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn bad_input_is_refused_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_snapshot = dir.path().join("junk.heapsnap");
    std::fs::write(&not_a_snapshot, b"not a snapshot at all").unwrap();
    let out = dir.path().join("out.heapsnapshot");
    for format in ["devtools", "folded", "svg"] {
        let o = Command::new(heapsnap())
            .args(["export", not_a_snapshot.to_str().unwrap(), "--format", format, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("cannot open") && !err.contains("panicked"), "{err}");
        assert!(!out.exists());
    }
    let o = Command::new(heapsnap()).args(["export", "x", "--format", "devtools", "--by", "kind", "-o", "y"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(heapsnap()).args(["export", "x", "--format", "pdf", "-o", "y"]).output().unwrap();
    assert!(!o.status.success());
}

/// A program whose items survive a compaction that moves them: three of every four items die
/// before it, so their pools are evacuated.
const MOVERS: &str = r#"
type item = { id : int; name : string; mutable hits : int }

let kept : item list ref = ref []
let dropped : item list ref = ref []

let ready step =
  print_string ("READY " ^ string_of_int step ^ "\n");
  flush stdout;
  try ignore (input_line stdin) with End_of_file -> ()

let () =
  for i = 0 to 19_999 do
    let it = { id = i; name = Printf.sprintf "item-%06d" i; hits = 0 } in
    if i mod 4 = 0 then kept := it :: !kept else dropped := it :: !dropped
  done;
  Gc.full_major ();
  ready 1;
  dropped := [];
  Gc.compact ();
  ready 2
"#;

/// From a `.heapsnapshot`: the id of each `item-NNNNNN` string, and of the record whose field
/// 1 (an `element` edge) holds it.
fn item_ids(file: &Path) -> (std::collections::HashMap<String, u64>, std::collections::HashMap<String, u64>, Vec<u64>) {
    let v: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let nums = |k: &str| v[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect::<Vec<u64>>();
    let (nodes, edges) = (nums("nodes"), nums("edges"));
    let strings: Vec<&str> = v["strings"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let element = v["snapshot"]["meta"]["edge_types"][0].as_array().unwrap().iter().position(|t| t == "element").unwrap() as u64;
    let ids: Vec<u64> = nodes.chunks(7).map(|n| n[2]).collect();
    let mut string_ids = std::collections::HashMap::new();
    for n in nodes.chunks(7) {
        let name = strings[n[1] as usize];
        if name.starts_with("item-") {
            string_ids.insert(name.to_string(), n[2]);
        }
    }
    let mut record_ids = std::collections::HashMap::new();
    let mut e = 0;
    for n in nodes.chunks(7) {
        for _ in 0..n[4] {
            let (kind, index, to) = (edges[e], edges[e + 1], edges[e + 2] as usize);
            e += 3;
            let target_name = strings[nodes[to + 1] as usize];
            if kind == element && index == 1 && target_name.starts_with("item-") {
                record_ids.insert(target_name.to_string(), n[2]);
            }
        }
    }
    (string_ids, record_ids, ids)
}

#[test]
fn devtools_ids_follow_the_objects_a_compaction_moved() {
    let dir = tempfile::tempdir().unwrap();
    let exe = crate::dump_support::compile_ocaml(dir.path(), "movers", MOVERS, &[]);
    let mut sample = Sample::start(&exe, &[]);
    sample.wait_ready(1);
    let (old, new) = (dir.path().join("1.heapsnap"), dir.path().join("2.heapsnap"));
    dump_ok(sample.pid(), &old, &[]);
    sample.release();
    sample.wait_ready(2);
    dump_ok(sample.pid(), &new, &[]);
    drop(sample);
    let export = |snap: &Path, out: &str, baseline: Option<&Path>| {
        let out = dir.path().join(out);
        let mut args = vec!["export", snap.to_str().unwrap(), "--format", "devtools", "-o", out.to_str().unwrap()];
        if let Some(b) = baseline {
            args.extend(["--baseline", b.to_str().unwrap()]);
        }
        (heapsnap_json(&args), out)
    };
    let (plain_old, old_file) = export(&old, "1.heapsnapshot", None);
    let (plain_new, plain_file) = export(&new, "2-plain.heapsnapshot", None);
    let (followed, new_file) = export(&new, "2.heapsnapshot", Some(&old));
    assert_eq!(plain_old["ids"]["from"], "address");
    assert!(plain_new["ids"]["note"].as_str().unwrap().contains("--baseline"), "{:#}", plain_new["ids"]);
    assert_eq!(followed["ids"]["from"], "baseline", "{:#}", followed["ids"]);

    let (old_strings, old_records, old_ids) = item_ids(&old_file);
    let (plain_strings, _, _) = item_ids(&plain_file);
    let (new_strings, new_records, new_ids) = item_ids(&new_file);
    assert_eq!(old_strings.len(), 20_000);
    assert_eq!(new_strings.len(), 5_000, "the kept items");
    // The compaction moved items: by address, some changed their ids.
    let moved = new_strings.keys().filter(|k| plain_strings[*k] != old_strings[*k]).count();
    assert!(moved > 100, "the compaction moved only {moved} of 5000 kept strings: this test would not show ids following moves");
    // With the baseline, every kept item's string and record keep their ids.
    for (name, id) in &new_strings {
        assert_eq!(old_strings.get(name), Some(id), "string {name}");
        assert_eq!(old_records.get(name), new_records.get(name), "the record of {name}");
    }
    assert_eq!(new_records.len(), 5_000);
    // Ids stay odd and unique in each file.
    for ids in [&old_ids, &new_ids] {
        assert!(ids.iter().all(|id| id % 2 == 1));
        assert_eq!(ids.iter().collect::<std::collections::HashSet<_>>().len(), ids.len());
    }
    assert!(followed["ids"]["kept"].as_u64().unwrap() >= 15_000, "{:#}", followed["ids"]);

    // --baseline is for DevTools ids only, and needs a snapshot it can compare.
    let out = dir.path().join("x.folded");
    let o = Command::new(heapsnap())
        .args(["export", new.to_str().unwrap(), "--format", "folded", "--baseline", old.to_str().unwrap(), "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--baseline applies to --format devtools"));
    let junk = dir.path().join("junk.heapsnap");
    std::fs::write(&junk, b"junk").unwrap();
    let o = Command::new(heapsnap())
        .args(["export", new.to_str().unwrap(), "--format", "devtools", "--baseline", junk.to_str().unwrap(), "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot open the baseline") && !err.contains("panicked"), "{err}");
}

/// With OCaml names, the exports speak OCaml as the reports do: in the DevTools export, typed
/// blocks are named by their type (DevTools' Summary view groups by it: one `Cache_leak.entry`
/// per cache entry) and a record's fields are properties named by their labels (memlab still
/// loads the file); a flame graph's frames are types and labels, as `diff` signatures.
#[test]
fn devtools_export_names_blocks_by_type_and_fields_by_label() {
    let dir = tempfile::tempdir().unwrap();
    let snap = cache_leak_snapshot(dir.path());
    let prefix = crate::dump_support::toolchain_prefix("5.3.0");
    let build = samples_dir().parent().unwrap().join(".build/5.3.0/cmt");
    let annotated = Command::new(heapsnap())
        .args(["annotate", snap.to_str().unwrap(), "--ocaml", prefix.to_str().unwrap(), "--cmt", build.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(annotated.status.success(), "{}", String::from_utf8_lossy(&annotated.stderr));
    let file = dir.path().join("cache.heapsnapshot");
    let report = heapsnap_json(&["export", snap.to_str().unwrap(), "--format", "devtools", "-o", file.to_str().unwrap()]);
    assert_eq!(report["largest"][0]["name"], "(string, Cache_leak.entry) Hashtbl.t", "{report}");

    let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let strings: Vec<&str> = v["strings"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let nodes: Vec<u64> = v["nodes"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
    let edges: Vec<u64> = v["edges"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
    let (node_fields, edge_fields) = (7, 3);
    let named = |name: &str| nodes.chunks(node_fields).filter(|n| strings[n[1] as usize] == name).count();
    let entries = heapsnap_json(&["top", snap.to_str().unwrap(), "--by", "type", "--limit", "0"]);
    let count_of =
        |name: &str| entries["groups"].as_array().unwrap().iter().find(|g| g["name"] == name).map(|g| g["count"].as_u64().unwrap());
    assert_eq!(Some(named("Cache_leak.entry") as u64), count_of("Cache_leak.entry"), "one node per entry, named by its type");
    assert!(named("Cache_leak.entry") >= 5000);
    // Each entry's payload is a property edge named `payload` (field 1 of the record).
    let property = v["snapshot"]["meta"]["edge_types"][0].as_array().unwrap().iter().position(|t| t == "property").unwrap() as u64;
    let payloads = edges.chunks(edge_fields).filter(|e| e[0] == property && strings[e[1] as usize] == "payload").count();
    assert_eq!(payloads, named("Cache_leak.entry"), "every entry's payload is named");

    let m = memlab(&file, 3, &[]);
    assert_eq!(m["nodes"], report["nodes"]);

    // The flame graph's frames too: the widest stack goes through the table's type and labels.
    let folded = dir.path().join("cache.folded");
    heapsnap_json(&["export", snap.to_str().unwrap(), "--format", "folded", "-o", folded.to_str().unwrap()]);
    let text = std::fs::read_to_string(&folded).unwrap();
    let widest = text.lines().max_by_key(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).unwrap();
    assert!(
        widest.starts_with(
            "Cache_leak.cache;(string, Cache_leak.entry) Hashtbl.t;.data (string, Cache_leak.entry) Hashtbl.bucketlist array;"
        ) && widest.contains(";.data Cache_leak.entry;.payload string "),
        "{widest}"
    );
}
