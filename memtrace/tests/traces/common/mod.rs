//! Helpers shared by the integration tests: the OCaml programs (built on demand and cached by
//! memtrace/scripts/build-ocaml-programs.sh), traces recorded with them, and memtrace's own
//! rendering of a trace (bin/dump_trace.ml) reproduced from our reader.
#![allow(dead_code)]

use heapsnap_memtrace::{Event, Trace};
use heapsnap_testkit::samples::not_covered;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The directory with `memtrace_sample` and `dump_trace`, or `None` (counted as not covered) when
/// memtrace's source is not on this machine.
pub fn ocaml_programs() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let output = Command::new(repo_root().join("memtrace/scripts/build-ocaml-programs.sh")).output().expect("run the build script");
        match output.status.code() {
            Some(0) => Some(PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())),
            Some(3) => {
                not_covered(String::from_utf8_lossy(&output.stderr).trim());
                None
            }
            _ => panic!("build-ocaml-programs.sh failed:\n{}", String::from_utf8_lossy(&output.stderr)),
        }
    })
    .clone()
}

pub struct Recorded {
    pub path: PathBuf,
    pub pid: u32,
    pub stdout: String,
    pub executable: PathBuf,
    pub _dir: tempfile::TempDir,
}

/// Runs memtrace_sample ITERATIONS under memtrace at RATE.
pub fn record_sample(programs: &Path, iterations: u32, rate: f64) -> Recorded {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sample.ctf");
    let executable = programs.join("memtrace_sample");
    let child = Command::new(&executable)
        .arg(iterations.to_string())
        .env("MEMTRACE", &path)
        .env("MEMTRACE_RATE", rate.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "memtrace_sample failed: {output:?}");
    Recorded { path, pid, stdout: String::from_utf8(output.stdout).unwrap(), executable, _dir: dir }
}

/// memtrace's test trace of ocamlopt (test/ocamlopt.ctf in its archive), extracted to `dir`.
pub fn memtrace_test_trace(dir: &Path) -> Option<PathBuf> {
    let archive = repo_root().join("../shared/sources/memtrace-a88470c.tar.gz");
    if !archive.exists() {
        not_covered(&format!("{} is not on this machine", archive.display()));
        return None;
    }
    let status = Command::new("tar")
        .args([
            "xzf",
            archive.to_str().unwrap(),
            "-C",
            dir.to_str().unwrap(),
            "--strip-components=2",
            "memtrace-0.18-a88470c/test/ocamlopt.ctf",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    Some(dir.join("ocamlopt.ctf"))
}

/// The output of memtrace's `dump_trace` for this trace, from our reader.
pub fn dump_like_memtrace(trace: &Trace<'_>) -> String {
    let start = trace.info().start_time;
    let mut out = String::new();
    let mut events = trace.events();
    while let Some(event) = events.next_event().unwrap() {
        match event {
            Event::Alloc(alloc) => {
                let source = match alloc.source {
                    heapsnap_memtrace::AllocSource::Minor => "alloc",
                    heapsnap_memtrace::AllocSource::Major => "alloc_major",
                    heapsnap_memtrace::AllocSource::External => "alloc_ext",
                };
                let prefix = format!(" {}", alloc.common_prefix);
                write!(
                    out,
                    "{:010} {:010} {source} {} len={} dom={} {prefix:>4}:",
                    alloc.time - start,
                    alloc.id,
                    alloc.nsamples,
                    alloc.length_words,
                    alloc.domain
                )
                .unwrap();
                for &code in alloc.backtrace.codes() {
                    // memtrace reads codes into 63-bit OCaml ints.
                    match alloc.backtrace.location_table().get(code) {
                        Some(locations) if !locations.is_empty() => locations.iter().for_each(|l| write!(out, " {l}").unwrap()),
                        _ => write!(out, " ${}", ((code << 1) as i64) >> 1).unwrap(),
                    }
                }
                out.push('\n');
            }
            Event::Promote { id, time, .. } => writeln!(out, "{:010} {id:010} promote", time - start).unwrap(),
            Event::Collect { id, time, .. } => writeln!(out, "{:010} {id:010} collect", time - start).unwrap(),
        }
    }
    out
}

pub mod synthetic;
