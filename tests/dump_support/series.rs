//! A leaking series: three snapshots of the cache_leak sample, one per step, taken by
//! `heapsnap run` (tests/analysis: web_ui.rs, mcp.rs, diff_samples.rs).

use super::{heapsnap, samples_dir, snapshots_in, DiesWithTest, KillOnDrop};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Three snapshots of cache_leak, one per step; `extra`: more options of `heapsnap run`.
pub fn three_snapshots(dir: &Path, extra: &[&str]) -> Vec<PathBuf> {
    three_snapshots_of("cache_leak", dir, extra)
}

/// Runs sample `name --steps 3 --pause` under `heapsnap run --on-compaction` and returns its
/// three snapshots, oldest first: at each `READY i`, waits for the i-th snapshot before letting
/// the sample go on, so that each snapshot shows one step. `extra`: more options of `run`.
pub fn three_snapshots_of(name: &str, dir: &Path, extra: &[&str]) -> Vec<PathBuf> {
    let child = Command::new(heapsnap())
        .args(["run", "--on-compaction", "--dir"])
        .arg(dir)
        .args(extra)
        .arg("--")
        .arg(samples_dir().join(name))
        .args(["--steps", "3", "--pause"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .dies_with_test()
        .spawn()
        .expect("start heapsnap run");
    let mut running = KillOnDrop(child);
    let mut stdin = running.0.stdin.take();
    let lines = lines_of(running.0.stdout.take().expect("piped stdout"));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut ready = 0;
    while ready < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines.recv_timeout(left).unwrap_or_else(|e| panic!("{name}: no READY line ({e})"));
        let Some(step) = line.strip_prefix("READY ") else { continue };
        ready = step.trim().parse().expect("READY <step>");
        while snapshots_in(dir).len() < ready {
            assert!(Instant::now() < deadline, "{name}: snapshot {ready} never appeared");
            std::thread::sleep(Duration::from_millis(50));
        }
        if ready < 3 {
            writeln!(stdin.as_mut().expect("stdin")).expect("resume the sample");
        } else {
            stdin = None; // EOF: the sample runs to its end
        }
    }
    drop(stdin);
    while running.0.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "{name} did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let found = snapshots_in(dir);
    assert_eq!(found.len(), 3, "{name}: {found:?}");
    found
}

/// The lines of a child's output, through a channel (so that a silent child times out).
pub fn lines_of(out: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
