//! Dump errors that say what to do (issue 18): a process another tracer holds is named with
//! that tracer's PID; `dump --json` prints its report alone.

use crate::dump_support::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_process_already_traced_names_its_tracer() {
    if Command::new("strace").arg("-V").stdout(Stdio::null()).status().is_err() {
        not_covered("a process another tracer holds: strace is not installed (scripts/install-deps.sh installs it)");
        return;
    }
    let mut sample = Sample::start(&sample_path("cache_leak"), &[]);
    sample.wait_ready(1);
    let pid = sample.pid();
    let mut strace = Command::new("strace")
        .args(["-p", &pid.to_string(), "-o", "/dev/null"])
        .stderr(Stdio::null())
        .dies_with_test()
        .spawn()
        .expect("start strace");
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc_status_field(pid, "TracerPid:").as_deref() != Some(&strace.id().to_string()) {
        assert!(Instant::now() < deadline, "strace did not attach");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dump(pid, &dir.path().join("x.heapsnap"), &[]);
    let _ = strace.kill();
    let _ = strace.wait();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("already traced by PID {}", strace.id())), "{err}");
    assert!(!err.contains("ptrace_scope"), "{err}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON error with --json");
    assert_eq!(doc["error"]["kind"], "dump");
}

#[test]
fn dump_json_prints_the_report_alone() {
    let mut sample = Sample::start(&sample_path("cache_leak"), &[]);
    sample.wait_ready(1);
    let dir = tempfile::tempdir().unwrap();
    let out = dump(sample.pid(), &dir.path().join("x.heapsnap"), &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the JSON report");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("paused process"), "{err}");
}

/// OS errors say their cause once, with the path or the process involved, and a hint: a
/// snapshot path that cannot be created, a missing core, a process of another user.
#[test]
fn os_errors_name_the_path_or_process_once_with_a_hint() {
    let mut sample = Sample::start(&sample_path("cache_leak"), &[]);
    sample.wait_ready(1);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let out_path = file.join("x.heapsnap");
    let out = dump(sample.pid(), &out_path, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&out_path.display().to_string()), "{err}");
    assert_eq!(err.matches("Not a directory").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let missing = dir.path().join("missing.core");
    let out = Command::new(heapsnap()).arg("dump").arg("--core").arg(&missing).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("missing.core") && err.contains("check the path"), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");

    // Root may dump anything: as root, dump our sample as another user; otherwise dump init.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let (mut command, target) = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(heapsnap());
        (c, sample.pid())
    } else {
        (Command::new(heapsnap()), 1)
    };
    let out = command.args(["dump", "--pid", &target.to_string(), "-o", "/tmp/never-written.heapsnap"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with(&format!("heapsnap: error: process {target} belongs to uid 0, heapsnap runs as uid ")), "{err}");
    assert_eq!(err.matches("Permission denied").count() + err.matches("Operation not permitted").count(), 1, "{err}");
    assert!(err.contains("run heapsnap as uid 0, or grant it CAP_SYS_PTRACE"), "{err}");
    assert_running_untraced(sample.pid(), "after a refused dump");
}
