//! Releases heapsnap has no file for, read by probing their runtime (issue 32):
//! - every sample of every known OCaml 5 toolchain read by probing alone holds the same world,
//!   word for word, as read by its release's file;
//! - every sample of an unseen runtime (OCaml's trunk of October 2024, `5.4.0-trunk` in
//!   releases.tsv) dumps by probing, with the reachability oracle and `verify --strict`;
//! - a runtime that is not what its version says is caught by the probe, naming the fact.

use crate::dump_support::*;
use std::path::{Path, PathBuf};

/// The manifest's samples for a toolchain without reserved header bits (`large_heap` is a
/// benchmark).
fn samples() -> Vec<(String, Vec<String>)> {
    manifest_samples()
        .into_iter()
        .filter(|s| s["variants"].as_array().is_some_and(|v| v.iter().any(|x| x == "std")))
        .map(|s| s["name"].as_str().expect("name").to_string())
        .filter(|name| name != "large_heap")
        .map(|name| {
            let args = manifest_args(&name);
            (name, args)
        })
        .collect()
}

/// The facts probed, by name.
fn fact<'a>(probed: &'a serde_json::Value, name: &str) -> &'a str {
    let facts = probed["facts"].as_array().expect("facts");
    let f = facts.iter().find(|f| f["fact"] == name).unwrap_or_else(|| panic!("no fact {name}: {probed}"));
    f["value"].as_str().expect("value")
}

fn by_probing_on(toolchain: &str, extra: &[&str], compare_with_release: bool) -> Vec<(String, serde_json::Value)> {
    let Some(dir) = toolchain_samples(toolchain) else { return Vec::new() };
    let samples = samples();
    assert!(samples.len() >= 13, "{samples:?}");
    let mut out = Vec::new();
    for (name, args) in samples {
        eprintln!("{toolchain}: {name}, read by probing");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let probed = check_sample_by_probing(&dir.join(&name), version_of(toolchain), &name, &args, extra, compare_with_release);
        out.push((name, probed));
    }
    out
}

fn known_release_by_probing(toolchain: &str, waste: &str, memprof: &str, tables: &str) {
    for (name, probed) in by_probing_on(toolchain, &["--read-by-probing"], true) {
        assert_eq!(fact(&probed, "where a pool's wasted words lie"), waste, "{toolchain} {name}");
        assert_eq!(fact(&probed, "statmemprof's entry tables"), memprof, "{toolchain} {name}");
        assert_eq!(fact(&probed, "stw_domains.domains"), tables, "{toolchain} {name}");
        assert_eq!(fact(&probed, "pool size"), "4096 words", "{toolchain} {name}");
        let continuation = fact(&probed, "fields of a continuation");
        let fields = if toolchain.starts_with("5.1") { "1" } else { "2" };
        assert!(continuation == "not needed" || continuation == fields, "{toolchain} {name}: {continuation}");
        if name == "effect_cont" {
            assert_eq!(continuation, fields, "{toolchain}: a suspended continuation is in effect_cont's heap");
        }
    }
}

#[test]
fn every_sample_by_probing_alone_on_5_1_and_5_2() {
    known_release_by_probing("5.1.0", "after its blocks", "false", "an array inline");
    known_release_by_probing("5.2.0", "before its blocks", "false", "an array inline");
}

#[test]
fn every_sample_by_probing_alone_on_5_3_and_with_reserved_header_bits() {
    known_release_by_probing("5.3.0", "before its blocks", "true", "a pointer to an array");
    known_release_by_probing("5.3.0-rhb16", "before its blocks", "true", "a pointer to an array");
}

/// The unseen runtime is read by probing with no flag, and nothing is guessed; a core of each
/// sample, read by probing too, holds the world its live dump holds.
#[test]
fn every_sample_of_an_unseen_runtime_is_read_by_probing() {
    for toolchain in heapsnap_testkit::samples::unseen_toolchains() {
        let read = by_probing_on(toolchain, &[], false);
        if let Some(dir) = toolchain_samples(toolchain) {
            for (name, args) in samples() {
                check_program(&name, &dir.join(&name), &args);
            }
        }
        for (name, probed) in &read {
            assert!(probed["reason"].as_str().unwrap().contains("is not a release heapsnap was tested on"), "{name}: {probed}");
        }
        if let Some((_, probed)) = read.iter().find(|(name, _)| name == "effect_cont") {
            assert_eq!(fact(probed, "fields of a continuation"), "2", "{probed}");
        }
    }
}

