//! Bytecode programs dumped like native ones: every sample that runs as bytecode, on every
//! toolchain (OCaml 4.14 and 5), started through its `#!` line, through `ocamlrun` directly, and linked
//! with the interpreter (`-custom`, `-output-complete-exe`); at each READY point the snapshot
//! holds exactly the live blocks, passes `verify --strict`, and a fork captures the same world.

use crate::dump_support::*;
use heapsnap_format::RootKind;
use heapsnap_testkit::samples::{builds_sample, toolchain_prefix, toolchain_samples, toolchains, version_of};

/// Every toolchain, with its bytecode samples' directory.
fn bytecode_toolchains() -> Vec<(&'static str, std::path::PathBuf)> {
    toolchains().filter_map(|t| Some((t, toolchain_samples(t)?.join("bytecode")))).collect()
}

/// The first toolchain of the registry (5.3.0, always built), with its bytecode samples'
/// directory; the others are not asked for.
fn first_bytecode_toolchain() -> (&'static str, std::path::PathBuf) {
    let toolchain = toolchains().next().expect("the registry has toolchains");
    let samples =
        toolchain_samples(toolchain).unwrap_or_else(|| panic!("samples/build.sh {toolchain}: the first toolchain is always available"));
    (toolchain, samples.join("bytecode"))
}

/// The samples that run as bytecode.
const SAMPLES: &[&str] = &[
    "cache_leak",
    "systhread_stack",
    "closure_list",
    "effect_cont",
    "domains_shared",
    "weak_ephemeron",
    "bigarray_sample",
    "lazy_sample",
    "objects_sample",
    "long_list",
    "large_array",
    "steady_state",
    "alloc_sites",
    "typed_values",
    "closure_shapes",
];

#[test]
fn every_bytecode_sample_is_dumped_exactly() {
    for (toolchain, dir) in bytecode_toolchains() {
        for name in SAMPLES {
            if !builds_sample(toolchain, name) {
                continue; // samples/build.sh leaves it out: the release has no effects or no domains
            }
            let program = dir.join(name);
            let args: Vec<String> = match manifest_samples().iter().any(|s| s["name"] == *name) {
                true => manifest_args(name),
                false => Vec::new(),
            };
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            check_bytecode_sample_at(&program, version_of(toolchain), &format!("{name} ({toolchain}, bytecode)"), &args);
        }
    }
}

/// cache_leak's table is a toplevel binding of its main unit, which runs inside its
/// initialisation: the binding lives in that frame, named by the debug events' variables.
/// And its unit is a global once initialised: its module block's fields are named roots.
#[test]
fn the_main_units_bindings_and_the_initialised_units_are_named() {
    for (toolchain, dir) in bytecode_toolchains() {
        let snaps =
            check_bytecode_sample_at(&dir.join("cache_leak"), version_of(toolchain), &format!("cache_leak ({toolchain}, names)"), &[]);
        let snap = &snaps[0];
        let cache: Vec<_> = snap.roots().iter().filter(|r| snap.string(r.name) == Some("Cache_leak.cache")).collect();
        assert_eq!(cache.len(), 1, "{toolchain}: one root for Cache_leak.cache");
        assert!(cache[0].is_binding() && cache[0].root_kind() == RootKind::Stack, "{toolchain}: {:?}", cache[0]);
        // A Hashtbl.t: { size; data; seed; initial_size }, its data an array of buckets.
        let word = |a: u64| snap.region_of(a).and_then(|r| r.word_at(a)).unwrap_or_else(|| panic!("{toolchain}: no word at {a:#x}"));
        let table = cache[0].value;
        assert_eq!((word(table - 8) >> 10) & 0x3f_ffff, 4, "{toolchain}: Cache_leak.cache is no Hashtbl");
        assert_eq!(word(table) >> 1, 5000, "{toolchain}: the table holds 5000 entries at READY 1");
        let stdlib_list: Vec<_> =
            snap.roots().iter().filter(|r| r.root_kind() == RootKind::Global && snap.string(r.name) == Some("camlStdlib__List")).collect();
        assert!(stdlib_list.len() > 20, "{toolchain}: Stdlib.List's fields are roots ({})", stdlib_list.len());
        assert!(stdlib_list.iter().enumerate().all(|(k, r)| r.origin == k as u64), "{toolchain}: each named by its field");
    }
}

