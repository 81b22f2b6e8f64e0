//! The analysis commands end to end on synthetic snapshots (`heapsnap_testkit::synth`), through
//! the binary, with `--json`.

use heapsnap_format::SymbolKind;
use heapsnap_testkit::synth::{addresses, Space, SynthHeap, Value};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `heapsnap SUBCOMMAND SNAPSHOT ARGS...`
fn heapsnap(args: &[&str], snapshot: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heapsnap")).arg(args[0]).arg(snapshot).args(&args[1..]).output().expect("run heapsnap")
}

fn json(args: &[&str], snapshot: &Path) -> Json {
    let out = heapsnap(args, snapshot);
    assert!(out.status.success(), "heapsnap {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// A small app: a cache (module field 0) holding a list of records with strings and
/// closures, a garbage block, free slots, and an unreachable block.
struct App {
    _dir: tempfile::TempDir,
    path: PathBuf,
    heap: SynthHeap,
    list_head: u64,
    orphan: u64,
}

fn app() -> App {
    let mut h = SynthHeap::new();
    h.free_every = 5;
    let code = addresses::CODE_BASE + 0x40;
    h.add_symbol("camlApp.handler_12", code, code + 0x40, SymbolKind::Function);
    let mut list = Value::Int(0);
    let mut head = 0;
    for i in 0..100 {
        let name = h.alloc_string(Space::Major, format!("entry-{i}").as_bytes());
        let handler = h.alloc_closure(Space::Major, code, 1, &[Value::Ptr(name)]);
        let record = h.alloc(Space::Major, 0, &[Value::Int(i), Value::Ptr(name), Value::Ptr(handler)]);
        head = h.alloc(Space::Major, 0, &[Value::Ptr(record), list]);
        list = Value::Ptr(head);
    }
    let garbage = h.alloc(Space::Major, 0, &[Value::Int(1), Value::Int(2), Value::Int(3)]);
    h.make_garbage(garbage);
    let orphan = h.alloc(Space::Major, 0, &[Value::Int(7)]);
    let config = h.alloc_string(Space::Major, b"config");
    h.add_module("App", &[list, Value::Ptr(config)]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.heapsnap");
    h.write(&path).unwrap();
    App { _dir: dir, path, heap: h, list_head: head, orphan }
}

#[test]
fn summary_counts_live_garbage_and_free() {
    let a = app();
    let s = json(&["summary", "--json"], &a.path);
    // 100 x (string, closure, record, cell) + orphan + config string
    assert_eq!(s["objects"], 402);
    assert_eq!(s["reachable_objects"], 401);
    assert_eq!(s["unreachable_objects"], 1);
    assert_eq!(s["garbage_objects"], 1);
    assert_eq!(s["garbage_bytes"], 32);
    assert!(s["free_slots"].as_u64().unwrap() > 50);
    assert_eq!(s["roots"][0]["kind"], "global");
    assert_eq!(s["roots"][0]["retained"], s["reachable_bytes"]);
    let human = heapsnap(&["summary"], &a.path);
    assert!(String::from_utf8_lossy(&human.stdout).contains("garbage"));
}

#[test]
fn top_groups_by_kind_closure_and_root() {
    let a = app();
    let kind = json(&["top", "--by", "kind", "--json"], &a.path);
    let groups = kind["groups"].as_array().unwrap();
    let cells = groups.iter().find(|g| g["name"] == "list cell").unwrap();
    assert_eq!(cells["count"], 100);
    // The list's cells nest: their union retains the whole list, counted once.
    // names "entry-0".."entry-9" take 16 bytes, the others 24; closure, record 32; cell 24.
    let whole: u64 = 10 * 16 + 90 * 24 + 100 * (32 + 32 + 24);
    assert_eq!(cells["retained"], whole);
    let closures = json(&["top", "--by", "closure", "--json"], &a.path);
    assert_eq!(closures["groups"].as_array().unwrap().len(), 1);
    assert_eq!(closures["groups"][0]["name"], "closure camlApp.handler_12");
    assert_eq!(closures["groups"][0]["count"], 100);
    let roots = json(&["top", "--by", "root", "--json"], &a.path);
    assert_eq!(roots["groups"][0]["name"], "App.0");
    assert_eq!(roots["groups"][0]["retained"], whole);
    assert_eq!(roots["groups"][1]["name"], "App.1");
}

#[test]
fn dominator_tree_report() {
    let a = app();
    let tree = json(&["dominators", "--depth", "3", "--min-percent", "0", "--json"], &a.path);
    assert_eq!(tree["description"], "(all roots)");
    let globals = &tree["children"][0];
    assert_eq!(globals["description"], "(global roots)");
    let head = &globals["children"][0];
    assert_eq!(head["address"], format!("{:#x}", a.heap.address_of(a.list_head)));
    assert_eq!(head["root"], "App.0");
    assert_eq!(head["retained"], 10 * 16 + 90 * 24 + 100 * (32 + 32 + 24));
}

#[test]
fn paths_inspect_and_verify() {
    let a = app();
    // The last cell of the list (the first allocated) is 100 cells deep.
    let head = a.heap.address_of(a.list_head);
    let paths = json(&["path", "--json", &format!("{head:#x}")], &a.path);
    assert_eq!(paths["paths"][0]["root"], "App.0");
    let by_kind = json(&["path", "--json", "--kind", "string"], &a.path);
    assert_eq!(by_kind["targets"], 101);
    let merged = by_kind["paths"].as_array().unwrap();
    let through_list: u64 = merged.iter().filter(|p| p["root"] == "App.0").map(|p| p["count"].as_u64().unwrap()).sum();
    assert_eq!(through_list, 100);
    // Past the head, the list's tail fields fold into one step repeated 1..99 times.
    let folded = merged.iter().find(|p| p["count"] == 99).unwrap();
    let tail = folded["steps"].as_array().unwrap().iter().find(|s| s["repeat_max"] == 99).unwrap();
    assert_eq!((tail["repeat_min"].as_u64(), tail["field"].as_str()), (Some(1), Some("1")));

    let inspect = json(&["inspect", "--json", &format!("{head:#x}")], &a.path);
    assert_eq!(inspect["fields"][0]["kind"], "pointer");
    assert_eq!(inspect["fields"][1]["kind"], "pointer");
    assert_eq!(inspect["immediate_dominator"], "(global roots)");
    assert_eq!(inspect["roots"][0], "App.0");

    let ok = heapsnap(&["verify"], &a.path);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stdout));
    let strict = heapsnap(&["verify", "--strict", "--json"], &a.path);
    assert_eq!(strict.status.code(), Some(1));
    let report: Json = serde_json::from_slice(&strict.stdout).unwrap();
    assert_eq!(report["error_counts"]["unreachable_major_block"], 1);
    assert_eq!(report["errors"][0]["address"], format!("{:#x}", a.heap.address_of(a.orphan)));
}

#[test]
fn bad_input_gets_a_clear_error() {
    let a = app();
    let bytes = std::fs::read(&a.path).unwrap();
    let truncated = a.path.with_extension("truncated");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    for cmd in ["summary", "top", "dominators", "verify"] {
        let out = heapsnap(&[cmd], &truncated);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("heapsnap: error") && !err.contains("panicked"), "{cmd}: {err}");
    }
    let nowhere = heapsnap(&["inspect", "0x10"], &a.path);
    assert_eq!(nowhere.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&nowhere.stderr).contains("no block at address 0x10"));
}

