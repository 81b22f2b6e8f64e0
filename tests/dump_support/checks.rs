//! The checks several end-to-end test files share: a sample dumped at each READY point, and a
//! core of a sample compared with a live dump of the same moment.

use super::*;
use heapsnap_format::{RegionKind, RootKind, Snapshot, Trigger};
use std::os::unix::fs::PermissionsExt;
use std::sync::{Mutex, MutexGuard};

/// gcore writes hundreds of MB per core: one at a time (the machine is small).
pub fn one_core_at_a_time() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Dumps sample `name` of 5.3.0 at each of its READY points and checks everything.
pub fn check_sample(name: &str, args: &[&str]) -> Vec<Snapshot> {
    check_sample_at(&sample_path(name), "5.3.0", name, args)
}

/// Dumps `program` (sample `name`, built by OCaml `version`) at each of its READY points and
/// checks everything: the snapshot validates, is owner-only, holds exactly the live blocks,
/// passes `heapsnap verify --strict`; a second dump of the same moment captured by fork holds
/// the same world word for word, and leaves no child; the sample's output and exit status are
/// unchanged.
pub fn check_sample_at(program: &Path, version: &str, name: &str, args: &[&str]) -> Vec<Snapshot> {
    check_any_sample_at(program, version, name, args, Code::Native)
}

/// How a sample runs: the checks of its roots' names differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Native,
    /// Run by the interpreter: `program` is what is started (the bytecode file itself, through
    /// its `#!` line, or an executable with the interpreter linked in).
    Bytecode,
}

/// [`check_sample_at`] for a program that runs bytecode.
pub fn check_bytecode_sample_at(program: &Path, version: &str, name: &str, args: &[&str]) -> Vec<Snapshot> {
    check_any_sample_at(program, version, name, args, Code::Bytecode)
}

fn check_any_sample_at(program: &Path, version: &str, name: &str, args: &[&str], code: Code) -> Vec<Snapshot> {
    let program = program.to_path_buf();
    let (expected, expected_status) = reference_output(&program, args);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sample = Sample::start(&program, args);
    let steps = expected.iter().filter(|l| l.starts_with("READY ")).count() as u32;
    assert!(steps >= 1, "{name} printed no READY line: {expected:?}");
    let mut snaps = Vec::new();
    for step in 1..=steps {
        sample.wait_ready(step);
        let path = dir.path().join(format!("{name}-{step}.snap"));
        let report = dump_ok(sample.pid(), &path, &["--capture", "copy"]);
        assert_eq!(report["consistent"], true, "{name}: {report}");
        assert_eq!(report["capture"]["method"], "copy", "{name}: {report}");
        let mode = std::fs::metadata(&path).expect("snapshot written").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{name}: snapshot mode {mode:o}");
        let snap = Snapshot::open(&path).unwrap_or_else(|e| panic!("{name}: snapshot does not validate: {e}"));
        sanity(name, version, &snap, sample.pid() as u32, code);
        let r = reachability(&snap);
        r.assert_exact(&format!("{name} step {step}"));
        // And the analyser's oracle, `heapsnap verify --strict`.
        let v = verify(&path, true);
        assert_eq!(v["ok"], true, "{name} step {step}: heapsnap verify --strict: {v}");
        assert!(r.major_live > 0 && r.reachable > 0, "{name}: {r:?}");
        let forked_path = dir.path().join(format!("{name}-{step}.forked.snap"));
        let forked = dump_ok(sample.pid(), &forked_path, &["--capture", "fork"]);
        assert_eq!((&forked["capture"]["method"], &forked["consistent"]), (&"fork".into(), &true.into()), "{name}: {forked}");
        assert_no_children(sample.pid(), name);
        let forked_snap = Snapshot::open(&forked_path).unwrap_or_else(|e| panic!("{name}: forked snapshot does not validate: {e}"));
        assert_eq!(forked_snap.metadata().capture.as_ref().map(|c| c.method.as_str()), Some("fork"), "{name}");
        assert_same_capture(&format!("{name} step {step}, fork against copy"), &snap, &forked_snap);
        snaps.push(snap);
        sample.release();
    }
    let (lines, status) = sample.finish();
    assert_eq!(lines, expected, "{name}: output changed by the dumps");
    assert_eq!(status.code(), expected_status.code(), "{name}: exit status changed");
    snaps
}