#[test]
fn bytecode_run_by_ocamlrun_directly_or_linked_with_the_interpreter() {
    for (toolchain, dir) in bytecode_toolchains() {
        let version = version_of(toolchain);
        let ocamlrun = toolchain_prefix(toolchain).join("bin/ocamlrun");
        let bytecode = dir.join("cache_leak");
        let by_ocamlrun =
            check_bytecode_sample_at(&ocamlrun, version, &format!("cache_leak ({toolchain}, ocamlrun)"), &[bytecode.to_str().unwrap()]);
        assert!(
            by_ocamlrun[0].metadata().executable.as_ref().is_some_and(|e| e.ends_with("ocamlrun")),
            "{toolchain}: the executable is ocamlrun"
        );
        for linked in ["cache_leak.custom", "cache_leak.complete"] {
            let snaps = check_bytecode_sample_at(&dir.join(linked), version, &format!("{linked} ({toolchain})"), &[]);
            assert!(
                snaps[0].metadata().executable.as_ref().is_some_and(|e| e.ends_with(linked)),
                "{toolchain}: {linked} is its own executable"
            );
        }
    }
}

/// systhreads in bytecode: `ocamlrun` loads it as `dllthreads.so`, read through the library's
/// own DWARF; `-custom` links it in. Either way each thread's interpreter stack is scanned: the
/// table that only a blocked worker's frame holds is held by a stack root of that thread (not
/// the main one), named after the worker's function, and the thread descriptors are roots.
/// (The main unit's initialisation frame also holds `worker`'s closure: a binding named
/// alike, on the main thread.)
#[test]
fn every_systhreads_stack_of_a_bytecode_program_is_scanned() {
    for (toolchain, dir) in bytecode_toolchains() {
        for program in ["systhread_stack", "systhread_stack.custom"] {
            let name = format!("{program} ({toolchain}, bytecode)");
            let snaps = check_bytecode_sample_at(&dir.join(program), version_of(toolchain), &name, &[]);
            let snap = &snaps[0];
            let threads: std::collections::BTreeSet<u64> =
                snap.roots().iter().filter(|r| r.root_kind() == RootKind::Thread).map(|r| r.thread).collect();
            assert!(threads.len() >= 2, "{name}: thread descriptors for {threads:?}");
            let worker: Vec<_> = snap
                .roots()
                .iter()
                .filter(|r| r.root_kind() == RootKind::Stack && !r.is_binding() && snap.string(r.name) == Some("Systhread_stack.worker"))
                .collect();
            assert!(!worker.is_empty(), "{name}: no stack root in the worker's frame");
            // The main thread's stack roots are in Heapsnap_sample's frames, another thread.
            let main: Vec<_> = snap
                .roots()
                .iter()
                .filter(|r| r.root_kind() == RootKind::Stack && snap.string(r.name) == Some("Heapsnap_sample.checkpoint"))
                .collect();
            assert!(!main.is_empty(), "{name}: no stack root in the main thread's frames");
            let ids = |roots: &[&heapsnap_format::RootRecord]| roots.iter().map(|r| r.thread).collect::<std::collections::BTreeSet<_>>();
            let (worker_ids, main_ids) = (ids(&worker), ids(&main));
            assert!(worker_ids.is_disjoint(&main_ids), "{name}: the worker's roots ({worker_ids:?}) are the main thread's ({main_ids:?})");
            // The 4096-row table, only in the worker's frame, is the first suspect, held by it.
            let table = worker.iter().find(|r| {
                let header = snap.region_of(r.value).and_then(|region| region.word_at(r.value - 8));
                header.is_some_and(|h| (h >> 10) & 0x3f_ffff == 4096)
            });
            assert!(table.is_some(), "{name}: the worker's table is held by no root of its frame");
        }
    }
}

/// While the interpreter runs bytecode it keeps its stack pointer in a register and the one in
/// memory is stale: a program that only interprets, or only calls a runtime function the
/// interpreter calls without saving its stack pointer (`caml_modify`, for `r := v`), is never
/// at a consistent stop, and `--require-consistent` says why instead of scanning a stale stack.
#[test]
fn a_stop_inside_the_interpreter_is_not_consistent() {
    for (toolchain, _) in bytecode_toolchains() {
        refused_inside_the_interpreter(toolchain);
    }
}

