//! Types through the heap (issue 17), on a real program: every typing rule of
//! `heapsnap_analyze::typed` checked against what `samples/typed_values.types.json` says each
//! block is (and, where typing must stop, that the block stays untyped), on OCaml 4.14 and
//! every 5.x toolchain; the reports (`top --by type`, `path`, `inspect`, `dominators`) show the same.

use crate::dump_support::*;
use heapsnap_analyze::{AnalysedHeap, Analysis, HeapFacts, Progress};
use heapsnap_format::{RootKind, Snapshot};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn build_dir(samples: &Path) -> PathBuf {
    samples.parent().unwrap().join(".build").join(samples.file_name().unwrap()).join("cmt")
}

/// A dump of a sample at READY 1, with names.
fn typed_snapshot(toolchain: &str, samples: &Path, sample: &str, dir: &Path) -> PathBuf {
    typed_snapshot_of(toolchain, &samples.join(sample), &build_dir(samples), dir)
}

/// A dump of `program` at READY 1, with names from `cmt`.
fn typed_snapshot_of(toolchain: &str, program: &Path, cmt: &Path, dir: &Path) -> PathBuf {
    let mut s = Sample::start(program, &[]);
    s.wait_ready(1);
    let path = dir.join(format!("{}.heapsnap", program.file_name().unwrap().to_string_lossy()));
    let prefix = toolchain_prefix(toolchain);
    dump_ok(s.pid(), &path, &["--ocaml", prefix.to_str().unwrap(), "--cmt", cmt.to_str().unwrap()]);
    path
}

/// The value of a module global of a unit (or, in bytecode, of a binding of the main unit,
/// which runs inside its initialisation: its frame holds the unit's values).
fn global(a: &Analysis<'_>, snap: &Snapshot, unit: &str, name: &str) -> u64 {
    let r = snap
        .roots()
        .iter()
        .find(|r| (r.root_kind() == RootKind::Global || r.is_binding()) && a.names.root_label(r) == format!("{unit}.{name}"))
        .unwrap_or_else(|| panic!("no global {unit}.{name}"));
    r.value
}

/// Every check of a sample's manifest (`samples/SAMPLE.types.json`): each block reached from
/// a module global by field indices has the type it says (or stays untyped), its constructor
/// and its field names.
fn assert_manifest_holds(toolchain: &str, a: &Analysis<'_>, snap: &Snapshot, sample: &str) {
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join(format!("samples/{sample}.types.json"))).unwrap()).unwrap();
    let unit = format!("{}{}", sample[..1].to_uppercase(), &sample[1..]);
    let typing = a.typing().expect("typed");
    for check in manifest["checks"].as_array().unwrap() {
        if check.get("since").and_then(Value::as_str).is_some_and(|since| version_before(toolchain, since)) {
            continue;
        }
        if snap.metadata().bytecode && check.get("native_only").is_some() {
            continue;
        }
        {
            let name = check["global"].as_str().unwrap();
            let mut value = global(a, snap, &unit, name);
            let mut node = None;
            for step in check["path"].as_array().unwrap() {
                let v = a.node_at(value).unwrap_or_else(|_| panic!("{toolchain}: {check}: no block at {value:#x}"));
                value = a.block(v).unwrap().fields[step.as_u64().unwrap() as usize];
                node = None;
            }
            let v = node.unwrap_or_else(|| a.node_at(value).unwrap_or_else(|_| panic!("{toolchain}: {check}: {value:#x} is no block")));
            let b = a.block(v).unwrap();
            let found = typing.of(v, b.header.tag, b.fields.first().copied());
            let wanted: Vec<Option<&str>> = match check.get("types") {
                Some(list) => list.as_array().unwrap().iter().map(|t| t.as_str()).collect(),
                None => vec![check["type"].as_str()],
            };
            let name_found = found.as_ref().map(|t| t.name);
            assert!(wanted.contains(&name_found), "{toolchain}: {check}: typed {name_found:?}");
            if let Some(c) = check.get("constructor") {
                assert_eq!(found.as_ref().and_then(|t| t.constructor), c.as_str(), "{toolchain}: {check}");
            }
            if let Some(fields) = check.get("fields") {
                let names: Vec<Option<String>> = (0..b.header.wosize as usize).map(|i| a.field_label(v, i)).collect();
                let want: Vec<Option<String>> = fields.as_array().unwrap().iter().map(|f| f.as_str().map(str::to_string)).collect();
                assert_eq!(names, want, "{toolchain}: {check}");
            }
        }
    }
}

