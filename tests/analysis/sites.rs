//! Allocation sites joined with retainers (issue 20), on samples/alloc_sites.ml: sessions
//! allocated at one line leak into a global Hashtbl, records of the same shape allocated at
//! another line are only kept by a bounded ring. Whether the call stacks come from a tracker
//! that stores them (`--tracker callstack`) or from memtrace (`alloc_sites_memtrace`,
//! `--memtrace FILE`), `top --by site` and `path --site` name the leaking line and the Hashtbl,
//! not the other line; the estimate of a 100 MB leak sampled at 1e-4 is within 25%; a trace of
//! another run or program is refused.

use crate::dump_support::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The line of the `(* SITE name *)` marker in samples/alloc_sites.ml.
fn site_line(name: &str) -> u64 {
    let source = std::fs::read_to_string(repo().join("samples/alloc_sites.ml")).unwrap();
    let marker = format!("(* SITE {name} *)");
    source.lines().position(|l| l.contains(&marker)).map(|n| n as u64 + 1).unwrap_or_else(|| panic!("no marker {marker}"))
}

/// Runs `program ARGS --steps 1` to its READY point and dumps it; the sample stays paused.
fn snapshot_at_ready(program: &Path, args: &[&str], env: &[(&str, &std::ffi::OsStr)], out: &Path) -> Sample {
    let mut args = args.to_vec();
    args.extend(["--steps", "1"]);
    let mut sample = Sample::start_with_env(program, &args, env);
    sample.wait_ready(1);
    dump_ok(sample.pid(), out, &[]);
    sample
}

/// `heapsnap ARGS --json`, expected to fail: its stderr and JSON error.
fn refused(args: &[&std::ffi::OsStr]) -> (String, Value) {
    let out = Command::new(heapsnap()).args(args).arg("--json").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
    (String::from_utf8_lossy(&out.stderr).into_owned(), serde_json::from_slice(&out.stdout).expect("a JSON error"))
}

fn group_at(top: &Value, line: u64) -> Option<&Value> {
    top["groups"].as_array().unwrap().iter().find(|g| g["frames"][0]["line"] == line && g["frames"][0]["file"] == "alloc_sites.ml")
}

