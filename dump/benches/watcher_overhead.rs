//! What the compaction watcher costs a program that never compacts (goal: under 1%).
//!
//! Two programs, each run alternately plain and watched (the watcher reads
//! `caml_compactions_count` every 20 ms, the default poll interval; the order within each pair
//! alternates too):
//!
//! - a deterministic OCaml program built here with the cached toolchain: one domain,
//!   allocation-heavy (trees and lists, with a live set that keeps the major GC busy), never
//!   compacting, sized to run about 3 s. Even so, on a busy or virtualised machine its own CPU
//!   time may vary by far more than 1% from run to run (1.66-2.37 s on the 2-core VM).
//! - the OCaml compiler itself (`ocamlopt.opt`) compiling a generated file of a few thousand
//!   definitions: the real-program row (its own run-to-run noise is several percent).
//!
//! Reported for each: the program's CPU time (user + system, from wait4: less sensitive than
//! wall time to other load) and wall time, medians and spread, the overhead both as the ratio
//! of the medians and as the median (and quartiles) of the per-pair ratios; the watcher's own
//! CPU split into its one-off setup (finding `caml_compactions_count` in the executable) and
//! its steady cost per poll, as a share of one core; and the watcher's CPU against the
//! program's, the most it can cost the program were they to share a core (a bound the noise of
//! a busy machine does not blur, where the program's own times may vary by more than 1%).
//!
//!   cargo bench -p heapsnap-dump --bench watcher_overhead
//!   HEAPSNAP_BENCH_RUNS=15 HEAPSNAP_BENCH_OCAMLOPT_RUNS=7 (the defaults)

use heapsnap_dump::triggers::TriggerSpec;
use heapsnap_dump::watch::{Inputs, Watch};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Allocates a few GB over its run and keeps about 32 MB live; never calls Gc.compact (OCaml 5
/// compacts only when asked). Prints a checksum so nothing is optimised away.
const ALLOC_PROGRAM: &str = r#"
type tree = Leaf | Node of tree * int * tree
let rec make d = if d = 0 then Leaf else Node (make (d - 1), d, make (d - 1))
let rec check = function Leaf -> 0 | Node (l, v, r) -> check l + v + check r
let () =
  let rounds = int_of_string Sys.argv.(1) in
  let keep = Array.make 64 Leaf in
  let sum = ref 0 in
  for i = 0 to rounds - 1 do
    let t = make 14 in
    sum := !sum + check t;
    keep.(i land 63) <- t;
    let l = List.init 1000 (fun j -> string_of_int (i + j)) in
    sum := !sum + List.length l
  done;
  Printf.printf "%d\n" !sum
"#;

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

fn build_alloc_program(toolchain: &Path, dir: &Path) -> PathBuf {
    std::fs::write(dir.join("alloc.ml"), ALLOC_PROGRAM).unwrap();
    let out = Command::new(toolchain.join("bin/ocamlopt")).current_dir(dir).args(["alloc.ml", "-o", "alloc"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    dir.join("alloc")
}

struct Run {
    wall: Duration,
    /// The program's user + system time.
    cpu: Duration,
    /// The watcher's CPU to find the counter (once per program run).
    setup_cpu: Duration,
    /// The watcher's CPU while polling.
    poll_cpu: Duration,
    polls: u64,
}

fn thread_cpu() -> Duration {
    // SAFETY: `rusage` is plain integers, valid all zero; getrusage writes only into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000)
}

/// Runs `command` to its end, watched or not.
fn run(mut command: Command, watched: bool) -> Run {
    let started = Instant::now();
    let child = command.stdout(Stdio::null()).spawn().expect("the benchmark program");
    let pid = child.id() as i32;
    let (mut setup_cpu, mut poll_cpu, mut polls) = (Duration::ZERO, Duration::ZERO, 0);
    if watched {
        let before = thread_cpu();
        let counter = heapsnap_dump::compactions_counter(pid).expect("a compaction counter in the program");
        let after_setup = thread_cpu();
        setup_cpu = after_setup - before;
        let spec = TriggerSpec { on_compaction: true, ..TriggerSpec::default() };
        let watch = Watch { pid, spec: &spec, compactions_counter: Some(counter), compactions_seen: 0, inputs: Inputs::default() };
        let summary = watch.run(|_| -> heapsnap_dump::Result<PathBuf> { panic!("the benchmark program compacted") }).unwrap();
        poll_cpu = thread_cpu() - after_setup;
        polls = summary.polls;
    }
    let mut status = 0;
    // SAFETY: `rusage` is plain integers, valid all zero; wait4 writes only into it and `status`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `pid` is this process's child.
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the benchmark program failed");
    drop(child); // reaped by wait4 above
    Run { wall: started.elapsed(), cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime), setup_cpu, poll_cpu, polls }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The first and third quartiles.
fn quartiles(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.25), at(0.75))
}

fn spread(v: &[f64]) -> (f64, f64) {
    (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max))
}

