//! `heapsnap diff` on real OCaml samples, each run under `heapsnap run --on-compaction` and
//! snapshotted after each of three steps while it grows (or stays steady), against
//! samples/manifest.json.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::dump_support::series::three_snapshots_of;
use crate::dump_support::{heapsnap, repo, samples_dir, toolchain};

fn manifest_sample(name: &str) -> Value {
    static M: OnceLock<Value> = OnceLock::new();
    let m = M.get_or_init(|| {
        serde_json::from_str(&std::fs::read_to_string(repo().join("samples/manifest.json")).expect("manifest")).expect("manifest JSON")
    });
    m["samples"].as_array().expect("samples").iter().find(|s| s["name"] == name).expect("sample in manifest").clone()
}

/// Three snapshots of a sample, taken once per test binary (under the target's temporary
/// directory, replaced at each run).
fn series(name: &'static str) -> Vec<PathBuf> {
    static TAKEN: OnceLock<std::sync::Mutex<std::collections::HashMap<&'static str, Vec<PathBuf>>>> = OnceLock::new();
    let taken = TAKEN.get_or_init(Default::default);
    let mut taken = taken.lock().unwrap_or_else(|e| e.into_inner());
    taken
        .entry(name)
        .or_insert_with(|| {
            let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("diff_samples").join(name);
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).expect("sample directory");
            three_snapshots_of(name, &d, &[])
        })
        .clone()
}

