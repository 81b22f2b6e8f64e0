//! `heapsnap diff` on synthetic snapshots: the command line, the JSON document's shape, errors.

use heapsnap_testkit::synth::{Space, SynthHeap, Value};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn heapsnap(args: &[&str], files: &[PathBuf]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heapsnap")).arg("diff").args(files).args(args).output().expect("run heapsnap diff")
}

/// `Registry.0` holds a list of `n` records {id; name}; `Registry.1` a constant string.
fn registry(dir: &Path, n: u64, reserved_bits: u8) -> PathBuf {
    let mut h = SynthHeap::new();
    h.reserved_header_bits = reserved_bits;
    let mut list = Value::Int(0);
    for i in 0..n {
        let name = h.alloc_string(Space::Major, format!("u{i:04}").as_bytes());
        let rec = h.alloc(Space::Major, 0, &[Value::Int(i as i64), Value::Ptr(name)]);
        list = Value::Ptr(h.alloc(Space::Major, 0, &[Value::Ptr(rec), list]));
    }
    let s = h.alloc_string(Space::Major, b"constant");
    h.add_module("Registry", &[list, Value::Ptr(s)]);
    let path = dir.join(format!("registry-{n}-{reserved_bits}.heapsnap"));
    h.write(&path).expect("write the snapshot");
    path
}

#[test]
fn json_report_has_the_documented_fields() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = [100, 200, 300].iter().map(|&n| registry(dir.path(), n, 0)).collect();
    let out = heapsnap(&["--json", "--limit", "0", "--min-growth", "1000"], &files);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Json = serde_json::from_slice(&out.stdout).expect("JSON");
    for key in ["by", "program", "snapshots", "warnings", "min_growth", "total_groups", "groups", "suspects", "growth", "timings"] {
        assert!(r.get(key).is_some(), "no {key:?} in {r:#}");
    }
    assert_eq!(r["by"], "kind");
    assert_eq!(r["snapshots"].as_array().unwrap().len(), 3);
    assert_eq!(r["total_groups"].as_u64(), Some(r["groups"].as_array().unwrap().len() as u64));
    // Cells (24 B), records (24 B) and names (16 B) grew by 200 each: 12800 bytes.
    let place = &r["growth"][0];
    assert_eq!(place["signature"], "Registry.0 -> list cell+");
    assert_eq!(place["delta_retained"], 200 * (24 + 24 + 16));
    // The list's cells; the records it holds, of another shape, are its children.
    assert_eq!(place["count"], serde_json::json!([100, 200, 300]));
    assert_eq!(place["steps"][0]["edge"], "root");
    let suspect = &r["suspects"][0];
    assert_eq!(suspect["name"], "list cell");
    assert_eq!(suspect["delta_count"], 200);
    assert_eq!(suspect["paths"][0]["signature"], "Registry.0 -> list cell+");
    assert_eq!(suspect["paths"][0]["count"], serde_json::json!([100, 300]));
    let strings = r["suspects"].as_array().unwrap().iter().find(|s| s["name"] == "string").expect("strings grew");
    assert_eq!(strings["paths"][0]["signature"], "Registry.0 -> list cell+ -> .0 block tag 0 size 2 -> .1 string");

    // Human tables by default.
    let out = heapsnap(&["--min-growth", "1000"], &files);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Registry.0 -> list cell+"), "{text}");
    assert!(text.contains("+200 new (100 -> 300)"), "{text}");
}

#[test]
fn bad_invocations_fail_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let one = registry(dir.path(), 10, 0);
    let out = heapsnap(&[], std::slice::from_ref(&one));
    assert_eq!(out.status.code(), Some(2), "one snapshot is not a diff");

    let missing = dir.path().join("missing.heapsnap");
    let out = heapsnap(&[], &[one.clone(), missing]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.heapsnap: No such file"));

    let garbage = dir.path().join("garbage.heapsnap");
    std::fs::write(&garbage, b"not a snapshot at all, but long enough to have a header").unwrap();
    let out = heapsnap(&[], &[one.clone(), garbage]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("heapsnap: error:"));

    let rhb = registry(dir.path(), 10, 16);
    let out = heapsnap(&[], &[one, rhb]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reserved bits (0 and 16)"), "{err}");
}

/// `--max-suspects`, `--max-paths`, `--max-places` and `--limit` take 0 for "no limit", as
/// every result limit does (REPORTS.md, "Result limits").
#[test]
fn zero_is_no_limit() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = [100, 200, 300].iter().map(|&n| registry(dir.path(), n, 0)).collect();
    let report = |args: &[&str]| -> Json {
        let out = heapsnap(&[&["--json", "--min-growth", "1000"], args].concat(), &files);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let count = |r: &Json, key: &str| r[key].as_array().unwrap().len();
    let all = report(&["--max-suspects", "0", "--max-places", "0", "--max-paths", "0", "--limit", "0"]);
    // The list cells, their records and the records' names grew at every step.
    assert_eq!(count(&all, "suspects"), 3, "{all:#}");
    assert!(count(&all, "groups") >= 3);
    assert!(count(&all, "growth") >= 1);
    let one = report(&["--max-suspects", "1", "--max-places", "1", "--max-paths", "1", "--limit", "1"]);
    assert_eq!((count(&one, "suspects"), count(&one, "groups"), count(&one, "growth")), (1, 1, 1));
}
