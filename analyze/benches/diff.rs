//! Diff benchmark: diffing two snapshots against analysing one of them, on synthetic snapshots
//! shaped like `samples/large_heap.ml` (the second has 2% more items, so there is growth).
//!
//!     cargo bench -p heapsnap-analyze --bench diff                  # 10M objects, 3 runs
//!     cargo bench -p heapsnap-analyze --bench diff -- --millions 1 --runs 5
//!
//! "Analysing one" is what `heapsnap top` does: open and validate the snapshot, build the graph,
//! dominators and retained sizes, group by kind. "Diffing two" is what `heapsnap diff A B` does
//! short of printing: open and check both, analyse them (two at a time, concurrently), group,
//! aggregate both dominator trees by path signature, match and compare. Each measurement runs in
//! a fresh child process; the best of `--runs` is kept. Snapshots are generated once and cached
//! under `<target>/heapsnap-bench/` (the analysis benchmark's files are reused).
//! Goal: diff <= 2x the analysis of one snapshot. CPU seconds are printed too: on a busy
//! machine wall-clock times mostly measure the other work; `heapsnap summary` (which does a
//! little more than `top`) is printed for reference.

// What the heapsnap binary installs, so that the figures are its figures.
#[global_allocator]
static ALLOCATOR: heapsnap_analyze::SplitAllocator = heapsnap_analyze::SplitAllocator;

use heapsnap_analyze::diff::{diff, DiffOptions, Input};
use heapsnap_analyze::{summary, Analysis, GroupBy, Progress};
use heapsnap_format::Snapshot;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn snapshot_for(items: u64) -> PathBuf {
    let path = heapsnap_testkit::bench::bench_dir().join(format!("large_heap_{items}.heapsnap"));
    if !path.exists() {
        eprintln!("generating {} ({items} items)...", path.display());
        let t = Instant::now();
        heapsnap_testkit::synth::large_heap_shape(items).heap.write(&path).expect("write snapshot");
        eprintln!("  generated in {:.1}s", t.elapsed().as_secs_f64());
    }
    path
}

/// CPU seconds (user and system) this process has used: unlike wall-clock time, barely
/// changed by other work on the machine.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The child: one measurement, printed as one JSON line.
fn measure(what: &str, paths: &[PathBuf]) {
    heapsnap_analyze::tune_allocator();
    let t = Instant::now();
    let cpu0 = cpu_seconds();
    let out = match what {
        "analysis" | "summary" => {
            let snap = Snapshot::open(&paths[0]).expect("open");
            let a = Analysis::new(&snap, &Progress::hidden()).expect("analysis");
            let groups = if what == "summary" { summary(&a, 10).top_groups.len() } else { a.group_by(GroupBy::Kind).unwrap().len() };
            let objects: u64 = a.graph.blocks.regions.iter().map(|r| r.counts.live_blocks).sum();
            serde_json::json!({"seconds": t.elapsed().as_secs_f64(), "cpu": cpu_seconds() - cpu0, "objects": objects, "groups": groups})
        }
        _ => {
            let snaps: Vec<Snapshot> = paths.iter().map(|p| Snapshot::open(p).expect("open")).collect();
            let inputs: Vec<Input<'_>> =
                paths.iter().zip(&snaps).map(|(p, s)| Input { name: p.display().to_string(), snap: s, saved: None }).collect();
            let r = diff(&inputs, &DiffOptions::default(), &Progress::hidden()).expect("diff");
            let seconds = t.elapsed().as_secs_f64();
            let growth = r.growth.first().map(|p| (p.description.clone(), p.growth));
            serde_json::json!({"seconds": seconds, "cpu": cpu_seconds() - cpu0, "objects": r.snapshots.iter().map(|s| s.objects).collect::<Vec<_>>(),
                "top_growth": growth, "timings": r.timings})
        }
    };
    println!("{out}");
}

fn child(what: &str, paths: &[&Path]) -> serde_json::Value {
    let exe = std::env::current_exe().expect("own path");
    let out = Command::new(exe).arg("--measure").arg(what).args(paths).output().expect("run the measuring child");
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        panic!("measuring {what} failed");
    }
    serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).expect("child JSON")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--measure") {
        let paths: Vec<PathBuf> = args[i + 2..].iter().map(PathBuf::from).collect();
        measure(&args[i + 1], &paths);
        return;
    }
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let millions: f64 = value("--millions").and_then(|v| v.parse().ok()).unwrap_or(10.0);
    let runs: usize = value("--runs").and_then(|v| v.parse().ok()).unwrap_or(3).max(1);
    let items = (millions * 1e6 / 7.0).round() as u64;
    let (old, new) = (snapshot_for(items), snapshot_for(items + items / 50));

    // Best (lowest) wall-clock and CPU seconds of each measurement over the runs.
    let mut best = [[f64::MAX; 2]; 4];
    let mut last_diff = serde_json::Value::Null;
    let mut objects = (0, 0);
    for run in 0..runs {
        let a = child("analysis", &[&old]);
        let b = child("analysis", &[&new]);
        let d = child("diff", &[&old, &new]);
        let sa = child("summary", &[&old]);
        let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        eprintln!(
            "run {}: analysis {:.2}s / {:.2}s (CPU {:.2}s / {:.2}s), diff {:.2}s (CPU {:.2}s)",
            run + 1,
            f(&a, "seconds"),
            f(&b, "seconds"),
            f(&a, "cpu"),
            f(&b, "cpu"),
            f(&d, "seconds"),
            f(&d, "cpu")
        );
        for (i, v) in [&a, &b, &d, &sa].into_iter().enumerate() {
            best[i][0] = best[i][0].min(f(v, "seconds"));
            best[i][1] = best[i][1].min(f(v, "cpu"));
        }
        objects = (a["objects"].as_u64().unwrap_or(0), b["objects"].as_u64().unwrap_or(0));
        last_diff = d;
    }
    let [a, b, d, sa] = best;
    println!("heapsnap diff benchmark: synthetic large_heap-shaped snapshots, {} threads, best of {runs}", rayon::current_num_threads());
    println!("  snapshot A: {} objects, analysed (open, graph, dominators, top --by kind) in {:.2}s (CPU {:.2}s)", objects.0, a[0], a[1]);
    println!("  snapshot B: {} objects, analysed in {:.2}s (CPU {:.2}s)", objects.1, b[0], b[1]);
    println!("  diff A B:   {:.2}s (CPU {:.2}s)", d[0], d[1]);
    println!(
        "  ratio diff / analysis of one (mean of A and B): {:.2}x wall-clock (goal: <= 2x), {:.2}x CPU",
        d[0] / ((a[0] + b[0]) / 2.0),
        d[1] / ((a[1] + b[1]) / 2.0)
    );
    println!(
        "  for reference, `heapsnap summary` of A: {:.2}s (CPU {:.2}s); diff / summary: {:.2}x wall-clock, {:.2}x CPU",
        sa[0],
        sa[1],
        d[0] / sa[0],
        d[1] / sa[1]
    );
    if let Some(g) = last_diff["top_growth"].as_array() {
        println!(
            "  top growth: {} bytes at {}",
            g.get(1).unwrap_or(&serde_json::Value::Null),
            g.first().and_then(|v| v.as_str()).unwrap_or("?")
        );
    }
    if let Some(t) = last_diff["timings"].as_array() {
        let steps: Vec<String> = t.iter().filter_map(|p| Some(format!("{} {:.2}s", p["step"].as_str()?, p["seconds"].as_f64()?))).collect();
        println!("  diff steps (last run, wall-clock): {}", steps.join(", "));
    }
}
