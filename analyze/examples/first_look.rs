//! Times the first look at a snapshot as `heapsnap summary` answers it without an index (the
//! completion in the background on, its default): open and check the snapshot, analyse, then
//! the summary and its leak suspects. Each round in turn; prints every round's phases, then the
//! medians, with the process's CPU seconds (user + system) per round.
//!
//!     cargo run --release -p heapsnap-analyze --example first_look -- SNAP [ROUNDS]
//!
//! In one process, so that nothing else (a completion writing the index) runs beside it: a
//! command line's first look also forks that completion when it has answered.

// What the heapsnap binary installs, so that the figures are its figures.
#[global_allocator]
static ALLOCATOR: heapsnap_analyze::SplitAllocator = heapsnap_analyze::SplitAllocator;

use heapsnap_analyze::{Analysis, Progress};
use heapsnap_format::Snapshot;
use std::time::Instant;

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The process's peak resident memory (`VmHWM`), in bytes.
fn peak_resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib =
        status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kib.unwrap_or(0) * 1024
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: first_look SNAP [ROUNDS]");
        std::process::exit(2);
    };
    let rounds: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(5);
    heapsnap_analyze::tune_allocator();
    let quiet = Progress::hidden();
    let mut rows: Vec<[f64; 5]> = Vec::new();
    let mut objects = 0u64;
    println!("{:>8} {:>8} {:>8} {:>8} {:>8}", "open", "analysis", "summary", "total", "cpu");
    for _ in 0..rounds {
        let (t, cpu) = (Instant::now(), cpu_seconds());
        let snap = Snapshot::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let opened = t.elapsed().as_secs_f64();
        let a = Analysis::new(&snap, &quiet).expect("analysis");
        let analysed = t.elapsed().as_secs_f64();
        objects = u64::from(a.graph.blocks.node_count - a.graph.blocks.first_block_node);
        std::hint::black_box(heapsnap_analyze::summary_with_suspects(&a, 10).1.suspects.len());
        let total = t.elapsed().as_secs_f64();
        let row = [opened, analysed - opened, total - analysed, total, cpu_seconds() - cpu];
        println!("{:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3}", row[0], row[1], row[2], row[3], row[4]);
        rows.push(row);
    }
    let m: Vec<f64> = (0..5).map(|i| median(rows.iter().map(|r| r[i]).collect())).collect();
    println!("median\n{:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3}", m[0], m[1], m[2], m[3], m[4]);
    let file = std::fs::metadata(path).map_or(0, |m| m.len());
    let peak = peak_resident_bytes();
    println!(
        "peak resident {} MiB: {:.1} B/object beyond the snapshot's {} MiB",
        peak >> 20,
        (peak.saturating_sub(file)) as f64 / objects.max(1) as f64,
        file >> 20
    );
}