fn refused_inside_the_interpreter(toolchain: &str) {
    let dir = tempfile::tempdir().unwrap();
    let spin = r#"
let rec spin i acc = if i = 0 then spin 1_000_000 (acc land 0xffff) else spin (i - 1) (acc + i)
let () = print_endline "READY"; ignore (spin 1 0)
"#;
    let modify = r#"
let r = ref (Some 1) and v = Some 2
let rec store i = r := v; r := v; r := v; r := v; if i = 0 then store 1_000_000 else store (i - 1)
let () = Gc.full_major (); print_endline "READY"; store 1
"#;
    // (The last stop's reason is said. In `modify`, a stop may also land in a runtime function
    // that `caml_modify` calls, unsafe whoever called it: `caml_darken` (major_gc.c) while the
    // major GC marks, 4.14's `caml_page_table_lookup` (memory.c).)
    let modifying = ["is interpreting bytecode", "is in caml_modify, which the interpreter calls without saving", ".c)"];
    for (name, source, says) in [("spin", spin, &modifying[..1]), ("modify", modify, &modifying[..])] {
        let program = compile_bytecode_by(&toolchain_prefix(toolchain), dir.path(), name, source);
        let mut running = start_until_ready(&program);
        let out = dump(running.0.id() as i32, &dir.path().join(format!("{name}.snap")), &["--require-consistent"]);
        assert!(!out.status.success(), "{name}: a stop inside the interpreter was taken as consistent");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(says.iter().any(|s| stderr.contains(s)), "{name}: {stderr}");
        assert_running_untraced(running.0.id() as i32, "the refused dump");
        running.0.kill().unwrap();
    }
}

/// A core of a bytecode program (gcore) holds the same world as a live dump of the same moment,
/// its bindings and functions named alike, on every OCaml 5 toolchain.
#[test]
fn a_bytecode_core_matches_the_live_dump() {
    for (toolchain, dir) in bytecode_toolchains() {
        for name in ["cache_leak", "effect_cont", "domains_shared"] {
            if builds_sample(toolchain, name) {
                let snap = check_program(&format!("{name} ({toolchain}, bytecode core)"), &dir.join(name), &[]);
                assert!(snap.metadata().bytecode, "{toolchain} {name}: the core's snapshot says bytecode");
            }
        }
    }
}

/// The toplevel, `ocaml script.ml`, running a script that builds a table and waits: the
/// snapshot holds exactly the live blocks and verifies strictly, the session's binding is a
/// root named after it, and the table it holds is the first suspect, most of the heap, held
/// by that binding.
#[test]
fn the_toplevels_bindings_are_roots_named_after_them() {
    let script = r#"
let tbl = Hashtbl.create 16
let () = for i = 1 to 100_000 do Hashtbl.replace tbl i (string_of_int i) done
let small = [1; 2; 3]
let () =
  (* 5.1's Gc.compact is one major cycle, leaving what died in it unswept: full_major sweeps. *)
  Gc.full_major ();
  Gc.compact ();
  print_endline "READY 1";
  (try ignore (input_line stdin) with End_of_file -> ());
  print_endline "DONE"
"#;
    for (toolchain, _) in bytecode_toolchains() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script.ml");
        std::fs::write(&path, script).unwrap();
        let ocaml = toolchain_prefix(toolchain).join("bin/ocaml");
        let snaps =
            check_bytecode_sample_at(&ocaml, version_of(toolchain), &format!("ocaml script.ml ({toolchain})"), &[path.to_str().unwrap()]);
        let snap = &snaps[0];
        let named = |n: &str| snap.roots().iter().filter(|r| snap.string(r.name) == Some(n)).copied().collect::<Vec<_>>();
        let tbl = named("tbl (toplevel)");
        assert_eq!(tbl.len(), 1, "{toolchain}: one root for the binding tbl");
        assert!(tbl[0].is_binding() && tbl[0].root_kind() == RootKind::Global, "{toolchain}: {:?}", tbl[0]);
        assert_eq!(named("small (toplevel)").len(), 1, "{toolchain}: and one for small");
        let snap_path = dir.path().join("again.snap");
        drop(snaps);
        // The table is the first suspect, held by the binding, most of the heap.
        let mut session = Sample::start(&ocaml, &[path.to_str().unwrap()]);
        session.wait_ready(1);
        dump_ok(session.pid(), &snap_path, &[]);
        let summary = analyse("summary", &[&snap_path], &[]);
        let first = &summary["suspects"]["suspects"][0];
        assert_eq!(first["held_by"], "tbl (toplevel)", "{toolchain}: {first}");
        assert_eq!(first["kind"], "Hashtbl", "{toolchain}: {first}");
        assert!(first["percent"].as_f64().unwrap() > 50.0, "{toolchain}: {first}");
        session.release();
        session.finish();
    }
}

