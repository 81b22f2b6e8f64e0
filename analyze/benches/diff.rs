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
//! Goal: diff <= 2x the analysis of one snapshot.

use heapsnap_analyze::diff::{diff, DiffOptions, Input};
use heapsnap_analyze::groups::{groups, GroupBy};
use heapsnap_analyze::{Analysis, Progress};
use heapsnap_format::Snapshot;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn snapshot_for(items: u64) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("target"));
    let dir = target.join("heapsnap-bench");
    std::fs::create_dir_all(&dir).expect("bench directory");
    let path = dir.join(format!("large_heap_{items}.heapsnap"));
    if !path.exists() {
        eprintln!("generating {} ({items} items)...", path.display());
        let t = Instant::now();
        heapsnap_analyze::synth::large_heap_shape(items).heap.write(&path).expect("write snapshot");
        eprintln!("  generated in {:.1}s", t.elapsed().as_secs_f64());
    }
    path
}

/// The child: one measurement, printed as one JSON line.
fn measure(what: &str, paths: &[PathBuf]) {
    heapsnap_analyze::mem::tune_allocator();
    let t = Instant::now();
    let out = match what {
        "analysis" => {
            let snap = Snapshot::open(&paths[0]).expect("open");
            let a = Analysis::new(&snap, &Progress::hidden()).expect("analysis");
            let top = groups(&a, GroupBy::Kind);
            let objects: u64 = a.graph.blocks.regions.iter().map(|r| r.counts.live_blocks).sum();
            serde_json::json!({"seconds": t.elapsed().as_secs_f64(), "objects": objects, "groups": top.len()})
        }
        _ => {
            let snaps: Vec<Snapshot> = paths.iter().map(|p| Snapshot::open(p).expect("open")).collect();
            let inputs: Vec<Input<'_>> = paths.iter().zip(&snaps).map(|(p, s)| Input { name: p.display().to_string(), snap: s }).collect();
            let r = diff(&inputs, &DiffOptions::default(), &Progress::hidden()).expect("diff");
            let seconds = t.elapsed().as_secs_f64();
            let growth = r.growth.first().map(|p| (p.description.clone(), p.growth));
            serde_json::json!({"seconds": seconds, "objects": r.snapshots.iter().map(|s| s.objects).collect::<Vec<_>>(),
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

    let (mut analysis_old, mut analysis_new, mut diffs) = (f64::MAX, f64::MAX, f64::MAX);
    let mut last_diff = serde_json::Value::Null;
    let mut objects = (0, 0);
    for run in 0..runs {
        let a = child("analysis", &[&old]);
        let b = child("analysis", &[&new]);
        let d = child("diff", &[&old, &new]);
        let s = |v: &serde_json::Value| v["seconds"].as_f64().unwrap_or(f64::NAN);
        eprintln!("run {}: analysis {:.2}s / {:.2}s, diff {:.2}s", run + 1, s(&a), s(&b), s(&d));
        analysis_old = analysis_old.min(s(&a));
        analysis_new = analysis_new.min(s(&b));
        diffs = diffs.min(s(&d));
        objects = (a["objects"].as_u64().unwrap_or(0), b["objects"].as_u64().unwrap_or(0));
        last_diff = d;
    }
    let one = (analysis_old + analysis_new) / 2.0;
    println!("heapsnap diff benchmark: synthetic large_heap-shaped snapshots, {} threads, best of {runs}", rayon::current_num_threads());
    println!("  snapshot A: {} objects, analysed (open, graph, dominators, top --by kind) in {analysis_old:.2}s", objects.0);
    println!("  snapshot B: {} objects, analysed in {analysis_new:.2}s", objects.1);
    println!("  diff A B:   {diffs:.2}s");
    println!("  ratio diff / analysis of one (mean of A and B): {:.2}x  (goal: <= 2x)", diffs / one);
    if let Some(g) = last_diff["top_growth"].as_array() {
        println!("  top growth: {} bytes at {}", g.get(1).unwrap_or(&serde_json::Value::Null), g.first().and_then(|v| v.as_str()).unwrap_or("?"));
    }
    if let Some(t) = last_diff["timings"].as_array() {
        let steps: Vec<String> = t.iter().filter_map(|p| Some(format!("{} {:.2}s", p[0].as_str()?, p[1].as_f64()?))).collect();
        println!("  diff steps (last run): {}", steps.join(", "));
    }
}
