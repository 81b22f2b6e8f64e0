//! The target is never left stopped, crashed or changed, whatever happens to the dumper, and
//! bad targets get clear errors and no file.

use crate::dump_support::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The pid tracing `pid` (0 when none), from /proc.
fn tracer_of(pid: i32) -> i32 {
    proc_status_field(pid, "TracerPid:").and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Starts `heapsnap dump` on `pid` and returns it as soon as it has seized the target.
fn dumper_attached(pid: i32, out: &Path, extra: &[&str]) -> std::process::Child {
    match dumper_attached_or_done(pid, out, extra) {
        Ok(dumper) => dumper,
        Err(status) => panic!("the dumper ended before we saw it attached: {status}"),
    }
}

/// [`dumper_attached`], or how the dumper ended when it was done before this process saw it
/// attached (its polling can sleep past a whole short dump on a loaded machine).
fn dumper_attached_or_done(pid: i32, out: &Path, extra: &[&str]) -> Result<std::process::Child, std::process::ExitStatus> {
    let mut dumper = Command::new(heapsnap())
        .args(["dump", "--pid", &pid.to_string(), "-o"])
        .arg(out)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .dies_with_test()
        .spawn()
        .expect("start heapsnap dump");
    let start = Instant::now();
    while tracer_of(pid) != dumper.id() as i32 {
        assert!(start.elapsed() < Duration::from_secs(30), "the dumper never attached");
        if let Ok(Some(status)) = dumper.try_wait() {
            return Err(status);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(dumper)
}

fn no_snapshot_left(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir).expect("read dir").filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

#[test]
fn target_survives_sigkill_of_the_dumper() {
    let program = sample_path("large_array");
    let (expected, expected_status) = reference_output(&program, &[]);
    let dir = tempfile::tempdir().unwrap();
    let mut sample = Sample::start(&program, &[]);
    sample.wait_ready(1);
    // Kill the dumper at several points of its work on the stopped target: a copy, so that the
    // target stays stopped for all of it (a fork lets it go after the clone, tens of
    // milliseconds a loaded machine's polling can miss whole).
    for delay_us in [0u64, 300, 1000, 3000] {
        // A dump that ended before it was seen attached killed nothing: again, a few times.
        let mut tries = 0;
        let mut dumper = loop {
            match dumper_attached_or_done(sample.pid(), &dir.path().join("killed.snap"), &["--capture", "copy"]) {
                Ok(dumper) => break dumper,
                Err(status) => {
                    assert!(status.success(), "the dumper failed: {status}");
                    tries += 1;
                    assert!(tries < 20, "the dumper was never seen attached in {tries} dumps");
                    let _ = std::fs::remove_file(dir.path().join("killed.snap"));
                }
            }
        };
        std::thread::sleep(Duration::from_micros(delay_us));
        dumper.kill().expect("SIGKILL the dumper");
        dumper.wait().unwrap();
        // The kernel detached the target: no tracer, and it runs on.
        let start = Instant::now();
        while tracer_of(sample.pid()) != 0 {
            assert!(start.elapsed() < Duration::from_secs(5), "target still traced after its tracer died");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // A later dump still works, and the program finishes with its normal output.
    let report = dump_ok(sample.pid(), &dir.path().join("after.snap"), &[]);
    assert_eq!(report["consistent"], true);
    sample.release();
    let (lines, status) = sample.finish();
    assert_eq!(lines, expected);
    assert_eq!(status.code(), expected_status.code());
}

#[test]
fn sigterm_releases_the_target_unchanged() {
    let program = sample_path("large_array");
    let (expected, _) = reference_output(&program, &[]);
    let dir = tempfile::tempdir().unwrap();
    let mut sample = Sample::start(&program, &[]);
    sample.wait_ready(1);
    let dumper = dumper_attached(sample.pid(), &dir.path().join("term.snap"), &[]);
    let killed = Command::new("kill").args(["-TERM", &dumper.id().to_string()]).status().expect("run kill");
    assert!(killed.success());
    let out = dumper.wait_with_output().unwrap();
    // Either the dump was already done, or it stopped cleanly: exit 130 and no file.
    match out.status.code() {
        Some(0) => assert!(dir.path().join("term.snap").exists()),
        Some(130) => {
            assert!(String::from_utf8_lossy(&out.stderr).contains("released unchanged"));
            no_snapshot_left(dir.path());
        }
        other => panic!("dumper ended with {other:?}: {}", String::from_utf8_lossy(&out.stderr)),
    }
    assert_eq!(tracer_of(sample.pid()), 0);
    sample.release();
    let (lines, status) = sample.finish();
    assert_eq!(lines, expected);
    assert!(status.success());
}

#[test]
fn a_target_that_dies_during_the_dump_gives_a_clear_error_and_no_file() {
    let program = sample_path("large_heap");
    let dir = tempfile::tempdir().unwrap();
    let mut sample = Sample::start(&program, &[]);
    sample.wait_ready(1);
    let dumper = dumper_attached(sample.pid(), &dir.path().join("dead.snap"), &[]);
    sample.child.kill().expect("SIGKILL the target");
    let out = dumper.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        // The copy was finished before the target died: the file is whole.
        heapsnap_format::Snapshot::open(dir.path().join("dead.snap")).expect("a complete snapshot");
    } else {
        assert!(stderr.contains("exited during the dump"), "unclear error: {stderr}");
        no_snapshot_left(dir.path());
    }
}

/// C code holding a block it allocated but has not initialised (its fields are stale words of an
/// earlier minor cycle): every stop lands in that window, so the dump fails clearly after its
/// attempts instead of writing pointers to no block, and the program runs on, untraced.
#[test]
fn a_block_that_c_code_has_not_initialised_is_never_dumped() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_uninitialised_block_program(dir.path());
    let mut program = start_until_ready(&exe);
    let snaps = tempfile::tempdir().unwrap();
    let o = dump(program.0.id() as i32, &snaps.path().join("stale.snap"), &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a snapshot was written: {}", String::from_utf8_lossy(&o.stdout));
    assert!(stderr.contains("no consistent stop") && stderr.contains("has not initialised its fields yet"), "unclear error: {stderr}");
    no_snapshot_left(snaps.path());
    assert!(program.0.try_wait().unwrap().is_none(), "the program died");
    assert_running_untraced(program.0.id() as i32, "the failed dump");
}

#[test]
fn no_such_process() {
    let dir = tempfile::tempdir().unwrap();
    let out = dump(i32::MAX - 1, &dir.path().join("x.snap"), &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no process with pid"), "{}", String::from_utf8_lossy(&out.stderr));
    no_snapshot_left(dir.path());
}

#[test]
fn a_program_that_is_not_ocaml_is_refused_clearly() {
    let mut sleeper = Command::new("sleep").arg("30").dies_with_test().spawn().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dump(sleeper.id() as i32, &dir.path().join("s.snap"), &[]);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not an OCaml program"), "{stderr}");
    no_snapshot_left(dir.path());
}
