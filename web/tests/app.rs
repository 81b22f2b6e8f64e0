//! The web UI's diff and flame graphs come from the snapshots' indexes.

use heapsnap_analyze::diff::{diff, DiffOptions, Input};
use heapsnap_analyze::{GroupBy, Progress};
use heapsnap_format::Snapshot;
use heapsnap_testkit::synth::large_heap_shape;
use heapsnap_web::App;
use std::path::PathBuf;

fn without_timings(mut v: serde_json::Value) -> serde_json::Value {
    v.as_object_mut().expect("an object").remove("timings");
    v
}

/// The diff computed at start reads each snapshot's saved classification and says what the
/// analysing diff says; the flame graph by signature needs no analysis, those by group one per
/// snapshot, whatever the grouping.
#[test]
fn the_diff_and_the_flame_graphs_come_from_the_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = [100u64, 150, 210]
        .iter()
        .map(|&items| {
            let path = dir.path().join(format!("grow-{items}.heapsnap"));
            large_heap_shape(items).heap.write(&path).unwrap();
            path
        })
        .collect();
    let quiet = Progress::hidden();
    let app = App::load(&paths, &quiet).unwrap();

    let snaps: Vec<Snapshot> = paths.iter().map(|p| Snapshot::open(p).unwrap()).collect();
    let inputs: Vec<Input<'_>> =
        app.snapshots.iter().zip(&snaps).map(|(s, snap)| Input { name: s.name.clone(), snap, saved: None }).collect();
    let analysed = diff(&inputs, &DiffOptions::default(), &quiet).unwrap();
    let served = app.diff.clone().expect("a diff of three snapshots");
    let read =
        served["timings"].as_array().unwrap().iter().filter(|t| t["step"].as_str().unwrap().ends_with("read from the index")).count();
    assert_eq!(read, 3, "{served:#}");
    assert!(!analysed.suspects.is_empty());
    assert_eq!(without_timings(served), without_timings(serde_json::to_value(&analysed).unwrap()));

    let svg = |i: usize, by: GroupBy| app.flames.svg(i, &app.snapshots[i].name, app.snapshots[i].indexed, by).unwrap();
    let by_root = svg(0, GroupBy::Root);
    assert!(String::from_utf8_lossy(&by_root).contains("Hashtbl bucket chains"), "the signatures' frames");
    assert_eq!(app.flames.analysed(), 0, "by signature: from the index");
    let by_kind = svg(0, GroupBy::Kind);
    assert!(by_kind != by_root && String::from_utf8_lossy(&by_kind).contains("by kind"));
    let _ = svg(0, GroupBy::Closure);
    assert_eq!(app.flames.analysed(), 1, "one analysis for every grouping");
    let _ = svg(1, GroupBy::Kind);
    assert_eq!(app.flames.analysed(), 2);
}
