//! Dump errors that say what to do (issue 18): a process another tracer holds is named with
//! that tracer's PID; `dump --json` prints its report alone.

mod dump_support;

use dump_support::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_process_already_traced_names_its_tracer() {
    if Command::new("strace").arg("-V").stdout(Stdio::null()).status().is_err() {
        eprintln!("strace is not installed: not covered");
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