/// `pairs` alternating plain and watched runs of `make()`, then the report.
fn measure(name: &str, pairs: usize, make: impl Fn() -> Command) {
    let _ = run(make(), false); // warm the page cache
    let (mut plain, mut watched) = (Vec::new(), Vec::new());
    for i in 0..pairs {
        // ABBA order: neither kind always runs first.
        if i % 2 == 0 {
            plain.push(run(make(), false));
            watched.push(run(make(), true));
        } else {
            watched.push(run(make(), true));
            plain.push(run(make(), false));
        }
    }
    let secs = |runs: &[Run], f: fn(&Run) -> Duration| runs.iter().map(|r| f(r).as_secs_f64()).collect::<Vec<_>>();
    let pct = |a: f64, b: f64| (b / a - 1.0) * 100.0;
    let (pc, wc) = (secs(&plain, |r| r.cpu), secs(&watched, |r| r.cpu));
    let (pw, ww) = (secs(&plain, |r| r.wall), secs(&watched, |r| r.wall));
    let paired: Vec<f64> = pc.iter().zip(&wc).map(|(&p, &w)| pct(p, w)).collect();
    let paired_wall: Vec<f64> = pw.iter().zip(&ww).map(|(&p, &w)| pct(p, w)).collect();
    println!("{name}: {pairs} pairs of runs, plain and watched alternating (poll every 20 ms)");
    for (label, v) in
        [("program CPU  plain  ", &pc), ("program CPU  watched", &wc), ("program wall plain  ", &pw), ("program wall watched", &ww)]
    {
        let (lo, hi) = spread(v);
        println!("  {label} median {:.3} s (min {lo:.3}, max {hi:.3}, spread {:.1}%)", median(v.clone()), pct(lo, hi));
    }
    let ((lo, hi), (q1, q3)) = (spread(&paired), quartiles(&paired));
    println!(
        "  overhead on program CPU: {:+.2}% (ratio of medians); per pair median {:+.2}% (middle half {q1:+.2}% to {q3:+.2}%, all {lo:+.2}% to {hi:+.2}%)",
        pct(median(pc.clone()), median(wc.clone())),
        median(paired.clone())
    );
    println!(
        "  overhead on program wall: {:+.2}% (ratio of medians); per pair median {:+.2}%",
        pct(median(pw.clone()), median(ww.clone())),
        median(paired_wall)
    );
    let setup = secs(&watched, |r| r.setup_cpu);
    let poll_cpu: f64 = secs(&watched, |r| r.poll_cpu).iter().sum();
    let polls: u64 = watched.iter().map(|r| r.polls).sum();
    let watched_wall: f64 = ww.iter().sum();
    let per_poll = poll_cpu / polls.max(1) as f64;
    println!(
        "  watcher setup (find caml_compactions_count): median {:.2} ms CPU per run (min {:.2}, max {:.2})",
        median(setup.clone()) * 1e3,
        spread(&setup).0 * 1e3,
        spread(&setup).1 * 1e3
    );
    println!(
        "  watcher polls: {polls} in {watched_wall:.1} s, {:.1} us CPU each = {:.3}% of one core at 20 ms ({:.3}% of the watched wall time)",
        per_poll * 1e6,
        100.0 * per_poll / 0.020,
        100.0 * poll_cpu / watched_wall
    );
    // What the watcher can take from the program at most, were they to share one core: its own
    // CPU (setup and polls) against the program's. Not blurred by the machine's noise.
    let watcher_total: f64 = poll_cpu + setup.iter().sum::<f64>();
    println!("  bound: the watcher's CPU is {:.3}% of the watched program's CPU time", 100.0 * watcher_total / wc.iter().sum::<f64>());
}

fn main() {
    // `cargo test --benches` runs this with --bench absent: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|r| r.parse().ok()).unwrap_or(default);
    let (runs, ocamlopt_runs) = (env("HEAPSNAP_BENCH_RUNS", 15), env("HEAPSNAP_BENCH_OCAMLOPT_RUNS", 7));
    let toolchain = toolchain();
    let dir = tempfile::tempdir().unwrap();

    // Sized to about 3 s of CPU on this machine, then fixed for every run.
    let alloc = build_alloc_program(&toolchain, dir.path());
    let mut probe = Command::new(&alloc);
    probe.arg("400");
    let probe = run(probe, false);
    let rounds = ((400.0 * 3.0 / probe.cpu.as_secs_f64()) as u64).max(1);
    measure(&format!("alloc.ml ({rounds} rounds, one domain, never compacts)"), runs, || {
        let mut c = Command::new(&alloc);
        c.arg(rounds.to_string());
        c
    });

    let ocamlopt = toolchain.join("bin/ocamlopt.opt");
    let source = generate_source(dir.path(), 3000);
    measure("ocamlopt.opt compiling 3000 definitions", ocamlopt_runs, || {
        let mut c = Command::new(&ocamlopt);
        c.args(["-c", "-o"]).arg(source.with_extension("cmx")).arg(&source);
        c
    });
}