/// The index level of `snapshot`'s saved index (opening it builds none when one is there).
fn index_level(snapshot: &Path) -> Option<heapsnap_index::Needs> {
    heapsnap_index::store::open_or_build_for(snapshot, heapsnap_index::Needs::Meta, &heapsnap_analyze::Progress::hidden())
        .expect("open the index")
        .index
        .level()
}

/// Waits (at most a minute) until `snapshot`'s saved index serves `needs`, building none.
fn wait_for_saved(snapshot: &Path, needs: heapsnap_index::Needs) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !heapsnap_index::store::saved_serves(snapshot, needs) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    true
}

/// A first report (`summary`, `top`, `dominators`, `suspects`, `path`, `inspect`) answers from
/// the analysis and leaves the whole index to a detached process; what it printed is word for
/// word what the same report prints from the index afterwards (text and JSON, every grouping
/// `top` has on this snapshot).
#[test]
fn a_first_look_answers_as_the_index_does() {
    let dir = tempfile::tempdir().unwrap();
    // An object to inspect: the largest the global roots dominate, found on a copy.
    let scratch = dir.path().join("scratch.heapsnap");
    heapsnap_testkit::synth::large_heap_shape(300).heap.write(&scratch).expect("write a synthetic snapshot");
    let tree = Command::new(env!("CARGO_BIN_EXE_heapsnap"))
        .args(["dominators", "--json", "--depth", "2"])
        .arg(&scratch)
        .env("HEAPSNAP_INDEX_IN_BACKGROUND", "0")
        .output()
        .expect("run heapsnap");
    let tree: serde_json::Value = serde_json::from_slice(&tree.stdout).expect("dominators --json");
    let address =
        tree["children"][0]["children"][0]["address"].as_str().unwrap_or_else(|| panic!("no child with an address: {tree}")).to_string();
    let reports: Vec<Vec<&str>> = vec![
        vec!["summary"],
        vec!["summary", "--json"],
        vec!["summary", "--limit", "0", "--json"],
        vec!["top"],
        vec!["top", "--by", "kind", "--json"],
        vec!["top", "--by", "closure", "--limit", "0"],
        vec!["top", "--by", "root"],
        vec!["top", "--by", "root", "--json"],
        vec!["dominators"],
        vec!["dominators", "--json", "--depth", "8", "--min-percent", "0", "--max-children", "0"],
        vec!["suspects"],
        vec!["suspects", "--json", "--min-percent", "0.5", "--limit", "0"],
        vec!["path", "--kind", "string", "--json"],
        vec!["inspect", &address, "--json"],
    ];
    for (i, report) in reports.iter().enumerate() {
        let snapshot = dir.path().join(format!("first-{i}.heapsnap"));
        heapsnap_testkit::synth::large_heap_shape(300).heap.write(&snapshot).expect("write a synthetic snapshot");
        let run = || {
            let out = Command::new(env!("CARGO_BIN_EXE_heapsnap"))
                .args(&report[..1])
                .arg(&snapshot)
                .args(&report[1..])
                .env_remove("HEAPSNAP_INDEX_IN_BACKGROUND")
                .env("HEAPSNAP_TRACE", "1")
                .output()
                .expect("run heapsnap");
            assert!(out.status.success(), "{report:?}: {}", String::from_utf8_lossy(&out.stderr));
            (String::from_utf8(out.stdout).unwrap(), String::from_utf8_lossy(&out.stderr).to_string())
        };
        let (first, trace) = run();
        assert!(trace.contains("the answer, from the analysis"), "{report:?}: the first look did not answer from the analysis: {trace}");
        assert!(wait_for_saved(&snapshot, heapsnap_index::Needs::All), "{report:?}: the index was not completed in the background");
        let (second, trace) = run();
        assert!(!trace.contains("the answer, from the analysis"), "{report:?}: the second look analysed again: {trace}");
        assert!(!first.is_empty());
        assert_eq!(first, second, "{report:?}: the first look and the one from the index differ");
    }
}

