//! The allocation-site join on synthetic snapshots and traces: memtrace ids find their
//! allocation (even when the trace records its collection after the snapshot), ids the trace
//! lacks are counted, never guessed; a trace of another process is refused; a site's retained
//! size counts a member another member of its site dominates once.

use heapsnap_analyze::sites::report::{site_top, union_retained};
use heapsnap_analyze::sites::{Sites, StackSource};
use heapsnap_analyze::{Analysis, Progress};
use heapsnap_format::{RootKind, Snapshot};
use heapsnap_memtrace::write::TraceWriter;
use heapsnap_memtrace::{AllocSource, Location, Trace, TraceInfo};
use heapsnap_testkit::synth::{Space, SynthHeap, Value};
use std::borrow::Cow;

const PID: u32 = 777;
const EXE: &str = "/opt/app/server";

fn info(pid: u64, exe: &str) -> TraceInfo {
    TraceInfo {
        version: 3,
        sample_rate: 0.01,
        word_size: 64,
        executable_name: exe.into(),
        host_name: "host".into(),
        ocaml_runtime_params: String::new(),
        pid,
        initial_domain: 0,
        start_time: 1_700_000_000_000_000,
        context: None,
    }
}

fn location(file: &str, line: u32, function: &str) -> Vec<Location<'static>> {
    vec![Location { filename: Cow::Owned(file.into()), line, start_char: 0, end_char: 5, defname: Cow::Owned(function.into()) }]
}

/// A trace of four allocations: ids 0 and 1 at `session.ml:88` (through `Array.make`, from the
/// standard library), 2 at `scratch.ml:5`, 3 there too and collected; then id 0 collected.
fn trace_bytes(pid: u64, exe: &str) -> Vec<u8> {
    let mut w = TraceWriter::new(&info(pid, exe));
    w.define_location(1, location("main.ml", 3, "Main.run"));
    w.define_location(2, location("session.ml", 88, "Session.open_"));
    w.define_location(3, location("array.ml", 20, "Stdlib__Array.make"));
    w.define_location(4, location("scratch.ml", 5, "Scratch.fill"));
    let t = 1_700_000_000_000_100;
    let a = w.alloc(t, 100, 1, AllocSource::Minor, &[1, 2, 3]);
    let b = w.alloc(t + 1, 100, 2, AllocSource::Minor, &[1, 2, 3]);
    let c = w.alloc(t + 2, 100, 1, AllocSource::Minor, &[1, 4]);
    let d = w.alloc(t + 3, 100, 1, AllocSource::Minor, &[1, 4]);
    assert_eq!((a, b, c, d), (0, 1, 2, 3));
    w.collect(t + 4, d);
    w.collect(t + 5, a);
    w.finish()
}

/// A root holds `x`, which holds `y` (both at session.ml:88); `z` (scratch.ml:5) is held
/// alone; `lost` holds an id the trace lacks.
fn snapshot(dir: &std::path::Path) -> std::path::PathBuf {
    let mut h = SynthHeap::new();
    h.process = Some((PID, EXE.into()));
    let y = h.alloc(Space::Major, 0, &[Value::Int(1); 100]);
    let x = h.alloc(Space::Major, 0, &[Value::Ptr(y), Value::Int(0)]);
    let z = h.alloc(Space::Major, 0, &[Value::Int(2); 100]);
    let lost = h.alloc(Space::Major, 0, &[Value::Int(3); 4]);
    h.add_root(RootKind::Global, Value::Ptr(x), "camlSession", 0);
    h.add_root(RootKind::Global, Value::Ptr(z), "camlScratch", 0);
    h.add_root(RootKind::Global, Value::Ptr(lost), "camlLost", 0);
    h.track(x, Value::Int(0), 1, 0.01);
    h.track(y, Value::Int(1), 2, 0.01);
    h.track(z, Value::Int(2), 1, 0.01);
    h.track(lost, Value::Int(99), 1, 0.01);
    let path = dir.join("s.heapsnap");
    h.write(&path).unwrap();
    path
}

#[test]
fn memtrace_ids_join_their_allocations_and_missing_ones_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let snap = Snapshot::open(snapshot(dir.path())).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let bytes = trace_bytes(u64::from(PID), EXE);
    let trace = Trace::from_bytes(&bytes).unwrap();
    let sites = Sites::new(&a, Some(&trace)).unwrap();
    let s = &sites.stats;
    // Id 0 was collected after the snapshot: still joined. Id 99 is not in the trace.
    assert_eq!((s.tracked, s.from_memtrace, s.no_event, s.no_trace, s.other_user_data, s.not_in_heap), (4, 3, 1, 0, 0, 0));
    assert!(sites.blocks.iter().all(|b| b.source == StackSource::Memtrace));

    let top = site_top(&a, &sites, 1, usize::MAX);
    let names: Vec<&str> = top.groups.iter().map(|g| g.site.as_str()).collect();
    assert_eq!(names, ["session.ml:88 (Session.open_)", "scratch.ml:5 (Scratch.fill)"], "the standard library's frame is skipped");
    let session = &top.groups[0];
    assert_eq!((session.count, session.samples), (2, 3));
    // 3 samples at 0.01 per word: 300 words.
    assert_eq!(session.estimated_bytes, 2400);
    // x dominates y: the site retains x's subtree, y counted once.
    let x = a.node_at(a.snap.memprof().unwrap()[0].block).unwrap();
    assert_eq!(session.retained, a.retained(x));
    assert_eq!(session.sampled_bytes, 3 * 8 + 101 * 8);
    let deep = site_top(&a, &sites, 2, usize::MAX);
    assert_eq!(deep.groups[0].site, "session.ml:88 (Session.open_) <- main.ml:3 (Main.run)");

    assert_eq!(sites.blocks_at("src/session.ml", 88).len(), 2);
    assert!(sites.blocks_at("session.ml", 89).is_empty());

    // Without the trace: counted, not guessed.
    let bare = Sites::new(&a, None).unwrap();
    assert_eq!((bare.stats.no_trace, bare.blocks.len()), (4, 0));
}

#[test]
fn a_trace_of_another_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let snap = Snapshot::open(snapshot(dir.path())).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    for (pid, exe, word) in [(u64::from(PID) + 1, EXE, "run"), (u64::from(PID), "/opt/app/other", "program")] {
        let bytes = trace_bytes(pid, exe);
        let trace = Trace::from_bytes(&bytes).unwrap();
        let err = Sites::new(&a, Some(&trace)).err().expect("refused").to_string();
        assert!(err.starts_with(&format!("the memtrace trace is of another {word}")), "{err}");
    }
}

#[test]
fn union_retained_counts_dominated_members_once() {
    let dir = tempfile::tempdir().unwrap();
    let snap = Snapshot::open(snapshot(dir.path())).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let node = |i: usize| a.node_at(a.snap.memprof().unwrap()[i].block).unwrap();
    let (x, y, z) = (node(0), node(1), node(2));
    // x dominates y: a set of both retains x's subtree.
    assert_eq!(union_retained(&a, &[vec![y, x], vec![z]]), vec![a.retained(x), a.retained(z)]);
    assert!(a.retained(x) > a.retained(y));
    // A member of another set covers nothing.
    assert_eq!(union_retained(&a, &[vec![y], vec![x, z]]), vec![a.retained(y), a.retained(x) + a.retained(z)]);
}
