//! Names you can trust (issue 53): a unit's interface found wherever the build put it (dune's
//! `byte/` beside `native/`), checked by its CRC; a unit whose interface is nowhere left unnamed
//! rather than named in the wrong order; and the names oracle (scripts/names-oracle.sh), which
//! compiles units again with `-drawlambda`, run on the OCaml compiler's own units.

use crate::dump_support::*;
use heapsnap_names::oracle::Oracle;
use heapsnap_names::reader::{run_reader, Toolchain};
use std::path::{Path, PathBuf};
use std::process::Command;

fn ocamlopt(prefix: &Path, dir: &Path, args: &[&str]) {
    let out = Command::new(prefix.join("bin/ocamlopt")).args(args).current_dir(dir).output().expect("run ocamlopt");
    assert!(out.status.success(), "ocamlopt {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn reader_json(prefix: &Path, file: &Path) -> serde_json::Value {
    let tc = Toolchain::find(Some(prefix)).expect("toolchain");
    let exe = tc.reader(&|m| eprintln!("{m}")).expect("build the reader");
    serde_json::from_str(&run_reader(&exe, &[file.to_path_buf()]).expect("run the reader")).expect("JSON")
}

fn names(unit: &serde_json::Value) -> Vec<String> {
    unit["fields"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_string()).collect()
}

const ML: &str = r#"
let algo = ref "lr1"
let reductions = Array.make 4 []
let transitions = Hashtbl.create 16
let start2item = fun x -> x + 1
module Node = struct let count = ref 0 end
let hidden = ref 0.5
let last = (ref 1, "last")
"#;
const MLI: &str = r#"
module Node : sig val count : int ref end
val last : int ref * string
val start2item : int -> int
val transitions : (string, int) Hashtbl.t
val reductions : int list array
val algo : string ref
"#;
/// Another interface of a unit of the same name (another program's, or a stale build's): the
/// same items in another order, so a different CRC.
const OTHER_MLI: &str = r#"
val algo : string ref
val reductions : int list array
val transitions : (string, int) Hashtbl.t
val start2item : int -> int
val last : int ref * string
module Node : sig val count : int ref end
"#;

/// Builds `lr1.ml` against `lr1.mli` as dune does with `-bin-annot` for a native executable: the
/// implementation's `.cmt` in `native/`, the interface's `.cmi` and `.cmti` in `byte/`, and a
/// decoy `.cmi` of another interface beside the `.cmt`. Returns the `.cmt`.
fn dune_layout(prefix: &Path, dir: &Path) -> PathBuf {
    std::fs::write(dir.join("lr1.ml"), ML).unwrap();
    std::fs::write(dir.join("lr1.mli"), MLI).unwrap();
    ocamlopt(prefix, dir, &["-bin-annot", "-c", "lr1.mli"]);
    ocamlopt(prefix, dir, &["-bin-annot", "-c", "lr1.ml"]);
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("lr1.mli"), OTHER_MLI).unwrap();
    ocamlopt(prefix, &other, &["-c", "lr1.mli"]);
    for d in ["byte", "native"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    for f in ["lr1.cmi", "lr1.cmti"] {
        std::fs::rename(dir.join(f), dir.join("byte").join(f)).unwrap();
    }
    std::fs::rename(dir.join("lr1.cmt"), dir.join("native/lr1.cmt")).unwrap();
    std::fs::copy(other.join("lr1.cmi"), dir.join("native/lr1.cmi")).unwrap();
    dir.join("native/lr1.cmt")
}

/// The unit's fields are in the interface's order, found in `byte/` by its CRC past the decoy
/// beside the `.cmt`; with no interface anywhere, the unit's fields are not named at all (its
/// types still are), and the oracle says so rather than counting them right or wrong.
#[test]
fn an_interface_in_a_sibling_directory_orders_the_fields_and_a_missing_one_names_none() {
    for (toolchain, _) in available_toolchains_where(|t| !t.contains("rhb16")) {
        let prefix = toolchain_prefix(toolchain);
        let tmp = tempfile::tempdir().unwrap();
        let cmt = dune_layout(&prefix, tmp.path());
        let doc = reader_json(&prefix, &cmt);
        let unit = &doc["units"][0];
        assert_eq!(unit["interface"], true, "{toolchain}: {unit}");
        let found = unit["interface_file"].as_str().unwrap_or("");
        assert!(found.contains("/byte/lr1.cmi") || found.contains("/byte/lr1.cmti"), "{toolchain}: the interface found: {found}");
        let names = names(unit);
        assert_eq!(&names[..6], ["Node", "last", "start2item", "transitions", "reductions", "algo"], "{toolchain}: {names:?}");
        // The oracle agrees field by field (it compiles the unit again in its directory, where
        // its interface's .cmi must be: put it back there for the compiler).
        std::fs::copy(tmp.path().join("byte/lr1.cmi"), tmp.path().join("lr1.cmi")).unwrap();
        let oracle = Oracle::new(Toolchain::find(Some(&prefix)).unwrap(), Vec::new(), Vec::new(), &|_| {}).unwrap();
        let checks = oracle.check(std::slice::from_ref(&cmt), 1).unwrap();
        assert_eq!((checks[0].agreed, checks[0].wrong.len()), (names.len(), 0), "{toolchain}: {checks:?}");
        std::fs::remove_file(tmp.path().join("lr1.cmi")).unwrap();

        // No interface with the right CRC anywhere: no field named, the types kept.
        std::fs::remove_dir_all(tmp.path().join("byte")).unwrap();
        let doc = reader_json(&prefix, &cmt);
        let unit = &doc["units"][0];
        assert!(unit["fields_unknown"].as_str().is_some_and(|w| w.contains("interface")), "{toolchain}: {unit}");
        assert_eq!(unit["fields"].as_array().map(Vec::len), Some(0), "{toolchain}");
        let checks = oracle.check(std::slice::from_ref(&cmt), 1).unwrap();
        assert!(checks[0].unnamed && checks[0].wrong.is_empty(), "{toolchain}: {checks:?}");
    }
}

/// The names oracle on a real program the suite builds: the OCaml compiler, whose compiler-libs
/// units (installed with their `.cmt` files) are compiled again from the release's source (the
/// npm package the toolchain was built from) against the installed `.cmi` files. Every field
/// the compiler stores an identifier into is named as it is, in every unit compared.
#[test]
fn the_compilers_own_units_are_named_as_the_compiler_stores_them() {
    let prefix = toolchain_prefix("5.3.0");
    let libs = prefix.join("lib/ocaml/compiler-libs");
    let tmp = tempfile::tempdir().unwrap();
    let packed = Command::new("npm").args(["pack", "--silent", "ocaml@5.3.0"]).current_dir(tmp.path()).output().expect("npm");
    if !packed.status.success() {
        not_covered(&format!(
            "the compiler's units against -drawlambda: npm pack ocaml@5.3.0 failed: {}",
            String::from_utf8_lossy(&packed.stderr)
        ));
        return;
    }
    let source = tmp.path().join("source");
    std::fs::create_dir_all(&source).unwrap();
    let tarball = String::from_utf8_lossy(&packed.stdout).trim().to_string();
    let ok = Command::new("tar").args(["xzf", &tarball, "-C", "source", "--strip-components=1"]).current_dir(tmp.path()).status().unwrap();
    assert!(ok.success(), "tar");
    // The typing and lambda passes' units: interfaces, functors, first-class modules.
    let tc = Toolchain::find(Some(&prefix)).unwrap();
    let exe = tc.reader(&|_| {}).unwrap();
    let all: Vec<PathBuf> =
        std::fs::read_dir(&libs).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "cmt")).collect();
    let doc: serde_json::Value = serde_json::from_str(&run_reader(&exe, &all).unwrap()).unwrap();
    let builddir = doc["units"][0]["builddir"].as_str().expect("a builddir").to_string();
    let wanted: Vec<PathBuf> = doc["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["source"].as_str().is_some_and(|s| s.starts_with("typing/") || s.starts_with("lambda/")))
        .map(|u| PathBuf::from(u["file"].as_str().unwrap()))
        .collect();
    assert!(wanted.len() > 60, "typing/ and lambda/ units: {}", wanted.len());
    let oracle = Oracle::new(tc, vec![(PathBuf::from(builddir), source)], vec![libs.clone(), prefix.join("lib/ocaml")], &|_| {}).unwrap();
    let checks = oracle.check(&wanted, 2).unwrap();
    let wrong: Vec<String> = checks.iter().flat_map(|c| c.wrong.iter().map(move |w| format!("{}: {w}", c.unit))).collect();
    assert!(wrong.is_empty(), "fields named wrongly: {wrong:#?}");
    let compared: Vec<&str> = checks.iter().filter(|c| c.not_compared.is_none()).map(|c| c.unit.as_str()).collect();
    let agreed: usize = checks.iter().map(|c| c.agreed).sum();
    // Only generated sources (the lexer, the parser) are absent from the release's source.
    assert!(compared.len() + 3 >= wanted.len(), "compared {} of {}: {checks:#?}", compared.len(), wanted.len());
    assert!(agreed > 2500, "{agreed} fields agreed");
}