/// Dumps `program` (sample `name`, built by OCaml `version`, which the snapshot's version
/// starts with) at each of its READY points by probing its runtime (`extra` says how: nothing
/// for a release heapsnap does not know, `--read-by-probing` for one it knows), and checks the
/// snapshot as [`check_sample_at`] does: it holds exactly the live blocks and passes `verify
/// --strict`, and the report and the metadata say how the runtime was probed. With
/// `compare_with_release`, a dump of the same moment read by the release's file must hold the
/// same world word for word. Returns the facts probed at the last READY point.
pub fn check_sample_by_probing(
    program: &Path,
    version: &str,
    name: &str,
    args: &[&str],
    extra: &[&str],
    compare_with_release: bool,
) -> serde_json::Value {
    let (expected, expected_status) = reference_output(program, args);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sample = Sample::start(program, args);
    let steps = expected.iter().filter(|l| l.starts_with("READY ")).count() as u32;
    let mut probed = serde_json::Value::Null;
    for step in 1..=steps {
        sample.wait_ready(step);
        let path = dir.path().join(format!("{name}-{step}.snap"));
        let mut flags = vec!["--capture", "copy"];
        flags.extend_from_slice(extra);
        let report = dump_ok(sample.pid(), &path, &flags);
        assert_eq!(report["consistent"], true, "{name}: {report}");
        probed = report["probed"].clone();
        assert!(probed["facts"].as_array().is_some_and(|f| f.len() >= 7), "{name}: probed facts: {report}");
        assert!(probed.get("guessed").is_none(), "{name}: nothing may be guessed: {report}");
        let snap = Snapshot::open(&path).unwrap_or_else(|e| panic!("{name}: snapshot does not validate: {e}"));
        let m = snap.metadata();
        assert!(m.ocaml_version.starts_with(version), "{name}: version {}", m.ocaml_version);
        let in_metadata = m.probed.as_ref().unwrap_or_else(|| panic!("{name}: the metadata does not say the runtime was probed"));
        assert_eq!(serde_json::to_value(in_metadata).unwrap(), probed, "{name}: the report and the metadata disagree");
        assert!(m.warnings.iter().any(|w| w.contains("read by probing")), "{name}: {:?}", m.warnings);
        reachability(&snap).assert_exact(&format!("{name} step {step}, read by probing"));
        let v = verify(&path, true);
        assert_eq!(v["ok"], true, "{name} step {step}: heapsnap verify --strict: {v}");
        if compare_with_release {
            let by_release = dir.path().join(format!("{name}-{step}.release.snap"));
            let report = dump_ok(sample.pid(), &by_release, &["--capture", "copy"]);
            assert!(report.get("probed").is_none(), "{name}: {report}");
            let known = Snapshot::open(&by_release).expect("snapshot by the release's file");
            assert!(known.metadata().probed.is_none());
            assert_same_capture(&format!("{name} step {step}, probed against the release's file"), &snap, &known);
        }
        sample.release();
    }
    let (lines, status) = sample.finish();
    assert_eq!(lines, expected, "{name}: output changed by the dumps");
    assert_eq!(status.code(), expected_status.code(), "{name}: exit status changed");
    probed
}

