//! End-to-end tests of the triggers: `heapsnap run` and `OCAML_HEAPSNAP` through the preload
//! library, on the real OCaml samples (built by `samples/build.sh`).

use heapsnap_format::{Snapshot, Trigger};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::dump_support::{heapsnap, sample_path as sample, toolchain_samples, DiesWithTest};

/// The preload library beside the heapsnap binary, built (or brought up to date) once per test
/// run: one left from an older build would be used silently otherwise.
fn preload_library() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let path = heapsnap().with_file_name("libheapsnap_preload.so");
    BUILT.call_once(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "heapsnap-preload"])
            .args(if cfg!(debug_assertions) { &[][..] } else { &["--release"][..] })
            .status()
            .expect("cargo build");
        assert!(status.success());
    });
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Snapshots in `dir`, sorted by name (their sequence number).
fn snapshots(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "heapsnap")).collect();
    found.sort();
    found
}

fn wait_for_snapshots(dir: &Path, count: usize) -> Vec<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = snapshots(dir);
        if found.len() >= count || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Drives a sample run with `--pause`: at each `READY i`, waits for `per_step` more snapshots in
/// `dir`, then lets the sample go on. Returns the sample's stdout lines.
fn drive(
    mut child: Child,
    dir: &Path,
    steps: usize,
    per_step: usize,
    mut at_ready: impl FnMut(&Child),
) -> (Vec<String>, std::process::ExitStatus) {
    let mut stdin = child.stdin.take();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        lines.push(line.clone());
        if let Some(step) = line.strip_prefix("READY ") {
            let step: usize = step.parse().unwrap();
            at_ready(&child);
            let found = wait_for_snapshots(dir, step * per_step);
            assert!(found.len() >= step * per_step, "after READY {step}: {found:?}");
            if step < steps {
                writeln!(stdin.as_mut().unwrap()).unwrap();
            } else {
                stdin = None; // EOF: the sample runs to its end
            }
        }
    }
    (lines, child.wait().unwrap())
}

fn check_snapshot(path: &Path, trigger: Trigger) -> Snapshot {
    let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", path.display());
    let snap = Snapshot::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(snap.metadata().trigger, trigger, "{}", path.display());
    // Every trigger here fires while the program is at rest: the stop must have been consistent.
    assert!(snap.metadata().warnings.is_empty(), "{}: {:?}", path.display(), snap.metadata().warnings);
    assert!(snap.region_count() > 0);
    assert!(!snap.roots().is_empty());
    snap
}

