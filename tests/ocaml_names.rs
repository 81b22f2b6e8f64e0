//! OCaml names from `.cmt` files (issue 17): the reader heapsnap builds with each toolchain
//! numbers module-block fields as the native compiler does, `dump` and `annotate` store the
//! names, every report names globals by identifier, and bad inputs are refused with a message.

mod dump_support;

use dump_support::*;
use heapsnap_format::{RootKind, Snapshot};
use heapsnap_names::reader::{run_reader, Toolchain};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The 5.x toolchains whose samples are built here.
fn toolchains() -> Vec<(&'static str, PathBuf)> {
    available_toolchains().into_iter().filter(|(t, _)| !t.contains("rhb16")).collect()
}

fn build_dir(samples: &Path) -> PathBuf {
    samples.parent().unwrap().join(".build").join(samples.file_name().unwrap())
}

/// `ocamlopt -dlambda`'s stores into the module block: field -> identifier (what
/// samples/module-fields.sh prints, for any source file).
fn lambda_fields(prefix: &Path, dir: &Path, source: &Path, includes: &[&str]) -> BTreeMap<u64, String> {
    let out = Command::new(prefix.join("bin/ocamlopt"))
        .args(includes.iter().flat_map(|i| ["-I", i]))
        .args(["-dlambda", "-bin-annot", "-c"])
        .arg(source)
        .current_dir(dir)
        .output()
        .expect("run ocamlopt");
    assert!(out.status.success(), "ocamlopt: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stderr).replace('\n', " ");
    let mut fields = BTreeMap::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("setfield_ptr(root-init) ") {
        rest = &rest[at + "setfield_ptr(root-init) ".len()..];
        let mut words = rest.split_whitespace();
        let (Some(field), Some(_global), Some(_module), Some(ident)) = (words.next(), words.next(), words.next(), words.next()) else {
            continue;
        };
        if let (Ok(n), Some(id)) = (field.parse::<u64>(), ident.split('/').next()) {
            if ident.contains('/') {
                fields.insert(n, id.to_string());
            }
        }
    }
    fields
}

fn reader_units(prefix: &Path, files: &[PathBuf]) -> serde_json::Value {
    let tc = Toolchain::find(Some(prefix)).expect("toolchain");
    let exe = tc.reader(&|m| eprintln!("{m}")).expect("build the reader");
    serde_json::from_str(&run_reader(&exe, files).expect("run the reader")).expect("JSON")
}

fn field_names(unit: &serde_json::Value) -> Vec<String> {
    unit["fields"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_string()).collect()
}

/// Every sample, on every 5.x toolchain: the reader's field of each identifier is the one
/// `samples/module-fields.sh` finds in the compiler's own lambda code.
#[test]
fn every_samples_fields_are_numbered_as_the_compiler_does() {
    for (toolchain, samples) in toolchains() {
        // The samples build.sh built (memtrace_sample needs a library it does not build).
        let mut built: Vec<String> = std::fs::read_dir(&samples)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().replace(".cmxs", ""))
            .filter(|n| !n.starts_with('.'))
            .collect();
        built.sort();
        let out = Command::new("bash")
            .arg(repo().join("samples/module-fields.sh"))
            .arg(toolchain)
            .args(&built)
            .output()
            .expect("module-fields.sh");
        assert!(out.status.success(), "module-fields.sh {toolchain}: {}", String::from_utf8_lossy(&out.stderr));
        let mut expected: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            expected.entry(w[0].trim_start_matches("caml").to_string()).or_default().insert(w[1].parse().unwrap(), w[2].to_string());
        }
        let build = build_dir(&samples);
        let files: Vec<PathBuf> = expected.keys().map(|u| build.join(format!("{}.cmt", u.to_lowercase()))).collect();
        let doc = reader_units(&toolchain_prefix(toolchain), &files);
        assert_eq!(doc["errors"].as_array().unwrap().len(), 0, "{toolchain}: {}", doc["errors"]);
        let mut compared = 0;
        for unit in doc["units"].as_array().unwrap() {
            let name = unit["unit"].as_str().unwrap();
            let names = field_names(unit);
            for (field, ident) in &expected[name] {
                assert_eq!(names.get(*field), Some(ident), "{toolchain}: {name} field {field}: {names:?}");
                compared += 1;
            }
        }
        assert!(compared > 40, "{toolchain}: only {compared} fields compared");
    }
}

