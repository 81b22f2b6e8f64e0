//! Probe benchmark: what reading the runtime by probing costs a dump (issue #32's goal: at
//! most 100 ms added to a dump's start, and the pause unchanged, because probing is done
//! before the stop). For each OCaml 5 toolchain's samples (the releases heapsnap knows, and the
//! unseen trunk of releases.tsv), each sample at its first READY point is dumped by its
//! release's file and by probing alone (`--read-by-probing`; nothing for the unseen runtime,
//! which is always probed), ROUNDS times each, alternating; the medians of the probe's own time
//! (`probe_ns` of the report: the executable's tables, DWARF and a few pools read while the
//! target runs) and of the pause are printed per toolchain.
//!
//!     cargo bench -p heapsnap-dump --bench probe
//!     HEAPSNAP_BENCH_TOOLCHAINS=5.3.0,5.4.0-trunk cargo bench -p heapsnap-dump --bench probe
//!
//! Needs the toolchains and their samples (scripts/ocaml-toolchain.sh, samples/build.sh);
//! a toolchain whose samples cannot be built is skipped with a message.

use heapsnap_dump::{dump_process, CaptureMode, DumpOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const ROUNDS: usize = 5;
const SAMPLES: &[&str] = &["cache_leak", "closure_list", "effect_cont", "systhread_stack", "domains_shared", "long_list", "steady_state"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

fn samples_of(toolchain: &str) -> Option<PathBuf> {
    let out = Command::new("bash").arg(repo().join("samples/build.sh")).arg(toolchain).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn median(mut v: Vec<u64>) -> f64 {
    v.sort_unstable();
    v[v.len() / 2] as f64 / 1e6
}

/// (probe ms, pause ms) of one dump.
fn dump_once(pid: i32, out: &Path, by_probing: bool) -> (u64, u64) {
    let mut options = DumpOptions { output: out.to_path_buf(), capture: CaptureMode::Copy, ..DumpOptions::default() };
    options.discover.read_by_probing = by_probing;
    let report = dump_process(pid, &options).expect("dump");
    assert_eq!(report.probed.is_some(), by_probing || report.ocaml_version.contains("+dev"), "{}", report.ocaml_version);
    (report.probe_ns, report.pause_ns)
}

fn main() {
    let toolchains = std::env::var("HEAPSNAP_BENCH_TOOLCHAINS").unwrap_or_else(|_| "5.1.0,5.2.0,5.3.0,5.4.0-trunk".into());
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("probe.snap");
    println!("{:<14} {:>22} {:>22} {:>22}", "toolchain", "probe ms (file/probed)", "pause ms, by file", "pause ms, by probing");
    for toolchain in toolchains.split(',') {
        let Some(samples) = samples_of(toolchain) else {
            eprintln!("{toolchain}: its samples cannot be built here, skipped");
            continue;
        };
        let (mut probe_file, mut probe_alone, mut pause_file, mut pause_probed) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for name in SAMPLES {
            let mut child =
                Command::new(samples.join(name)).arg("--pause").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start sample");
            let mut line = String::new();
            BufReader::new(child.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("READY");
            assert!(line.starts_with("READY"), "{name}: {line}");
            for _ in 0..ROUNDS {
                let (probe, pause) = dump_once(child.id() as i32, &out, false);
                probe_file.push(probe);
                pause_file.push(pause);
                let (probe, pause) = dump_once(child.id() as i32, &out, true);
                probe_alone.push(probe);
                pause_probed.push(pause);
            }
            let _ = child.stdin.take().map(|mut s| s.write_all(b"\n"));
            let _ = child.kill();
            let _ = child.wait();
        }
        println!(
            "{toolchain:<14} {:>10.2} / {:<9.2} {:>22.2} {:>22.2}",
            median(probe_file),
            median(probe_alone),
            median(pause_file),
            median(pause_probed)
        );
    }
}
