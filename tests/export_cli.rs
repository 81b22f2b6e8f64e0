//! `heapsnap export` on a real dump of the cache_leak sample: memlab (from the npm registry,
//! installed by export/scripts/install-memlab.sh) loads the DevTools export and computes the
//! same retained sizes as heapsnap for the biggest dominators; the flame graphs show the
//! cache's Hashtbl as the widest tower; bad input is refused cleanly.

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

mod dump_support;
use dump_support::{dump_ok, heapsnap, repo, samples_dir, Sample};

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