/// What cannot be read is refused, saying what it is, and the program goes on untouched: a
/// WebAssembly module, JavaScript or a bytecode file given as the executable to read.
#[test]
fn other_builds_given_as_the_executable_are_refused_clearly() {
    let (_, dir) = first_bytecode_toolchain();
    let files = tempfile::tempdir().unwrap();
    let wasm = files.path().join("prog.wasm");
    std::fs::write(&wasm, b"\0asm\x01\0\0\0").unwrap();
    let js = files.path().join("prog.bc.js");
    std::fs::write(&js, "// Generated by js_of_ocaml\n(function(){}())\n").unwrap();
    let bytecode = dir.join("cache_leak");
    let mut sample = Sample::start(&bytecode, &[]);
    sample.wait_ready(1);
    for (exe, says) in [(&wasm, "a WebAssembly module"), (&js, "JavaScript"), (&bytecode, "a bytecode file")] {
        let out = dump(sample.pid(), &files.path().join("x.snap"), &["--exe", exe.to_str().unwrap()]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{}: {stderr}", exe.display());
        assert_running_untraced(sample.pid(), "a refused dump");
    }
    assert!(snapshots_in(files.path()).is_empty());
    sample.release();
    assert!(sample.finish().1.success());
}

/// The bytecode file read for names is input like any other: changed on disk after the program
/// loaded it (its table of globals or its debug events overwritten, or the file cut short), the
/// dump still holds exactly the live blocks, and says once what it could not name.
#[test]
fn a_corrupt_bytecode_file_costs_names_not_the_snapshot() {
    let (toolchain, dir) = first_bytecode_toolchain();
    let original = std::fs::read(dir.join("cache_leak")).unwrap();
    let section = |name: &[u8; 4]| -> std::ops::Range<usize> {
        let n = original.len();
        let count = u32::from_be_bytes(original[n - 16..n - 12].try_into().unwrap()) as usize;
        let table = n - 16 - 8 * count;
        let mut end = table;
        let mut found = None;
        for i in (0..count).rev() {
            let d = &original[table + 8 * i..table + 8 * i + 8];
            let len = u32::from_be_bytes(d[4..].try_into().unwrap()) as usize;
            if &d[..4] == name {
                found = Some(end - len..end);
            }
            end -= len;
        }
        found.unwrap_or_else(|| panic!("no {} section", String::from_utf8_lossy(name)))
    };
    let garbled = |range: std::ops::Range<usize>| {
        let mut bytes = original.clone();
        for (i, b) in bytes[range].iter_mut().enumerate().skip(20) {
            *b = (i as u8).wrapping_mul(151) ^ 0x5a;
        }
        bytes
    };
    let cases: [(&str, Vec<u8>, &str); 3] = [
        ("SYMB", garbled(section(b"SYMB")), "the bytecode's globals, frames and closures are not named"),
        ("DBUG", garbled(section(b"DBUG")), "debug events could not be read"),
        ("cut", original[..original.len() / 2].to_vec(), "the bytecode's globals, frames and closures are not named"),
    ];
    for (what, bytes, says) in cases {
        let files = tempfile::tempdir().unwrap();
        let program = files.path().join("cache_leak");
        std::fs::write(&program, &original).unwrap();
        std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let mut sample = Sample::start(&program, &[]);
        sample.wait_ready(1);
        std::fs::write(&program, &bytes).unwrap();
        let path = files.path().join("s.snap");
        let report = dump_ok(sample.pid(), &path, &[]);
        let notes = report["notes"].to_string();
        assert!(notes.contains(says), "{toolchain} {what}: {notes}");
        let snap = heapsnap_format::Snapshot::open(&path).unwrap();
        reachability(&snap).assert_exact(&format!("{toolchain} {what}"));
        assert_eq!(verify(&path, true)["ok"], true, "{toolchain} {what}");
        sample.release();
        assert!(sample.finish().1.success(), "{toolchain} {what}");
    }
}