/// A first `summary` answers before any of the index is written and leaves a detached process
/// to build it, so that the next report finds it; with `HEAPSNAP_INDEX_IN_BACKGROUND=0`, the
/// summary writes the index itself, only what it read.
#[test]
fn the_rest_of_the_index_is_built_after_the_first_answer() {
    use heapsnap_index::Needs;
    let dir = tempfile::tempdir().unwrap();
    for (background, name) in [(true, "on.heapsnap"), (false, "off.heapsnap")] {
        let snapshot = dir.path().join(name);
        heapsnap_testkit::synth::large_heap_shape(200).heap.write(&snapshot).expect("write a synthetic snapshot");
        let mut summary = Command::new(env!("CARGO_BIN_EXE_heapsnap"));
        summary.arg("summary").arg(&snapshot).arg("--json").env_remove("HEAPSNAP_INDEX_IN_BACKGROUND");
        if !background {
            summary.env("HEAPSNAP_INDEX_IN_BACKGROUND", "0");
        }
        let out = summary.output().expect("run heapsnap summary");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        if background {
            assert!(wait_for_saved(&snapshot, Needs::All), "the index was not completed in the background");
        } else {
            std::thread::sleep(std::time::Duration::from_secs(2));
            assert_eq!(index_level(&snapshot), Some(Needs::Meta), "the index was completed with the background turned off");
        }
    }
}

