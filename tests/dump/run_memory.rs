//! `heapsnap run --on-memory`: snapshots before the out-of-memory killer, end to end. The
//! `memory_growth` sample grows by about 60 MB/s inside a memory cgroup limited to 400 MiB that
//! the test makes (cgroup v1 and v2, where this machine has them), until the kernel kills it;
//! heapsnap runs outside that cgroup, as the README says to place it.

use heapsnap_format::{Snapshot, Trigger};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::dump_support::{
    analyse, heapsnap, not_covered, sample_path, samples_dir, toolchain_prefix, verify, CgroupVersion, DiesWithTest, TestCgroup,
};

const LIMIT: u64 = 400 << 20;
/// The goal: a snapshot at no more than this share of the limit.
const MOST: f64 = 0.75;

/// A memory cgroup limited to `limit`, or why this machine cannot make one.
fn limited_cgroup(version: CgroupVersion, limit: u64) -> Result<TestCgroup, String> {
    let cgroup = TestCgroup::make("memory", version)?;
    cgroup.limit_memory(limit)?;
    Ok(cgroup)
}

/// Under whichever hierarchy holds this machine's memory controller: a controller is bound to
/// one hierarchy at a time (a hybrid machine's is v1's, a unified one's v2's), so one of the two
/// is all a machine can test; neither is what counts as not covered.
#[test]
fn on_memory_snapshots_before_the_oom_kill() {
    let mut why_not = Vec::new();
    for version in [CgroupVersion::V2, CgroupVersion::V1] {
        match limited_cgroup(version, LIMIT) {
            Ok(cgroup) => return snapshots_before_the_oom_kill(cgroup),
            Err(why) => why_not.push(why),
        }
    }
    not_covered(&format!("on-memory under a cgroup memory limit: {}", why_not.join("; ")));
}

fn snapshots_before_the_oom_kill(cgroup: TestCgroup) {
    let dir = tempfile::tempdir().unwrap();
    let program = sample_path("memory_growth");
    let cmt = samples_dir().parent().unwrap().join(".build").join(samples_dir().file_name().unwrap()).join("cmt");
    // The program moves itself into the limited cgroup, then becomes the sample (same pid):
    // heapsnap stays outside. 60 MB/s; at 2000 MB, far past the limit, it would stop and exit 0.
    let script = format!("echo $$ > '{}/cgroup.procs' && exec '{}' 60 2000", cgroup.dir.display(), program.display());
    let started = Instant::now();
    let out = Command::new(heapsnap())
        .args(["run", "--on-memory", "30%,60%", "--json", "--dir"])
        .arg(dir.path())
        .arg("--cmt")
        .arg(&cmt)
        .arg("--ocaml")
        .arg(toolchain_prefix("5.3.0"))
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .dies_with_test()
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The program's death passes through: killed by SIGKILL (137 in a shell), by the kernel's
    // out-of-memory killer of the test's cgroup.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{:?} after {:?}\n{stderr}", out.status, started.elapsed());
    assert!(cgroup.oom_kills() >= 1, "the out-of-memory killer killed nothing in {}\n{stderr}", cgroup.dir.display());
    assert!(stderr.contains("the program was killed by SIGKILL"), "{stderr}");

    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let taken = report["memory_snapshots"].as_array().unwrap_or_else(|| panic!("{report}"));
    assert!(!taken.is_empty(), "no memory snapshot:\n{report}\n{stderr}");
    for snapshot in taken {
        let memory = &snapshot["memory"];
        let bytes = memory["bytes"].as_u64().unwrap();
        // Measured as the test's cgroup charges it, against its limit.
        assert_eq!(memory["measured"], "cgroup", "{snapshot}");
        assert_eq!(memory["limit"]["bytes"], LIMIT, "{snapshot}");
        assert_eq!(Path::new(memory["limit"]["of"].as_str().unwrap()), cgroup.dir, "{snapshot}");
        let path = PathBuf::from(snapshot["path"].as_str().unwrap());
        eprintln!("{}: taken at {:.1}% of the limit", path.display(), bytes as f64 * 100.0 / LIMIT as f64);
        // Named after the sample, which the wrapper shell became.
        assert!(path.file_name().unwrap().to_string_lossy().starts_with("memory_growth-"), "{}", path.display());
        let snap = Snapshot::open(&path).unwrap();
        assert_eq!(snap.metadata().trigger, Trigger::Memory);
        let verdict = verify(&path, true);
        assert_eq!(verdict["ok"], true, "{}: {verdict}", path.display());
        // What grew is named: the global table and its sessions.
        let summary = analyse("summary", &[&path], &[]).to_string();
        assert!(summary.contains("Memory_growth.sessions") && summary.contains("Memory_growth.session"), "{summary}");
    }
    let first = taken[0]["memory"]["bytes"].as_u64().unwrap();
    assert!(first as f64 <= MOST * LIMIT as f64, "the first snapshot was taken at {first} bytes, above {MOST} of {LIMIT}");
    assert_eq!(taken[0]["thresholds"], serde_json::json!(["30%"]), "{report}");
    // Two snapshots (unless the first one's writing outlived the program): the diff names the
    // sessions that grew between them.
    if let [a, b, ..] = taken.as_slice() {
        let paths = [Path::new(a["path"].as_str().unwrap()), Path::new(b["path"].as_str().unwrap())];
        let diff = analyse("diff", &paths, &[]).to_string();
        assert!(diff.contains("Memory_growth.session"), "{diff}");
    } else {
        eprintln!("one memory snapshot only (the program was killed while it was written): no diff\n{stderr}");
    }
}

