//! Golden tests of the analyser on real snapshots of the samples, against samples/manifest.json:
//! each sample is started with `--pause`, dumped at `READY 1` with `heapsnap dump`, and
//! analysed through the binary with `--json`.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::dump_support::{heapsnap, samples_dir, toolchain_samples, DiesWithTest};
use heapsnap_testkit::samples::manifest;

/// A sample paused at `READY 1`; killed when dropped.
struct Paused(Child);

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `name` with `--pause`, waits for `READY 1`, dumps it to `dir/name.heapsnap`.
fn dump_sample(name: &str, args: &[String], dir: &Path) -> PathBuf {
    let mut child = Command::new(samples_dir().join(name))
        .arg("--pause")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .dies_with_test()
        .spawn()
        .expect("start the sample");
    let stdout = child.stdout.take().expect("piped stdout");
    let paused = Paused(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read READY");
    assert_eq!(line.trim(), "READY 1", "{name} did not get ready");
    let out = dir.join(format!("{name}.heapsnap"));
    let status = Command::new(heapsnap())
        .args(["dump", "--pid", &paused.0.id().to_string(), "-o"])
        .arg(&out)
        .stderr(Stdio::null())
        .status()
        .expect("run heapsnap dump");
    assert!(status.success(), "heapsnap dump of {name} failed");
    drop(paused);
    out
}

fn json(args: &[&str], snapshot: &Path) -> Value {
    let out = Command::new(heapsnap()).args(args).arg(snapshot).arg("--json").output().expect("run heapsnap");
    assert!(out.status.code().is_some_and(|c| c <= 1), "heapsnap {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("heapsnap {args:?}: bad JSON ({e})"))
}

fn sample(name: &str) -> &'static Value {
    manifest()["samples"].as_array().expect("samples").iter().find(|s| s["name"] == name).expect("sample in manifest")
}

fn args_of(s: &Value) -> Vec<String> {
    s["args"].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// Retained bytes of each root group (`Module.field`, ...).
fn root_groups(snapshot: &Path) -> Vec<(String, u64)> {
    let top = json(&["top", "--by", "root", "--limit", "0"], snapshot);
    top["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| (g["name"].as_str().unwrap().to_string(), g["retained"].as_u64().unwrap()))
        .collect()
}

#[test]
fn global_roots_retain_what_the_manifest_says() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for s in manifest()["samples"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap();
        if !s["variants"].as_array().unwrap().iter().any(|v| v == "std") {
            continue;
        }
        let snapshot = dump_sample(name, &args_of(s), dir.path());
        let groups = root_groups(&snapshot);
        for root in s["roots"].as_array().unwrap().iter().filter(|r| r["kind"] == "global") {
            let label = format!("{}.{}", root["module"].as_str().unwrap(), root["field"]);
            let Some(expect) = root["retained_bytes"].as_array().and_then(|a| a.iter().find(|x| x["step"] == 1)) else { continue };
            let (min, max) = (expect["min"].as_u64().unwrap(), expect["max"].as_u64().unwrap());
            let got = groups.iter().find(|(n, _)| *n == label).map(|g| g.1);
            checked += 1;
            match got {
                Some(b) if (min..=max).contains(&b) => {}
                other => failures.push(format!("{name}: {label} ({}) retains {other:?}, expected {min}..={max}", root["ident"])),
            }
        }
    }
    assert!(checked >= 20, "only {checked} roots checked");
    assert!(failures.is_empty(), "{} of {checked} roots off:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn cache_hashtbl_retains_most_of_the_heap() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dump_sample("cache_leak", &[], dir.path());
    let summary = json(&["summary"], &snapshot);
    let reachable = summary["reachable_bytes"].as_u64().unwrap();
    let groups = root_groups(&snapshot);
    let cache = groups.iter().find(|(n, _)| n == "Cache_leak.1").expect("the cache's root group").1;
    assert!(cache * 10 >= reachable * 9, "the cache retains {cache} of {reachable} bytes");
    assert_eq!(groups[0].0, "Cache_leak.1");
    // Paths to the payloads all go through the cache.
    let paths = json(&["path", "--kind", "string", "--limit", "3"], &snapshot);
    assert_eq!(paths["paths"][0]["root"], "Cache_leak.1");
    let verify = json(&["verify", "--strict"], &snapshot);
    assert_eq!(verify["ok"], true, "{verify:#}");
    // The leak suspect is the table itself (not its bucket array), with its entries counted:
    // the manifest's bucket cells at step 1.
    let cells = sample("cache_leak")["roots"][0]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["desc"].as_str().unwrap().starts_with("bucket cell"))
        .unwrap()["count_by_step"][0]
        .clone();
    let suspects = json(&["suspects"], &snapshot);
    let first = &suspects["suspects"][0];
    assert_eq!(first["kind"], "Hashtbl", "{suspects:#}");
    assert_eq!(first["elements"], serde_json::json!({"count": cells, "of": "Hashtbl entries", "exact": true}));
    assert_eq!(first["held_by"], "Cache_leak.1");
    assert_eq!(first["path"]["root"], "Cache_leak.1");
    assert!(first["retained"].as_u64().unwrap() * 10 >= reachable * 9, "{first:#}");
}

/// The systhread's table is held only by its blocked frame: `suspects` reports those bytes
/// apart, under the frame's function and line (the manifest's), and `summary` says so first.
#[test]
fn what_only_a_stack_frame_holds_is_reported_by_frame() {
    let dir = tempfile::tempdir().unwrap();
    let root = &sample("systhread_stack")["roots"][0];
    let expect = &root["retained_bytes"][0];
    let (min, max) = (expect["min"].as_u64().unwrap(), expect["max"].as_u64().unwrap());
    let line = root["location"].as_str().unwrap().rsplit('/').next().unwrap();
    let snapshot = dump_sample("systhread_stack", &[], dir.path());
    let report = json(&["suspects"], &snapshot);
    let stack = &report["stack_only"];
    let frame = &stack["frames"][0];
    assert_eq!(frame["function"], "Systhread_stack.worker", "{stack:#}");
    assert_eq!(frame["location"], line, "{stack:#}");
    let table = frame["bytes"].as_u64().unwrap();
    assert!((min..=max).contains(&table), "the worker's frame alone holds {table}, expected {min}..={max}");
    // Besides the table, the other frames hold a few small values alone.
    let all = stack["bytes"].as_u64().unwrap();
    assert!(all >= table && all - table < 4096, "{stack:#}");
    // The table is the first suspect: an untyped block of 4096 fields, held by the frame.
    let first = &report["suspects"][0];
    assert_eq!(first["elements"]["count"], 4096, "{report:#}");
    assert!(first["held_by"].as_str().unwrap().starts_with("stack camlSysthread_stack.worker_"), "{first:#}");
    // `summary` opens with the same, in JSON and in text.
    let summary = json(&["summary"], &snapshot);
    assert_eq!(summary["suspects"]["stack_only"], *stack);
    let out = Command::new(heapsnap()).arg("summary").arg(&snapshot).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("Leak suspects: "), "{text}");
    let held = text.lines().find(|l| l.starts_with("held only by stack frames: ")).unwrap_or_else(|| panic!("{text}"));
    assert!(held.contains(&format!("Systhread_stack.worker {line} (")), "{held}");
}

#[test]
fn weakly_held_data_is_not_retained_by_weak_tables() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample("weak_ephemeron");
    let snapshot = dump_sample("weak_ephemeron", &[], dir.path());
    let groups = root_groups(&snapshot);
    for root in s["roots"].as_array().unwrap() {
        let label = format!("{}.{}", root["module"].as_str().unwrap(), root["field"]);
        let max = root["retained_bytes"][0]["max"].as_u64().unwrap();
        let got = groups.iter().find(|(n, _)| *n == label).map_or(0, |g| g.1);
        assert!(got <= max, "{label} retains {got}, at most {max} expected (weakly held data counted?)");
    }
    // The weak-only objects exist but nothing retains them.
    let verify = json(&["verify"], &snapshot);
    let weak_only = verify["weakly_reachable_objects"].as_u64().unwrap();
    let expected: u64 = s["weak_only"].as_array().unwrap().iter().map(|w| w["count"].as_u64().unwrap()).sum();
    assert!(weak_only >= expected, "{weak_only} weakly reachable objects, {expected} expected");
    assert_eq!(verify["error_counts"].as_object().map_or(0, |m| m.len()), 0, "{verify:#}");
}