/// The answer both kinds of stack must give: the leak's line first, far above the bounded
/// line; its paths go through the sessions Hashtbl, the other line's through the ring.
fn assert_leak_named(snap: &Path, extra: &[&str]) -> Value {
    let (leak, scratch) = (site_line("leak"), site_line("scratch"));
    let top = analyse("top", &[snap], &[&["--by", "site", "--limit", "0"], extra].concat());
    let first = &top["groups"][0];
    assert_eq!(first["frames"][0]["file"], "alloc_sites.ml", "{top:#}");
    assert_eq!(first["frames"][0]["line"], leak, "the largest site is the leak's line: {top:#}");
    assert_eq!(first["frames"][0]["function"], "Alloc_sites.open_session", "{top:#}");
    let bounded = group_at(&top, scratch).unwrap_or_else(|| panic!("the ring's line is a site too: {top:#}"));
    assert_eq!(bounded["frames"][0]["function"], "Alloc_sites.scratch");
    // 2000 sessions of 1048 bytes against a ring of 64.
    let (leak_bytes, bounded_bytes) = (first["estimated_bytes"].as_u64().unwrap(), bounded["estimated_bytes"].as_u64().unwrap());
    assert!(leak_bytes > 10 * bounded_bytes, "{leak_bytes} vs {bounded_bytes}");
    assert!((1_000_000..4_200_000).contains(&leak_bytes), "2000 sessions are 2.1 MB: {leak_bytes}");
    assert!(first["count"].as_u64().unwrap() > 500 && bounded["count"].as_u64().unwrap() <= 64, "{top:#}");
    assert!(first["retained"].as_u64().unwrap() >= first["shallow"].as_u64().unwrap());

    // A longer stack: the leak's line, then its caller.
    let deep = analyse("top", &[snap], &[&["--by", "site", "--site-depth", "2"], extra].concat());
    let frames = deep["groups"][0]["frames"].as_array().unwrap();
    assert_eq!((frames.len(), &frames[0]["line"], &frames[1]["function"]), (2, &Value::from(leak), &Value::from("Alloc_sites.handle")));

    let leak_paths = analyse("path", &[snap], &[&["--site", &format!("alloc_sites.ml:{leak}")], extra].concat());
    let bounded_paths = analyse("path", &[snap], &[&["--site", &format!("samples/alloc_sites.ml:{scratch}")], extra].concat());
    assert_eq!(leak_paths["targets"], first["count"], "{leak_paths:#}");
    let paths = |report: &Value| report["paths"].as_array().unwrap().clone();
    let holds_table = |p: &Value| p["steps"].as_array().unwrap().iter().any(|s| s["label"] == "Hashtbl");
    assert!(!paths(&leak_paths).is_empty() && paths(&leak_paths).iter().all(|p| p["steps"][0]["label"] == "Hashtbl"), "{leak_paths:#}");
    assert!(!paths(&bounded_paths).is_empty() && !paths(&bounded_paths).iter().any(holds_table), "{bounded_paths:#}");
    let root = &paths(&leak_paths)[0]["root"];
    assert!(paths(&leak_paths).iter().all(|p| &p["root"] == root), "one global holds the sessions: {leak_paths:#}");
    assert!(paths(&bounded_paths).iter().all(|p| &p["root"] != root), "{bounded_paths:#}");

    // inspect names a sampled session's allocation stack.
    let steps = paths(&leak_paths)[0]["steps"].as_array().unwrap().clone();
    let example = steps.last().unwrap()["example"].as_str().unwrap().to_string();
    let inspected = analyse("inspect", &[snap], &[&[example.as_str()], extra].concat());
    let stack: Vec<&str> = inspected["allocation"]["stack"].as_array().unwrap().iter().map(|f| f["function"].as_str().unwrap()).collect();
    assert!(inspected["allocation"]["site"].as_str().unwrap().starts_with(&format!("alloc_sites.ml:{leak} ")), "{inspected:#}");
    let at = stack.iter().position(|&f| f == "Alloc_sites.open_session").unwrap_or_else(|| panic!("{stack:?}"));
    assert_eq!(stack.get(at + 1), Some(&"Alloc_sites.handle"), "{stack:?}");
    top
}

#[test]
fn a_tracker_storing_call_stacks_names_the_leaking_site_and_its_retainer() {
    a_tracker_storing_call_stacks_on(&samples_dir());
}

/// OCaml 4.14's memprof: the same stacks, the same answer.
#[test]
fn a_tracker_storing_call_stacks_on_4_14() {
    let Some(dir) = toolchain_samples("4.14.0") else { return };
    a_tracker_storing_call_stacks_on(&dir);
}

fn a_tracker_storing_call_stacks_on(samples: &Path) {
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("callstack.snap");
    let sample = snapshot_at_ready(&samples.join("alloc_sites"), &["--tracker", "callstack", "2000"], &[], &snap);
    drop(sample);
    let top = assert_leak_named(&snap, &[]);
    let join = &top["join"];
    assert!(join["tracked"].as_u64().unwrap() > 1000, "{join:#}");
    assert_eq!(join["from_callstack"], join["tracked"], "every tracked block's stack decodes: {join:#}");
    assert_eq!(join["sampling_rates"], serde_json::json!([0.01]));
    assert_devtools_stacks(&snap, join["from_callstack"].as_u64().unwrap());
}