#[test]
fn preload_watcher_inside_the_cgroup_refuses_a_snapshot_that_could_kill_the_program() {
    let cgroup = match limited_cgroup(CgroupVersion::V1, LIMIT).or_else(|_| limited_cgroup(CgroupVersion::V2, LIMIT)) {
        Ok(cgroup) => cgroup,
        Err(why) => return not_covered(&format!("OCAML_HEAPSNAP=on-memory under a cgroup memory limit: {why}")),
    };
    let dir = tempfile::tempdir().unwrap();
    // The preload library's watcher is the program's child: inside the limited cgroup. At 25%
    // a snapshot fits in the room left under the limit; at 70% it may not, and is refused.
    let script = format!("echo $$ > '{}/cgroup.procs' && exec '{}' 60 2000", cgroup.dir.display(), sample_path("memory_growth").display());
    let out = Command::new("sh")
        .args(["-c", &script])
        .env("LD_PRELOAD", heapsnap().with_file_name("libheapsnap_preload.so"))
        .env("OCAML_HEAPSNAP", format!("on-memory=25%,70%,dir={}", dir.path().display()))
        .env("HEAPSNAP_BIN", heapsnap())
        .stdin(Stdio::null())
        .dies_with_test()
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{:?}\n{stderr}", out.status);
    assert!(cgroup.oom_kills() >= 1, "{stderr}");
    let found: Vec<PathBuf> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(found.len(), 1, "{found:?}\n{stderr}");
    assert!(found[0].to_string_lossy().ends_with("-0001-memory.heapsnap"), "{found:?}");
    assert_eq!(verify(&found[0], true)["ok"], true, "{stderr}");
    assert!(stderr.contains("on-memory 25%: ") && stderr.contains("% of the 400.0 MiB limit of"), "{stderr}");
    assert!(
        stderr.contains("memory snapshot not taken: the dumper runs inside the program's memory cgroup")
            && stderr.contains("run heapsnap outside that cgroup"),
        "{stderr}"
    );
    assert!(stderr.contains("on-memory 70%: no snapshot") && stderr.contains("1 snapshot lost (1 written)"), "{stderr}");
}