/// `heapsnap run TRIGGERS... --dir DIR -- PROGRAM --steps STEPS --pause`, with stdin and stdout
/// piped for [`drive`].
fn run_paused(triggers: &[&str], dir: &Path, program: &Path, steps: u32) -> Child {
    Command::new(heapsnap())
        .arg("run")
        .args(triggers)
        .arg("--dir")
        .arg(dir)
        .arg("--")
        .arg(program)
        .args(["--steps", &steps.to_string(), "--pause"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .dies_with_test()
        .spawn()
        .unwrap()
}

/// `PROGRAM --steps STEPS --pause` started without heapsnap, the preload library watching it
/// with `OCAML_HEAPSNAP=VALUE`; stdin and stdout piped for [`drive`].
fn preloaded_paused(program: &Path, steps: u32, value: &str) -> Child {
    Command::new(program)
        .args(["--steps", &steps.to_string(), "--pause"])
        .env("LD_PRELOAD", preload_library())
        .env("OCAML_HEAPSNAP", value)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .dies_with_test()
        .spawn()
        .unwrap()
}

#[test]
fn run_dumps_after_each_compaction_and_at_exit_and_passes_output_through() {
    let dir = tempfile::tempdir().unwrap();
    let child = run_paused(&["--on-compaction", "--at-exit"], dir.path(), &sample("cache_leak"), 3);
    let (lines, status) = drive(child, dir.path(), 3, 1, |_| {});
    assert_eq!(lines, ["READY 1", "READY 2", "READY 3", "DONE"]);
    assert!(status.success(), "{status:?}");
    let found = snapshots(dir.path());
    let names: Vec<String> = found.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(found.len(), 4, "{names:?}");
    for (i, path) in found.iter().take(3).enumerate() {
        assert!(names[i].contains(&format!("-{:04}-compaction", i + 1)), "{names:?}");
        let snap = check_snapshot(path, Trigger::Compaction);
        assert_eq!(snap.metadata().compactions, Some(i as u64 + 1));
    }
    check_snapshot(&found[3], Trigger::Exit);
    // The cache grows at each step: so do the snapshots' pools.
    let pool_bytes = |p: &Path| -> usize { Snapshot::open(p).unwrap().regions().map(|r| r.bytes.len()).sum() };
    assert!(pool_bytes(&found[0]) < pool_bytes(&found[2]));
}

#[test]
fn run_dumps_on_its_own_signal_without_passing_it_on() {
    let dir = tempfile::tempdir().unwrap();
    let child = run_paused(&["--on-signal", "USR2", "--capture", "fork"], dir.path(), &sample("closure_list"), 2);
    // SIGUSR2's default action would kill the sample: it must go to heapsnap only.
    // SAFETY: kill has no memory preconditions; the pid is our child's, not yet reaped.
    let (lines, status) = drive(child, dir.path(), 2, 1, |c| unsafe {
        libc::kill(c.id() as i32, libc::SIGUSR2);
    });
    assert_eq!(lines, ["READY 1", "READY 2", "DONE"]);
    assert!(status.success(), "{status:?}");
    let found = snapshots(dir.path());
    assert_eq!(found.len(), 2);
    for path in &found {
        let snap = check_snapshot(path, Trigger::Signal);
        assert_eq!(snap.metadata().capture.as_ref().map(|c| (c.requested.as_str(), c.method.as_str())), Some(("fork", "fork")));
    }
}

#[test]
fn run_passes_exit_codes_and_deaths_by_signal_through() {
    let dir = tempfile::tempdir().unwrap();
    let status =
        Command::new(heapsnap()).args(["run", "--at-exit", "--dir"]).arg(dir.path()).args(["--", "sh", "-c", "exit 7"]).status().unwrap();
    assert_eq!(status.code(), Some(7));
    let status = Command::new(heapsnap())
        .args(["run", "--every", "1h", "--dir"])
        .arg(dir.path())
        .args(["--", "sh", "-c", "kill -TERM $$"])
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    // Not OCaml programs: nothing to dump, and nothing was written.
    assert!(snapshots(dir.path()).is_empty());
}

#[test]
fn malformed_ocaml_heapsnap_is_rejected_with_the_grammar() {
    let out = Command::new(heapsnap()).args(["run", "--", "true"]).env("OCAML_HEAPSNAP", "on-compation,dir=x").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown item 'on-compation'") && stderr.contains("on-compaction, on-signal=SIG"), "{stderr}");

    let out = Command::new(heapsnap()).args(["run", "--", "true"]).env_remove("OCAML_HEAPSNAP").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no trigger"));
}

#[test]
fn run_honours_ocaml_heapsnap() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(heapsnap())
        .args(["run", "--"])
        .arg(sample("long_list"))
        .args(["--steps", "1"])
        .env("OCAML_HEAPSNAP", format!("at-exit,dir={}", dir.path().display()))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let found = snapshots(dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    check_snapshot(&found[0], Trigger::Exit);
}

#[test]
fn preload_library_watches_a_program_started_without_heapsnap() {
    let dir = tempfile::tempdir().unwrap();
    let child = preloaded_paused(
        &sample("cache_leak"),
        2,
        &format!("on-compaction,at-exit,on-signal=USR1,capture=fork,dir={}", dir.path().display()),
    );
    let (lines, status) = drive(child, dir.path(), 2, 1, |_| {});
    assert_eq!(lines, ["READY 1", "READY 2", "DONE"]);
    assert!(status.success(), "{status:?}");
    let found = wait_for_snapshots(dir.path(), 3);
    assert_eq!(found.len(), 3, "{found:?}");
    let forked = |snap: Snapshot| assert_eq!(snap.metadata().capture.as_ref().map(|c| c.method.as_str()), Some("fork"));
    forked(check_snapshot(&found[0], Trigger::Compaction));
    forked(check_snapshot(&found[1], Trigger::Compaction));
    forked(check_snapshot(&found[2], Trigger::Exit));
}

/// `OCAML_HEAPSNAP=...,export=parquet=DIR,keep-snapshots=1` through the preload library: the
/// watcher writes each snapshot's tables while the program runs, and of the snapshot files only
/// the last is left once the program has exited.
#[test]
fn preload_library_exports_tables_and_keeps_the_last_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (snaps, tables) = (dir.path().join("snaps"), dir.path().join("tables"));
    std::fs::create_dir(&snaps).unwrap();
    let mut child = preloaded_paused(
        &sample("cache_leak"),
        2,
        &format!("on-compaction,at-exit,dir={},export=parquet={},keep-snapshots=1", snaps.display(), tables.display()),
    );
    let table_files = |name: &str| std::fs::read_dir(tables.join(name)).map_or(0, |d| d.count());
    let wait_until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let mut stdin = child.stdin.take();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    for line in stdout.lines() {
        let line = line.unwrap();
        if let Some(step) = line.strip_prefix("READY ") {
            let step: usize = step.parse().unwrap();
            // Each compaction's tables are written while the program waits.
            wait_until(&format!("no tables after READY {step}"), &|| table_files("snapshots") >= step);
            if step < 2 {
                writeln!(stdin.as_mut().unwrap()).unwrap();
            } else {
                stdin = None;
            }
        }
    }
    assert!(child.wait().unwrap().success());
    // The exit snapshot's tables are written after the program is gone; the older files go.
    wait_until("the exit snapshot's tables", &|| table_files("snapshots") == 3 && snapshots(&snaps).len() == 1);
    for table in ["snapshots", "groups", "suspects", "dominator_paths"] {
        assert_eq!(table_files(table), 3, "{table}");
    }
    let left = snapshots(&snaps);
    check_snapshot(&left[0], Trigger::Exit);
    let last = Snapshot::open(&left[0]).unwrap();
    let id = heapsnap_export::parquet::identity::snapshot_id(last.metadata(), last.metadata().host.as_deref());
    assert!(tables.join("snapshots").join(format!("{id}.parquet")).exists(), "the last snapshot's tables are named by its id");
}

#[test]
fn preload_library_reports_a_malformed_value_and_leaves_the_program_alone() {
    let out = Command::new(sample("long_list"))
        .args(["--steps", "1"])
        .env("LD_PRELOAD", preload_library())
        .env("OCAML_HEAPSNAP", "every=10parsecs")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "READY 1\nDONE\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OCAML_HEAPSNAP") && stderr.contains("unknown unit"), "{stderr}");
}

