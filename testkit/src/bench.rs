//! Where benchmarks keep the snapshots they generate, and the large-heap snapshot most of them
//! measure.

use crate::synth::{large_heap_shape, LAYOUT_VERSION};
use std::path::PathBuf;

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
