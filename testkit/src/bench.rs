//! Where benchmarks keep the snapshots they generate, and the large-heap snapshot most of them
//! measure.

use crate::synth::{large_heap_shape, LAYOUT_VERSION};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The benchmarks' directory of generated snapshots, `<target>/heapsnap-bench/`, created if
/// missing: the workspace's target directory (`CARGO_TARGET_DIR` when set).
pub fn bench_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| crate::samples::repo().join("target"));
    let dir = target.join("heapsnap-bench");
    std::fs::create_dir_all(&dir).expect("bench directory");
    dir
}

/// The benchmarks' [`large_heap_shape`] snapshot of about `millions` million objects (7 per
/// item), in [`bench_dir`], generated the first time it is asked for.
pub fn bench_large_heap(millions: f64) -> PathBuf {
    let items = (millions * 1e6 / 7.0).round() as u64;
    let path = bench_dir().join(format!("large_heap_v{LAYOUT_VERSION}_{items}.heapsnap"));
    if !path.exists() {
        eprintln!("generating {} ({items} items)...", path.display());
        let t = std::time::Instant::now();
        large_heap_shape(items).heap.write(&path).expect("write snapshot");
        eprintln!("  generated in {:.1}s", t.elapsed().as_secs_f64());
    }
    path
}

/// The snapshot sizes a benchmark measures, in millions of objects: `--sizes 1,10,50` (or the
/// variable `HEAPSNAP_BENCH_SIZES`), else 1 and 10 under `cargo bench` (which passes `--bench`),
/// else 0.05: `cargo test --all-targets` runs the benchmarks without it, as a quick check that
/// they work.
pub fn sizes(args: &[String]) -> Vec<f64> {
    let given = args.iter().position(|a| a == "--sizes").and_then(|i| args.get(i + 1)).cloned();
    let default = if args.iter().any(|a| a == "--bench") { "1,10" } else { "0.05" };
    given
        .or_else(|| std::env::var("HEAPSNAP_BENCH_SIZES").ok())
        .unwrap_or_else(|| default.into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// The shortest of `runs` runs of `f`, and the last run's value.
pub fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = None;
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        let value = f();
        best = best.min(started.elapsed());
        out = Some(value);
    }
    (best, out.expect("at least one run"))
}