/// The live processes whose command line (its NUL-separated arguments) contains `part`: a
/// zombie has no command line, so only live processes count.
fn processes_running(part: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).unwrap_or_default()).contains(part))
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect()
}

/// The completion a first look leaves runs detached and keeps the snapshot locked: in a session
/// of its own (the terminal's Ctrl-C for the next command does not reach it), at a lower
/// priority, holding the snapshot's `flock` from before the command the user ran exits until
/// its index is saved. The test holds the completions' turn (`completing.lock` in the cache directory),
/// so that the completion is seen waiting, whatever the machine's speed.
#[test]
fn the_completion_is_detached_and_holds_the_snapshot_locked() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let turn = hold_completions_turn(&cache);
    let snapshot = dir.path().join("detached.heapsnap");
    heapsnap_testkit::synth::large_heap_shape(50).heap.write(&snapshot).expect("write a synthetic snapshot");
    let out = Command::new(env!("CARGO_BIN_EXE_heapsnap"))
        .arg("summary")
        .arg(&snapshot)
        .env_remove("HEAPSNAP_INDEX_IN_BACKGROUND")
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .expect("run heapsnap summary");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The completion: the process that answered, gone on after its answer (found by its
    // command line; the one the test started has exited).
    let wanted = format!("summary\0{}\0", snapshot.display());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let pid = loop {
        if let Some(&pid) = processes_running(&wanted).first() {
            break pid;
        }
        assert!(std::time::Instant::now() < deadline, "no completion started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // Its session and priority (fields 6 and 19 of /proc/PID/stat, after the command's name),
    // once it has detached.
    let stat = |pid: i32| {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = text.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<i64>().ok());
        (field(3), field(16))
    };
    // SAFETY: getsid(0) only reads this process's session id.
    let our_session = i64::from(unsafe { libc::getsid(0) });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (session, nice) = loop {
        let (session, nice) = stat(pid);
        // Its priority is lowered once it has saved the meta level.
        if (session == Some(i64::from(pid)) && nice >= Some(10)) || std::time::Instant::now() > deadline {
            break (session, nice);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(session, Some(i64::from(pid)), "the completion leads a session of its own (ours is {our_session})");
    // Lowered to 10, from this test's own priority (the test may run niced itself).
    // SAFETY: getpriority only reads this process's priority.
    let base = i64::from(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) });
    let lowered = base.max(10);
    assert_eq!(nice, Some(lowered), "the completion runs at a lower priority");
    // Every thread of it (Linux gives each its own priority: the analysis's workers were
    // started before), but those that answer other commands from its analysis.
    let threads: Vec<(String, Option<i64>)> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|t| {
            let tid: i32 = t.file_name().to_str().unwrap().parse().unwrap();
            let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default().trim().to_string();
            (name, stat(tid).1)
        })
        .collect();
    assert!(threads.len() > 2, "{threads:?}");
    for (name, nice) in &threads {
        let expected = if name.starts_with("held analysis") { base } else { lowered };
        assert_eq!(*nice, Some(expected), "thread {name} of the completion: {threads:?}");
    }
    assert!(threads.iter().any(|(name, _)| name == "held analysis"), "no thread answers other commands: {threads:?}");
    // The first look has exited; its completion, waiting for its turn, holds the snapshot.
    let probe = std::fs::File::open(&snapshot).unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_ne!(unsafe { libc::flock(probe.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0, "the snapshot is not locked");
    assert!(!heapsnap_index::store::saved_serves(&snapshot, heapsnap_index::Needs::All), "the completion ran before its turn");
    drop(turn);
    assert!(wait_for_saved(&snapshot, heapsnap_index::Needs::All), "the index was not completed once the turn was given");
    // SAFETY: as above; granted once the completion has ended.
    assert_eq!(unsafe { libc::flock(probe.as_raw_fd(), libc::LOCK_EX) }, 0);
}

/// With the completion in the background on, a report answers from a child of the command the
/// user ran (which goes on to complete the index): the command still ends as the report does,
/// exit code for exit code, and a signal that ends the child ends it alike.
#[test]
fn a_report_answered_by_its_child_ends_as_the_report_does() {
    use std::os::unix::process::ExitStatusExt;
    let a = app();
    let run = |args: &[&str], snapshot: &Path| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_heapsnap"));
        cmd.arg(args[0]).arg(snapshot).args(&args[1..]).env_remove("HEAPSNAP_INDEX_IN_BACKGROUND");
        cmd.output().expect("run heapsnap")
    };
    let strict = run(&["verify", "--strict", "--json"], &a.path);
    assert_eq!(strict.status.code(), Some(1), "{}", String::from_utf8_lossy(&strict.stderr));
    let report: Json = serde_json::from_slice(&strict.stdout).expect("the whole report, through the child");
    assert_eq!(report["error_counts"]["unreachable_major_block"], 1);
    assert_eq!(run(&["verify"], &a.path).status.code(), Some(0));
    let truncated = a.path.with_extension("truncated");
    let bytes = std::fs::read(&a.path).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let failed = run(&["summary"], &truncated);
    assert_eq!(failed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&failed.stderr).contains("heapsnap: error"));
    // A reader that stops early: the child dies of SIGPIPE, and so does the command.
    let mut top = Command::new(env!("CARGO_BIN_EXE_heapsnap"))
        .args(["top", "--limit", "0", "--by", "kind"])
        .arg(&a.path)
        .env_remove("HEAPSNAP_INDEX_IN_BACKGROUND")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(top.stdout.take());
    let status = top.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
}

