//! `heapsnap dump --core`: a `gcore` of a sample paused at READY gives the same snapshot as a
//! live dump at the same moment, object for object; bad cores get clear errors.

mod dump_support;

use dump_support::*;
use heapsnap_format::{Snapshot, Trigger};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// gcore writes hundreds of MB per core: one test at a time (the machine is small).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `gcore -o DIR/core PID`; returns the core's path. Checks that gcore left the target running
/// and detached (not traced, not stopped).
fn gcore(pid: i32, dir: &Path) -> PathBuf {
    let prefix = dir.join("core");
    let out = Command::new("gcore").arg("-o").arg(&prefix).arg(pid.to_string()).output().expect("run gcore (is gdb installed?)");
    assert!(out.status.success(), "gcore failed: {}", String::from_utf8_lossy(&out.stderr));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("target still there after gcore");
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or_else(|| panic!("no {name} in status")).to_string()
    };
    assert_eq!(field("TracerPid:"), "0", "gcore left the target traced");
    let state = field("State:");
    assert!(!state.starts_with('t') && !state.starts_with('T'), "gcore left the target stopped: {state}");
    let core = PathBuf::from(format!("{}.{pid}", prefix.display()));
    assert!(core.exists(), "gcore wrote no {}", core.display());
    core
}

/// `heapsnap dump --core CORE [EXTRA...] -o OUT --json`.
fn dump_core(core: &Path, out: &Path, extra: &[&str]) -> Output {
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

fn dump_core_ok(core: &Path, out: &Path) -> serde_json::Value {
    let o = dump_core(core, out, &[]);
    assert!(o.status.success(), "heapsnap dump --core failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("dump --json prints JSON")
}

/// A root as a comparable tuple, its name resolved.
type RootKey = (u16, u16, u32, u64, u64, u64, u64, String);

fn roots(snap: &Snapshot) -> Vec<RootKey> {
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
fn assert_same_world(name: &str, live: &Snapshot, core: &Snapshot) {
    let (ml, mc) = (live.metadata(), core.metadata());
    assert_eq!(mc.trigger, Trigger::Core, "{name}: trigger");
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

/// Pauses `name` at its first READY, takes a live dump and a gcore, dumps the core, compares;
/// then lets the sample finish and checks it was not disturbed.
fn check_sample(name: &str) {
    check_sample_with(name, true)
}

/// Like [`check_sample`]; `exact` when every live block is reachable at READY (a sample that
/// drops data just before its READY leaves garbage the strict checks would count).
fn check_sample_with(name: &str, exact: bool) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let program = sample_path(name);
    let (expected, expected_status) = reference_output(&program, &[]);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sample = Sample::start(&program, &[]);
    sample.wait_ready(1);
    let live_path = dir.path().join("live.snap");
    dump_ok(sample.pid(), &live_path, &[]);
    let core = gcore(sample.pid(), dir.path());
    let core_path = dir.path().join("core.snap");
    let report = dump_core_ok(&core, &core_path);
    assert_eq!(report["consistent"], true, "{name}: {report}");
    assert_eq!(report["pid"], sample.pid(), "{name}: {report}");

    let live = Snapshot::open(&live_path).expect("live snapshot validates");
    let snap = Snapshot::open(&core_path).unwrap_or_else(|e| panic!("{name}: core snapshot does not validate: {e}"));
    assert_same_world(name, &live, &snap);
    if exact {
        reachability(&snap).assert_exact(&format!("{name} from its core"));
    }
    let v = verify(&core_path, exact);
    assert_eq!(v["ok"], true, "{name}: heapsnap verify (strict: {exact}) on the core snapshot: {v}");

    let (lines, status) = sample.finish();
    assert_eq!(lines, expected, "{name}: output changed by the dumps");
    assert_eq!(status.code(), expected_status.code(), "{name}: exit status");
}

#[test]
fn cache_leak_core_matches_live_dump() {
    check_sample("cache_leak");
}

#[test]
fn closure_list_core_matches_live_dump() {
    check_sample("closure_list");
}

#[test]
fn effect_cont_core_matches_live_dump() {
    check_sample("effect_cont");
}

#[test]
fn systhread_stack_core_matches_live_dump() {
    check_sample("systhread_stack");
}

#[test]
fn domains_shared_core_matches_live_dump() {
    check_sample("domains_shared");
}

#[test]
fn other_samples_cores_match_live_dumps() {
    for name in ["bigarray_sample", "lazy_sample", "objects_sample", "large_array", "steady_state"] {
        check_sample(name);
    }
    check_sample_with("weak_ephemeron", false);
}

/// A core the kernel writes when the process crashes (`core_pattern` = `core`, when the
/// machine has it so: systemd-coredump or apport take cores elsewhere) gives the snapshot of a
/// live dump just before the crash.
#[test]
fn kernel_core_after_a_crash_matches_live_dump() {
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    if pattern.trim() != "core" {
        eprintln!("skipped: kernel.core_pattern is {pattern:?}, not \"core\"");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let program = sample_path("closure_list");
    // The core is written in the crashed process's directory, if its size limit allows.
    let script = format!("cd '{}' && ulimit -c unlimited && exec \"$0\" \"$@\"", dir.path().display());
    let mut sample = Sample::start(Path::new("/bin/sh"), &["-c", &script, program.to_str().expect("utf-8 path")]);
    sample.wait_ready(1);
    let live_path = dir.path().join("live.snap");
    dump_ok(sample.pid(), &live_path, &[]);
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(sample.pid(), libc::SIGSEGV) }, 0);
    let _ = sample.child.wait();
    let core = dir.path().join("core");
    assert!(core.exists(), "the kernel wrote no core in {}", dir.path().display());
    let core_path = dir.path().join("core.snap");
    let report = dump_core_ok(&core, &core_path);
    // The kernel leaves out only what the process could not read: nothing is lost.
    assert!(report["warnings"].as_array().is_none_or(|w| w.is_empty()), "{report}");
    let live = Snapshot::open(&live_path).expect("live snapshot validates");
    let snap = Snapshot::open(&core_path).expect("core snapshot validates");
    assert_same_world("closure_list (kernel core)", &live, &snap);
    assert_eq!(verify(&core_path, true)["ok"], true);
}

/// Kills the child when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Cores of a program that allocates without pause catch it anywhere, often inside a
/// collection: a snapshot is still written (the moment said in its metadata and on stderr) and
/// it validates; or, when a block header was being written, a clear error and no file.
#[test]
fn cores_of_a_busy_program_give_a_snapshot_or_a_clear_error() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let child = Command::new(sample_path("long_list"))
        .args(["--steps", "1000000"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start long_list");
    let busy = KillOnDrop(child);
    std::thread::sleep(std::time::Duration::from_millis(300));
    for i in 0..3 {
        let sub = dir.path().join(i.to_string());
        std::fs::create_dir(&sub).expect("mkdir");
        let core = gcore(busy.0.id() as i32, &sub);
        let out = sub.join("busy.snap");
        let o = dump_core(&core, &out, &[]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        std::fs::remove_file(&core).expect("remove core");
        if !o.status.success() {
            assert!(err.contains("inconsistent") && !err.contains("panicked"), "core {i}: {err}");
            assert!(!out.exists(), "core {i}: a snapshot was written despite the error");
            continue;
        }
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
        let snap = Snapshot::open(&out).unwrap_or_else(|e| panic!("core {i}: snapshot does not validate: {e}"));
        let warned = snap.metadata().warnings.iter().any(|w| w.contains("inconsistent moment"));
        assert_eq!(warned, report["consistent"] == false, "core {i}: {report}");
        assert_eq!(warned, err.contains("inconsistent moment"), "core {i}: stderr: {err}");
        let v = verify(&out, false);
        assert_eq!(v["ok"], true, "core {i}: {v}");
    }
}

/// A truncated core, a core of another executable, and a file that is no core: each a clear
/// error, no snapshot.
#[test]
fn bad_cores_are_clear_errors() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sample = Sample::start(&sample_path("closure_list"), &[]);
    sample.wait_ready(1);
    let core = gcore(sample.pid(), dir.path());
    drop(sample);
    let out = dir.path().join("out.snap");
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();

    // Another executable: the build ids differ.
    let other = sample_path("cache_leak");
    let o = dump_core(&core, &out, &["--exe", other.to_str().expect("utf-8 path")]);
    assert!(!o.status.success(), "a core of another executable was accepted");
    assert!(stderr(&o).contains("build id") && stderr(&o).contains("not taken from this executable"), "{}", stderr(&o));
    assert!(!out.exists(), "a snapshot was written");

    // The right executable given explicitly is accepted.
    let right = sample_path("closure_list");
    let o = dump_core(&core, &out, &["--exe", right.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_file(&out).expect("remove");

    // A core cut in the middle: its notes (at the end of a gcore) or its memory are gone.
    let len = std::fs::metadata(&core).expect("core").len();
    let cut = dir.path().join("cut.core");
    std::fs::copy(&core, &cut).expect("copy core");
    std::fs::OpenOptions::new().write(true).open(&cut).expect("open copy").set_len(len / 2).expect("truncate");
    let o = dump_core(&cut, &out, &[]);
    assert!(!o.status.success(), "a core truncated to {} of {len} bytes was accepted", len / 2);
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(!out.exists(), "a snapshot was written");

    // A core that lost only its last bytes (gcore's section table; no memory): a snapshot,
    // with a warning that says so.
    std::fs::copy(&core, &cut).expect("copy core");
    std::fs::OpenOptions::new().write(true).open(&cut).expect("open copy").set_len(len - 100).expect("truncate");
    let o = dump_core(&cut, &out, &[]);
    if o.status.success() {
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
        let warned = report["warnings"].as_array().expect("warnings").iter().any(|w| w.as_str().unwrap_or("").contains("truncated"));
        assert!(warned, "no truncation warning: {report}");
        std::fs::remove_file(&out).expect("remove");
    } else {
        assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    }

    // The heap left out of the core (as coredump_filter would): the error names the region.
    let filtered = dir.path().join("filtered.core");
    std::fs::copy(&core, &filtered).expect("copy core");
    let (start, end) = drop_largest_writable_segment(&filtered);
    let o = dump_core(&filtered, &out, &[]);
    assert!(!o.status.success(), "a core without its heap was accepted");
    let region = format!("{start:#x}..{end:#x} ({} bytes", end - start);
    assert!(stderr(&o).contains(&region) && stderr(&o).contains("left out of the core"), "{}", stderr(&o));
    assert!(!out.exists(), "a snapshot was written");

    // Not a core at all.
    let o = dump_core(&right, &out, &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a core file"), "{}", stderr(&o));
}

/// Sets `p_filesz` to 0 in the largest writable `PT_LOAD` of an ELF64 core, as a core dumped
/// without that memory says; returns the segment's address range.
fn drop_largest_writable_segment(core: &Path) -> (u64, u64) {
    let mut bytes = std::fs::read(core).expect("read core");
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(&bytes, 0x20) as usize, u16_at(&bytes, 0x36), u16_at(&bytes, 0x38));
    let (at, vaddr, memsz) = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&h| u32::from_le_bytes(bytes[h..h + 4].try_into().unwrap()) == 1) // PT_LOAD
        .filter(|&h| u32::from_le_bytes(bytes[h + 4..h + 8].try_into().unwrap()) & 2 != 0) // PF_W
        .map(|h| (h, u64_at(&bytes, h + 16), u64_at(&bytes, h + 40)))
        .max_by_key(|&(_, _, memsz)| memsz)
        .expect("a writable segment");
    bytes[at + 32..at + 40].copy_from_slice(&0u64.to_le_bytes());
    std::fs::write(core, bytes).expect("write core");
    (vaddr, vaddr + memsz)
}