/// What every snapshot of a sample must hold.
fn sanity(name: &str, version: &str, snap: &Snapshot, pid: u32, code: Code) {
    let m = snap.metadata();
    assert_eq!(m.ocaml_version, version);
    assert_eq!(m.pid, Some(pid));
    assert!(!m.domains.is_empty(), "{name}: no domain");
    for d in &m.domains {
        assert!(d.minor_start <= d.young_ptr && d.young_ptr <= d.minor_end, "{name}: {d:?}");
    }
    let kinds: Vec<RegionKind> = snap.regions().map(|r| r.kind()).collect();
    // OCaml 4.14's major heap is chunks, and its stacks are system stacks (not copied).
    let expected = match version.starts_with("4.") {
        true => [RegionKind::HeapChunk, RegionKind::Static].as_slice(),
        false => [RegionKind::Pool, RegionKind::Static, RegionKind::FiberStack].as_slice(),
    };
    for &k in expected {
        assert!(kinds.contains(&k), "{name}: no {k} region");
    }
    assert_eq!(m.ocaml4_gc.is_some(), version.starts_with("4."), "{name}: ocaml4_gc {:?}", m.ocaml4_gc);
    for r in snap.regions().filter(|r| r.kind() == RegionKind::Pool) {
        assert!(r.header.block_wsize > 0 && r.header.first_block >= 32, "{name}: pool {:?}", r.header);
    }
    for r in snap.regions().filter(|r| r.kind() == RegionKind::FiberStack) {
        assert_ne!(r.header.owner, 0, "{name}: fiber stack without owner");
    }
    assert!(snap.symbols().len() > 1000, "{name}: symbols missing");
    assert!(snap.dwarf_section(".debug_line").is_some(), "{name}: no .debug_line");
    if code == Code::Bytecode {
        bytecode_sanity(name, snap);
        return;
    }
    // The sample's own module block is a global root, named after its unit.
    let unit = format!("caml{}{}", name[..1].to_uppercase(), &name[1..]);
    assert!(
        snap.roots().iter().any(|r| r.root_kind() == RootKind::Global && snap.string(r.name) == Some(unit.as_str())),
        "{name}: no global root named {unit}"
    );
    // Stack frames are named after their function.
    let stack: Vec<_> = snap.roots().iter().filter(|r| r.root_kind() == RootKind::Stack && r.origin != 0).collect();
    assert!(!stack.is_empty(), "{name}: no stack root");
    assert!(stack.iter().all(|r| snap.string(r.name).is_some_and(|n| n.starts_with("caml"))), "{name}: unnamed stack roots");
}

/// A bytecode program's globals are the fields of `caml_global_data` (a registered root in
/// OCaml 5, a static variable in 4.14); its stack roots are the interpreter's stack words that
/// hold blocks (in a fiber's stack in OCaml 5, in the one stack 4.14 allocates outside the
/// heap), each attributed to the code pointer of its frame, and none of them a code pointer
/// (those are outside the heap).
fn bytecode_sanity(name: &str, snap: &Snapshot) {
    let ocaml4 = snap.metadata().ocaml_version.starts_with("4.");
    let global_data_kind = if ocaml4 { RootKind::Global } else { RootKind::GenerationalRoot };
    let global_data: Vec<_> =
        snap.roots().iter().filter(|r| r.root_kind() == global_data_kind && snap.string(r.name) == Some("caml_global_data")).collect();
    assert_eq!(global_data.len(), 1, "{name}: caml_global_data is one {global_data_kind:?} root");
    let value = global_data[0].value;
    let header = snap.region_of(value).and_then(|r| r.word_at(value - 8)).unwrap_or_else(|| panic!("{name}: caml_global_data is no block"));
    let fields = (header >> 10) & ((1 << 54) - 1);
    assert!(fields > 20, "{name}: caml_global_data has {fields} fields");
    let stack: Vec<_> = snap.roots().iter().filter(|r| r.root_kind() == RootKind::Stack && r.slot != 0).collect();
    // (The fiber's handler, at the stack's top, holds three closures named after their field.)
    let handler = |r: &heapsnap_format::RootRecord| snap.string(r.name).is_some_and(|n| n.starts_with("handle_"));
    let frames: Vec<_> = stack
        .iter()
        .filter(|r| {
            let region = snap.region_of(r.slot);
            !handler(r) && if ocaml4 { region.is_none() } else { region.is_some_and(|region| region.kind() == RegionKind::FiberStack) }
        })
        .collect();
    assert!(!frames.is_empty(), "{name}: no root in the interpreter's stack");
    assert!(
        frames.iter().all(|r| r.origin != 0 && snap.region_of(r.origin).is_none()),
        "{name}: a stack root without its frame's code pointer"
    );
    assert!(
        frames.iter().all(|r| snap.region_of(r.value).is_some()),
        "{name}: a stack root outside the heap (a code pointer taken for a value?)"
    );
    // Compiled with -g: frames are named after their function by the debug events, in OCaml's
    // words (`Stdlib.input_line`), never by the interpreter's C symbols; code the compiler made
    // without a location is left unnamed. An executable linked with -output-complete-exe
    // keeps no debug events: the snapshot says so, and names none.
    let names: Vec<Option<&str>> = frames.iter().map(|r| snap.string(r.name)).collect();
    if snap.metadata().warnings.iter().any(|w| w.contains("no debug events")) {
        assert!(names.iter().all(Option::is_none), "{name}: frames named without debug events: {names:?}");
    } else {
        assert!(names.iter().any(Option::is_some), "{name}: no frame named");
        let ocaml = |n: &str| n.chars().next().is_some_and(char::is_uppercase) && n != "??";
        assert!(names.iter().flatten().all(|n| ocaml(n)), "{name}: frames named {names:?}");
    }
}