/// A command killed before it has answered leaves nothing running: its child, which was
/// analysing, dies with it, and no index is written.
#[test]
fn a_command_killed_before_its_answer_leaves_no_child() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("killed.heapsnap");
    heapsnap_testkit::synth::large_heap_shape(400_000).heap.write(&snapshot).expect("write a synthetic snapshot");
    let mut summary = Command::new(env!("CARGO_BIN_EXE_heapsnap"))
        .arg("summary")
        .arg(&snapshot)
        .env_remove("HEAPSNAP_INDEX_IN_BACKGROUND")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let wanted = format!("summary\0{}\0", snapshot.display());
    // The child has started (two processes of that command line), not answered (nothing on
    // the output yet: the answer is one write at the end of the analysis).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while processes_running(&wanted).len() < 2 {
        assert!(std::time::Instant::now() < deadline, "the command started no child");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    summary.kill().unwrap();
    summary.wait().unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(summary.stdout.as_mut().unwrap(), &mut answer).unwrap();
    // Output would mean the child went on without its parent (or, on a machine fast enough to
    // answer within the first few milliseconds, that the kill came too late).
    assert!(answer.is_empty(), "an answer after the command was killed: {answer}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !processes_running(&wanted).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the child outlived the command");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!heapsnap_index::store::saved_serves(&snapshot, heapsnap_index::Needs::Meta), "an index was written");
}

/// `heapsnap REPORT SNAP ARGS...` with the completion in the background on (or off), the cache
/// in `cache`, traced: its output and its trace, within `timeout` (else it is killed, and the
/// test fails: it waited).
fn report_within(report: &[&str], snapshot: &Path, cache: &Path, background: bool, timeout: std::time::Duration) -> (String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_heapsnap"));
    cmd.arg(report[0]).arg(snapshot).args(&report[1..]).env("XDG_CACHE_HOME", cache).env("HEAPSNAP_TRACE", "1");
    if background {
        cmd.env_remove("HEAPSNAP_INDEX_IN_BACKGROUND");
    } else {
        cmd.env("HEAPSNAP_INDEX_IN_BACKGROUND", "0");
    }
    let out_path = snapshot.with_extension("out");
    let err_path = snapshot.with_extension("err");
    let mut child = cmd
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("run heapsnap");
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{report:?} (background {background}) still waiting after {timeout:?}: {}", std::fs::read_to_string(&err_path).unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (out, err) = (std::fs::read_to_string(&out_path).unwrap(), std::fs::read_to_string(&err_path).unwrap());
    assert!(status.success(), "{report:?}: {err}");
    (out, err)
}