/// Whether a toolchain (`5.1.0`, `4.14.0-rhb16`) is an older release than `since` (`5.2`).
fn version_before(toolchain: &str, since: &str) -> bool {
    let parse = |v: &str| -> Vec<u32> { v.split(['.', '-']).take(2).filter_map(|p| p.parse().ok()).collect() };
    parse(toolchain) < parse(since)
}

#[test]
fn every_block_has_the_type_the_manifest_says() {
    for (toolchain, samples) in available_toolchains_where(|t| !t.contains("rhb16")) {
        let dir = tempfile::tempdir().unwrap();
        let path = typed_snapshot(toolchain, &samples, "typed_values", dir.path());
        let snap = Snapshot::open(&path).unwrap();
        let info = std::process::Command::new(heapsnap()).arg("info").arg(&path).output().unwrap();
        assert!(!String::from_utf8_lossy(&info.stdout).contains("left out"), "{toolchain}: {}", String::from_utf8_lossy(&info.stdout));
        let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
        let typing = a.typing().expect("typed");
        assert_manifest_holds(toolchain, &a, &snap, "typed_values");
        assert_walks_agree(&a, typing);
        assert_saved_typing_reads_back(&a, typing);
        assert!(typing.mismatches >= 1, "{toolchain}: Obj.magic'd [|1; 2|] as a point list is a mismatch");
        assert!(typing.conflicts >= 1, "{toolchain}: the conflict block was reached with two types");

        // The reports say the same, from the analysis index too (the second run).
        for _ in 0..2 {
            let top = analyse("top", &[&path], &["--by", "type", "--limit", "0"]);
            let groups: Vec<&str> = top["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
            for t in ["Typed_values.point", "(string, Typed_values.point) Hashtbl.t", "Typed_values.point Queue.cell"] {
                assert!(groups.contains(&t), "{toolchain}: {t} not in {groups:?}");
            }
            // The untyped bytes are a line of their own: what the typing leaves of the reachable
            // heap bytes, from the analysis and from the index alike.
            let untyped = top["untyped_bytes"].as_u64().expect("untyped_bytes");
            let reachable = top["reachable_bytes"].as_u64().unwrap();
            assert_eq!(untyped, reachable.saturating_sub(typing.typed_bytes), "{toolchain}: {untyped} of {reachable}");
            let point = top["groups"].as_array().unwrap().iter().find(|g| g["name"] == "Typed_values.point").unwrap();
            // pt 1..4 in shapes, 5..7 in smap, 8 in poly, 9 lazy, 10 boxed, 101 in points, 201 in
            // the queue, 1 in stbl.
            assert_eq!(point["count"], 13, "{toolchain}: {point}");
            let paths = analyse("path", &[&path], &["--kind", "string", "--sample", "0", "--limit", "0"]);
            let text = paths.to_string();
            assert!(text.contains("\"field\":\"label\""), "{toolchain}: no .label step in {text}");
            assert!(text.contains("Cons : Typed_values.point Queue.cell"), "{toolchain}: {text}");
        }
    }
}

/// Bytecode programs are typed as native ones: the main unit's values, bindings of its
/// initialisation's frame, are typed from its `.cmt` by name, and every block the manifest
/// checks has its type; the reports say so.
#[test]
fn bytecode_blocks_have_the_type_the_manifest_says() {
    for (toolchain, samples) in available_toolchains_where(|t| !t.contains("rhb16")) {
        let dir = tempfile::tempdir().unwrap();
        let cmt = build_dir(&samples).parent().unwrap().join("bytecode/cmt");
        let path = typed_snapshot_of(toolchain, &samples.join("bytecode/typed_values"), &cmt, dir.path());
        let snap = Snapshot::open(&path).unwrap();
        assert!(snap.metadata().bytecode, "{toolchain}");
        let info = std::process::Command::new(heapsnap()).arg("info").arg(&path).output().unwrap();
        assert!(!String::from_utf8_lossy(&info.stdout).contains("left out"), "{toolchain}: {}", String::from_utf8_lossy(&info.stdout));
        let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
        assert_manifest_holds(toolchain, &a, &snap, "typed_values");
        let top = analyse("top", &[&path], &["--by", "type", "--limit", "0"]);
        let groups: Vec<&str> = top["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
        for t in ["Typed_values.point", "(string, Typed_values.point) Hashtbl.t", "Typed_values.point Queue.cell"] {
            assert!(groups.contains(&t), "{toolchain}: {t} not in {groups:?}");
        }
    }
}

/// Closures of every shape get their environment's types from their function's `.cmt`
/// (closure_shapes.types.json); what no type can say stays untyped.
#[test]
fn closures_are_typed_from_their_functions() {
    for (toolchain, samples) in available_toolchains_where(|t| !t.contains("rhb16")) {
        let dir = tempfile::tempdir().unwrap();
        let path = typed_snapshot(toolchain, &samples, "closure_shapes", dir.path());
        let snap = Snapshot::open(&path).unwrap();
        let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
        let typing = a.typing().expect("typed");
        assert_manifest_holds(toolchain, &a, &snap, "closure_shapes");
        // One mismatch is the standard library's own: the recursive module links CamlinternalMod,
        // and so CamlinternalOO, whose `dummy_met : item` is an `Obj.new_block 0 0`.
        assert!(typing.mismatches <= 1, "{toolchain}: {} mismatches: a closure's environment other than its function's", typing.mismatches);
        assert_walks_agree(&a, typing);
        assert_saved_typing_reads_back(&a, typing);
    }
}

/// `info` says how much of the reachable heap got a type, as the typing walk counts it (the
/// figure issue 26 measures on real programs).
#[test]
fn info_gives_the_typed_share_of_reachable_bytes() {
    let samples = toolchain_samples("5.3.0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = typed_snapshot("5.3.0", &samples, "typed_values", dir.path());
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let typing = a.typing().expect("typed");
    // A first info answers from the analysis (the index left to a completion in the
    // background); the second, below, from the index.
    let info_json = |first_look: bool| {
        let out = std::process::Command::new(heapsnap())
            .args(["info", "--json"])
            .arg(&path)
            .env("HEAPSNAP_INDEX_IN_BACKGROUND", if first_look { "1" } else { "0" })
            .env("HEAPSNAP_TRACE", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let from_analysis = String::from_utf8_lossy(&out.stderr).contains("the answer, from the analysis");
        assert_eq!(from_analysis, first_look, "first look: {first_look}; trace:\n{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let info = info_json(true);
    let completed = std::process::Command::new(heapsnap()).arg("complete-index").arg(&path).output().unwrap();
    assert!(completed.status.success(), "{}", String::from_utf8_lossy(&completed.stderr));
    let typed = &info["typed"];
    // Typed bytes as reachable bytes count them: heap blocks only (freeable), static data
    // (module blocks, static closures) apart.
    let typed_nodes: Vec<u32> = (0..a.graph.offsets.len() as u32 - 1).filter(|&v| typing.type_name(typing.type_id(v)).is_some()).collect();
    let heap_bytes: u64 = typed_nodes.iter().map(|&v| a.freeable(v)).sum();
    let static_bytes: u64 = typed_nodes.iter().filter(|&&v| a.freeable(v) == 0).map(|&v| a.shallow(v)).sum();
    assert!(static_bytes > 0, "typed_values has typed module blocks in static data");
    assert_eq!(typed["objects"], typing.typed_objects, "{typed}");
    assert_eq!(typed["bytes"], heap_bytes, "{typed}");
    assert_eq!(typed["static_bytes"], static_bytes, "{typed}");
    assert_eq!(typed["reachable_bytes"], a.reachable_bytes(), "{typed}");
    assert_eq!((typed["conflicts"].as_u64(), typed["mismatches"].as_u64()), (Some(typing.conflicts), Some(typing.mismatches)));
    let percent = typed["percent_of_reachable_bytes"].as_f64().unwrap();
    let want = 100.0 * heap_bytes as f64 / a.reachable_bytes() as f64;
    assert!((percent - want).abs() < 1e-9, "{percent} != {want}");
    // The sample's Obj.magic'd list and its conflict block are counted; part of its heap is
    // typed, the rest being the runtime's and the standard library's.
    assert!(typing.mismatches >= 1 && typing.conflicts >= 1, "{typed}");
    // Today 61.1% (1308 of 1626 reachable objects): a drop of a few points is a regression.
    assert!(percent > 58.0 && percent < 100.0, "{percent}% typed");
    let text = std::process::Command::new(heapsnap()).arg("info").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let line = format!("typed           {} objects, {heap_bytes} bytes, {percent:.1}% of reachable bytes", typing.typed_objects);
    assert!(text.contains(&line), "no `{line}` in:\n{text}");
    // The names' counts, read from the index's digest of them, are the names section's own.
    let program = heapsnap_names::Program::parse(snap.ocaml_names().unwrap()).unwrap();
    let fields: usize = program.units.iter().map(|u| u.fields.len()).sum();
    let names = &info["ocaml_names"];
    assert_eq!((names["units"].as_u64(), names["fields"].as_u64()), (Some(program.units.len() as u64), Some(fields as u64)), "{names}");
    assert_eq!(info, info_json(false), "a second info, from the index, says the same");
}

/// Reports read from the analysis index label roots from the module fields' paths it saved
/// (section 41, not the names, which it does not parse), as the analysis does.
#[test]
fn the_index_labels_roots_as_the_analysis_does() {
    let samples = toolchain_samples("5.3.0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = typed_snapshot("5.3.0", &samples, "typed_values", dir.path());
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let ix = heapsnap_index::store::load(&path, heapsnap_index::Needs::All, &Progress::hidden()).unwrap();
    let view = ix.view(heapsnap_index::Needs::All).unwrap();
    let mut named = 0;
    for r in snap.roots() {
        let label = a.names.root_label(r);
        assert_eq!(view.names().root_label(r), label);
        named += usize::from(r.root_kind() == RootKind::Global && label.rsplit('.').next().is_some_and(|f| f.parse::<u64>().is_err()));
    }
    assert!(named > 10, "{named} globals named by their fields");
}

/// The typing walk runs on every core when no block is reached with two types: on the large
/// heap sample (a list and a Hashtbl of records, 1M objects), it types the same blocks as the
/// one-core walk, with the same types.
#[test]
fn the_walk_on_every_core_types_as_the_one_core_walk() {
    let samples = toolchain_samples("5.3.0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sample::start(&samples.join("large_heap"), &[]);
    s.wait_ready(1);
    let path = dir.path().join("large.heapsnap");
    let prefix = toolchain_prefix("5.3.0");
    dump_ok(s.pid(), &path, &["--ocaml", prefix.to_str().unwrap(), "--cmt", build_dir(&samples).to_str().unwrap()]);
    drop(s);
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let typing = a.typing().expect("typed");
    assert_eq!(typing.conflicts, 0, "no block of this heap has two types: the walk ran on every core");
    // Today all but 284 of 1001333 reachable objects (the runtime's and the standard library's).
    let reachable = a.tree.reachable_count() as u64;
    assert!(typing.typed_objects as f64 > 0.995 * reachable as f64, "{} of {reachable} objects typed", typing.typed_objects);
    assert_walks_agree(&a, typing);
}

/// A real program with `.cmt` files: the OCaml compiler, whose `.cmt` files the toolchain
/// installs (compiler-libs), compiling a large generated source. It is dumped at a moment its
/// own course fixes, so that every run dumps the same heap: when it hands the code it generated
/// to the assembler, whose place a script on its PATH takes (saying READY, then waiting for the
/// test before running the real `as`), with its environments and the typed tree still live.
/// Its globals are named by identifier, and its heap is typed as much as it is today, with
/// every type a block got fitting it (no mismatch would be silent).
#[test]
fn the_compiler_at_its_assembler_is_typed() {
    use std::fmt::Write as _;
    use std::io::{BufRead, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let mut src = String::from(
        "type shape = Circle of int | Rect of int * int | Named of string * int list\ntype r = { a : int; b : string; c : float list }\n",
    );
    for i in 0..3000 {
        let _ = writeln!(
            src,
            "let f{i} x = match x with\n  | Circle r -> r * {i} + List.length [{i}; {i}]\n  | Rect (w, h) -> w + h + String.length \"{i}\"\n  | Named (s, l) -> String.length s + List.fold_left ( + ) {i} l\nlet g{i} () = let v = {{ a = {i}; b = string_of_int {i}; c = [float_of_int {i}] }} in f{i} (Named (v.b, [v.a; {i}]))"
        );
    }
    std::fs::write(dir.path().join("big.ml"), src).unwrap();
    // The compiler runs `as` (its configured assembler) through the shell, which finds it on
    // the PATH: the stand-in says READY on the compiler's stdout and reads a line from its
    // stdin, then runs the real one with the PATH it had.
    let stand_in = dir.path().join("bin");
    std::fs::create_dir(&stand_in).unwrap();
    std::fs::write(stand_in.join("as"), "#!/bin/sh\necho READY\nread _\nPATH=\"$HEAPSNAP_TEST_REAL_PATH\" exec as \"$@\"\n").unwrap();
    std::fs::set_permissions(stand_in.join("as"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let real_path = std::env::var_os("PATH").unwrap_or_default();
    let mut path = std::ffi::OsString::from(&stand_in);
    path.push(":");
    path.push(&real_path);
    let prefix = toolchain();
    let mut compiler = KillOnDrop(
        std::process::Command::new(prefix.join("bin/ocamlopt.opt"))
            .current_dir(dir.path())
            .args(["-g", "-c", "big.ml"])
            .env("PATH", path)
            .env("HEAPSNAP_TEST_REAL_PATH", &real_path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .dies_with_test()
            .spawn()
            .unwrap(),
    );
    let mut said = String::new();
    std::io::BufReader::new(compiler.0.stdout.take().unwrap()).read_line(&mut said).unwrap();
    assert_eq!(said.trim(), "READY", "the compiler ended without running `as` from its PATH (`ocamlopt -config`: asm)");
    let path = dir.path().join("ocamlopt.heapsnap");
    let libs = prefix.join("lib/ocaml/compiler-libs");
    dump_ok(compiler.0.id() as i32, &path, &["--ocaml", prefix.to_str().unwrap(), "--cmt", libs.to_str().unwrap()]);
    compiler.0.stdin.take().unwrap().write_all(b"\n").unwrap();
    assert!(compiler.0.wait().unwrap().success(), "the compiler failed after the dump");
    assert!(dir.path().join("big.o").exists(), "the compiler wrote no object file after the dump");
    let snap = Snapshot::open(&path).unwrap();
    let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
    let (units, fields) = a.names.ocaml().expect("names").counts();
    let typing = a.typing().expect("typed");
    let share = typing.typed_bytes as f64 / a.reachable_bytes() as f64;
    let object_share = typing.typed_objects as f64 / a.tree.reachable_count() as f64;
    eprintln!(
        "ocamlopt.opt at its assembler: {units} units, {fields} fields named; {} of {} reachable objects typed ({:.1}%), {:.1}% of reachable bytes; {} types, {} conflicts, {} mismatches",
        typing.typed_objects,
        a.tree.reachable_count(),
        100.0 * object_share,
        100.0 * share,
        typing.type_count(),
        typing.conflicts,
        typing.mismatches
    );
    assert!(units > 200, "{units} units named");
    assert_walks_agree(&a, typing);
    // Today: 69.1% of reachable bytes and 61.6% of reachable objects typed, 334 conflicts, no
    // mismatch; the moment is fixed, so a drop of two points is a regression, not noise.
    assert!(share > 0.67, "{:.1}% of reachable bytes typed", 100.0 * share);
    assert!(object_share > 0.595, "{:.1}% of reachable objects typed", 100.0 * object_share);
    assert_eq!(typing.mismatches, 0, "a block typed with a type that does not fit it");
    assert!(typing.conflicts <= 350, "{} blocks reached with two types", typing.conflicts);
    // The typed heap bytes under each root group add up to all the typed heap bytes (the
    // groups partition the reachable heap); the stack frames' part is what `suspects` reports.
    let super_root = heapsnap_analyze::SUPER_ROOT;
    let (typed_heap_bytes, _static) = heapsnap_index::reports::typed_bytes(&a).unwrap();
    assert_eq!(a.typed_bytes_dominated_by(super_root), Some(typed_heap_bytes));
    // Each reachable node's root group (the child of the super root that dominates it), in
    // one pass over the preorder: the groups' typed bytes, summed, are all of them.
    let (order, idom_pre) = (a.tree.preorder(), &a.tree.idom_pre);
    let mut group_of = vec![0usize; order.len()];
    let mut typed_by_group: std::collections::BTreeMap<usize, u64> = Default::default();
    for p in 1..order.len() {
        group_of[p] = if idom_pre[p] == 0 { p } else { group_of[idom_pre[p] as usize] };
        if typing.type_id(order[p]) != heapsnap_analyze::NO_TYPE {
            *typed_by_group.entry(group_of[p]).or_default() += a.freeable(order[p]);
        }
    }
    assert_eq!(typed_by_group.values().sum::<u64>(), typed_heap_bytes);
    let mut largest: Vec<(usize, u64)> = typed_by_group.into_iter().collect();
    largest.sort_by_key(|&(_, bytes)| std::cmp::Reverse(bytes));
    for &(p, bytes) in largest.iter().take(3) {
        assert_eq!(a.typed_bytes_dominated_by(order[p]), Some(bytes), "the root group of {:#x}", order[p]);
    }
    let stack = heapsnap_analyze::stack_only(&a).expect("the compiler's frames hold its work");
    let typed_in_frames = stack.typed_bytes.expect("typed");
    eprintln!(
        "held only by stack frames: {} bytes ({:.1}%), {typed_in_frames} of them typed ({:.1}%)",
        stack.bytes,
        stack.percent,
        100.0 * typed_in_frames as f64 / stack.bytes.max(1) as f64
    );
    // Today: 25.3 of 25.3 MB (14.3% of the reachable bytes), typed through the closures the
    // frames hold; a drop to 90% is a regression.
    assert!(typed_in_frames <= stack.bytes && typed_in_frames * 10 >= stack.bytes * 9, "{typed_in_frames} of {} bytes", stack.bytes);
    let said = analyse("suspects", &[&path], &[]);
    assert_eq!(said["stack_only"]["typed_bytes"], typed_in_frames, "{}", said["stack_only"]);
    // The analysis index's view of the dominator tree says the same.
    let ix = heapsnap_index::open_or_build(&path, &Progress::hidden()).unwrap();
    let view = heapsnap_index::IndexView::open(&ix.snap, &ix.index, heapsnap_index::Needs::All).unwrap();
    let from_index = heapsnap_analyze::stack_only(&view).expect("stack roots");
    assert_eq!(from_index.typed_bytes, Some(typed_in_frames));
    // Its own way of counting (saved sizes and retained bytes, no block looked up) against
    // the blocks' sizes, on the whole heap and on the largest root groups.
    assert_eq!(view.typed_bytes_dominated_by(super_root), Some(typed_heap_bytes));
    for &(p, bytes) in largest.iter().take(3) {
        assert_eq!(view.typed_bytes_dominated_by(order[p]), Some(bytes), "the index's root group of {:#x}", order[p]);
    }
    let top = analyse("top", &[&path], &["--by", "root", "--limit", "0"]);
    let names: Vec<&str> = top["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert!(!names.iter().any(|n| n.starts_with("Env.") && n[4..].parse::<u64>().is_ok()), "numbered Env globals: {names:?}");
}

/// The typing walk runs on every core unless blocks are reached with two types: its result
/// must be the one-core walk's, block for block.
fn assert_walks_agree(a: &Analysis<'_>, typing: &heapsnap_analyze::Typing) {
    let serial = heapsnap_analyze::Typing::compute_on_one_core(a).expect("typed");
    assert_eq!((serial.typed_objects, serial.typed_bytes), (typing.typed_objects, typing.typed_bytes));
    assert_eq!((serial.conflicts, serial.mismatches), (typing.conflicts, typing.mismatches));
    for v in 0..a.graph.offsets.len().saturating_sub(1) as u32 {
        let name = |t: &heapsnap_analyze::Typing| t.type_name(t.type_id(v)).map(str::to_string);
        assert_eq!(name(&serial), name(typing), "node {v}");
    }
}

/// What the analysis index saves of a typing (every node's type id, the types as JSON) reads
/// back as the same typing: every node's type, constructor and field names.
fn assert_saved_typing_reads_back(a: &Analysis<'_>, typing: &heapsnap_analyze::Typing) {
    let json = serde_json::to_vec(&typing.saved().expect("a typing made by the walk saves")).unwrap();
    let back = heapsnap_analyze::Typing::from_saved(typing.node_types().clone(), serde_json::from_slice(&json).unwrap())
        .expect("the saved typing fits its node types");
    assert_eq!((back.typed_objects, back.conflicts, back.mismatches), (typing.typed_objects, typing.conflicts, typing.mismatches));
    assert_eq!(back.labels(), typing.labels());
    for v in 0..a.graph.offsets.len().saturating_sub(1) as u32 {
        let Some(b) = a.block(v) else { continue };
        let first = b.fields.first().copied();
        assert_eq!(back.describe(v, b.header.tag, first), typing.describe(v, b.header.tag, first), "node {v}");
        for i in 0..b.fields.len().min(4) {
            assert_eq!(back.field_name(v, b.header.tag, i), typing.field_name(v, b.header.tag, i), "node {v} field {i}");
        }
    }
    // A saved typing of other names (a type id past its types) is not trusted.
    let mut wrong = typing.node_types().widened();
    if let Some(t) = wrong.iter_mut().find(|t| **t != heapsnap_analyze::NO_TYPE) {
        *t = typing.type_count() as u32 + 5;
    }
    let narrow: Vec<u16> = wrong.iter().map(|&t| t.min(u16::MAX as u32) as u16).collect();
    assert!(heapsnap_analyze::Typing::from_saved(heapsnap_analyze::NodeTypes::U32(wrong.into()), typing.saved().unwrap()).is_none());
    assert!(heapsnap_analyze::Typing::from_saved(heapsnap_analyze::NodeTypes::U16(narrow.into()), typing.saved().unwrap()).is_none());
}
