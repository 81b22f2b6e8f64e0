//! What the compaction watcher costs a program that never compacts (goal: under 1%).
//!
//! The program is the OCaml compiler itself (`ocamlopt.opt`) compiling a generated source file
//! of a few thousand definitions: a real, allocation-heavy program that never calls Gc.compact.
//! Runs alternate between plain and watched (the watcher reads `caml_compactions_count` every
//! 20 ms, the default poll interval) and the medians are compared: the program's CPU time
//! (user + system, from wait4: less sensitive than wall time to other load on the machine), its
//! wall time, and the CPU the watcher itself spends.
//!
//!   cargo bench -p heapsnap-dump --bench watcher_overhead        # HEAPSNAP_BENCH_RUNS=7 by default

use heapsnap_dump::triggers::TriggerSpec;
use heapsnap_dump::watch::{Inputs, Watch};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn toolchain() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new(root.join("scripts/ocaml-toolchain.sh")).output().expect("scripts/ocaml-toolchain.sh");
    assert!(out.status.success(), "the OCaml toolchain could not be built");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A source file with `n` functions over records, lists and closures.
fn generate_source(dir: &Path, n: usize) -> PathBuf {
    let mut text = String::from("type r = { a : int; b : string; c : float list }\n");
    for i in 0..n {
        text.push_str(&format!(
            "let f{i} x = let r = {{ a = x + {i}; b = string_of_int x; c = [float_of_int x; {i}.5] }} in \
             List.fold_left (fun acc y -> acc +. y *. float_of_int r.a) 0.0 r.c +. float_of_int (String.length r.b)\n"
        ));
    }
    let path = dir.join("big.ml");
    std::fs::write(&path, text).unwrap();
    path
}

struct Run {
    wall: Duration,
    /// The program's user + system time.
    cpu: Duration,
    /// The watcher's own CPU time.
    watcher_cpu: Duration,
}

fn thread_cpu() -> Duration {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000)
}

fn compile(ocamlopt: &Path, source: &Path, watched: bool) -> Run {
    let started = Instant::now();
    let mut child = Command::new(ocamlopt)
        .args(["-c", "-o"])
        .arg(source.with_extension("cmx"))
        .arg(source)
        .stdout(Stdio::null())
        .spawn()
        .expect("ocamlopt.opt");
    let mut compactions = 0;
    let watcher_started = thread_cpu();
    if watched {
        let pid = child.id() as i32;
        let address = heapsnap_dump::compactions_counter_address(pid).expect("caml_compactions_count in ocamlopt.opt");
        let spec = TriggerSpec { on_compaction: true, ..TriggerSpec::default() };
        let watch = Watch { pid, spec: &spec, compactions_counter: Some(address), compactions_seen: 0, inputs: Inputs::default() };
        let summary = watch
            .run(|_| -> Result<PathBuf, String> {
                compactions += 1;
                Err("the benchmark program compacted".into())
            })
            .unwrap();
        assert!(summary.snapshots.is_empty());
    }
    let watcher_cpu = thread_cpu() - watcher_started;
    assert_eq!(compactions, 0, "the benchmark program compacted");
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as i32;
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "ocamlopt.opt failed");
    Run { wall: started.elapsed(), cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime), watcher_cpu }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn secs(v: &[Duration]) -> Vec<String> {
    v.iter().map(|d| format!("{:.3}", d.as_secs_f64())).collect()
}

fn main() {
    let runs: usize = std::env::var("HEAPSNAP_BENCH_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(7);
    let ocamlopt = toolchain().join("bin/ocamlopt.opt");
    let dir = tempfile::tempdir().unwrap();
    let source = generate_source(dir.path(), 3000);
    compile(&ocamlopt, &source, false); // warm the page cache
    let (mut plain, mut watched) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        plain.push(compile(&ocamlopt, &source, false));
        watched.push(compile(&ocamlopt, &source, true));
    }
    let cpu = |runs: &[Run]| runs.iter().map(|r| r.cpu).collect::<Vec<_>>();
    let wall = |runs: &[Run]| runs.iter().map(|r| r.wall).collect::<Vec<_>>();
    let ratio = |a: Duration, b: Duration| (b.as_secs_f64() / a.as_secs_f64() - 1.0) * 100.0;
    let (pc, wc) = (median(cpu(&plain)), median(cpu(&watched)));
    let (pw, ww) = (median(wall(&plain)), median(wall(&watched)));
    let watcher_cpu: Duration = watched.iter().map(|r| r.watcher_cpu).sum();
    let watched_wall: Duration = wall(&watched).iter().sum();
    println!("watcher overhead: ocamlopt.opt compiling 3000 definitions, {runs} runs each, alternating plain/watched");
    println!("  program CPU  plain median {:.3} s {:?}", pc.as_secs_f64(), secs(&cpu(&plain)));
    println!("  program CPU  watched median {:.3} s {:?}", wc.as_secs_f64(), secs(&cpu(&watched)));
    println!("  program wall plain median {:.3} s, watched median {:.3} s ({:+.2}%)", pw.as_secs_f64(), ww.as_secs_f64(), ratio(pw, ww));
    println!("  watcher CPU  {:.4} s over {:.1} s watched ({:.3}% of one core)", watcher_cpu.as_secs_f64(), watched_wall.as_secs_f64(), 100.0 * watcher_cpu.as_secs_f64() / watched_wall.as_secs_f64());
    println!("  overhead on the program's CPU time: {:+.2}% (goal: < 1%)", ratio(pc, wc));
}