/// A 5.3 runtime that says it is another release heapsnap knows is refused by the probe,
/// which names the first fact that differs; the target runs on untouched.
#[test]
fn a_runtime_that_is_not_its_release_is_caught_naming_the_fact() {
    let tmp = tempfile::tempdir().unwrap();
    for (label, differs) in [("5.1.9", "size classes"), ("5.2.9", "statmemprof's entry tables")] {
        let program = relabelled(&sample_path("cache_leak"), tmp.path(), label);
        let mut sample = Sample::start(&program, &[]);
        sample.wait_ready(1);
        let out = tmp.path().join(format!("{label}.snap"));
        let o = dump(sample.pid(), &out, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && !out.exists(), "{label}: {err}");
        let series = &label[..3];
        assert!(err.contains(&format!("is not the OCaml {series} heapsnap knows: {differs}:")), "{label}: {err}");
        assert_running_untraced(sample.pid(), "after a refused dump");
        // Read by probing, it is what it is.
        let report = dump_ok(sample.pid(), &out, &["--read-by-probing"]);
        assert_eq!(fact(&report["probed"], "statmemprof's entry tables"), "true", "{report}");
        assert_eq!(verify(&out, true)["ok"], true);
        sample.release();
        sample.finish();
    }
}

/// What heapsnap must do with a sample of an altered runtime, read by the 5.3 file.
enum ByFile {
    ReadRight,
    Refused(&'static str),
}

/// What is expected of each sample of a variant.
type Expected = dyn Fn(&str) -> ByFile;

/// The runtime of 5.3.0 altered on purpose (scripts/altered-runtime.sh): each is read right
/// (the oracle and `verify --strict` pass) or refused naming the fact that differs, by the
/// release's file; by probing, each is read right. Never a snapshot that fails verification.
#[test]
fn altered_runtimes_are_read_right_or_refused_naming_the_fact() {
    let variants: [(&str, &Expected); 7] = [
        ("pool-size", &|_| ByFile::Refused("pool size")),
        ("domain-field", &|_| ByFile::ReadRight),
        // Only effect_cont has a continuation, promoted with the third field.
        ("continuation-field", &|sample| {
            if sample == "effect_cont" {
                ByFile::Refused("fields of a continuation")
            } else {
                ByFile::ReadRight
            }
        }),
        ("header-bits", &|_| ByFile::ReadRight),
        // OCaml 5.4's free slots (ocaml/ocaml#13616): every heap has free slots after its
        // full major collections, so every sample has runs.
        ("free-runs", &|_| ByFile::Refused("free pool slots")),
        // OCaml 5.4's sweep-only phase (ocaml/ocaml#13580): the samples' last compaction
        // opens a cycle, so their newer blocks are UNMARKED, which is live.
        ("mark-delay", &|_| ByFile::ReadRight),
        // OCaml 5.5's idle phase (ocaml/ocaml#14365): major slices after the compaction
        // sweep the cycle's pools and leave it idle, unmarked, when the sample is dumped.
        ("idle-phase", &|_| ByFile::ReadRight),
    ];
    let tmp = tempfile::tempdir().unwrap();
    for (variant, expected) in variants {
        let out = std::process::Command::new("bash")
            .arg(heapsnap_testkit::samples::repo().join("scripts/altered-runtime.sh"))
            .arg(variant)
            .output()
            .expect("run scripts/altered-runtime.sh");
        if out.status.code() == Some(3) {
            heapsnap_testkit::samples::not_covered("altered 5.3.0 runtimes: the 5.3.0 toolchain cannot be built here");
            return;
        }
        assert!(out.status.success(), "altered-runtime.sh {variant}: {}", String::from_utf8_lossy(&out.stderr));
        let dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        for sample_name in ["cache_leak", "effect_cont", "long_list"] {
            let what = format!("{variant} {sample_name}");
            let program = dir.join(sample_name);
            let slices: &[(&str, &std::ffi::OsStr)] =
                if variant == "idle-phase" { &[("HEAPSNAP_SAMPLE_MAJOR_SLICES", std::ffi::OsStr::new("10"))] } else { &[] };
            let (reference, _) = reference_output(&program, &[]);
            let mut sample = Sample::start_with_env(&program, &[], slices);
            sample.wait_ready(1);
            if variant == "idle-phase" {
                // The variant's enum puts Phase_idle first.
                assert_eq!(global_i32(sample.pid(), &program, "caml_gc_phase"), 0, "{what}: not dumped in the idle phase");
            }
            let by_file = tmp.path().join(format!("{variant}-{sample_name}.snap"));
            match expected(sample_name) {
                ByFile::ReadRight => {
                    let report = dump_ok(sample.pid(), &by_file, &[]);
                    assert!(report.get("probed").is_none(), "{what}: {report}");
                    let snap = heapsnap_format::Snapshot::open(&by_file).unwrap();
                    reachability(&snap).assert_exact(&what);
                    assert_eq!(verify(&by_file, true)["ok"], true, "{what}");
                    if variant == "header-bits" {
                        assert_eq!(snap.metadata().reserved_header_bits, 8, "{what}: the runtime's own header format");
                    }
                }
                ByFile::Refused(fact) => {
                    let o = dump(sample.pid(), &by_file, &[]);
                    let err = String::from_utf8_lossy(&o.stderr);
                    assert!(!o.status.success() && !by_file.exists(), "{what}: {err}");
                    assert!(err.contains(&format!("is not the OCaml 5.3 heapsnap knows: {fact}:")), "{what}: {err}");
                    assert_running_untraced(sample.pid(), &what);
                }
            }
            let by_probing = tmp.path().join(format!("{variant}-{sample_name}.probed.snap"));
            let report = dump_ok(sample.pid(), &by_probing, &["--read-by-probing"]);
            assert!(report["probed"].is_object(), "{what}: {report}");
            if variant == "pool-size" {
                assert_eq!(fact(&report["probed"], "pool size"), "8192 words", "{what}");
            }
            let runs = fact(&report["probed"], "free pool slots");
            assert_eq!(runs.starts_with("runs:"), variant == "free-runs", "{what}: {runs}");
            if variant == "continuation-field" && sample_name == "effect_cont" {
                assert_eq!(fact(&report["probed"], "fields of a continuation"), "3", "{what}");
            }
            let snap = heapsnap_format::Snapshot::open(&by_probing).unwrap();
            reachability(&snap).assert_exact(&format!("{what}, read by probing"));
            assert_eq!(verify(&by_probing, true)["ok"], true, "{what}, read by probing");
            sample.release();
            let (lines, _) = sample.finish();
            assert_eq!(lines, reference, "{what}: output changed by the dumps");
        }
    }
}

/// The value of the C global `name`, an `int`, in the running `program`: its link-time
/// address moved by the load bias the dumper computes from the process's mappings.
fn global_i32(pid: i32, program: &Path, name: &str) -> i32 {
    use heapsnap_dump::source::{parse_maps, FileIdentity};
    use std::os::unix::fs::FileExt;
    let exe = heapsnap_dump::elf::Executable::open(program).unwrap();
    let mappings = parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap());
    let bias = exe.load_bias(&mappings, &FileIdentity::of(program)).unwrap();
    let mut bytes = [0u8; 4];
    std::fs::File::open(format!("/proc/{pid}/mem")).unwrap().read_exact_at(&mut bytes, bias + exe.require(name).unwrap()).unwrap();
    i32::from_le_bytes(bytes)
}

