//! Differential tests: our reader renders every event exactly as memtrace's own reader
//! (bin/dump_trace.ml, built from memtrace's source) does, on memtrace's test trace of ocamlopt
//! and on fresh traces of samples/memtrace_sample.ml. This checks the backtrace cache and
//! prediction decoding, the move-to-front location decoding, ids and timestamps frame by frame.

use crate::common::*;
use heapsnap_memtrace::Trace;
use std::path::Path;
use std::process::Command;

fn assert_same_as_memtrace(programs: &Path, trace_path: &Path) -> usize {
    let reference = Command::new(programs.join("dump_trace")).arg(trace_path).output().unwrap();
    assert!(reference.status.success(), "dump_trace failed: {}", String::from_utf8_lossy(&reference.stderr));
    let reference = String::from_utf8(reference.stdout).unwrap();
    let trace = Trace::open(trace_path).unwrap();
    let ours = dump_like_memtrace(&trace);
    let mut lines = 0;
    for (n, (theirs, ours)) in reference.lines().zip(ours.lines()).enumerate() {
        assert_eq!(ours, theirs, "line {} of the dump of {} differs", n + 1, trace_path.display());
        lines += 1;
    }
    assert_eq!(ours.lines().count(), reference.lines().count(), "number of events");
    lines
}

#[test]
fn memtrace_test_trace_decodes_as_memtrace_does() {
    let Some(programs) = ocaml_programs() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = memtrace_test_trace(dir.path()) else { return };
    let events = assert_same_as_memtrace(&programs, &path);
    assert!(events > 3000, "{events} events");
}

#[test]
fn sample_traces_decode_as_memtrace_does() {
    let Some(programs) = ocaml_programs() else { return };
    // A low rate gives sparse backtraces (more cache misses); a high one long prediction runs.
    for (iterations, rate) in [(3000, 0.001), (20_000, 0.05)] {
        let recorded = record_sample(&programs, iterations, rate);
        let events = assert_same_as_memtrace(&programs, &recorded.path);
        assert!(events > 100, "{events} events at rate {rate}");
    }
}

/// Our writer's traces (used by the benchmark and the fuzz test) are real memtrace traces.
#[test]
fn synthetic_traces_decode_as_memtrace_does() {
    let Some(programs) = ocaml_programs() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("synthetic.ctf");
    std::fs::write(&path, synthetic::trace(50_000, 3)).unwrap();
    let events = assert_same_as_memtrace(&programs, &path);
    assert!(events >= 50_000, "{events} events");
}
