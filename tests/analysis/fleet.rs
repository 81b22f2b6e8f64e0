//! `heapsnap fleet` over real snapshots exported as Parquet: runs of the cache_leak sample with
//! different leak rates, each exported as if from another host. The embedded engine's answers
//! are DuckDB's and Spark's (PyPI, installed into target/fleet-venv by scripts/fleet-engines.sh)
//! running the same SQL over the same files; among 20 replicas, the one that leaks is the first
//! host `fleet diverge` names.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::dump_support::{dump_ok, heapsnap, not_covered, repo, samples_dir, toolchain, Sample};

/// Hosts named `NAME` each running cache_leak adding `rate` entries per step; per host, one
/// directory of its three exported snapshots.
fn exported_fleet(name: &str, rates: &[u32]) -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fleet").join(name);
    let _ = std::fs::remove_dir_all(&root);
    let samples = samples_dir();
    let cmt = samples.parent().unwrap().join(".build").join(samples.file_name().unwrap()).join("cmt");
    let mut dirs = Vec::new();
    for (i, rate) in rates.iter().enumerate() {
        let host = format!("{name}-{i:02}");
        let snapshots = root.join("snapshots").join(&host);
        let dir = root.join("exported").join(&host);
        std::fs::create_dir_all(&snapshots).unwrap();
        let per_step = rate.to_string();
        let mut sample = Sample::start(&samples.join("cache_leak"), &["--steps", "3", per_step.as_str()]);
        for step in 1..=3 {
            sample.wait_ready(step);
            let snapshot = snapshots.join(format!("step-{step}.heapsnap"));
            dump_ok(sample.pid(), &snapshot, &[]);
            sample.release();
            // The program's OCaml names, for the groups by type.
            let out = Command::new(heapsnap())
                .arg("annotate")
                .arg(&snapshot)
                .arg("--ocaml")
                .arg(toolchain())
                .arg("--cmt")
                .arg(&cmt)
                .output()
                .unwrap();
            assert!(out.status.success(), "annotate: {}", String::from_utf8_lossy(&out.stderr));
            let out = Command::new(heapsnap())
                .arg("export")
                .arg(&snapshot)
                .args(["--format", "parquet", "--host", &host, "-o"])
                .arg(&dir)
                .output()
                .unwrap();
            assert!(out.status.success(), "export --format parquet: {}", String::from_utf8_lossy(&out.stderr));
        }
        let (_, status) = sample.finish();
        assert!(status.success(), "cache_leak {rate}: {status}");
        dirs.push(dir);
    }
    dirs
}

/// Four hosts leaking at different rates, one not at all.
fn four_hosts() -> &'static [PathBuf] {
    static FLEET: OnceLock<Vec<PathBuf>> = OnceLock::new();
    FLEET.get_or_init(|| exported_fleet("rates", &[1000, 0, 4000, 2000]))
}

/// `heapsnap fleet ARGS... --json DIRS...`, asserting success.
fn fleet(args: &[&str], dirs: &[PathBuf]) -> Value {
    let out = Command::new(heapsnap()).arg("fleet").args(args).arg("--json").args(dirs).output().unwrap();
    assert!(out.status.success(), "heapsnap fleet {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("heapsnap fleet {args:?}: {e}"))
}

/// Every standard question, with all its rows: (name, arguments).
const QUESTIONS: [(&str, &[&str]); 7] = [
    ("growth-type", &["growth", "--by", "type", "--limit", "0"]),
    ("growth-root", &["growth", "--by", "root", "--limit", "0"]),
    ("growth-kind", &["growth", "--by", "kind", "--limit", "0"]),
    ("growth-path", &["growth", "--by", "path", "--limit", "0"]),
    ("growth-site", &["growth", "--by", "site", "--limit", "0"]),
    ("diverge", &["diverge", "--limit", "0"]),
    ("suspects", &["suspects", "--limit", "0"]),
];

/// The embedded engine's answers to every question, by name.
fn embedded_answers(dirs: &[PathBuf]) -> Vec<(&'static str, Value)> {
    QUESTIONS.iter().map(|(name, args)| (*name, fleet(args, dirs))).collect()
}

fn engines_python() -> PathBuf {
    let out = Command::new(repo().join("scripts/fleet-engines.sh")).output().expect("run scripts/fleet-engines.sh");
    assert!(out.status.success(), "DuckDB and PySpark did not install: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The same queries, as the embedded engine ran them, on `engine` (duckdb or spark).
fn engine_answers(engine: &str, dirs: &[PathBuf], embedded: &[(&str, Value)]) -> Value {
    let questions: Vec<Value> = embedded.iter().map(|(name, answer)| json!({"name": name, "sql": answer["sql"]})).collect();
    let mut child = Command::new(engines_python())
        .arg(repo().join("fleet/tests/engines.py"))
        .arg(engine)
        .args(dirs)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), &questions).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{engine}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{engine}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Each answer's columns and rows, in order, equal the engine's.
fn assert_same_answers(engine: &str, embedded: &[(&str, Value)], theirs: &Value) {
    for (name, answer) in embedded {
        let their = &theirs[*name];
        assert_eq!(answer["columns"], their["columns"], "{name}: the columns of heapsnap fleet and {engine}");
        assert_eq!(answer["rows"], their["rows"], "{name}: the rows of heapsnap fleet (left) and {engine} (right)");
    }
}

fn answer<'a>(answers: &'a [(&str, Value)], name: &str) -> &'a Value {
    &answers.iter().find(|(n, _)| *n == name).unwrap().1
}

