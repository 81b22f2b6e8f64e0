//! The OCaml compiler itself, dumped in the middle of compiling a large generated source file:
//! a big, busy, real program. The snapshot is consistent and parses, its roots lead only to
//! blocks, and the compilation still succeeds with a working program.

use crate::dump_support::*;
use heapsnap_format::{RootKind, Snapshot};
use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

/// A source file of `n` functions over variants, records, lists and strings, and a main that
/// prints the sum of their results.
fn large_source(n: usize) -> (String, i64) {
    let mut src = String::from("type shape = Circle of int | Rect of int * int | Named of string * int list\n");
    src.push_str("type r = { a : int; b : string; c : float list }\n");
    let mut expected = 0i64;
    for i in 0..n {
        let _ = writeln!(
            src,
            "let f{i} x = match x with\n  | Circle r -> r * {i} + List.length [{i}; {i}]\n  | Rect (w, h) -> w + h + String.length \"{i}\"\n  | Named (s, l) -> String.length s + List.fold_left ( + ) {i} l\nlet g{i} () = let v = {{ a = {i}; b = string_of_int {i}; c = [float_of_int {i}] }} in f{i} (Named (v.b, [v.a; {i}]))"
        );
        // g_i () = String.length (string_of_int i) + i + i + i
        expected += i.to_string().len() as i64 + 3 * i as i64;
    }
    src.push_str("let () =\n  let total = ref 0 in\n");
    for i in 0..n {
        let _ = writeln!(src, "  total := !total + g{i} ();");
    }
    src.push_str("  print_int !total; print_newline ()\n");
    (src, expected)
}

#[test]
fn the_compiler_dumped_mid_compilation() {
    compiler_dumped_mid_compilation("5.3.0");
}

#[test]
fn the_4_14_compiler_dumped_mid_compilation() {
    compiler_dumped_mid_compilation("4.14.0");
}

/// One compiler at a time: two busy compilers on a small machine make each other's dumps slow
/// enough for the other to finish first.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn compiler_dumped_mid_compilation(toolchain: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (source, expected) = large_source(1500);
    std::fs::write(dir.path().join("big.ml"), source).unwrap();
    let mut compiler = Command::new(toolchain_prefix(toolchain).join("bin/ocamlopt.opt"))
        .current_dir(dir.path())
        .args(["-g", "big.ml", "-o", "big"])
        .dies_with_test()
        .spawn()
        .expect("start ocamlopt.opt");
    // Let it get well into the work, then dump it (twice: early and later).
    let start = Instant::now();
    let mut dumped = 0;
    for delay in [Duration::from_millis(1500), Duration::from_millis(3000)] {
        while start.elapsed() < delay {
            std::thread::sleep(Duration::from_millis(20));
        }
        if compiler.try_wait().unwrap().is_some() {
            break;
        }
        let path = dir.path().join(format!("ocamlopt-{dumped}.snap"));
        let report = dump_ok(compiler.id() as i32, &path, &["--require-consistent"]);
        assert_eq!(report["consistent"], true, "{report}");
        let snap = Snapshot::open(&path).expect("snapshot validates");
        let r = reachability(&snap);
        r.assert_well_formed("ocamlopt.opt");
        // A busy program: its major heap holds garbage not yet swept, so only the size and
        // the well-formedness are checked, not that every block is reachable.
        assert!(r.major_live > 100_000 && r.reachable > 10_000, "{} blocks, {} reachable", r.major_live, r.reachable);
        let globals = snap.roots().iter().filter(|r| r.root_kind() == RootKind::Global).count();
        assert!(globals > 1000, "{globals} global roots");
        assert_eq!(snap.metadata().ocaml_version, version_of(toolchain));
        // And the analyser's check (not --strict: a busy program is full of garbage).
        let v = verify(&path, false);
        assert_eq!(v["ok"], true, "{toolchain}: heapsnap verify: {v}");
        std::fs::remove_file(&path).unwrap();
        dumped += 1;
    }
    assert!(dumped >= 1, "the compiler finished before it could be dumped; make the source larger");
    let status = compiler.wait().unwrap();
    assert!(status.success(), "ocamlopt.opt failed after being dumped");
    let out = Command::new(dir.path().join("big")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), expected.to_string());
}