#[test]
fn closures_are_named_by_function_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dump_sample("closure_list", &[], dir.path());
    let top = json(&["top", "--by", "closure", "--limit", "1"], &snapshot);
    let name = top["groups"][0]["name"].as_str().unwrap();
    assert!(name.starts_with("closure camlClosure_list.fun_") && name.ends_with("(closure_list.ml:9)"), "{name}");
    assert_eq!(top["groups"][0]["count"], 10000);
}

#[test]
fn every_sample_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for s in manifest()["samples"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap();
        if !s["variants"].as_array().unwrap().iter().any(|v| v == "std") {
            continue;
        }
        let snapshot = dump_sample(name, &args_of(s), dir.path());
        let out = Command::new(heapsnap()).args(["verify", "--json"]).arg(&snapshot).output().unwrap();
        if !out.status.success() {
            failures.push(format!("{name}: {}", String::from_utf8_lossy(&out.stdout)));
        }
        let _ = std::io::stderr().flush();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The rhb16 variant (16 reserved header bits): `top --by reserved` groups by the bits' value.
#[test]
fn reserved_header_bits_group_by_reserved() {
    reserved_header_bits_group_by_reserved_on("5.3.0-rhb16");
}

/// The same with OCaml 4.14 configured with 16 reserved ("profinfo") header bits: the bits a
/// C stub wrote come back, without a patched runtime.
#[test]
fn reserved_header_bits_group_by_reserved_on_4_14() {
    reserved_header_bits_group_by_reserved_on("4.14.0-rhb16");
}

fn reserved_header_bits_group_by_reserved_on(toolchain: &str) {
    let dir_rhb16 =
        toolchain_samples(toolchain).unwrap_or_else(|| panic!("samples/build.sh {toolchain}: the rhb16 toolchains are always available"));
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(dir_rhb16.join("reserved_bits"))
        .arg("--pause")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .dies_with_test()
        .spawn()
        .expect("start reserved_bits");
    let stdout = child.stdout.take().unwrap();
    let paused = Paused(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "READY 1");
    let snapshot = dir.path().join("reserved_bits.heapsnap");
    let status = Command::new(heapsnap()).args(["dump", "--pid", &paused.0.id().to_string(), "-o"]).arg(&snapshot).status().unwrap();
    assert!(status.success());
    drop(paused);
    let top = json(&["top", "--by", "reserved", "--limit", "0"], &snapshot);
    let groups = top["groups"].as_array().unwrap();
    for r in sample("reserved_bits")["reserved"].as_array().unwrap() {
        let name = format!("reserved {}", r["value"]);
        let g = groups.iter().find(|g| g["name"] == name.as_str()).unwrap_or_else(|| panic!("no group {name}"));
        assert_eq!(g["count"], r["count"], "{name}");
        let bytes = r["count"].as_u64().unwrap() * 8 * (r["wosize"].as_u64().unwrap() + 1);
        assert_eq!(g["shallow"].as_u64().unwrap(), bytes, "{name}");
    }
    let groups = root_groups(&snapshot);
    for root in sample("reserved_bits")["roots"].as_array().unwrap() {
        let label = format!("{}.{}", root["module"].as_str().unwrap(), root["field"]);
        let expect = &root["retained_bytes"][0];
        let got = groups.iter().find(|(n, _)| *n == label).map(|g| g.1).unwrap_or(0);
        assert!((expect["min"].as_u64().unwrap()..=expect["max"].as_u64().unwrap()).contains(&got), "{label}: {got}");
    }
}
