//! A real OCaml 5.4 program: semgrep-core, from PyPI's `semgrep` wheel (scripts/semgrep-core.sh),
//! built by its publisher with "OCaml 5.4.0+semgrep-fork". heapsnap has no release file for
//! 5.4, so it reads the runtime by probing. semgrep-core is dumped in the middle of a scan of a
//! generated Python file; the snapshot verifies, and the findings are those of a scan that was
//! not dumped.

use crate::dump_support::*;
use heapsnap_format::{RootKind, Snapshot};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// semgrep-core, fetched and cached by scripts/semgrep-core.sh; `None` (said as NOT COVERED)
/// when it cannot be had on this machine.
fn semgrep_core() -> Option<PathBuf> {
    let out = Command::new(repo().join("scripts/semgrep-core.sh")).output().expect("run scripts/semgrep-core.sh");
    match out.status.code() {
        Some(0) => Some(PathBuf::from(String::from_utf8(out.stdout).expect("a path").trim())),
        Some(3) => {
            // Its last line says why (the first says what it was fetching).
            let stderr = String::from_utf8_lossy(&out.stderr);
            not_covered(&format!("OCaml 5.4 (semgrep-core): {}", stderr.trim().lines().last().unwrap_or("no reason given")));
            None
        }
        _ => panic!("scripts/semgrep-core.sh failed: {}", String::from_utf8_lossy(&out.stderr)),
    }
}

/// Functions in the scanned file, and how often one of them holds what the rules look for.
const FUNCTIONS: usize = 6000;
const FINDING_EVERY: usize = 40;

/// Three rules, each matching once in every function that holds the findings.
const RULES: &str = "rules:
  - id: eval-use
    pattern: eval(...)
    message: eval of a string
    languages: [python]
    severity: WARNING
  - id: self-compare
    pattern: $X == $X
    message: a value compared with itself
    languages: [python]
    severity: WARNING
  - id: exec-return
    pattern: return exec(...)
    message: the result of exec returned
    languages: [python]
    severity: WARNING
";

/// A Python file of [`FUNCTIONS`] functions, one in [`FINDING_EVERY`] with one finding per rule.
fn python_source() -> String {
    let mut src = String::new();
    for i in 0..FUNCTIONS {
        if i % FINDING_EVERY == 0 {
            let _ = writeln!(src, "def f{i}(x, y):\n    z = eval(x + str({i}))\n    if y == y:\n        return z\n    return exec(y)\n");
        } else {
            let _ = writeln!(
                src,
                "def f{i}(x, y):\n    z = [x * k for k in range({i})]\n    if y > {i}:\n        return z\n    return sum(z) + y\n"
            );
        }
    }
    src
}

/// semgrep-core's command: the rules on one Python file, findings as JSON on stdout.
fn scan(semgrep_core: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(semgrep_core);
    cmd.current_dir(dir)
        // Whatever it keeps in HOME stays in the test's directory.
        .env("HOME", dir)
        .args(["-rules", "rules.yaml", "-lang", "python", "target.py", "-json", "-j", "1"])
        .stdin(Stdio::null());
    cmd
}

/// The findings of a scan's stdout: its JSON document (after the progress dots semgrep-core
/// prints first) without `time`, which differs from run to run.
fn findings(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    let start = text.find('{').unwrap_or_else(|| panic!("no JSON in semgrep-core's output: {text}"));
    let mut json: serde_json::Value = serde_json::from_str(&text[start..]).expect("semgrep-core's JSON output");
    json.as_object_mut().expect("a JSON object").remove("time");
    json
}

/// CPU time the process has used so far (user and system), or `None` once it is gone.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().ok()? + fields[12].parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Some(Duration::from_millis(ticks * 1000 / per_second))
}

#[test]
fn semgrep_core_on_ocaml_5_4_dumped_mid_scan_with_its_findings_unchanged() {
    let Some(semgrep_core) = semgrep_core() else { return };
    let _one = one_core_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yaml"), RULES).unwrap();
    std::fs::write(dir.path().join("target.py"), python_source()).unwrap();

    // The scan, not dumped: what it finds.
    let reference = scan(&semgrep_core, dir.path()).output().expect("run semgrep-core");
    assert!(reference.status.success(), "semgrep-core failed: {}", String::from_utf8_lossy(&reference.stderr));
    let expected = findings(&reference.stdout);
    let results = expected["results"].as_array().expect("results");
    assert_eq!(results.len(), 3 * FUNCTIONS.div_ceil(FINDING_EVERY), "semgrep-core's findings: {expected}");
    assert_eq!(expected["errors"], serde_json::json!([]), "{expected}");

    // The same scan, dumped once it is well into its work (a second of CPU: its rules are
    // read and the file is being parsed and matched).
    let output = dir.path().join("dumped.json");
    let mut child = KillOnDrop(
        scan(&semgrep_core, dir.path())
            .stdout(std::fs::File::create(&output).unwrap())
            .stderr(Stdio::null())
            .dies_with_test()
            .spawn()
            .expect("start semgrep-core"),
    );
    let pid = child.0.id();
    let start = Instant::now();
    loop {
        let running = child.0.try_wait().unwrap().is_none();
        let Some(used) = cpu_time(pid).filter(|_| running) else {
            panic!("semgrep-core ended before it could be dumped: make the file larger")
        };
        if used >= Duration::from_secs(1) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "semgrep-core used under a second of CPU in two minutes");
        std::thread::sleep(Duration::from_millis(20));
    }
    let written = std::fs::read_to_string(&output).unwrap();
    assert!(!written.contains('{'), "semgrep-core had finished its scan: {written}");
    let path = dir.path().join("semgrep-core.snap");
    let report = dump_ok(pid as i32, &path, &["--require-consistent"]);

    // Read by probing: heapsnap has no file for 5.4, and says so.
    let version = report["ocaml_version"].as_str().expect("ocaml_version");
    assert!(version.starts_with("5.4.0"), "{report}");
    let reason = report["probed"]["reason"].as_str().unwrap_or_else(|| panic!("not read by probing: {report}"));
    assert!(reason.contains("is not a release heapsnap was tested on"), "{report}");
    assert_eq!(report["consistent"], true, "{report}");

    // The scan goes on and finds what it found undumped.
    let status = child.0.wait().expect("wait for semgrep-core");
    assert!(status.success(), "semgrep-core failed after being dumped: {status}");
    assert_eq!(findings(&std::fs::read(&output).unwrap()), expected, "semgrep-core's findings changed by the dump");

    let snap = Snapshot::open(&path).expect("snapshot validates");
    assert_eq!(snap.metadata().ocaml_version, version);
    let r = reachability(&snap);
    r.assert_well_formed("semgrep-core");
    // A busy program: only the size and the well-formedness are checked by the oracle.
    assert!(r.major_live > 100_000 && r.reachable > 100_000, "{} blocks, {} reachable", r.major_live, r.reachable);
    let globals = snap.roots().iter().filter(|r| r.root_kind() == RootKind::Global).count();
    assert!(globals > 1000, "{globals} global roots");
    let v = verify(&path, false);
    assert_eq!(v["ok"], true, "heapsnap verify: {v}");
    assert_eq!(v["external_pointers"], 0, "{v}");
    // `--strict` also fails on every unreachable block of the major heap, which a program
    // mid-scan has in plenty (garbage not yet swept): that must be all it finds.
    let strict = verify(&path, true);
    let kinds: Vec<&String> = strict["error_counts"].as_object().expect("error_counts").keys().collect();
    assert!(kinds.iter().all(|k| *k == "unreachable_major_block"), "heapsnap verify --strict: {strict}");
}