/// What moves fields around in Translmod: an interface (exported fields first, in its order),
/// shadowing, `open struct`, `include struct`, an `external` exported as a value, submodules,
/// exceptions and classes. Compared with the compiler's lambda code on every toolchain.
#[test]
fn interfaces_and_shadowing_number_fields_as_the_compiler_does() {
    let ml = r#"
let first = ref 1
let hidden = Array.make 3 0
let first = (ref 2, "shadows")
open struct let opened = ref "open" end
include struct let included = Some 4 let also = [5] end
external ident : 'a -> 'a = "%identity"
exception Oops of string
module Sub = struct let inner = ref 3.0 let inner2 = Bytes.create 3 end
class counter = object val mutable n = 0 method incr = n <- n + 1 end
let last = lazy (ident opened)
"#;
    let mli = r#"
val last : string ref lazy_t
val ident : 'a -> 'a
module Sub : sig val inner2 : bytes val inner : float ref end
val first : int ref * string
exception Oops of string
class counter : object method incr : unit end
val also : int list
"#;
    for (toolchain, _) in toolchains() {
        let prefix = toolchain_prefix(toolchain);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("layout.ml"), ml).unwrap();
        std::fs::write(dir.path().join("layout.mli"), mli).unwrap();
        let ok =
            Command::new(prefix.join("bin/ocamlopt")).args(["-bin-annot", "-c", "layout.mli"]).current_dir(dir.path()).status().unwrap();
        assert!(ok.success());
        let expected = lambda_fields(&prefix, dir.path(), Path::new("layout.ml"), &[]);
        let doc = reader_units(&prefix, &[dir.path().join("layout.cmt")]);
        let unit = &doc["units"][0];
        assert_eq!(unit["interface"], true);
        let names = field_names(unit);
        assert!(expected.len() >= 10, "{toolchain}: {expected:?}");
        for (field, ident) in &expected {
            assert_eq!(names.get(*field as usize), Some(ident), "{toolchain}: field {field}: {names:?} vs {expected:?}");
        }
        // The exported ones first, in the interface's order.
        assert_eq!(&names[..2], ["last", "ident"], "{toolchain}");
        // The same without the interface: the last `first` is exported, the shadowed one not.
        std::fs::remove_file(dir.path().join("layout.mli")).unwrap();
        std::fs::remove_file(dir.path().join("layout.cmi")).unwrap();
        std::fs::remove_file(dir.path().join("layout.cmti")).unwrap();
        let expected = lambda_fields(&prefix, dir.path(), Path::new("layout.ml"), &[]);
        let doc = reader_units(&prefix, &[dir.path().join("layout.cmt")]);
        let names = field_names(&doc["units"][0]);
        for (field, ident) in &expected {
            assert_eq!(names.get(*field as usize), Some(ident), "{toolchain} (no mli): field {field}: {names:?} vs {expected:?}");
        }
    }
}

/// `dump` of a running sample with `--cmt`: the snapshot carries names, and every report names
/// the global by its identifier; the module block of every unit has as many fields as named.
#[test]
fn dump_stores_names_and_reports_use_them() {
    for (toolchain, samples) in toolchains() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Sample::start(&samples.join("cache_leak"), &[]);
        s.wait_ready(1);
        let snap_path = dir.path().join("c.heapsnap");
        let prefix = toolchain_prefix(toolchain);
        let build = build_dir(&samples);
        dump_ok(s.pid(), &snap_path, &["--ocaml", prefix.to_str().unwrap(), "--cmt", build.to_str().unwrap()]);
        drop(s);
        let snap = Snapshot::open(&snap_path).unwrap();
        let names = heapsnap_analyze::names::Names::new(&snap);
        let ocaml = names.ocaml().expect("the snapshot has names");
        let (units, _) = ocaml.counts();
        assert!(units > 10, "{toolchain}: {units} units");
        let mut labels = Vec::new();
        for r in snap.roots().iter().filter(|r| r.root_kind() == RootKind::Global) {
            labels.push(names.root_label(r));
        }
        assert!(labels.contains(&"Cache_leak.cache".to_string()), "{toolchain}: {labels:?}");
        assert!(!labels.iter().any(|l| l.starts_with("Cache_leak.") && l[11..].parse::<u64>().is_ok()), "{toolchain}: {labels:?}");
        let top = analyse("top", &[&snap_path], &["--by", "root", "--limit", "3"]);
        assert_eq!(top["groups"][0]["name"], "Cache_leak.cache", "{toolchain}: {top}");
        let info = Command::new(heapsnap()).arg("info").arg(&snap_path).output().unwrap();
        assert!(String::from_utf8_lossy(&info.stdout).contains("ocaml names     "), "{toolchain}");
    }
}