/// A first look at a fresh copy of the synthetic heap `items` (no index: the answer from the
/// analysis), once its completion has ended.
fn first_look(report: &[&str], items: u64, dir: &Path, cache: &Path) -> String {
    let snapshot = dir.join(format!("reference-{}.heapsnap", report.join("-").replace(['/', '.'], "_")));
    heapsnap_testkit::synth::large_heap_shape(items).heap.write(&snapshot).expect("write a synthetic snapshot");
    let (out, trace) = report_within(report, &snapshot, cache, true, std::time::Duration::from_secs(60));
    assert!(trace.contains("the answer, from the analysis"), "{report:?}: the reference did not answer from the analysis: {trace}");
    // The completion holds the snapshot's lock from before the command exits until it ends.
    flock_snapshot(&snapshot, libc::LOCK_SH);
    assert!(!out.is_empty());
    out
}

/// The completions' turn (`completing.lock` in the cache directory `cache`), held while the
/// file returned is open: the completion a first look leaves waits for it, after saving the
/// meta level.
fn hold_completions_turn(cache: &Path) -> std::fs::File {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(cache.join("heapsnap")).unwrap();
    let turn = std::fs::File::create(cache.join("heapsnap").join("completing.lock")).unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_eq!(unsafe { libc::flock(turn.as_raw_fd(), libc::LOCK_EX) }, 0);
    turn
}

/// A `flock` on the snapshot file (held while the file returned is open).
fn flock_snapshot(snapshot: &Path, how: i32) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(snapshot).unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), how) }, 0);
    file
}

/// Right after a first look, while its process saves the index (held here at its turn among
/// completions, after the meta level), every report on the snapshot whose level is not saved
/// yet is answered by that process from the analysis it holds, word for word as a first look
/// answers, even after an asker that says nothing; the holder answers its own snapshot only (a
/// copy of the file has none), through an owner-only socket that goes once the index is saved.
#[test]
fn reports_right_after_a_first_look_are_answered_by_the_process_holding_its_analysis() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let reports: Vec<Vec<&str>> = vec![
        vec!["dominators", "--json", "--depth", "6", "--min-percent", "0"],
        vec!["suspects", "--json", "--min-percent", "0.5"],
        vec!["path", "--kind", "string", "--json"],
        vec!["dominators", "--depth", "3"],
    ];
    let references: Vec<String> = reports.iter().map(|r| first_look(r, 300, dir.path(), &cache)).collect();
    let turn = hold_completions_turn(&cache);
    let snapshot = dir.path().join("held.heapsnap");
    heapsnap_testkit::synth::large_heap_shape(300).heap.write(&snapshot).expect("write a synthetic snapshot");
    let (_, trace) = report_within(&["top"], &snapshot, &cache, true, std::time::Duration::from_secs(60));
    assert!(trace.contains("the answer, from the analysis"), "{trace}");
    assert!(wait_for_saved(&snapshot, heapsnap_index::Needs::Meta), "the meta level was not saved");
    let held = cache.join("heapsnap").join("held");
    assert_eq!(std::fs::metadata(&held).unwrap().permissions().mode() & 0o777, 0o700, "the holders' directory is not owner-only");
    assert_eq!(std::fs::read_dir(&held).unwrap().count(), 1, "one holder's socket");
    // An asker that connects and says nothing delays the next one (the holder answers one at
    // a time), but only until the holder drops it.
    let socket = std::fs::read_dir(&held).unwrap().next().unwrap().unwrap().path();
    let stalled = std::os::unix::net::UnixStream::connect(&socket).expect("connect to the holder");
    for (report, reference) in reports.iter().zip(&references) {
        let (out, trace) = report_within(report, &snapshot, &cache, true, std::time::Duration::from_secs(30));
        assert!(trace.contains("the answer, from the process holding the analysis"), "{report:?} not answered by the holder: {trace}");
        assert_eq!(&out, reference, "{report:?} from the held analysis");
    }
    drop(stalled);
    // Another file with the same bytes has no holder: its report analyses it.
    let copy = dir.path().join("copy.heapsnap");
    std::fs::copy(&snapshot, &copy).unwrap();
    let (out, trace) = report_within(&reports[0], &copy, &cache, true, std::time::Duration::from_secs(30));
    assert!(!trace.contains("holding the analysis") && trace.contains("the answer, from the analysis"), "{trace}");
    assert_eq!(out, references[0]);
    drop(turn);
    for completed in [&snapshot, &copy] {
        assert!(wait_for_saved(completed, heapsnap_index::Needs::All), "the index was not completed once the turn was given");
        flock_snapshot(completed, libc::LOCK_SH);
    }
    assert_eq!(std::fs::read_dir(&held).unwrap().count(), 0, "the holder's socket outlived it");
}

