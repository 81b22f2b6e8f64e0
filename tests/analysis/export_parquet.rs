//! `heapsnap export --format parquet` on real dumps of the cache_leak sample: the tables, read
//! back with the parquet crate, say what the reports say (`summary`, `top --by kind|root|type`,
//! `suspects`); keys are the same across processes of one program; a re-export writes the same
//! files; files and directories are owner-only; bad output and bad snapshots are refused
//! cleanly.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{json, Map, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::dump_support::{dump_ok, heapsnap, samples_dir, Sample};

/// A snapshot of cache_leak after `steps` steps, with its OCaml names (`annotate`).
fn named_cache_leak(dir: &Path, name: &str, steps: u32) -> PathBuf {
    let mut sample = Sample::start(&samples_dir().join("cache_leak"), &[]);
    for step in 1..steps {
        sample.wait_ready(step);
        sample.release();
    }
    sample.wait_ready(steps);
    let out = dir.join(name);
    dump_ok(sample.pid(), &out, &[]);
    let prefix = crate::dump_support::toolchain_prefix("5.3.0");
    let cmt = samples_dir().parent().unwrap().join(".build/5.3.0/cmt");
    let o = Command::new(heapsnap())
        .args(["annotate", out.to_str().unwrap(), "--ocaml", prefix.to_str().unwrap(), "--cmt", cmt.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

fn heapsnap_json(args: &[&str]) -> Value {
    let out = Command::new(heapsnap()).args(args).arg("--json").output().expect("run heapsnap");
    assert!(out.status.success(), "heapsnap {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn export(snap: &Path, dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["export", snap.to_str().unwrap(), "--format", "parquet", "-o", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    heapsnap_json(&args)
}

/// Every row of a Parquet file, as JSON objects keyed by column (timestamps as microseconds,
/// lists as arrays); with the file's schema.
fn read_rows(file: &Path) -> (Vec<Map<String, Value>>, arrow_schema::SchemaRef) {
    let builder = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(file).unwrap()).unwrap();
    let schema = builder.schema().clone();
    let mut rows = Vec::new();
    for batch in builder.build().unwrap() {
        let batch: RecordBatch = batch.unwrap();
        for i in 0..batch.num_rows() {
            let mut row = Map::new();
            for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
                row.insert(field.name().clone(), cell(column.as_ref(), i));
            }
            rows.push(row);
        }
    }
    (rows, schema)
}

fn cell(column: &dyn Array, i: usize) -> Value {
    if column.is_null(i) {
        return Value::Null;
    }
    match column.data_type() {
        DataType::Utf8 => json!(column.as_string::<i32>().value(i)),
        DataType::Int64 => json!(column.as_primitive::<Int64Type>().value(i)),
        DataType::Int32 => json!(column.as_primitive::<Int32Type>().value(i)),
        DataType::Float64 => json!(column.as_primitive::<Float64Type>().value(i)),
        DataType::Boolean => json!(column.as_boolean().value(i)),
        DataType::Timestamp(_, _) => json!(column.as_primitive::<TimestampMicrosecondType>().value(i)),
        DataType::List(_) => {
            let list = column.as_list::<i32>().value(i);
            Value::Array((0..list.len()).map(|k| cell(list.as_ref(), k)).collect())
        }
        other => panic!("a type outside the contract: {other}"),
    }
}

/// The rows of `table` of the export `report` describes.
fn table(report: &Value, name: &str) -> Vec<Map<String, Value>> {
    let file = report["tables"].as_array().unwrap().iter().find(|t| t["table"] == name).unwrap_or_else(|| panic!("no {name}: {report}"));
    read_rows(Path::new(file["file"].as_str().unwrap())).0
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `top --by BY --limit 0`'s groups as the `groups` table has them.
fn expected_groups(snap: &str, by: &str) -> Vec<Value> {
    let top = heapsnap_json(&["top", snap, "--by", by, "--limit", "0"]);
    top["groups"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, g)| json!([g["name"], g["count"], g["shallow"], g["retained"], i + 1]))
        .collect()
}

#[test]
fn parquet_tables_say_what_the_reports_say() {
    let dir = tempfile::tempdir().unwrap();
    let snap = named_cache_leak(dir.path(), "cache.heapsnap", 2);
    let s = snap.to_str().unwrap();
    let out = dir.path().join("tables");
    let report = export(&snap, &out, &[]);
    let id = report["snapshot_id"].as_str().unwrap().to_string();
    assert!(id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{id}");

    // What was written: the files the report lists, owner-only, of the sizes it says.
    assert_eq!(mode(&out), 0o700);
    let tables: Vec<&str> = report["tables"].as_array().unwrap().iter().map(|t| t["table"].as_str().unwrap()).collect();
    assert_eq!(tables, ["snapshots", "groups", "suspects", "dominator_paths"], "no memprof data: no sites");
    let mut total = 0;
    for t in report["tables"].as_array().unwrap() {
        let file = PathBuf::from(t["file"].as_str().unwrap());
        assert_eq!(file, out.join(t["table"].as_str().unwrap()).join(format!("{id}.parquet")));
        assert_eq!(mode(&file), 0o600, "{}", file.display());
        assert_eq!(mode(file.parent().unwrap()), 0o700);
        assert_eq!(std::fs::metadata(&file).unwrap().len(), t["bytes"].as_u64().unwrap());
        let (rows, schema) = read_rows(&file);
        assert_eq!(rows.len() as u64, t["rows"].as_u64().unwrap());
        assert_eq!(schema.field(0).name(), "snapshot_id");
        assert!(rows.iter().all(|r| r["snapshot_id"] == id.as_str()));
        total += t["bytes"].as_u64().unwrap();
    }
    assert_eq!(report["bytes"].as_u64(), Some(total));

    // snapshots: the summary's totals and the metadata.
    let summary = heapsnap_json(&["summary", s]);
    let info = heapsnap_json(&["info", s]);
    let snapshots = table(&report, "snapshots");
    assert_eq!(snapshots.len(), 1);
    let row = &snapshots[0];
    for (column, key) in [
        ("objects", "objects"),
        ("heap_bytes", "bytes"),
        ("reachable_objects", "reachable_objects"),
        ("reachable_bytes", "reachable_bytes"),
        ("unreachable_objects", "unreachable_objects"),
        ("unreachable_bytes", "unreachable_bytes"),
    ] {
        assert_eq!(row[column], summary[key], "{column}");
    }
    assert_eq!(row["program"], "cache_leak");
    assert_eq!(row["ocaml_version"], summary["ocaml_version"]);
    assert_eq!(row["has_names"], true);
    assert_eq!(row["trigger"], "manual");
    assert_eq!(row["snapshot_file_bytes"].as_u64(), Some(std::fs::metadata(&snap).unwrap().len()));
    assert_eq!(row["host"], report["host"]);
    assert!(row["host"].as_str().is_some_and(|h| !h.is_empty()), "a live dump records its host: {row:?}");
    let meta = &info["metadata"];
    if meta.is_object() {
        assert_eq!(row["pid"], meta["pid"]);
        assert_eq!(row["host"], meta["host"], "the host the dump recorded");
        assert_eq!(row["captured_at"].as_u64(), meta["time_unix_ns"].as_u64().map(|ns| ns / 1000));
    }

    // groups: every group of `top --by kind|root|type`, in its order.
    let groups = table(&report, "groups");
    for by in ["kind", "root", "type"] {
        let ours: Vec<Value> = groups
            .iter()
            .filter(|g| g["grouping"] == by)
            .map(|g| json!([g["name"], g["count"], g["shallow_bytes"], g["retained_bytes"], g["rank"]]))
            .collect();
        assert_eq!(ours, expected_groups(s, by), "--by {by}");
    }
    let entry = groups.iter().find(|g| g["grouping"] == "type" && g["name"] == "Cache_leak.entry").expect("the entries' type");
    assert!(entry["count"].as_u64().unwrap() >= 10_000, "{entry:?}");

    // suspects: `suspects --limit 100`'s.
    let expected = heapsnap_json(&["suspects", s, "--limit", "100"]);
    let suspects = table(&report, "suspects");
    let expected = expected["suspects"].as_array().unwrap();
    assert!(!expected.is_empty());
    assert_eq!(suspects.len(), expected.len());
    for (i, (ours, theirs)) in suspects.iter().zip(expected).enumerate() {
        assert_eq!(ours["rank"], json!(i + 1));
        assert_eq!(ours["type"], theirs["type"]);
        assert_eq!(ours["kind"], theirs["kind"]);
        assert_eq!(ours["description"], theirs["description"]);
        assert_eq!(ours["held_by"], theirs["held_by"]);
        assert_eq!(ours["shallow_bytes"], theirs["shallow"]);
        assert_eq!(ours["retained_bytes"], theirs["retained"]);
        assert_eq!(ours["elements"], theirs["elements"]["count"]);
        assert_eq!(ours["elements_of"], theirs["elements"]["of"]);
        assert!((ours["percent"].as_f64().unwrap() - theirs["percent"].as_f64().unwrap()).abs() < 1e-9);
        let steps = ours["path_steps"].as_array().unwrap();
        assert_eq!(steps[0], theirs["path"]["root"]);
        assert_eq!(steps.len(), theirs["path"]["steps"].as_array().unwrap().len() + 1);
        assert_eq!(ours["path_text"], Value::String(steps.iter().map(|s| s.as_str().unwrap()).collect::<Vec<_>>().join(" -> ")));
    }
    let leak = &suspects[0];
    assert_eq!(leak["type"], "(string, Cache_leak.entry) Hashtbl.t", "{leak:?}");
    assert_eq!(leak["held_by"], "Cache_leak.cache");

    // dominator_paths: the diff's places; a root's place retains what `top --by root` says the
    // root retains, the suspect's place is one of them, children point at their parents.
    let paths = table(&report, "dominator_paths");
    assert_eq!(paths.len(), 1000.min(paths.len()));
    let ranks: Vec<u64> = paths.iter().map(|p| p["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, (1..=paths.len() as u64).collect::<Vec<_>>());
    assert!(paths.windows(2).all(|w| w[0]["retained_bytes"].as_u64() >= w[1]["retained_bytes"].as_u64()));
    let roots = heapsnap_json(&["top", s, "--by", "root", "--limit", "0"]);
    let mut checked_roots = 0;
    for p in paths.iter().filter(|p| p["depth"] == 0) {
        assert_eq!(p["parent_key"], Value::Null);
        assert_eq!(p["signature"], p["root"]);
        if let Some(g) = roots["groups"].as_array().unwrap().iter().find(|g| g["name"] == p["root"]) {
            assert_eq!(p["retained_bytes"], g["retained"], "{}", p["root"]);
            checked_roots += 1;
        }
    }
    assert!(checked_roots >= 1, "no root's place found in top --by root");
    let by_key: std::collections::HashMap<i64, &Map<String, Value>> = paths.iter().map(|p| (p["key"].as_i64().unwrap(), p)).collect();
    assert_eq!(by_key.len(), paths.len(), "one key per place");
    for p in paths.iter().filter(|p| p["depth"].as_u64() > Some(0)) {
        if let Some(parent) = by_key.get(&p["parent_key"].as_i64().unwrap()) {
            assert_eq!(parent["depth"].as_u64().unwrap() + 1, p["depth"].as_u64().unwrap());
            assert!(p["signature"].as_str().unwrap().starts_with(parent["signature"].as_str().unwrap().trim_end_matches('+')));
        }
    }
    let place = by_key.get(&leak["key"].as_i64().unwrap()).expect("the suspect's place is among the largest");
    assert_eq!(place["signature"], leak["signature"]);
    assert_eq!(place["signature"], "Cache_leak.cache -> (string, Cache_leak.entry) Hashtbl.t");
    assert_eq!(place["retained_bytes"], leak["retained_bytes"]);

    // Re-exporting gives the same files, byte for byte, and nothing else.
    let before: Vec<(PathBuf, Vec<u8>)> = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let f = PathBuf::from(t["file"].as_str().unwrap());
            let bytes = std::fs::read(&f).unwrap();
            (f, bytes)
        })
        .collect();
    let again = export(&snap, &out, &[]);
    assert_eq!(again["snapshot_id"], report["snapshot_id"]);
    for (f, bytes) in &before {
        assert_eq!(&std::fs::read(f).unwrap(), bytes, "{} changed", f.display());
    }
    let files: usize = std::fs::read_dir(&out).unwrap().map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count()).sum();
    assert_eq!(files, before.len(), "no temporary file left, no second copy");

    // --host: another host is another snapshot.
    let other = export(&snap, &out, &["--host", "replica-7"]);
    assert_ne!(other["snapshot_id"], report["snapshot_id"]);
    assert_eq!(table(&other, "snapshots")[0]["host"], "replica-7");
}

/// Two processes of one program: every name they share has the same key in both (groups,
/// places), their snapshots two ids.
#[test]
fn parquet_keys_are_the_same_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let first = named_cache_leak(dir.path(), "a.heapsnap", 1);
    let second = named_cache_leak(dir.path(), "b.heapsnap", 2);
    let out = dir.path().join("tables");
    let (a, b) = (export(&first, &out, &[]), export(&second, &out, &[]));
    assert_ne!(a["snapshot_id"], b["snapshot_id"]);
    let keys = |report: &Value, name: &str, of: &[&str]| -> std::collections::HashMap<(String, String), i64> {
        table(report, name)
            .iter()
            .map(|r| {
                ((of.iter().map(|c| r[*c].as_str().unwrap_or("")).collect::<Vec<_>>().join("/"), String::new()), r["key"].as_i64().unwrap())
            })
            .collect()
    };
    for (name, of) in [("groups", &["grouping", "name"][..]), ("dominator_paths", &["signature"][..])] {
        let (ka, kb) = (keys(&a, name, of), keys(&b, name, of));
        let shared: Vec<_> = ka.keys().filter(|k| kb.contains_key(*k)).collect();
        assert!(shared.len() >= 10, "{name}: {} names in common", shared.len());
        for k in shared {
            assert_eq!(ka[k], kb[k], "{name} {k:?}");
        }
    }
    // The leak's place grew, and is one key in both.
    let place = |report: &Value| {
        table(report, "dominator_paths")
            .into_iter()
            .find(|p| p["signature"] == "Cache_leak.cache -> (string, Cache_leak.entry) Hashtbl.t")
            .expect("the cache's place")
    };
    let (pa, pb) = (place(&a), place(&b));
    assert_eq!(pa["key"], pb["key"]);
    assert!(pb["retained_bytes"].as_u64() > pa["retained_bytes"].as_u64());
}

#[test]
fn parquet_export_refuses_bad_output_and_bad_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"keep me").unwrap();
    let snap = named_cache_leak(dir.path(), "cache.heapsnap", 1);
    let o = Command::new(heapsnap()).args(["export", snap.to_str().unwrap(), "--format", "parquet", "-o"]).arg(&file).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is not a directory") && !err.contains("panicked"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");

    // A snapshot cut short: refused, nothing written.
    let bytes = std::fs::read(&snap).unwrap();
    let cut = dir.path().join("cut.heapsnap");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = dir.path().join("tables");
    let o = Command::new(heapsnap()).args(["export", cut.to_str().unwrap(), "--format", "parquet", "-o"]).arg(&out).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot open") && !err.contains("panicked"), "{err}");
    assert!(!out.exists(), "nothing written for a bad snapshot");

    // Options of other formats are refused, not ignored.
    let o = Command::new(heapsnap())
        .args(["export", snap.to_str().unwrap(), "--format", "parquet", "--by", "kind", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("do not apply"));
}