/// `gcore -o DIR/core PID`; returns the core's path. Checks that gcore left the target running
/// and detached (not traced, not stopped).
pub fn gcore(pid: i32, dir: &Path) -> PathBuf {
    let prefix = dir.join("core");
    let out = Command::new("gcore").arg("-o").arg(&prefix).arg(pid.to_string()).output().expect("run gcore (is gdb installed?)");
    assert!(out.status.success(), "gcore failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_running_untraced(pid, "gcore");
    let core = PathBuf::from(format!("{}.{pid}", prefix.display()));
    assert!(core.exists(), "gcore wrote no {}", core.display());
    core
}

/// `heapsnap dump --core CORE [EXTRA...] -o OUT --json`.
pub fn dump_core(core: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(heapsnap())
        .arg("dump")
        .arg("--core")
        .arg(core)
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg("--json")
        .output()
        .expect("run heapsnap dump --core")
}

pub fn dump_core_ok(core: &Path, out: &Path) -> serde_json::Value {
    let o = dump_core(core, out, &[]);
    assert!(o.status.success(), "heapsnap dump --core failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("dump --json prints JSON")
}

/// A root as a comparable tuple, its name resolved.
pub type RootKey = (u16, u16, u32, u64, u64, u64, u64, String);

pub fn roots(snap: &Snapshot) -> Vec<RootKey> {
    let mut v: Vec<RootKey> = snap
        .roots()
        .iter()
        .map(|r| (r.kind, r.domain, r.flags, r.thread, r.slot, r.value, r.origin, snap.string(r.name).unwrap_or("").to_string()))
        .collect();
    v.sort();
    v
}

/// The two snapshots hold the same world: same regions word for word (so the same blocks and
/// the same edges), same roots, same static tables. Only what says *how* the snapshot was
/// taken may differ: the trigger and the time.
pub fn assert_same_world(name: &str, live: &Snapshot, core: &Snapshot) {
    assert_eq!(core.metadata().trigger, Trigger::Core, "{name}: trigger");
    assert_same_capture(name, live, core);
}

/// The process `pid` has no child process (a fork capture left none, nor a zombie).
pub fn assert_no_children(pid: i32, name: &str) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        assert!(children.trim().is_empty(), "{name}: process {pid} has children {children:?} after the dump");
    }
}