/// The `.cmt` files of a release heapsnap has no file for are read with its own toolchain, and
/// name and type the snapshot read by probing.
#[test]
fn an_unseen_release_s_cmt_files_name_and_type_its_snapshot() {
    for toolchain in heapsnap_testkit::samples::unseen_toolchains() {
        let Some(dir) = toolchain_samples(toolchain) else { continue };
        let tmp = tempfile::tempdir().unwrap();
        let mut sample = Sample::start(&dir.join("typed_values"), &[]);
        sample.wait_ready(1);
        let path = tmp.path().join("typed.snap");
        let report = dump_ok(sample.pid(), &path, &[]);
        assert!(report["probed"].is_object(), "{report}");
        sample.release();
        sample.finish();
        // samples/build.sh keeps the .cmt files in target/samples/.build/TOOLCHAIN/cmt.
        let cmt = dir.parent().unwrap().join(".build").join(toolchain).join("cmt");
        let prefix = toolchain_prefix(toolchain);
        let out = std::process::Command::new(heapsnap())
            .arg("annotate")
            .arg(&path)
            .arg("--ocaml")
            .arg(&prefix)
            .arg("--cmt")
            .arg(&cmt)
            .arg("--json")
            .output()
            .expect("run heapsnap annotate");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let named: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(named["program_units"], 2, "{named}");
        assert_eq!(named["units"], named["snapshot_units"], "{named}");
        assert_eq!(named["refused"].as_array().map(Vec::len), Some(0), "{named}");
        let top = analyse("top", &[&path], &["--by", "type"]);
        let groups: Vec<&str> = top["groups"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str()).collect();
        assert!(groups.contains(&"Typed_values.point"), "{groups:?}");
    }
}
