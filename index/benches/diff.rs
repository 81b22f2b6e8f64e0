//! `diff` of three snapshots with their analysis indexes present, against the same diff
//! without them (issue #27's goal: at most 30%).
//!
//!     cargo bench -p heapsnap-index --bench diff                  # 1M and 10M objects
//!     cargo bench -p heapsnap-index --bench diff -- --sizes 10
//!     (`cargo test --all-targets` runs it on 50k objects, as a smoke test)
//!
//! Snapshots are the synthetic `large_heap` shape (cached in `<target>/heapsnap-bench/`,
//! shared with the other benchmarks): three of about N, 1.02 N and 1.04 N million objects, so
//! that every kind grows and the suspects have paths. For each size, in one run:
//!
//! - `analysed`: the diff as it runs without indexes (and as it ran before they saved its
//!   classification): open and check the snapshots, analyse and classify each, compare, count
//!   the suspects' paths in the first and the last;
//! - `1st diff`: the first `diff` as the command runs it: each snapshot analysed once, its
//!   meta data and the diff's sections written, then compared from them;
//! - `indexed`: the diff with the indexes present, as the command runs it: open the snapshots and
//!   their indexes, check and read the diff's sections, compare (best of 3);
//! - `ratio`: `indexed / analysed`.
//!
//! Both diffs' reports are checked equal (but for their timings). The command line gives the
//! same figures as whole processes (`HEAPSNAP_TRACE=1` prints the phases):
//!
//!     D=target/heapsnap-bench; S="$D/large_heap_v2_1428571.heapsnap $D/large_heap_v2_1457143.heapsnap $D/large_heap_v2_1485714.heapsnap"
//!     rm -f $D/*.hsidx; HEAPSNAP_INDEX_IN_BACKGROUND=0 target/release/heapsnap diff $S   # the first: writes the indexes
//!     HEAPSNAP_TRACE=1 target/release/heapsnap diff $S                                   # indexes present

// What the heapsnap binary installs, so that the figures are its figures.
#[global_allocator]
static ALLOCATOR: heapsnap_analyze::SplitAllocator = heapsnap_analyze::SplitAllocator;

use heapsnap_analyze::diff::{diff, DiffOptions, DiffReport, Input};
use heapsnap_analyze::Progress;
use heapsnap_format::Snapshot;
use heapsnap_index::store::{beside, load};
use heapsnap_index::Needs;
use std::path::PathBuf;
use std::time::Instant;

fn timed<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let t = Instant::now();
    let out = f();
    (t.elapsed().as_secs_f64(), out)
}

fn without_timings(r: &DiffReport) -> serde_json::Value {
    let mut v = serde_json::to_value(r).expect("serialises");
    v.as_object_mut().expect("an object").remove("timings");
    v
}

/// The diff without indexes: every snapshot opened (its checksums checked) and analysed.
fn analysed(paths: &[PathBuf], quiet: &Progress) -> DiffReport {
    let snaps: Vec<Snapshot> = paths.iter().map(|p| Snapshot::open(p).expect("open")).collect();
    let inputs: Vec<Input<'_>> =
        paths.iter().zip(&snaps).map(|(p, s)| Input { name: p.display().to_string(), snap: s, saved: None }).collect();
    diff(&inputs, &DiffOptions::default(), quiet).expect("diff")
}

/// The diff as the command runs it: each snapshot with its index (built when absent).
fn indexed(paths: &[PathBuf], quiet: &Progress) -> DiffReport {
    let loaded: Vec<_> = paths.iter().map(|p| load(p, Needs::Diff, quiet).expect("index")).collect();
    let views: Vec<_> = loaded.iter().map(|ix| ix.view(Needs::Diff).expect("the diff's sections")).collect();
    let inputs: Vec<Input<'_>> = paths
        .iter()
        .zip(&views)
        .map(|(p, v)| Input { name: p.display().to_string(), snap: v.snap, saved: v.diff_profile(heapsnap_analyze::GroupBy::Kind) })
        .collect();
    diff(&inputs, &DiffOptions::default(), quiet).expect("diff")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes = heapsnap_testkit::bench::sizes(&args);
    heapsnap_analyze::tune_allocator();
    let quiet = Progress::hidden();
    println!("{:>8} {:>9} {:>9} {:>9} {:>7}", "objects", "analysed", "1st diff", "indexed", "ratio");
    for millions in sizes {
        let paths: Vec<PathBuf> = [1.0, 1.02, 1.04].iter().map(|f| heapsnap_testkit::bench::bench_large_heap(millions * f)).collect();
        for p in &paths {
            let _ = std::fs::remove_file(beside(p));
        }
        let (analysed_s, full) = timed(|| analysed(&paths, &quiet));
        let (first_s, first) = timed(|| indexed(&paths, &quiet));
        let (mut indexed_s, mut compared) = timed(|| indexed(&paths, &quiet));
        for _ in 0..2 {
            let (s, r) = timed(|| indexed(&paths, &quiet));
            if s < indexed_s {
                (indexed_s, compared) = (s, r);
            }
        }
        assert_eq!(without_timings(&full), without_timings(&first), "the first diff's report");
        assert_eq!(without_timings(&full), without_timings(&compared), "the diff over indexes' report");
        assert!(compared.timings.iter().any(|t| t.step.ends_with("read from the index")), "{:?}", compared.timings);
        println!("{:>7.2}M {:>8.2}s {:>8.2}s {:>8.3}s {:>6.1}%", millions, analysed_s, first_s, indexed_s, 100.0 * indexed_s / analysed_s);
    }
}