#[test]
fn preload_library_ignores_programs_that_are_not_ocaml() {
    let out = Command::new("sh")
        .args(["-c", "echo hello"])
        .env("LD_PRELOAD", preload_library())
        .env("OCAML_HEAPSNAP", "at-exit,dir=/nonexistent/never")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// OCaml 5.2 compacts, and counts it: `run --on-compaction` and the preload library's
/// `on-compaction` dump after each step's Gc.compact, as on 5.3.
#[test]
fn compaction_triggers_on_5_2() {
    compaction_triggers_on("5.2.0");
}

/// OCaml 4.14 counts compactions in `Caml_state->stat_compactions`: the same triggers work
/// there, without the patched runtime the internship's dumps needed.
#[test]
fn compaction_triggers_on_4_14() {
    compaction_triggers_on("4.14.0");
}

/// The same triggers watch a bytecode program: `run` starts it through its `#!` line, and the
/// preload library is loaded into the interpreter.
#[test]
fn compaction_triggers_on_bytecode_5_3() {
    let Some(samples) = toolchain_samples("5.3.0") else { return };
    compaction_triggers_on_program("5.3.0", &samples.join("bytecode/cache_leak"), |snap| assert!(snap.metadata().bytecode));
}

/// And on OCaml 4.14's interpreter, whose compaction counter is `Caml_state`'s as in native code.
#[test]
fn compaction_triggers_on_bytecode_4_14() {
    let Some(samples) = toolchain_samples("4.14.0") else { return };
    compaction_triggers_on_program("4.14.0", &samples.join("bytecode/cache_leak"), |snap| assert!(snap.metadata().bytecode));
}

fn compaction_triggers_on(toolchain: &str) {
    let Some(samples) = toolchain_samples(toolchain) else { return };
    compaction_triggers_on_program(toolchain, &samples.join("cache_leak"), |snap| assert!(!snap.metadata().bytecode));
}

/// Checks `run --on-compaction`, then the preload library's `on-compaction,at-exit`, on
/// `program`, and `also` on every snapshot.
fn compaction_triggers_on_program(toolchain: &str, program: &Path, also: impl Fn(&Snapshot)) {
    let dir = tempfile::tempdir().unwrap();
    let child = run_paused(&["--on-compaction"], dir.path(), program, 2);
    let (lines, status) = drive(child, dir.path(), 2, 1, |_| {});
    assert_eq!(lines, ["READY 1", "READY 2", "DONE"]);
    assert!(status.success(), "{status:?}");
    let found = snapshots(dir.path());
    assert_eq!(found.len(), 2, "{found:?}");
    for (i, path) in found.iter().enumerate() {
        let snap = check_snapshot(path, Trigger::Compaction);
        assert_eq!(snap.metadata().ocaml_version, crate::dump_support::version_of(toolchain));
        assert_eq!(snap.metadata().compactions, Some(i as u64 + 1));
        also(&snap);
    }

    let dir = tempfile::tempdir().unwrap();
    let child = preloaded_paused(program, 2, &format!("on-compaction,at-exit,dir={}", dir.path().display()));
    let (lines, status) = drive(child, dir.path(), 2, 1, |_| {});
    assert_eq!(lines, ["READY 1", "READY 2", "DONE"]);
    assert!(status.success(), "{status:?}");
    let found = wait_for_snapshots(dir.path(), 3);
    let snaps: Vec<Snapshot> = found.iter().map(|p| Snapshot::open(p).unwrap()).collect();
    let triggers: Vec<Trigger> = snaps.iter().map(|s| s.metadata().trigger).collect();
    assert_eq!(triggers, [Trigger::Compaction, Trigger::Compaction, Trigger::Exit], "{found:?}");
    snaps.iter().for_each(&also);
}

/// OCaml 5.1 has no compaction counter: `run` and the preload library dump on a signal and at
/// exit; the preload library's `on-compaction` says why it cannot work and the rest goes on.
#[test]
fn signal_and_exit_triggers_on_5_1() {
    let Some(samples) = toolchain_samples("5.1.0") else { return };
    preload_library(); // `run --at-exit` preloads it
    let dir = tempfile::tempdir().unwrap();
    let child = run_paused(&["--on-signal", "USR2", "--at-exit"], dir.path(), &samples.join("closure_list"), 2);
    // SAFETY: kill has no memory preconditions; the pid is our child's, not yet reaped.
    let (lines, status) = drive(child, dir.path(), 2, 1, |c| unsafe {
        libc::kill(c.id() as i32, libc::SIGUSR2);
    });
    assert_eq!(lines, ["READY 1", "READY 2", "DONE"]);
    assert!(status.success(), "{status:?}");
    let found = wait_for_snapshots(dir.path(), 3);
    assert_eq!(found.len(), 3, "{found:?}");
    for path in &found[..2] {
        let snap = check_snapshot(path, Trigger::Signal);
        assert_eq!(snap.metadata().ocaml_version, "5.1.0");
        assert_eq!(snap.metadata().compactions, None);
    }
    check_snapshot(&found[2], Trigger::Exit);

    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(samples.join("long_list"))
        .args(["--steps", "1"])
        .env("LD_PRELOAD", preload_library())
        .env("OCAML_HEAPSNAP", format!("on-compaction,at-exit,dir={}", dir.path().display()))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "READY 1\nDONE\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not compact") && stderr.contains("on-signal"), "{stderr}");
    let found = wait_for_snapshots(dir.path(), 1);
    assert_eq!(found.len(), 1, "the exit snapshot is still taken: {found:?}");
    check_snapshot(&found[0], Trigger::Exit);
}

