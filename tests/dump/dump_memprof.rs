//! Statmemprof's tracking tables in snapshots (OCaml 5.3, and 4.14's memprof): a program
//! samples its allocations with `Gc.Memprof.start` and a tracker of its own; the snapshot
//! records every tracked block with the tracker's value, its samples, size, source and
//! promotion, and the profile's rate; the blocks stay weak (they retain nothing) and the
//! tracker's values are roots; OCaml 5.1 and 5.2 snapshots record none.

use crate::dump_support::*;
use heapsnap_analyze::PointsTo;
use heapsnap_format::{Snapshot, MEMPROF_PROMOTED, MEMPROF_SOURCE_NORMAL, MEMPROF_TABLE_DOMAIN};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Keeps 4000 arrays of 100 words sampled at 1% (each block's tracker value is 1000 plus its
/// sample count, and promotion keeps it); the first half are promoted by a minor collection.
const PROGRAM: &str = r#"
let kept = ref []
let () =
  let tracker = { Gc.Memprof.null_tracker with
    alloc_minor = (fun info -> Some (1000 + info.Gc.Memprof.n_samples));
    promote = (fun v -> Some v) } in
  let _profile = Gc.Memprof.start ~sampling_rate:0.01 tracker in
  for i = 1 to 2000 do kept := Array.make 100 i :: !kept done;
  Gc.minor ();
  for i = 1 to 2000 do kept := Array.make 100 i :: !kept done;
  print_endline "READY";
  ignore (input_line stdin);
  print_int (List.length !kept)
"#;

#[test]
fn tracked_blocks_are_recorded_with_their_samples_and_rate() {
    tracked_blocks_are_recorded_on("5.3.0");
}

#[test]
fn tracked_blocks_are_recorded_with_their_samples_and_rate_on_4_14() {
    tracked_blocks_are_recorded_on("4.14.0");
}

fn tracked_blocks_are_recorded_on(toolchain: &str) {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_ocaml_by(&toolchain_prefix(toolchain), dir.path(), "memprof_program", PROGRAM, &[], None);
    let mut child = KillOnDrop(Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).dies_with_test().spawn().unwrap());
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "READY");
    let out = dir.path().join("m.snap");
    dump_ok(child.0.id() as i32, &out, &[]);
    let snap = Snapshot::open(&out).unwrap();
    let entries = snap.memprof().expect("a 5.3 or 4.14 snapshot records memprof's tables");
    // 4000 arrays of 101 words and 4000 list cells of 3 at 1%: about 4160 samples, in about
    // 4000 * (1 - 0.99^101) + 4000 * (1 - 0.99^3) = 2670 blocks (five standard deviations apart).
    let samples: u64 = entries.iter().map(|e| e.samples).sum();
    assert!((3830..=4490).contains(&samples), "{toolchain}: {samples} samples");
    assert!((2520..=2820).contains(&entries.len()), "{toolchain}: {} entries", entries.len());
    let index = heapsnap_analyze::Analysis::new(&snap, &heapsnap_analyze::Progress::hidden()).unwrap();
    let mut promoted = 0;
    for e in &entries {
        assert!(e.wosize == 100 || e.wosize == 2, "{e:?}");
        assert_eq!((e.source, e.table, e.sampling_rate), (MEMPROF_SOURCE_NORMAL, MEMPROF_TABLE_DOMAIN, 0.01), "{e:?}");
        // The tracker returned Some (1000 + samples): memprof keeps the option's content.
        assert_eq!(e.user_data, ((1000 + e.samples) << 1) | 1, "{e:?}");
        // The sampled block, an array or a list cell, is still there, of the size recorded.
        let PointsTo::Node(block) = index.graph.blocks.resolve(e.block) else { panic!("block {:#x} is no block", e.block) };
        assert_eq!(index.graph.blocks.block(block).unwrap().header.wosize, e.wosize);
        if e.flags & MEMPROF_PROMOTED != 0 {
            promoted += 1;
        }
    }
    assert!(promoted > 0 && promoted < entries.len(), "{toolchain}: {promoted} of {} promoted", entries.len());
    drop(child);
}

/// The tracker's values are blocks only memprof holds: the snapshot's roots must reach them
/// (the oracle finds every live block of the compacted heap reachable).
const USER_DATA_PROGRAM: &str = r#"
let kept = ref []
let () =
  let tracker = { Gc.Memprof.null_tracker with
    alloc_minor = (fun info -> Some (Bytes.make 64 (Char.chr (65 + info.Gc.Memprof.n_samples mod 26))));
    promote = (fun v -> Some v) } in
  let _profile = Gc.Memprof.start ~sampling_rate:0.01 tracker in
  for i = 1 to 4000 do kept := Array.make 100 i :: !kept done;
  Gc.compact ();
  print_endline "READY";
  ignore (input_line stdin);
  print_int (List.length !kept)
"#;

#[test]
fn tracker_values_are_roots() {
    for toolchain in ["5.3.0", "4.14.0"] {
        let dir = tempfile::tempdir().unwrap();
        let exe = compile_ocaml_by(&toolchain_prefix(toolchain), dir.path(), "user_data", USER_DATA_PROGRAM, &[], None);
        let mut child = KillOnDrop(Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).dies_with_test().spawn().unwrap());
        let mut line = String::new();
        BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "READY");
        let out = dir.path().join("m.snap");
        dump_ok(child.0.id() as i32, &out, &[]);
        let snap = Snapshot::open(&out).unwrap();
        let entries = snap.memprof().unwrap();
        assert!(entries.iter().filter(|e| e.user_data & 1 == 0).count() > 2000, "{toolchain}: {} entries", entries.len());
        reachability(&snap).assert_exact(toolchain);
        // Without the memprof roots, the tracker's strings are live blocks nothing reaches.
        let without = reachability_from(&snap, |r| r.root_kind() != heapsnap_format::RootKind::Memprof);
        assert!(without.missed.len() > 2000, "{toolchain}: {} missed without memprof roots", without.missed.len());
        drop(child);
    }
}

#[test]
fn releases_without_statmemprof_record_no_tables() {
    for toolchain in ["5.1.0", "5.2.0"] {
        let Some(dir) = toolchain_samples(toolchain) else { continue };
        let tmp = tempfile::tempdir().unwrap();
        let mut sample = Sample::start(&dir.join("cache_leak"), &[]);
        sample.wait_ready(1);
        let out = tmp.path().join("x.snap");
        dump_ok(sample.pid(), &out, &[]);
        assert!(Snapshot::open(&out).unwrap().memprof().is_none(), "{toolchain}");
        let info = Command::new(heapsnap()).arg("info").arg(&out).output().unwrap();
        assert!(String::from_utf8_lossy(&info.stdout).contains("statmemprof exists in OCaml 4.14 and from 5.3 on"), "{toolchain}");
        sample.release();
        sample.finish();
    }
}
