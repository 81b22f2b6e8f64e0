//! The Parquet export's size against the snapshot's: what a fleet keeps per snapshot when it
//! keeps the tables only. The goal is at most 2% of the snapshot file.
//!
//!     cargo bench -p heapsnap-export --bench parquet_size -- --sizes 10
//!     cargo bench -p heapsnap-export --bench parquet_size -- --snapshot PATH [--snapshot PATH]...
//!
//! The synthetic `large_heap` snapshots of `heapsnap-analyze`'s benchmark (`--sizes`, millions
//! of objects, cached in the bench directory), or real ones (`--snapshot`); each is analysed and
//! exported to a temporary directory, and every table's rows and bytes printed with the total
//! as a percentage of the snapshot file. The figures measured are in `export/EXPORT.md`.

#[global_allocator]
static ALLOCATOR: heapsnap_analyze::SplitAllocator = heapsnap_analyze::SplitAllocator;

use heapsnap_analyze::{Analysis, Progress};
use heapsnap_export::parquet::{export, identity, Options, DEFAULT_PATHS};
use heapsnap_format::Snapshot;
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let real: Vec<PathBuf> = args.windows(2).filter(|w| w[0] == "--snapshot").map(|w| PathBuf::from(&w[1])).collect();
    let inputs: Vec<PathBuf> = if real.is_empty() {
        heapsnap_testkit::bench::sizes(&args).into_iter().map(heapsnap_testkit::bench::bench_large_heap).collect()
    } else {
        real
    };
    heapsnap_analyze::tune_allocator();
    println!("{:>12} {:>12} {:>9} {:>9}  snapshot / tables (rows, bytes)", "snapshot", "tables", "percent", "export s");
    for path in inputs {
        let snap = Snapshot::open(&path).expect("open the snapshot");
        let snapshot_file_bytes = std::fs::metadata(&path).expect("its size").len();
        let analysis = Analysis::new(&snap, &Progress::hidden()).expect("analyse");
        let host = snap.metadata().host.clone();
        let options = Options {
            snapshot_id: identity::snapshot_id(snap.metadata(), host.as_deref()),
            host,
            snapshot_file_bytes,
            paths: DEFAULT_PATHS,
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        let t = Instant::now();
        let report = export(&analysis, &options, dir.path(), &Progress::hidden()).expect("export");
        let seconds = t.elapsed().as_secs_f64();
        let tables: Vec<String> = report.tables.iter().map(|t| format!("{} {} {}", t.table, t.rows, t.bytes)).collect();
        println!(
            "{:>12} {:>12} {:>8.3}% {:>9.2}  {} / {}",
            snapshot_file_bytes,
            report.bytes,
            report.percent_of_snapshot,
            seconds,
            path.display(),
            tables.join(", ")
        );
    }
}