fn diff_json(snapshots: &[PathBuf], args: &[&str]) -> Value {
    let out = Command::new(heapsnap()).arg("diff").args(snapshots).args(args).arg("--json").output().expect("run heapsnap diff");
    assert!(out.status.success(), "heapsnap diff {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("heapsnap diff {args:?}: bad JSON ({e})"))
}

fn within(got: f64, expected: f64, tolerance: f64) -> bool {
    (got - expected).abs() <= expected * tolerance
}

#[test]
fn cache_leak_top_suspect_is_its_hashtbl() {
    let sample = manifest_sample("cache_leak");
    let root = &sample["roots"][0];
    let label = format!("{}.{}", root["module"].as_str().unwrap(), root["field"]);
    assert_eq!(label, "Cache_leak.1");
    // What the sample allocates per step (manifest note: 5000 entries x 1104 B).
    let per_step = (root["growth_per_step_bytes"]["min"].as_f64().unwrap() + root["growth_per_step_bytes"]["max"].as_f64().unwrap()) / 2.0;
    let snaps = series("cache_leak");

    // By root: the Hashtbl's root grew at every step, by what the sample allocated.
    let r = diff_json(&snaps, &["--by", "root"]);
    let top = &r["suspects"][0];
    assert_eq!(top["name"], label.as_str(), "{:#}", r["suspects"]);
    let retained: Vec<f64> = top["retained"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    for w in retained.windows(2) {
        assert!(within(w[1] - w[0], per_step, 0.10), "step growth {} vs {per_step}", w[1] - w[0]);
    }
    let path = &top["paths"][0];
    assert!(path["signature"].as_str().unwrap().starts_with("Cache_leak.1 -> Hashtbl -> .1 "), "{path:#}");

    // By kind (the default): the top suspect's members are new in the Hashtbl's bucket chains.
    let r = diff_json(&snaps, &[]);
    let top = &r["suspects"][0];
    let path = &top["paths"][0];
    assert_eq!(path["steps"][0]["shape"], label.as_str());
    assert_eq!(path["steps"][1]["shape"], "Hashtbl");
    assert!(path["description"].as_str().unwrap().contains("Hashtbl bucket chains"), "{path:#}");
    assert!(path["new"].as_i64().unwrap() >= 10000, "{path:#}");

    // The dominator tree: the growth sits in the bucket chains, every step.
    let place = &r["growth"][0];
    assert_eq!(place["reason"], "members");
    assert_eq!(place["grew_every_step"], true);
    assert!(place["signature"].as_str().unwrap().starts_with("Cache_leak.1 -> Hashtbl -> .1 block tag 0 size >16 -> [*] "), "{place:#}");
    let growth = place["growth"].as_f64().unwrap();
    assert!(within(growth, 2.0 * per_step, 0.10), "the chains grew by {growth}, the sample allocated {}", 2.0 * per_step);
}

#[test]
fn closure_list_grows_closures_of_the_right_function_and_line() {
    let sample = manifest_sample("closure_list");
    let closure = &sample["closures"][0];
    let location = closure["code_location"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
    let counts: Vec<u64> = closure["count_by_step"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    let snaps = series("closure_list");

    let r = diff_json(&snaps, &["--by", "closure"]);
    let suspects = r["suspects"].as_array().unwrap();
    assert_eq!(suspects.len(), 1, "{suspects:#?}");
    let name = suspects[0]["name"].as_str().unwrap();
    assert!(name.starts_with("closure camlClosure_list.fun_") && name.ends_with(&format!("({location})")), "{name}");
    let count: Vec<u64> = suspects[0]["count"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(count, counts);
    let path = &suspects[0]["paths"][0];
    assert_eq!(path["steps"][0]["shape"], format!("{}.{}", sample["roots"][0]["module"].as_str().unwrap(), sample["roots"][0]["field"]));
    assert_eq!(path["new"].as_u64(), Some(counts[2] - counts[0]));

    // By kind, the closures are among the suspects too, and the list's cells hold the growth.
    let r = diff_json(&snaps, &[]);
    assert!(r["suspects"].as_array().unwrap().iter().any(|s| s["name"] == name), "{:#}", r["suspects"]);
    let place = &r["growth"][0];
    assert!(place["signature"].as_str().unwrap().starts_with("Closure_list.0 -> "), "{place:#}");
    assert_eq!(place["delta_count"].as_u64(), Some(counts[2] - counts[0]));
}

#[test]
fn steady_state_has_no_suspect() {
    let snaps = series("steady_state");
    // (`--by reserved` needs reserved header bits, which these samples' runtime has not.)
    for by in ["kind", "closure", "root"] {
        let r = diff_json(&snaps, &["--by", by]);
        assert_eq!(r["suspects"].as_array().map(Vec::len), Some(0), "--by {by}: {:#}", r["suspects"]);
        assert_eq!(r["growth"].as_array().map(Vec::len), Some(0), "--by {by}: {:#}", r["growth"]);
    }
}

#[test]
fn human_report_names_the_suspect_and_where_it_grows() {
    let snaps = series("cache_leak");
    let out = Command::new(heapsnap()).arg("diff").args(&snaps).output().expect("run heapsnap diff");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Leak suspects: groups by kind whose count grew at every step"), "{text}");
    assert!(text.contains("Cache_leak.1 -> Hashtbl -> .1 Hashtbl data"), "{text}");
    assert!(text.contains("Growth in the dominator tree"), "{text}");
}

#[test]
fn snapshots_of_different_programs_are_refused() {
    let (a, b) = (series("cache_leak"), series("closure_list"));
    let out = Command::new(heapsnap()).arg("diff").arg(&a[0]).arg(&b[1]).output().expect("run heapsnap diff");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("different programs") && err.contains("cache_leak") && err.contains("closure_list"), "{err}");
    assert!(out.stdout.is_empty());

    // A synthetic snapshot is of no known program.
    let synthetic = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("diff_samples").join("synthetic.heapsnap");
    heapsnap_testkit::synth::large_heap_shape(100).heap.write(&synthetic).expect("write a synthetic snapshot");
    let out = Command::new(heapsnap()).arg("diff").arg(&a[0]).arg(&synthetic).output().expect("run heapsnap diff");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown program"), "{err}");
}

#[test]
fn diff_groups_are_the_groups_top_reports() {
    let snaps = series("closure_list");
    for by in ["kind", "closure", "root"] {
        let r = diff_json(&snaps, &["--by", by, "--limit", "0"]);
        for (i, snap) in snaps.iter().enumerate() {
            let out =
                Command::new(heapsnap()).args(["top", "--by", by, "--limit", "0", "--json"]).arg(snap).output().expect("run heapsnap top");
            assert!(out.status.success());
            let top: Value = serde_json::from_slice(&out.stdout).expect("top JSON");
            let mut expected: Vec<(String, u64, u64, u64)> = top["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| {
                    (
                        g["name"].as_str().unwrap().to_string(),
                        g["count"].as_u64().unwrap(),
                        g["shallow"].as_u64().unwrap(),
                        g["retained"].as_u64().unwrap(),
                    )
                })
                .collect();
            let mut got: Vec<(String, u64, u64, u64)> = r["groups"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|g| g["count"][i].as_u64() != Some(0))
                .map(|g| {
                    (
                        g["name"].as_str().unwrap().to_string(),
                        g["count"][i].as_u64().unwrap(),
                        g["shallow"][i].as_u64().unwrap(),
                        g["retained"][i].as_u64().unwrap(),
                    )
                })
                .collect();
            expected.sort();
            got.sort();
            assert_eq!(got, expected, "--by {by}, snapshot {}", i + 1);
        }
    }
}

/// Copies of a series with the program's OCaml names added (`heapsnap annotate` with the
/// samples' `.cmt` files and the 5.3.0 toolchain, as `dump --ocaml --cmt` would), once per test
/// binary.
fn named_series(name: &'static str) -> Vec<PathBuf> {
    static NAMED: OnceLock<std::sync::Mutex<std::collections::HashMap<&'static str, Vec<PathBuf>>>> = OnceLock::new();
    let named = NAMED.get_or_init(Default::default);
    let mut named = named.lock().unwrap_or_else(|e| e.into_inner());
    named
        .entry(name)
        .or_insert_with(|| {
            let samples = samples_dir();
            let cmt = samples.parent().unwrap().join(".build").join(samples.file_name().unwrap()).join("cmt");
            let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("diff_samples").join(format!("{name}-named"));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).expect("named series directory");
            series(name)
                .iter()
                .map(|p| {
                    let copy = d.join(p.file_name().unwrap());
                    std::fs::copy(p, &copy).expect("copy the snapshot");
                    let out = Command::new(heapsnap())
                        .arg("annotate")
                        .arg(&copy)
                        .arg("--ocaml")
                        .arg(toolchain())
                        .arg("--cmt")
                        .arg(&cmt)
                        .output()
                        .expect("run heapsnap annotate");
                    assert!(out.status.success(), "annotate {}: {}", copy.display(), String::from_utf8_lossy(&out.stderr));
                    copy
                })
                .collect()
        })
        .clone()
}

/// Every signature a diff report prints: its suspects' paths and its places of growth (with
/// their children's steps).
fn signatures(r: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for s in r["suspects"].as_array().unwrap() {
        for p in s["paths"].as_array().unwrap() {
            out.push(format!("{}: {}", s["name"], p["signature"].as_str().unwrap()));
            out.push(format!("{}: {}", s["name"], p["description"].as_str().unwrap()));
        }
    }
    for g in r["growth"].as_array().unwrap() {
        out.push(g["signature"].as_str().unwrap().to_string());
        out.push(g["description"].as_str().unwrap().to_string());
        for c in g["children"].as_array().unwrap() {
            out.push(format!("  {} {}", c["edge"].as_str().unwrap(), c["shape"].as_str().unwrap()));
        }
    }
    out
}

/// The typed part of cache_leak's table: `cache : (string, entry) Hashtbl.t`.
const TABLE: &str = "(string, Cache_leak.entry) Hashtbl.t";
const CHAINS: &str = "Cache_leak.cache -> (string, Cache_leak.entry) Hashtbl.t -> .data (string, Cache_leak.entry) Hashtbl.bucketlist array -> [*] Cons : (string, Cache_leak.entry) Hashtbl.bucketlist+";

#[test]
fn with_names_in_every_snapshot_signatures_speak_ocaml_and_without_they_are_shapes() {
    let named = named_series("cache_leak");
    let r = diff_json(&named, &[]);
    assert_eq!(r["ocaml_names"], true);
    assert!(r["warnings"].as_array().unwrap().is_empty(), "{:#}", r["warnings"]);
    // The suspects' retainer paths: the global by its identifier, the table by its type, the
    // fields by their labels; the bucket cells (one constructor of one type) fold into one step
    // and the entries they hold are a step of their own.
    let paths: Vec<&str> = r["suspects"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["paths"].as_array().unwrap())
        .map(|p| p["signature"].as_str().unwrap())
        .collect();
    for wanted in [
        CHAINS.to_string(),
        format!("{CHAINS} -> .data Cache_leak.entry"),
        format!("{CHAINS} -> .data Cache_leak.entry -> .payload string"),
        format!("{CHAINS} -> .key string"),
    ] {
        assert!(paths.contains(&wanted.as_str()), "{wanted} not in {paths:#?}");
    }
    let path = r["suspects"][0]["paths"][0].clone();
    assert_eq!(path["steps"][0]["shape"], "Cache_leak.cache");
    assert_eq!(path["steps"][1]["shape"], TABLE);
    assert_eq!(path["steps"][2]["edge"], ".data");
    assert_eq!(path["steps"][3]["edge"], "[*]");
    assert_eq!(path["steps"][3]["folded"], true);
    // The dominator tree: the growth is in the bucket chains, whose entries hold it.
    let place = &r["growth"][0];
    assert_eq!(place["signature"], CHAINS, "{place:#}");
    assert_eq!(place["description"], CHAINS, "{place:#}");
    let child = &place["children"][0];
    assert_eq!((child["edge"].as_str(), child["shape"].as_str()), (Some(".data"), Some("Cache_leak.entry")), "{place:#}");
    // By root, the table's global is named by its identifier.
    let r = diff_json(&named, &["--by", "root"]);
    assert_eq!(r["suspects"][0]["name"], "Cache_leak.cache", "{:#}", r["suspects"]);
    assert!(r["suspects"][0]["paths"][0]["signature"].as_str().unwrap().starts_with(&format!("Cache_leak.cache -> {TABLE} -> .data ")));
    // The human report says the same.
    let out = Command::new(heapsnap()).arg("diff").args(&named).output().expect("run heapsnap diff");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{CHAINS} -> .data Cache_leak.entry -> .payload string")), "{text}");
    assert!(text.contains(".data Cache_leak.entry\n"), "{text}");

    // The same snapshots without names: the signatures as ever, by shape and field number.
    let r = diff_json(&series("cache_leak"), &[]);
    assert_eq!(r["ocaml_names"], false);
    let all = signatures(&r);
    let chains = "Cache_leak.1 -> Hashtbl -> .1 block tag 0 size >16 -> [*] block tag 0 size 3+";
    assert!(all.iter().any(|s| s == chains), "{all:#?}");
    assert!(all.iter().any(|s| s.ends_with(&format!("{chains} -> .1 string"))), "{all:#?}");
    assert!(!all.iter().any(|s| s.contains("Cache_leak.cache") || s.contains("Hashtbl.t") || s.contains(".data")), "{all:#?}");
}

#[test]
fn with_names_in_some_snapshots_only_signatures_are_shapes_and_the_report_says_why() {
    let (named, unnamed) = (named_series("cache_leak"), series("cache_leak"));
    let mixed = vec![named[0].clone(), unnamed[1].clone(), named[2].clone()];
    for by in ["kind", "root"] {
        let r = diff_json(&mixed, &["--by", by]);
        assert_eq!(r["ocaml_names"], false);
        let notes: Vec<&str> =
            r["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).filter(|w| w.contains("OCaml names not used")).collect();
        assert_eq!(notes.len(), 1, "{:#}", r["warnings"]);
        let missing = unnamed[1].display().to_string();
        assert!(notes[0].contains(&format!("{missing} has none")) && notes[0].contains("heapsnap annotate"), "{}", notes[0]);
        // The same signatures as the diff of the snapshots without names: every place and path
        // matches across the three snapshots (growth counted once, not as a new place).
        let plain = diff_json(&unnamed, &["--by", by]);
        assert_eq!(signatures(&r), signatures(&plain), "--by {by}");
        assert!(!signatures(&r).is_empty(), "--by {by}");
        let names = |r: &Value| -> Vec<String> { r["groups"].as_array().unwrap().iter().map(|g| g["name"].to_string()).collect() };
        assert_eq!(names(&r), names(&plain), "--by {by}");
        assert_eq!(r["growth"][0]["delta_retained"], plain["growth"][0]["delta_retained"], "--by {by}");
    }
    // The human report says it once, on stderr.
    let out = Command::new(heapsnap()).arg("diff").args(&mixed).output().expect("run heapsnap diff");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("OCaml names not used").count(), 1, "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Cache_leak.1 -> Hashtbl -> .1 Hashtbl data"));

    // The indexes save a classification with the names: compared without, copies without an
    // index are analysed once each, and no index is built for it.
    let dir = tempfile::tempdir().unwrap();
    let copies: Vec<PathBuf> = mixed
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let copy = dir.path().join(format!("{i}.heapsnap"));
            std::fs::copy(p, &copy).unwrap();
            copy
        })
        .collect();
    let out = Command::new(heapsnap())
        .arg("diff")
        .args(&copies)
        .env("HEAPSNAP_TRACE", "1")
        .env("HEAPSNAP_INDEX_IN_BACKGROUND", "0")
        .output()
        .expect("run heapsnap diff");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).matches("graph: edges at").count(), 3, "one analysis per snapshot");
    assert!(copies.iter().all(|p| !heapsnap_index::store::beside(p).exists()), "no index built that the diff would not read");
}