/// Two snapshots of the same moment, however taken, hold the same world: regions word for
/// word, roots, ephemerons, custom operations and symbols.
pub fn assert_same_capture(name: &str, live: &Snapshot, core: &Snapshot) {
    let (ml, mc) = (live.metadata(), core.metadata());
    assert_eq!(
        (&ml.ocaml_version, ml.reserved_header_bits, ml.colours, ml.pid, &ml.build_id, &ml.domains, ml.compactions),
        (&mc.ocaml_version, mc.reserved_header_bits, mc.colours, mc.pid, &mc.build_id, &mc.domains, mc.compactions),
        "{name}: metadata"
    );
    assert_eq!(ml.executable, mc.executable, "{name}: executable");
    assert_eq!(live.region_count(), core.region_count(), "{name}: region count");
    for (a, b) in live.regions().zip(core.regions()) {
        assert_eq!((a.kind(), a.base(), a.end()), (b.kind(), b.base(), b.end()), "{name}: region");
        assert!(a.words() == b.words(), "{name}: region {:?} at {:#x} differs", a.kind(), a.base());
    }
    let (rl, rc) = (roots(live), roots(core));
    assert_eq!(rl.len(), rc.len(), "{name}: root count");
    if let Some(i) = (0..rl.len()).find(|&i| rl[i] != rc[i]) {
        panic!("{name}: roots differ, first: live {:?} core {:?}", rl[i], rc[i]);
    }
    assert_eq!(live.ephemerons(), core.ephemerons(), "{name}: ephemerons");
    assert_eq!(live.custom_ops().len(), core.custom_ops().len(), "{name}: custom ops");
    assert_eq!(live.symbols().len(), core.symbols().len(), "{name}: symbols");
}

/// The arguments samples/manifest.json gives sample `name`.
pub fn manifest_args(name: &str) -> Vec<String> {
    let sample = manifest_samples().into_iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("{name} is not in the manifest"));
    sample["args"].as_array().expect("args").iter().map(|a| a.as_str().expect("string arg").to_string()).collect()
}

/// The samples of samples/manifest.json.
pub fn manifest_samples() -> Vec<serde_json::Value> {
    heapsnap_testkit::samples::manifest()["samples"].as_array().expect("samples").clone()
}

/// [`check_sample`] for any sample executable: every sample reaches READY right after its
/// Gc.compact with every live block reachable, so the core's snapshot is checked strictly.
pub fn check_program(name: &str, program: &Path, args: &[String]) -> Snapshot {
    let _one = one_core_at_a_time();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (expected, expected_status) = reference_output(program, &args);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sample = Sample::start(program, &args);
    sample.wait_ready(1);
    let live_path = dir.path().join("live.snap");
    dump_ok(sample.pid(), &live_path, &[]);
    let core = gcore(sample.pid(), dir.path());
    let core_path = dir.path().join("core.snap");
    let report = dump_core_ok(&core, &core_path);
    // The core is hundreds of MB; the snapshot is all that is checked from here on.
    std::fs::remove_file(&core).expect("remove core");
    assert_eq!(report["consistent"], true, "{name}: {report}");
    assert_eq!(report["pid"], sample.pid(), "{name}: {report}");

    let live = Snapshot::open(&live_path).expect("live snapshot validates");
    let snap = Snapshot::open(&core_path).unwrap_or_else(|e| panic!("{name}: core snapshot does not validate: {e}"));
    assert_same_world(name, &live, &snap);
    reachability(&snap).assert_exact(&format!("{name} from its core"));
    let v = verify(&core_path, true);
    assert_eq!(v["ok"], true, "{name}: heapsnap verify --strict on the core snapshot: {v}");

    let (lines, status) = sample.finish();
    assert_eq!(lines, expected, "{name}: output changed by the dumps");
    assert_eq!(status.code(), expected_status.code(), "{name}: exit status");
    snap
}

/// A copy of `exe` whose `Sys.ocaml_version` says `version` instead of 5.3.0 (same length).
pub fn relabelled(exe: &Path, dir: &Path, version: &str) -> PathBuf {
    let mut bytes = std::fs::read(exe).unwrap();
    let from = b"5.3.0\0";
    assert_eq!(version.len(), 5);
    let at: Vec<usize> = bytes.windows(from.len()).enumerate().filter(|(_, w)| *w == from).map(|(i, _)| i).collect();
    assert!(!at.is_empty(), "no version string in {}", exe.display());
    for i in at {
        bytes[i..i + 5].copy_from_slice(version.as_bytes());
    }
    let out = dir.join(format!("{}-{version}", exe.file_name().unwrap().to_string_lossy()));
    std::fs::write(&out, bytes).unwrap();
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    out
}