/// A program sampled by statmemprof: the `sites` table and the `site` groups are `top --by
/// site`'s groups, ranked by retained bytes.
#[test]
fn parquet_sites_are_top_by_sites() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("sites.heapsnap");
    let mut sample = Sample::start(&samples_dir().join("alloc_sites"), &["--tracker", "callstack", "2000", "--steps", "1"]);
    sample.wait_ready(1);
    dump_ok(sample.pid(), &snap, &[]);
    drop(sample);
    let report = export(&snap, &dir.path().join("tables"), &[]);
    let sites = table(&report, "sites");
    let top = heapsnap_json(&["top", snap.to_str().unwrap(), "--by", "site", "--limit", "0"]);
    let expected = top["groups"].as_array().unwrap();
    assert!(expected.len() >= 2, "{top}");
    assert_eq!(sites.len(), expected.len());
    for g in expected {
        let row = sites
            .iter()
            .find(|r| r["location"] == format!("{}:{}", g["frames"][0]["file"].as_str().unwrap(), g["frames"][0]["line"]))
            .unwrap();
        assert_eq!(row["function"], g["frames"][0]["function"]);
        for (column, key) in [
            ("count", "count"),
            ("shallow_bytes", "shallow"),
            ("retained_bytes", "retained"),
            ("samples", "samples"),
            ("estimated_bytes", "estimated_bytes"),
        ] {
            assert_eq!(row[column], g[key], "{column} of {}", g["name"]);
        }
    }
    let retained: Vec<u64> = sites.iter().map(|r| r["retained_bytes"].as_u64().unwrap()).collect();
    assert!(retained.windows(2).all(|w| w[0] >= w[1]), "{retained:?}");
    assert!(sites.iter().enumerate().all(|(i, r)| r["rank"] == json!(i + 1)));
    let groups: Vec<(i64, String)> = table(&report, "groups")
        .iter()
        .filter(|g| g["grouping"] == "site")
        .map(|g| (g["key"].as_i64().unwrap(), g["name"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(groups.len(), sites.len());
    for (r, (key, name)) in sites.iter().zip(&groups) {
        assert_eq!(r["key"].as_i64(), Some(*key));
        assert!(expected.iter().any(|g| &g["name"] == name));
    }
}

/// `run --export parquet=DIR --keep-snapshots 1`: every snapshot's tables, named, and only the
/// last snapshot file left.
#[test]
fn run_exports_each_snapshot_and_keeps_the_last() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let (snaps, tables) = (dir.path().join("snaps"), dir.path().join("tables"));
    let prefix = crate::dump_support::toolchain_prefix("5.3.0");
    let cmt = samples_dir().parent().unwrap().join(".build/5.3.0/cmt");
    let mut child = Command::new(heapsnap())
        .args(["run", "--on-compaction", "--json", "--keep-snapshots", "1", "-d"])
        .arg(&snaps)
        .arg(format!("--export=parquet={}", tables.display()))
        .args(["--cmt", cmt.to_str().unwrap(), "--ocaml", prefix.to_str().unwrap(), "--"])
        .arg(samples_dir().join("cache_leak"))
        .args(["--steps", "3", "--pause"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    // After each step the sample compacts, says READY N and waits for a line: it gets one once
    // the tables of snapshot N are written.
    for step in 1..=3 {
        loop {
            let mut line = String::new();
            assert!(std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0, "the run ended early: {text}");
            text.push_str(&line);
            if line.trim() == format!("READY {step}") {
                break;
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::fs::read_dir(tables.join("snapshots")).map_or(0, |d| d.count()) < step {
            assert!(std::time::Instant::now() < deadline, "no tables for snapshot {step}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }
    drop(stdin);
    std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
    assert!(child.wait().unwrap().success());
    let report: Value = serde_json::from_str(text.lines().rev().find(|l| l.starts_with('{')).expect("the run's JSON")).unwrap();
    let snapshots: Vec<PathBuf> = report["snapshots"].as_array().unwrap().iter().map(|p| PathBuf::from(p.as_str().unwrap())).collect();
    assert_eq!(snapshots.len(), 3, "{report}");
    assert_eq!(report["tables"]["exported"].as_array().unwrap().len(), 3, "{report}");
    assert_eq!(report["tables"]["removed"].as_array().unwrap().len(), 2, "{report}");
    assert!(!snapshots[0].exists() && !snapshots[1].exists() && snapshots[2].exists());
    let rows: Vec<Map<String, Value>> =
        std::fs::read_dir(tables.join("snapshots")).unwrap().flat_map(|f| read_rows(&f.unwrap().path()).0).collect();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r["has_names"] == true), "named before export: {rows:?}");
    let mut objects: Vec<u64> = rows.iter().map(|r| r["reachable_objects"].as_u64().unwrap()).collect();
    objects.dedup();
    assert_eq!(objects.len(), 3, "three different heaps: {rows:?}");
}