/// `diff --by type` on named snapshots: growth per OCaml type, as `top --by type` counts each
/// snapshot; the entries' type is a suspect whose paths go through the table.
#[test]
fn diff_by_type_groups_by_ocaml_type() {
    let named = named_series("cache_leak");
    let r = diff_json(&named, &["--by", "type", "--limit", "0"]);
    let groups = r["groups"].as_array().unwrap();
    let entry = groups.iter().find(|g| g["name"] == "Cache_leak.entry").unwrap_or_else(|| panic!("no Cache_leak.entry group: {r:#}"));
    // Each snapshot's count is what `top --by type` says of it.
    let counts: Vec<u64> = named
        .iter()
        .map(|s| {
            let out = Command::new(heapsnap()).arg("top").arg(s).args(["--by", "type", "--limit", "0", "--json"]).output().unwrap();
            let top: Value = serde_json::from_slice(&out.stdout).unwrap();
            top["groups"].as_array().unwrap().iter().find(|g| g["name"] == "Cache_leak.entry").unwrap()["count"].as_u64().unwrap()
        })
        .collect();
    assert!(counts.windows(2).all(|w| w[1] > w[0]), "{counts:?}");
    let per_snapshot: Vec<u64> = entry["count"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    assert_eq!(per_snapshot, counts, "{entry:#}");
    let suspect = r["suspects"].as_array().unwrap().iter().find(|s| s["name"] == "Cache_leak.entry");
    let suspect = suspect.unwrap_or_else(|| panic!("Cache_leak.entry is not a suspect: {:#}", r["suspects"]));
    let path = suspect["paths"][0]["signature"].as_str().unwrap();
    assert!(path.starts_with(&format!("Cache_leak.cache -> {TABLE} -> .data ")), "{path}");
    // Without names in every snapshot, --by type is refused.
    let out = Command::new(heapsnap()).arg("diff").args(series("cache_leak")).args(["--by", "type"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("annotate"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A snapshot whose names section does not parse counts as one without names: the diff compares
/// every snapshot by shape and says which one lacks them (else its places would match no other).
#[test]
fn a_damaged_names_section_counts_as_no_names_in_a_diff() {
    let named = named_series("cache_leak");
    let dir = tempfile::tempdir().unwrap();
    let copies: Vec<PathBuf> = named
        .iter()
        .map(|p| {
            let c = dir.path().join(p.file_name().unwrap());
            std::fs::copy(p, &c).unwrap();
            c
        })
        .collect();
    heapsnap_format::replace_ocaml_names(&copies[1], "[1,2,3]").unwrap();
    let r = diff_json(&copies, &[]);
    assert_eq!(r["ocaml_names"], false);
    let warnings = r["warnings"].to_string();
    assert!(warnings.contains(copies[1].file_name().unwrap().to_str().unwrap()), "{warnings}");
    assert!(signatures(&r).iter().any(|s| s.starts_with("Cache_leak.1 -> Hashtbl")), "{:#?}", signatures(&r));
}

/// The text `heapsnap diff` prints of `report` (as the command prints what it computed).
fn printed(paths: &[PathBuf], report: heapsnap_analyze::diff::DiffReport) -> String {
    use clap::{Args, FromArgMatches};
    use heapsnap_reports::diff::{Diff, DiffArgs, DiffOutput};
    use heapsnap_reports::Report;
    let command = DiffArgs::augment_args(clap::Command::new("diff"));
    let words = std::iter::once("diff".to_string()).chain(paths.iter().map(|p| p.display().to_string()));
    let args = DiffArgs::from_arg_matches(&command.try_get_matches_from(words).expect("diff's arguments")).expect("diff's arguments");
    let mut out = Vec::new();
    Diff::print(&args, &DiffOutput::Groups(Box::new(report)), &mut out).expect("printed");
    String::from_utf8(out).expect("UTF-8")
}

/// A diff's JSON without its timings (wall-clock seconds, and which steps ran).
fn without_timings(mut v: Value) -> Value {
    v.as_object_mut().expect("an object").remove("timings");
    v
}

/// `heapsnap diff` analyses each snapshot once, saving the diff's classification in its
/// index; with the indexes there, it only compares. Either way it prints word for word what the
/// diff that analyses every snapshot prints (text and JSON but for the timings), with and
/// without OCaml names.
#[test]
fn a_diff_over_indexes_prints_what_the_analysis_prints() {
    let dir = tempfile::tempdir().unwrap();
    for (label, series) in
        [("cache_leak", series("cache_leak")), ("named", named_series("cache_leak")), ("closures", series("closure_list"))]
    {
        // Copies without an index.
        let paths: Vec<PathBuf> = series
            .iter()
            .map(|p| {
                let copy = dir.path().join(format!("{label}-{}", p.file_name().unwrap().to_string_lossy()));
                std::fs::copy(p, &copy).expect("copy the snapshot");
                copy
            })
            .collect();
        let snaps: Vec<heapsnap_format::Snapshot> = paths.iter().map(|p| heapsnap_format::Snapshot::open(p).unwrap()).collect();
        let inputs: Vec<heapsnap_analyze::diff::Input<'_>> = paths
            .iter()
            .zip(&snaps)
            .map(|(p, s)| heapsnap_analyze::diff::Input { name: p.display().to_string(), snap: s, saved: None })
            .collect();
        // The command groups by type where every snapshot has OCaml names, else by kind.
        let by = if label == "named" { heapsnap_analyze::GroupBy::Type } else { heapsnap_analyze::GroupBy::Kind };
        let options = heapsnap_analyze::diff::DiffOptions { by, ..Default::default() };
        let analysed = heapsnap_analyze::diff::diff(&inputs, &options, &heapsnap_analyze::Progress::hidden()).unwrap();
        let analysed_json = without_timings(serde_json::to_value(&analysed).unwrap());
        let analysed_text = printed(&paths, analysed);
        assert!(analysed_text.contains(&format!("Leak suspects: groups by {}", by.name())), "{label}: {analysed_text}");

        let run = |json: bool| {
            let mut c = Command::new(heapsnap());
            c.arg("diff").args(&paths).env("HEAPSNAP_TRACE", "1").env("HEAPSNAP_INDEX_IN_BACKGROUND", "0");
            if json {
                c.arg("--json");
            }
            let out = c.output().expect("run heapsnap diff");
            assert!(out.status.success(), "{label}: {}", String::from_utf8_lossy(&out.stderr));
            let analyses = String::from_utf8_lossy(&out.stderr).matches("graph: edges at").count();
            (String::from_utf8(out.stdout).unwrap(), analyses)
        };
        let (first, analyses) = run(false);
        assert_eq!(analyses, 3, "{label}: the first diff analyses each snapshot once");
        assert!(paths.iter().all(|p| heapsnap_index::store::beside(p).exists()), "{label}: the first diff saved the indexes");
        assert_eq!(first, analysed_text, "{label}: the first diff");
        let (second, analyses) = run(false);
        assert_eq!(analyses, 0, "{label}: with the indexes there, the diff only compares");
        assert_eq!(second, analysed_text, "{label}: the diff over indexes");
        let (json, analyses) = run(true);
        assert_eq!(analyses, 0);
        let json: Value = serde_json::from_str(&json).unwrap();
        let read =
            json["timings"].as_array().unwrap().iter().filter(|t| t["step"].as_str().unwrap().ends_with("read from the index")).count();
        assert_eq!(read, 3, "{label}: {json:#}");
        assert_eq!(without_timings(json), analysed_json, "{label}: the JSON of the diff over indexes");
    }
}