/// What the answers say of the four hosts, whichever engine computed them.
fn check_the_answers_mean_something(answers: &[(&str, Value)]) {
    for (name, answer) in answers {
        assert_eq!(answer["snapshots"], 12, "{name}");
        assert_eq!(answer["hosts"], 4, "{name}");
        let rows = answer["rows"].as_array().unwrap();
        // No memprof data: no sites, and the answer says why.
        if *name == "growth-site" {
            assert!(rows.is_empty() && answer["note"].as_str().unwrap().contains("allocation sites"), "{answer}");
        } else {
            assert!(!rows.is_empty(), "{name}: no rows: {answer}");
        }
    }
    // The cache's entries grow on the three hosts that add to it, the most on the fastest.
    let growth = answer(answers, "growth-type")["rows"].as_array().unwrap();
    let entry = growth.iter().find(|r| r["name"] == "Cache_leak.entry").unwrap_or_else(|| panic!("no Cache_leak.entry: {growth:?}"));
    assert_eq!((entry["hosts_growing"].as_i64(), entry["fleet_hosts"].as_i64()), (Some(3), Some(4)), "{entry}");
    // 7000 entries of two steps more, at least their 1000-byte payloads.
    assert!(entry["growth_bytes"].as_i64().unwrap() > 2 * 7000 * 1000, "{entry}");
    let diverge = answer(answers, "diverge")["rows"].as_array().unwrap();
    let hosts: Vec<&str> = diverge.iter().map(|r| r["host"].as_str().unwrap()).collect();
    assert_eq!(hosts, ["rates-02", "rates-03", "rates-00", "rates-01"], "fastest growing first: {diverge:?}");
    // The cache is a suspect of the three hosts whose cache holds entries.
    let suspects = answer(answers, "suspects")["rows"].as_array().unwrap();
    let cache = &suspects[0];
    assert!(cache["signature"].as_str().unwrap().contains("Cache_leak.cache"), "{cache}");
    assert_eq!((cache["hosts"].as_i64(), cache["fleet_hosts"].as_i64()), (Some(3), Some(4)), "{cache}");
}

#[test]
fn duckdb_gives_the_embedded_engines_answers() {
    let dirs = four_hosts();
    let embedded = embedded_answers(dirs);
    check_the_answers_mean_something(&embedded);
    let duckdb = engine_answers("duckdb", dirs, &embedded);
    assert_same_answers("DuckDB", &embedded, &duckdb);
}

#[test]
fn spark_gives_the_embedded_engines_answers() {
    if !Command::new("java").arg("-version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
        not_covered("Spark: no Java here (scripts/install-deps.sh installs openjdk-17-jre-headless)");
        return;
    }
    let dirs = four_hosts();
    let embedded = embedded_answers(dirs);
    let spark = engine_answers("spark", dirs, &embedded);
    assert_same_answers("Spark", &embedded, &spark);
}

#[test]
fn the_leaking_replica_comes_first_among_twenty() {
    let mut rates = [0; 20];
    rates[13] = 5000;
    let dirs = exported_fleet("replica", &rates);
    let answer = fleet(&["diverge"], &dirs);
    assert_eq!(answer["hosts"], 20);
    let rows = answer["rows"].as_array().unwrap();
    assert_eq!(rows[0]["host"], "replica-13", "{answer}");
    assert_eq!(rows[0]["diverges"], true, "{answer}");
    // The others grow alike: none of them is said to diverge.
    assert!(rows[1..].iter().all(|r| r["diverges"] == false), "{answer}");
}

/// Bad input: a clear error naming what is wrong, never a panic.
#[test]
fn bad_directories_are_refused_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |dirs: &[&Path], says: &str| {
        let out = Command::new(heapsnap()).args(["fleet", "growth", "--json"]).args(dirs).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{dirs:?}");
        let error: Value = serde_json::from_slice(&out.stdout).unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{dirs:?}: {message}");
    };
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    refused(&[empty.as_path()], "no exported snapshots");
    refused(&[dir.path().join("absent").as_path()], "not a directory");
    // Files that are not Parquet under a table's name.
    let junk = dir.path().join("junk");
    std::fs::create_dir_all(junk.join("snapshots")).unwrap();
    std::fs::write(junk.join("snapshots/0123456789abcdef.parquet"), b"not parquet at all").unwrap();
    refused(&[junk.as_path()], "not a readable Parquet file");
    // A real export, truncated.
    let real = &four_hosts()[0];
    let cut = dir.path().join("cut");
    copy_dir(real, &cut);
    let victim = std::fs::read_dir(cut.join("groups")).unwrap().next().unwrap().unwrap().path();
    let bytes = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &bytes[..bytes.len() / 2]).unwrap();
    refused(&[cut.as_path()], "not a readable Parquet file");
    // One table's file put in another's place: its columns are not that table's.
    let swapped = dir.path().join("swapped");
    copy_dir(real, &swapped);
    let group = std::fs::read_dir(swapped.join("groups")).unwrap().next().unwrap().unwrap().path();
    std::fs::copy(&group, swapped.join("snapshots").join(group.file_name().unwrap())).unwrap();
    refused(&[swapped.as_path()], "not the `snapshots` table");
    // A good directory beside a bad one is not enough.
    refused(&[real.as_path(), empty.as_path()], "no exported snapshots");
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(to.join(entry.file_name())).unwrap();
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}