/// The DevTools export carries the stacks as V8's allocation trace tree: every sampled node
/// names a trace node, and the leak's line is the most common innermost frame outside the
/// standard library.
fn assert_devtools_stacks(snap: &Path, sampled: u64) {
    let out = snap.with_extension("heapsnapshot");
    let status =
        Command::new(heapsnap()).arg("export").arg(snap).args(["--format", "devtools", "-o"]).arg(&out).arg("--json").output().unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let strings = v["strings"].as_array().unwrap();
    let infos: Vec<u64> = v["trace_function_infos"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(v["snapshot"]["trace_function_count"].as_u64().unwrap() as usize, infos.len() / 6);
    // Each trace node's function and parent.
    let mut nodes: std::collections::HashMap<u64, (u64, Option<u64>)> = std::collections::HashMap::new();
    let mut todo: Vec<(&Value, Option<u64>)> = vec![(&v["trace_tree"], None)];
    while let Some((list, parent)) = todo.pop() {
        for node in list.as_array().unwrap().chunks(5) {
            let id = node[0].as_u64().unwrap();
            nodes.insert(id, (node[1].as_u64().unwrap(), parent));
            todo.push((&node[4], Some(id)));
        }
    }
    let function = |f: u64| (strings[infos[f as usize * 6 + 1] as usize].as_str().unwrap(), infos[f as usize * 6 + 4]);
    let fields = v["snapshot"]["meta"]["node_fields"].as_array().unwrap().len();
    let mut sites: std::collections::HashMap<(String, u64), u64> = std::collections::HashMap::new();
    let mut traced = 0;
    for node in v["nodes"].as_array().unwrap().chunks(fields) {
        let mut t = node[5].as_u64().unwrap();
        if t == 0 {
            continue;
        }
        traced += 1;
        // The innermost frame outside the standard library.
        while let Some(&(f, parent)) = nodes.get(&t) {
            let (name, line) = function(f);
            if !name.starts_with("Stdlib") {
                *sites.entry((name.to_string(), line)).or_default() += 1;
                break;
            }
            t = parent.unwrap();
        }
    }
    assert_eq!(traced, sampled);
    let top = sites.iter().max_by_key(|(_, &n)| n).unwrap().0;
    assert_eq!(top, &("Alloc_sites.open_session".to_string(), site_line("leak")), "{sites:?}");
}

#[test]
fn memtrace_ids_are_joined_with_the_trace_of_the_same_run_only() {
    let _one = one_core_at_a_time();
    let Some(programs) = memtrace_programs() else { return };
    let program = programs.join("alloc_sites_memtrace");
    let dir = tempfile::tempdir().unwrap();
    let (snap, trace, lagging) = (dir.path().join("m.snap"), dir.path().join("m.ctf"), dir.path().join("lagging.ctf"));
    let env = [("MEMTRACE", trace.as_os_str()), ("MEMTRACE_RATE", std::ffi::OsStr::new("0.01"))];
    let sample = snapshot_at_ready(&program, &["2000"], &env, &snap);
    let (_, status) = sample.finish();
    assert!(status.success());
    // A trace read while memtrace still held its latest events: its first half of packets.
    let whole = std::fs::read(&trace).unwrap();
    std::fs::write(&lagging, first_packets(&whole, 0.5)).unwrap();

    // Without the trace, nothing is guessed.
    let bare = analyse("top", &[&snap], &["--by", "site"]);
    assert_eq!(bare["join"]["no_trace"], bare["join"]["tracked"], "{bare:#}");
    assert_eq!(bare["groups"], serde_json::json!([]));

    let top = assert_leak_named(&snap, &["--memtrace", trace.to_str().unwrap()]);
    let join = &top["join"];
    assert_eq!(join["from_memtrace"], join["tracked"], "the whole trace has every sampled block: {join:#}");

    // A lagging trace: the blocks it has no event for are counted, and only those.
    let lag = analyse("top", &[&snap], &["--by", "site", "--memtrace", lagging.to_str().unwrap()]);
    let n = |k: &str| lag["join"][k].as_u64().unwrap();
    assert!(n("no_event") > 0, "{lag:#}");
    assert_eq!(n("from_memtrace") + n("no_event"), n("tracked"), "{lag:#}");
    let counted: u64 = lag["groups"].as_array().unwrap().iter().map(|g| g["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, n("from_memtrace"));
    assert_eq!(lag["join"]["trace_truncated"], false);
    // Copied while memtrace was writing a packet: read up to that packet, and said.
    let cut = first_packets(&whole, 0.5).len() + 100;
    std::fs::write(&lagging, &whole[..cut]).unwrap();
    let cut_short = analyse("top", &[&snap], &["--by", "site", "--memtrace", lagging.to_str().unwrap()]);
    let mut expected = lag["join"].clone();
    expected["trace_truncated"] = Value::from(true);
    assert_eq!(cut_short["join"], expected);

    // A trace of another run of the same program, then of another program: refused.
    let other_run = dir.path().join("other-run.ctf");
    let status = Command::new(&program)
        .args(["--steps", "1", "200"])
        .env("MEMTRACE", &other_run)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let (stderr, json) =
        refused(&["top".as_ref(), snap.as_os_str(), "--by".as_ref(), "site".as_ref(), "--memtrace".as_ref(), other_run.as_os_str()]);
    assert!(stderr.starts_with("heapsnap: error: the memtrace trace is of another run"), "{stderr}");
    assert_eq!(json["error"]["kind"], "bad_query");
    let other_program = dir.path().join("other-program.ctf");
    let status = Command::new(programs.join("memtrace_sample"))
        .arg("100")
        .env("MEMTRACE", &other_program)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let site = format!("alloc_sites.ml:{}", site_line("leak"));
    let (stderr, _) =
        refused(&["path".as_ref(), snap.as_os_str(), "--site".as_ref(), site.as_ref(), "--memtrace".as_ref(), other_program.as_os_str()]);
    assert!(stderr.contains("the memtrace trace is of another program") && stderr.contains("memtrace_sample"), "{stderr}");
}

/// The first `share` of a trace's packets (each starts with a magic word and its size in bits).
fn first_packets(trace: &[u8], share: f64) -> &[u8] {
    let mut ends = Vec::new();
    let mut at = 0;
    while at + 8 <= trace.len() {
        assert_eq!(u32::from_le_bytes(trace[at..at + 4].try_into().unwrap()), 0xc1fc1fc1, "a packet at {at}");
        at += u32::from_le_bytes(trace[at + 4..at + 8].try_into().unwrap()) as usize / 8;
        ends.push(at);
    }
    assert!(ends.len() >= 4, "{} packets", ends.len());
    &trace[..ends[(ends.len() as f64 * share) as usize]]
}

#[test]
fn a_100_mb_leak_sampled_at_1e_4_is_estimated_within_25_percent() {
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("big.snap");
    let (sessions, payload) = (100_000u64, 1000u64);
    let sample = snapshot_at_ready(
        &samples_dir().join("alloc_sites"),
        &["--tracker", "callstack", "--rate", "1e-4", &sessions.to_string(), &payload.to_string()],
        &[],
        &snap,
    );
    drop(sample);
    // A session: a record of 3 fields and a Bytes of `payload` bytes, headers included.
    let truth = sessions * (4 * 8 + (payload / 8 + 2) * 8);
    let top = analyse("top", &[&snap], &["--by", "site"]);
    let leak = group_at(&top, site_line("leak")).unwrap_or_else(|| panic!("{top:#}"));
    let estimate = leak["estimated_bytes"].as_u64().unwrap();
    let error = (estimate as f64 - truth as f64).abs() / truth as f64;
    assert!(error < 0.25, "estimated {estimate} bytes for {truth}: {:.1}% off", error * 100.0);
    // About 1300 samples: the sampled blocks themselves are about 1% of the leak.
    assert!(leak["shallow"].as_u64().unwrap() < truth / 20, "{leak:#}");
}

#[test]
fn diff_names_the_sites_of_the_new_objects() {
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let snaps: Vec<PathBuf> = (1..=3).map(|i| dir.path().join(format!("{i}.snap"))).collect();
    let mut sample = Sample::start(&samples_dir().join("alloc_sites"), &["--steps", "3", "--tracker", "callstack", "1000"]);
    for (i, snap) in snaps.iter().enumerate() {
        sample.wait_ready(i as u32 + 1);
        dump_ok(sample.pid(), snap, &[]);
        sample.release();
    }
    drop(sample);
    let paths: Vec<&Path> = snaps.iter().map(PathBuf::as_path).collect();
    let (leak, scratch) = (format!("alloc_sites.ml:{} ", site_line("leak")), format!("alloc_sites.ml:{} ", site_line("scratch")));
    let by_site = analyse("diff", &paths, &["--by", "site"]);
    let suspects = by_site["suspects"].as_array().unwrap();
    assert!(suspects[0]["site"].as_str().unwrap().starts_with(&leak), "{by_site:#}");
    let grown = suspects[0]["estimated_bytes"].as_array().unwrap();
    assert!(grown[2].as_u64().unwrap() > 2 * grown[0].as_u64().unwrap(), "{by_site:#}");
    assert!(!suspects.iter().any(|s| s["site"].as_str().unwrap().starts_with(&scratch)), "the ring is bounded: {by_site:#}");
    assert_eq!(by_site["join"].as_array().unwrap().len(), 3);

    // Grouped by kind, the suspect of the sessions' payloads (strings) names the leak's line.
    let by_kind = analyse("diff", &paths, &[]);
    let strings = by_kind["suspects"].as_array().unwrap().iter().find(|s| s["name"] == "string").unwrap_or_else(|| panic!("{by_kind:#}"));
    assert!(strings["sites"][0]["site"].as_str().unwrap().starts_with(&leak), "{strings:#}");

    // On copies without an index, the diff and its suspects' sites analyse each snapshot once
    // (the diff's classification and the sites' sections come from one index), and say the same.
    let fresh = tempfile::tempdir().unwrap();
    let copies: Vec<PathBuf> = snaps
        .iter()
        .map(|p| {
            let copy = fresh.path().join(p.file_name().unwrap());
            std::fs::copy(p, &copy).unwrap();
            copy
        })
        .collect();
    let out = Command::new(heapsnap())
        .arg("diff")
        .args(&copies)
        .arg("--json")
        .env("HEAPSNAP_TRACE", "1")
        .env("HEAPSNAP_INDEX_IN_BACKGROUND", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stderr).matches("graph: edges at").count(), 3, "one analysis per snapshot");
    let fresh_kind: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sites = |r: &Value| r["suspects"].as_array().unwrap().iter().map(|s| s["sites"].clone()).collect::<Vec<_>>();
    assert_eq!(sites(&fresh_kind), sites(&by_kind));

    // By a grouping the index does not save, on copies without an index: the diff's
    // classification is made from the analysis that builds the index the sites read.
    let fresher = tempfile::tempdir().unwrap();
    let copies: Vec<PathBuf> = snaps
        .iter()
        .map(|p| {
            let copy = fresher.path().join(p.file_name().unwrap());
            std::fs::copy(p, &copy).unwrap();
            copy
        })
        .collect();
    let out = Command::new(heapsnap())
        .arg("diff")
        .args(&copies)
        .args(["--by", "closure", "--json"])
        .env("HEAPSNAP_TRACE", "1")
        .env("HEAPSNAP_INDEX_IN_BACKGROUND", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stderr).matches("graph: edges at").count(), 3, "one analysis per snapshot");
    let fresh_closure: Value = serde_json::from_slice(&out.stdout).unwrap();
    let by_closure = analyse("diff", &paths, &["--by", "closure"]);
    let mut fresh_closure = fresh_closure;
    let mut by_closure = by_closure;
    for r in [&mut fresh_closure, &mut by_closure] {
        r.as_object_mut().unwrap().remove("timings");
        for s in r["snapshots"].as_array_mut().unwrap() {
            s.as_object_mut().unwrap().remove("name");
        }
    }
    assert_eq!(fresh_closure, by_closure, "the same report as with the indexes there (and the diff analysing)");
}

#[test]
fn snapshots_without_statmemprof_are_refused_for_sites() {
    let Some(dir) = toolchain_samples("5.2.0") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let snap = tmp.path().join("old.snap");
    let sample = snapshot_at_ready(&dir.join("alloc_sites"), &["100"], &[], &snap);
    drop(sample);
    let (stderr, json) = refused(&["top".as_ref(), snap.as_os_str(), "--by".as_ref(), "site".as_ref()]);
    assert!(stderr.contains("no statmemprof tables"), "{stderr}");
    assert_eq!(json["error"]["kind"], "bad_query");
}