/// `command` as another user when we are root (root writes anywhere), else as ourselves; and
/// a directory this user cannot write in.
fn unwritable_dir_and_user(parent: &Path) -> (PathBuf, impl Fn(&Path) -> Command) {
    let dir = parent.join("read-only");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let command = move |program: &Path| {
        if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    };
    (dir, command)
}

/// A snapshot directory that cannot be written is an error before the program starts, for
/// `run --dir`, `run` with `OCAML_HEAPSNAP`'s `dir=`, and the preload library's watcher
/// (which then leaves the program unwatched).
#[test]
fn an_unwritable_snapshot_directory_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, as_user) = unwritable_dir_and_user(tmp.path());
    let marker = tmp.path().join("ran");
    let script = format!("touch {}", marker.display());
    let out = as_user(&heapsnap()).args(["run", "--at-exit", "--dir"]).arg(&dir).args(["--", "sh", "-c", &script]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("cannot write in the snapshot directory {}", dir.display())), "{stderr}");
    assert!(stderr.contains("Permission denied") && stderr.contains("--dir DIR"), "{stderr}");
    assert!(!marker.exists(), "the program ran");

    // A path under a file cannot be created (whoever runs it): dir= of OCAML_HEAPSNAP.
    let file = tmp.path().join("file");
    std::fs::write(&file, "").unwrap();
    let out = Command::new(heapsnap())
        .args(["run", "--", "sh", "-c", &script])
        .env("OCAML_HEAPSNAP", format!("at-exit,dir={}/snaps", file.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot create the snapshot directory") && stderr.contains("Not a directory"), "{stderr}");
    assert!(!marker.exists(), "the program ran");

    // The preload library's watcher says so at once, and the program runs unwatched.
    let preload = preload_library();
    let out = as_user(&sample("long_list"))
        .args(["--steps", "1"])
        .env("LD_PRELOAD", &preload)
        .env("HEAPSNAP_BIN", heapsnap())
        .env("OCAML_HEAPSNAP", format!("on-signal=USR2,dir={}", dir.display()))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "READY 1\nDONE\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("cannot write in the snapshot directory {}", dir.display())), "{stderr}");
    assert!(stderr.contains("not watching pid"), "{stderr}");
}

/// A snapshot that fails after the start (here its directory was removed) is reported when it
/// fails, and at the end: `run` exits with 2 when the program succeeded, with the program's
/// own status when it did not.
#[test]
fn lost_snapshots_make_run_fail_at_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("snaps");
    let log = tmp.path().join("stderr");
    let mut child = Command::new(heapsnap())
        .args(["run", "--on-signal", "USR2", "--dir"])
        .arg(&dir)
        .arg("--")
        .arg(sample("closure_list"))
        .args(["--steps", "2", "--pause"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .dies_with_test()
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY 1");
    std::fs::remove_dir(&dir).unwrap();
    // SAFETY: kill has no memory preconditions; the pid is our child's, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGUSR2) };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log).unwrap().contains("signal snapshot failed") {
        assert!(Instant::now() < deadline, "no failure reported: {}", std::fs::read_to_string(&log).unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    writeln!(stdin.as_mut().unwrap()).unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "READY 2");
    drop(stdin);
    assert_eq!(lines.map(|l| l.unwrap()).collect::<Vec<_>>(), ["DONE"]);
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("heapsnap: warning: signal snapshot failed") && stderr.contains("snaps"), "{stderr}");
    assert!(stderr.trim_end().ends_with("heapsnap: error: 1 snapshot lost (0 written); the reasons are above"), "{stderr}");

    // The program's failure comes first: `false` exits with 1 through exit(3), whose exit
    // snapshot cannot be taken (not an OCaml program).
    let out = Command::new(heapsnap()).args(["run", "--at-exit", "--dir"]).arg(tmp.path()).args(["--", "false"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("exit snapshot failed") && stderr.contains("1 snapshot lost"), "{stderr}");
}

/// An `every=` trigger that fires while the program exits stops quietly, and the program's
/// exit status is still `run`'s (the dumper leaves the exit of `run`'s child to `run`).
#[test]
fn an_interval_trigger_stops_quietly_when_the_program_exits() {
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..8 {
        let out = Command::new(heapsnap())
            .args(["run", "--every", "5ms", "--dir"])
            .arg(dir.path())
            .arg("--")
            .arg(sample("long_list"))
            .args(["--steps", "1"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{:?}: {stderr}", out.status);
        assert!(!stderr.contains("failed") && !stderr.contains("error"), "{stderr}");
    }
    assert!(!snapshots(dir.path()).is_empty());
}

/// A program with its own handlers for SIGUSR1 and SIGUSR2: a C library it links installs an
/// `SA_SIGINFO` handler for SIGUSR1 from its constructor, which runs before the preload
/// library's; OCaml's `Sys.set_signal` installs one for SIGUSR2 in `main`, after. At each line on
/// stdin it prints how many of each its handlers saw. Prints `READY` first.
fn compile_own_handlers_program(dir: &Path) -> PathBuf {
    const LIBRARY: &str = r#"
#include <signal.h>
#include <caml/mlvalues.h>
static volatile sig_atomic_t usr1_seen;
static void on_usr1(int signal, siginfo_t *info, void *context)
{
  (void) context;
  if (signal == SIGUSR1 && info != NULL && info->si_signo == SIGUSR1) usr1_seen++;
}
__attribute__((constructor)) static void install_before_main(void)
{
  struct sigaction action = {0};
  action.sa_sigaction = on_usr1;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, NULL);
}
value heapsnap_test_usr1_seen(value unit) { (void) unit; return Val_int(usr1_seen); }
"#;
    const PROGRAM: &str = r#"
external usr1_seen : unit -> int = "heapsnap_test_usr1_seen"
let usr2_seen = ref 0
let () =
  Sys.set_signal Sys.sigusr2 (Sys.Signal_handle (fun _ -> incr usr2_seen));
  print_endline "READY";
  try
    while true do
      ignore (input_line stdin);
      Printf.printf "usr1=%d usr2=%d\n%!" (usr1_seen ()) !usr2_seen
    done
  with End_of_file -> ()
"#;
    let prefix = crate::dump_support::toolchain();
    std::fs::write(dir.join("own_handlers.c"), LIBRARY).unwrap();
    let out = Command::new("cc")
        .current_dir(dir)
        .args(["-shared", "-fPIC", "-o", "libown_handlers.so", "own_handlers.c", "-I"])
        .arg(prefix.join("lib/ocaml"))
        .output()
        .expect("run cc");
    assert!(out.status.success(), "cc failed: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(dir.join("own_handlers.ml"), PROGRAM).unwrap();
    let out = Command::new(prefix.join("bin/ocamlopt"))
        .current_dir(dir)
        .args(["-g", "own_handlers.ml", "-o", "own_handlers", "-cclib", "-lown_handlers", "-ccopt"])
        .arg(format!("-L{0} -Wl,-rpath,{0}", dir.display()))
        .output()
        .expect("run ocamlopt");
    assert!(out.status.success(), "ocamlopt failed: {}", String::from_utf8_lossy(&out.stderr));
    dir.join("own_handlers")
}

/// Sends `signal` to the program once it is READY, waits for heapsnap's snapshot, then asks the
/// program what its handlers saw.
fn signal_own_handlers_program(program: &Path, trigger: &str, signal: i32) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(program)
        .env("LD_PRELOAD", preload_library())
        .env("HEAPSNAP_BIN", heapsnap())
        .env("OCAML_HEAPSNAP", format!("on-signal={trigger},dir={}", dir.path().display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .dies_with_test()
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "READY\n");
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let found = wait_for_snapshots(dir.path(), 1);
    assert_eq!(found.len(), 1, "heapsnap's trigger took no snapshot on {trigger}");
    check_snapshot(&found[0], Trigger::Signal);
    writeln!(stdin).unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    line.trim_end().to_owned()
}

/// The program's own handler for heapsnap's trigger signal still runs, and heapsnap's trigger
/// still dumps, whether the program installed its handler before the preload library did
/// (SIGUSR1, from a C library's constructor, with `SA_SIGINFO`) or after (SIGUSR2, OCaml's
/// `Sys.set_signal` in `main`, which calls `sigaction` again).
#[test]
fn preload_library_keeps_the_programs_own_signal_handlers() {
    let tmp = tempfile::tempdir().unwrap();
    let program = compile_own_handlers_program(tmp.path());
    assert_eq!(signal_own_handlers_program(&program, "USR1", libc::SIGUSR1), "usr1=1 usr2=0", "a handler set before the library");
    assert_eq!(signal_own_handlers_program(&program, "USR2", libc::SIGUSR2), "usr1=0 usr2=1", "a handler set after the library");
}

/// `heapsnap watch` takes the descriptors the preload library passes it by number: one that is
/// stdin, stdout or stderr, one that is not open, or the same one twice is refused, saying so,
/// rather than taken over (and closed) as a pipe.
#[test]
fn watch_refuses_descriptors_that_are_not_the_librarys_pipes() {
    let watch = |control: &str, ack: &str| {
        let out = Command::new(heapsnap())
            .args(["watch", "--pid", &std::process::id().to_string(), "--control-fd", control, "--ack-fd", ack])
            .env_remove("OCAML_HEAPSNAP")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = watch("1", "4000");
    assert!(said.contains("--control-fd 1 is stdin, stdout or stderr") && said.contains("not by hand"), "{said}");
    let said = watch("4000", "4001");
    assert!(said.contains("--control-fd 4000 is not an open file descriptor"), "{said}");
    let said = watch("4000", "4000");
    assert!(said.contains("the same descriptor"), "{said}");
}