/// A report never waits for a completion longer than a first look would take: with one held up
/// (the test holds the snapshot's lock, as a running completion does) and no index saved, every
/// report answers from its own analysis, word for word as a first look without any index
/// does, with the completion in the background on or off.
#[test]
fn a_report_does_not_wait_for_a_completion_held_up() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let reports: Vec<Vec<&str>> = vec![
        vec!["summary", "--json"],
        vec!["top", "--by", "root", "--json"],
        vec!["dominators", "--json", "--depth", "6", "--min-percent", "0"],
        vec!["suspects", "--json", "--min-percent", "0.5"],
        vec!["path", "--kind", "string", "--json"],
    ];
    for (i, report) in reports.iter().enumerate() {
        let reference = first_look(report, 300, dir.path(), &cache);
        let snapshot = dir.path().join(format!("held-{i}.heapsnap"));
        heapsnap_testkit::synth::large_heap_shape(300).heap.write(&snapshot).expect("write a synthetic snapshot");
        let held = flock_snapshot(&snapshot, libc::LOCK_EX);
        for background in [true, false] {
            let (out, trace) = report_within(report, &snapshot, &cache, background, std::time::Duration::from_secs(30));
            assert_eq!(out, reference, "{report:?} (background {background}), the completion held up: {trace}");
        }
        drop(held);
    }
}

/// A completion saves the meta level first, ahead of its turn among completions (here held
/// by the test): a second `summary` or `top` right after a first look reads it, while the rest
/// is still to come, and a `dominators` does not wait for the rest (the process completing the
/// index answers it from its analysis); each answers word for word as a first look without any
/// index does.
#[test]
fn a_second_report_reads_the_level_saved_ahead_of_the_rest() {
    use heapsnap_index::store::saved_serves;
    use heapsnap_index::Needs;
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let from_meta: Vec<Vec<&str>> =
        vec![vec!["summary", "--json"], vec!["top", "--by", "root", "--json"], vec!["top", "--by", "closure", "--json", "--limit", "0"]];
    let dominators = vec!["dominators", "--json", "--depth", "6", "--min-percent", "0"];
    let references: Vec<String> = from_meta.iter().chain([&dominators]).map(|r| first_look(r, 300, dir.path(), &cache)).collect();
    let turn = hold_completions_turn(&cache);
    let snapshot = dir.path().join("second.heapsnap");
    heapsnap_testkit::synth::large_heap_shape(300).heap.write(&snapshot).expect("write a synthetic snapshot");
    let (_, trace) = report_within(&["top"], &snapshot, &cache, true, std::time::Duration::from_secs(60));
    assert!(trace.contains("the answer, from the analysis"), "{trace}");
    assert!(wait_for_saved(&snapshot, Needs::Meta), "the meta level was not saved ahead of the completion's turn");
    assert!(!saved_serves(&snapshot, Needs::Tree), "the completion went on without its turn");
    let probe = std::fs::File::open(&snapshot).unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_ne!(unsafe { libc::flock(probe.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) }, 0, "no completion holds the snapshot");
    for (report, reference) in from_meta.iter().zip(&references) {
        let (out, trace) = report_within(report, &snapshot, &cache, true, std::time::Duration::from_secs(30));
        assert!(!trace.contains("the answer, from the analysis"), "{report:?} analysed instead of reading the meta level: {trace}");
        assert!(!trace.contains("holding the analysis"), "{report:?} asked the holder for what the meta level holds: {trace}");
        assert_eq!(&out, reference, "{report:?} from the meta level saved ahead of the rest");
    }
    let (out, trace) = report_within(&dominators, &snapshot, &cache, true, std::time::Duration::from_secs(30));
    assert!(trace.contains("the answer, from the process holding the analysis"), "{trace}");
    assert_eq!(&out, references.last().unwrap(), "dominators while the completion waits for its turn");
    assert!(!saved_serves(&snapshot, Needs::Tree), "the completion went on without its turn");
    drop(turn);
    assert!(wait_for_saved(&snapshot, Needs::All), "the index was not completed once the turn was given");
    flock_snapshot(&snapshot, libc::LOCK_SH);
}
