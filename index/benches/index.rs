//! What the analysis index buys: a report on a snapshot whose index exists, against the first
//! analysis of it (the goal: under 5%).
//!
//!     cargo bench -p heapsnap-index --bench index                  # 1M and 10M objects
//!     cargo bench -p heapsnap-index --bench index -- --sizes 1
//!     (`cargo test --all-targets` runs it on 50k objects, as a smoke test)
//!
//! Snapshots are the synthetic `large_heap` shape of `heapsnap-analyze`'s benchmark (cached in
//! `<target>/heapsnap-bench/`, shared with it). For each size: the first analysis as a command
//! runs it (open and check the snapshot, graph, dominators, every grouping, index written),
//! then, best of 3 with the index in place, each report as a command runs it: open the
//! snapshot and the index, check the sections the report reads, answer.
//!
//! Figures on the development machine (2 shared cores, loaded), `--sizes 1,10`:
//!
//!     objects  analysis   first  index MiB | summary    top  domin. inspect   path | worst %
//!       1.00M    0.173s  0.526s         52 | 0.0014s 0.0014s 0.0064s 0.0061s 0.0060s |  3.69%
//!      10.00M    1.130s  6.284s        518 | 0.0063s 0.0065s 0.0462s 0.0459s 0.0457s |  4.09%
//!
//! Index version 2 (each block's kind saved; the reports are the analysis's own, with sibling
//! summaries), `--sizes 1`: 56 MiB (52 before), dominators 0.0126s (the summaries of the
//! 131072 bucket chains and 142857 shared top objects), the others as above.
//!
//! The reports that read the dominator tree check the checksums of its sections (about 40 ms of
//! the 46 at 10M); building and writing the index makes the first analysis slower (every
//! grouping, referrers, 518 MiB written).

use heapsnap_analyze::groups::GroupBy;
use heapsnap_analyze::paths::PathQuery;
use heapsnap_analyze::{AnalysedHeap, Analysis, Progress};
use heapsnap_index::store::{beside, load};
use heapsnap_index::Needs;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn snapshot_for(millions: f64) -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("heapsnap-bench");
    std::fs::create_dir_all(&dir).expect("bench directory");
    let items = (millions * 1e6 / 7.0).round() as u64;
    let path = dir.join(format!("large_heap_v{}_{items}.heapsnap", heapsnap_analyze::synth::LAYOUT_VERSION));
    if !path.exists() {
        eprintln!("generating {} ({} items)...", path.display(), items);
        heapsnap_analyze::synth::large_heap_shape(items).heap.write(&path).expect("write snapshot");
    }
    path
}

fn best_of(n: usize, mut f: impl FnMut()) -> f64 {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let default_sizes = if args.iter().any(|a| a == "--bench") { "1,10" } else { "0.05" };
    let sizes: Vec<f64> =
        value("--sizes").unwrap_or_else(|| default_sizes.into()).split(',').filter_map(|s| s.trim().parse().ok()).collect();
    heapsnap_analyze::mem::tune_allocator();
    let quiet = Progress::hidden();
    println!(
        "{:>9} {:>10} {:>10} {:>10} | {:>9} {:>9} {:>9} {:>9} {:>9} | {:>8} {:>8}",
        "objects", "analysis", "first", "index MiB", "summary", "top", "domin.", "inspect", "path", "% first", "% alone"
    );
    for millions in sizes {
        let path = snapshot_for(millions);
        let _ = std::fs::remove_file(beside(&path));
        // The analysis alone (no index), as heapsnap ran before the index existed.
        let analysis = best_of(1, || {
            let snap = heapsnap_format::Snapshot::open(&path).unwrap();
            let a = Analysis::new(&snap, &quiet).unwrap();
            std::hint::black_box(heapsnap_analyze::groups::groups(&a, GroupBy::Kind).expect("kind groups").len());
        });
        let first = best_of(1, || {
            let ix = load(&path, Needs::Meta, &quiet).unwrap();
            assert!(ix.built);
            std::hint::black_box(ix.view(Needs::Meta).unwrap().summary(10).objects);
        });
        let index_mib = std::fs::metadata(beside(&path)).unwrap().len() as f64 / (1 << 20) as f64;
        let report = |needs: Needs, f: &dyn Fn(&heapsnap_index::IndexView<'_>)| {
            best_of(3, || {
                let ix = load(&path, needs, &quiet).unwrap();
                assert!(!ix.built);
                f(&ix.view(needs).unwrap());
            })
        };
        let summary = report(Needs::Meta, &|v| {
            std::hint::black_box(v.summary(10).objects);
        });
        let top = report(Needs::Meta, &|v| {
            std::hint::black_box(heapsnap_analyze::groups::top(v, GroupBy::Kind, 30).unwrap().groups.len());
        });
        let dominators = report(Needs::Tree, &|v| {
            std::hint::black_box(heapsnap_analyze::reports::dominator_report(v, 4, 1.0, 20).children.len());
        });
        // The biggest object below the roots: the hash table of the large-heap shape.
        let biggest = {
            let ix = load(&path, Needs::Tree, &quiet).unwrap();
            let v = ix.view(Needs::Tree).unwrap();
            let top = v.children_iter(0).flat_map(|k| v.children_iter(k).next()).max_by_key(|&n| v.retained(n)).unwrap();
            v.address(top).unwrap()
        };
        let inspect = report(Needs::All, &|v| {
            std::hint::black_box(heapsnap_analyze::inspect::inspect(v, biggest, 64).unwrap().retained);
        });
        let paths = report(Needs::All, &|v| {
            std::hint::black_box(heapsnap_analyze::paths::paths(v, &PathQuery::Address(biggest), 1, 10).unwrap().paths.len());
        });
        let worst = [summary, top, dominators, inspect, paths].into_iter().fold(0.0, f64::max);
        println!(
            "{:>8.2}M {:>9.3}s {:>9.3}s {:>10.0} | {:>8.4}s {:>8.4}s {:>8.4}s {:>8.4}s {:>8.4}s | {:>7.2}% {:>7.2}%",
            millions,
            analysis,
            first,
            index_mib,
            summary,
            top,
            dominators,
            inspect,
            paths,
            worst * 100.0 / first,
            worst * 100.0 / analysis
        );
    }
    println!("(analysis: open, graph, dominators, a top report, no index; first: the same, every grouping, and the index written;");
    println!(" then each report with the index in place, best of 3; % first: the slowest report against the first analysis (the goal:");
    println!(" under 5%), % alone: against the analysis without the index)");
}
