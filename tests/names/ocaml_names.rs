//! OCaml names from `.cmt` files (issue 17): the reader heapsnap builds with each toolchain
//! numbers module-block fields as the native compiler does, `dump` and `annotate` store the
//! names, every report names globals by identifier, and bad inputs are refused with a message.

use crate::dump_support::*;
use heapsnap_format::{RootKind, Snapshot};
use heapsnap_names::reader::{run_reader, Toolchain};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The toolchains whose samples are built here, one per OCaml release (4.14 and 5.x: the
/// reserved-bits builds compile alike).
fn toolchains() -> Vec<(&'static str, PathBuf)> {
    available_toolchains_where(|t| !t.contains("rhb16"))
}

fn build_dir(samples: &Path) -> PathBuf {
    samples.parent().unwrap().join(".build").join(samples.file_name().unwrap()).join("cmt")
}

/// `ocamlopt -dlambda`'s stores into the module block: field -> identifier, and the block's
/// size from `-dcmm` (what samples/module-fields.sh prints, for any source file).
fn lambda_fields(prefix: &Path, dir: &Path, source: &Path, includes: &[&str]) -> (BTreeMap<u64, String>, usize) {
    let out = Command::new(prefix.join("bin/ocamlopt"))
        .args(includes.iter().flat_map(|i| ["-I", i]))
        .args(["-dlambda", "-dcmm", "-bin-annot", "-c"])
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
    // The module block's data: `int HEADER [global "camlUnit"] "camlUnit":`.
    let stem = source.file_stem().unwrap().to_string_lossy();
    let symbol = format!("\"caml{}{}\":", stem[..1].to_uppercase(), &stem[1..]);
    let at = text.find(&symbol).expect("the module block in -dcmm");
    let words: Vec<&str> = text[..at].split_whitespace().collect();
    let header = words.iter().rposition(|w| *w == "int").and_then(|i| words[i + 1].parse::<u64>().ok()).expect("its header");
    (fields, (header >> 10) as usize)
}

fn reader_units(prefix: &Path, files: &[PathBuf]) -> serde_json::Value {
    let tc = Toolchain::find(Some(prefix)).expect("toolchain");
    let exe = tc.reader(&|m| eprintln!("{m}")).expect("build the reader");
    serde_json::from_str(&run_reader(&exe, files).expect("run the reader")).expect("JSON")
}

fn field_names(unit: &serde_json::Value) -> Vec<String> {
    unit["fields"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_string()).collect()
}

/// Every sample, on OCaml 4.14 and every 5.x toolchain: the reader's field of each identifier
/// is the one `samples/module-fields.sh` finds in the compiler's own lambda code, and the
/// reader has as many fields as the module block (typed_values has an `include struct`,
/// whose bindings 4.14 gives no fields of their own).
#[test]
fn every_samples_fields_are_numbered_as_the_compiler_does() {
    for (toolchain, samples) in toolchains() {
        // The samples build.sh built (memtrace_sample needs a library it does not build).
        // (The bytecode builds are in a directory of their own.)
        let mut built: Vec<String> = std::fs::read_dir(&samples)
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
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
        let mut sizes: BTreeMap<String, usize> = BTreeMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let unit = w[0].trim_start_matches("caml").to_string();
            if w[1] == "size" {
                sizes.insert(unit, w[2].parse().unwrap());
            } else {
                expected.entry(unit).or_default().insert(w[1].parse().unwrap(), w[2].to_string());
            }
        }
        assert_eq!(sizes.len(), built.len(), "{toolchain}: a size per sample");
        let build = build_dir(&samples);
        let files: Vec<PathBuf> = sizes.keys().map(|u| build.join(format!("{}.cmt", u.to_lowercase()))).collect();
        let doc = reader_units(&toolchain_prefix(toolchain), &files);
        assert_eq!(doc["errors"].as_array().unwrap().len(), 0, "{toolchain}: {}", doc["errors"]);
        let mut compared = 0;
        for unit in doc["units"].as_array().unwrap() {
            let name = unit["unit"].as_str().unwrap();
            let names = field_names(unit);
            assert_eq!(names.len(), sizes[name], "{toolchain}: {name}'s module block: {names:?}");
            for (field, ident) in expected.get(name).into_iter().flatten() {
                assert_eq!(names.get(*field), Some(ident), "{toolchain}: {name} field {field}: {names:?}");
                compared += 1;
            }
        }
        assert_eq!(doc["units"].as_array().unwrap().len(), sizes.len(), "{toolchain}: a unit per sample");
        assert!(compared > 40, "{toolchain}: only {compared} fields compared");
    }
}

/// Compiles `ml` (with `mli` when given) as unit `unit` with `toolchain` and checks the reader's
/// fields against the compiler's: each field the lambda code stores an identifier into, and the
/// module block's size. Returns the reader's field names.
fn compare_with_lambda(toolchain: &str, unit: &str, ml: &str, mli: Option<&str>) -> Vec<String> {
    let prefix = toolchain_prefix(toolchain);
    let dir = tempfile::tempdir().unwrap();
    let source = format!("{unit}.ml");
    std::fs::write(dir.path().join(&source), ml).unwrap();
    if let Some(mli) = mli {
        std::fs::write(dir.path().join(format!("{unit}.mli")), mli).unwrap();
        let ok = Command::new(prefix.join("bin/ocamlopt"))
            .args(["-bin-annot", "-c", &format!("{unit}.mli")])
            .current_dir(dir.path())
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let (expected, size) = lambda_fields(&prefix, dir.path(), Path::new(&source), &[]);
    let doc = reader_units(&prefix, &[dir.path().join(format!("{unit}.cmt"))]);
    let what = format!("{toolchain} {unit}{}", if mli.is_some() { "" } else { " (no mli)" });
    assert_eq!(doc["units"][0]["interface"], mli.is_some(), "{what}");
    let names = field_names(&doc["units"][0]);
    assert!(expected.len() >= 8, "{what}: {expected:?}");
    for (field, ident) in &expected {
        assert_eq!(names.get(*field as usize), Some(ident), "{what}: field {field}: {names:?} vs {expected:?}");
    }
    assert_eq!(names.len(), size, "{what}: the module block has {size} fields: {names:?}");
    names
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
    let mut sizes = BTreeMap::new();
    for (toolchain, _) in toolchains() {
        let names = compare_with_lambda(toolchain, "layout", ml, Some(mli));
        // The exported ones first, in the interface's order.
        assert_eq!(&names[..2], ["last", "ident"], "{toolchain}");
        // The `include struct`'s bindings: copied into the unit's own fields everywhere, and
        // given fields of their own too (after Sub's) since OCaml 5.1, not by 4.14.
        let copies = names.iter().filter(|n| *n == "included").count();
        assert_eq!(copies, if toolchain.starts_with("4.") { 1 } else { 2 }, "{toolchain}: {names:?}");
        sizes.insert(version_of(toolchain).to_string(), names.len());
        // The same without the interface: the last `first` is exported, the shadowed one not.
        compare_with_lambda(toolchain, "layout", ml, None);
    }
    if let (Some(old), Some(new)) = (sizes.get("4.14.0"), sizes.get("5.3.0")) {
        assert_eq!(old + 2, *new, "4.14 and 5.3 lay this unit out differently: {sizes:?}");
    }
}

/// Immediate objects and classes at a unit's top level, with method calls by name in methods,
/// in an object built inside another object's instance variable, and in an initializer: the
/// calls that Translobj caches give the unit one more field, the method cache, at the end of
/// its block (an object nested in another object's `val` caches them too, though no function
/// is in sight). Compared with the compiler's lambda code on every toolchain.
#[test]
fn immediate_objects_and_method_caches_number_fields_as_the_compiler_does() {
    let nested = r#"
let third = object method name = "third" end
let a = object
  val v = (object val w = third#name method w = w end)#w
  method v = v
end
let b = ref 1 let c = ref 2 let d = ref 3 let e = ref 4 let f = ref 5 let g = ref 6
"#;
    let plain = r#"
let counter = ref 0
let sensitiveOps = object
  method is_sensitive x = x > 0
  method check (o : < name : string >) = o#name = "x"
end
let other = object (self) val mutable n = 0 method incr = n <- n + 1; self#get method get = n end
let third = object method name = "third" end
let fourth = object initializer print_string "" end
let use () = sensitiveOps#is_sensitive 3
let b = ref 1 let c = ref 2 let d = ref 3
"#;
    let without_calls = r#"
let first = object method name = "first" end
let second = object val v = first#name method v = v end
let b = ref 1 let c = ref 2 let d = ref 3 let e = ref 4 let f = ref 5 let g = ref 6
"#;
    for (toolchain, _) in toolchains() {
        let names = compare_with_lambda(toolchain, "nested", nested, None);
        assert_eq!(names.last().map(String::as_str), Some("(method cache)"), "{toolchain}: {names:?}");
        let names = compare_with_lambda(toolchain, "plain", plain, None);
        assert_eq!(names.last().map(String::as_str), Some("(method cache)"), "{toolchain}: {names:?}");
        let names = compare_with_lambda(toolchain, "without_calls", without_calls, None);
        assert!(!names.iter().any(|n| n == "(method cache)"), "{toolchain}: {names:?}");
    }
}

/// A module alias that names what an `include` brought in and the alias shadows (`include
/// Stdune module Console = Console`, in dune's `Import` modules): the simplified signature
/// makes it present, so the module block stores the module it stands for, and an included
/// module it shadows keeps a field of its own after the exported ones. Compared with the
/// compiler's lambda code on every toolchain.
#[test]
fn aliases_to_shadowed_includes_number_fields_as_the_compiler_does() {
    let ml = r#"
module Inner = struct module C = Stdlib.Buffer let x = ref 1 end
include Inner
module C = C
module Holder = struct module D = struct let v = ref 0 end let y = ref 2 end
include Holder
module D = D
let a = ref 3
let b = ref 4
let c = ref 5
let d = ref 6
let e = ref 7
"#;
    for (toolchain, _) in toolchains() {
        let names = compare_with_lambda(toolchain, "aliases", ml, None);
        // C (the Buffer module) and D are exported in the signature's order; the included D
        // keeps a field too, after them.
        assert_eq!(&names[..6], ["Inner", "x", "C", "Holder", "y", "D"], "{toolchain}");
        assert!(names[6..].contains(&"D".to_string()), "{toolchain}: {names:?}");
    }
}

/// An `open struct` that binds a name an `include` brought in, which the interface exports
/// (dune's `Action_builder`: `include T open struct module List = Stdune.List end`, and `module
/// List : ...` in its .mli): what an `open struct` binds is hidden from the interface's
/// inclusion check, so the exported List is the included one, with no field of its own after
/// the exported ones (the reader gave it one: a field too many, the unit refused). Compared
/// with the compiler's lambda code on every toolchain.
#[test]
fn an_open_struct_shadowing_an_included_module_numbers_fields_as_the_compiler_does() {
    let ml = r#"
module T = struct
  module List = struct let find = List.find_opt let size = ref 1 end
  let a = ref 1
  let b = ref 2
end
include T
open struct
  module List = Stdlib.List
end
let c = ref (List.length [a; b])
let d = ref 4
let e = ref 5
let f = ref 6
"#;
    let mli = r#"
module List : sig val find : ('a -> bool) -> 'a list -> 'a option val size : int ref end
val a : int ref
val c : int ref
val d : int ref
val e : int ref
val f : int ref
"#;
    for (toolchain, _) in toolchains() {
        let names = compare_with_lambda(toolchain, "opened", ml, Some(mli));
        assert_eq!(&names[..6], ["List", "a", "c", "d", "e", "f"], "{toolchain}");
        assert_eq!(names.iter().filter(|n| *n == "List").count(), 2, "the exported List, and T's own: {names:?}");
    }
}

/// `include struct` and `open struct` nested in each other and in submodules, with externals,
/// submodules and exceptions inside them; `include` of a constrained structure (compiled in
/// place by 4.14 too) and of a module path; recursive modules, a functor application, extension
/// constructors. With and without an interface that exports externals as values, and one
/// through `external`.
#[test]
fn nested_open_and_include_number_fields_as_the_compiler_does() {
    let ml = r#"
external ext1 : int -> int = "%identity"
let a = ref 1
include struct
  let b = ref 2
  external ext2 : 'a -> 'a = "%identity"
  module Inner = struct let c = ref 3 include struct let c2 = ref 33 end end
  exception E1
  open struct let hid = ref 4 end
  let d = ext2 hid
end
include (struct let e = ref 5 let e2 = ref 55 external ext3 : int -> int = "%identity" end
         : sig val e : int ref val ext3 : int -> int end)
module M = struct
  include struct let f = ref 6 end
  open struct let g = ref 7 include struct let g2 = ref 77 end end
  external ext4 : int -> int = "%identity"
  let h = g
end
module P = struct let p = ref 8 end
include P
open struct
  let q = ref 9
  module Q = struct let q2 = ref 10 end
  include struct let q3 = ref 11 end
end
module rec R1 : sig val r : int ref end = struct let r = ref 12 end
and R2 : sig val r : int ref end = struct let r = ref 13 end
module F (X : sig end) = struct let fx = ref 14 end
module FA = F (struct end)
class cls = object method m = 1 end
exception E2 of int
type ext = ..
type ext += X1 | X2 of int
let i = ref ext1
let a = ref 15
"#;
    let mli = r#"
val i : (int -> int) ref
val ext2 : 'a -> 'a
external ext1 : int -> int = "%identity"
module M : sig val h : int ref val ext4 : int -> int val f : int ref end
val d : int ref
exception E1
module Inner : sig val c2 : int ref end
val e : int ref
val p : int ref
module FA : sig val fx : int ref end
class cls : object method m : int end
exception E2 of int
type ext = ..
type ext += X1 | X2 of int
val a : int ref
val ext3 : int -> int
"#;
    let mut sizes = BTreeMap::new();
    for (toolchain, _) in toolchains() {
        let with_mli = compare_with_lambda(toolchain, "nested", ml, Some(mli));
        // `external ext1` in the interface is no field; `val ext2` is one (a closure).
        assert_eq!(&with_mli[..2], ["i", "ext2"], "{toolchain}");
        let without = compare_with_lambda(toolchain, "nested", ml, None);
        sizes.insert(version_of(toolchain).to_string(), (with_mli.len(), without.len()));
    }
    // The plain `include struct`s (in Inner, in M, in M's and the unit's `open struct`) bind
    // c2, f, g2 and q3, which 5.1 and later also give fields of their own, 4.14 not. (The
    // first `include struct` hides an `open struct` from its signature, so 4.14's typing
    // constrains it, and Translmod compiles it in place as 5.x does.)
    if let (Some(old), Some(new)) = (sizes.get("4.14.0"), sizes.get("5.3.0")) {
        assert_eq!((old.0 + 4, old.1 + 4), *new, "4.14 and 5.3 lay this unit out differently: {sizes:?}");
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
        let names = heapsnap_analyze::Names::new(&snap);
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

fn heapsnap_out(args: &[&str]) -> std::process::Output {
    Command::new(heapsnap()).args(args).output().expect("run heapsnap")
}

/// A 5.3 dump of cache_leak without names (no .cmt file beside its sources).
fn unnamed_cache_leak(dir: &Path) -> PathBuf {
    let samples = toolchain_samples("5.3.0").unwrap();
    let mut s = Sample::start(&samples.join("cache_leak"), &[]);
    s.wait_ready(1);
    let path = dir.join("c.heapsnap");
    dump_ok(s.pid(), &path, &[]);
    path
}

/// Names added after the index was built are not hidden by it: annotate changes the snapshot,
/// so the index (tied to the snapshot's section table) is rebuilt with the new labels.
#[test]
fn annotating_after_indexing_shows_the_new_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = unnamed_cache_leak(dir.path());
    let p = path.to_str().unwrap();
    let info = heapsnap_out(&["info", p]);
    assert!(String::from_utf8_lossy(&info.stdout).contains("heapsnap annotate"), "info says how to add names");
    let before = analyse("top", &[&path], &["--by", "root", "--limit", "1"]);
    assert_eq!(before["groups"][0]["name"], "Cache_leak.1");
    let summary = analyse("summary", &[&path], &["--limit", "1"]);
    assert_eq!(summary["top_groups_by"], "kind", "without names, summary's groups are by kind");
    assert!(dir.path().join("c.heapsnap.hsidx").exists() || std::env::var_os("XDG_CACHE_HOME").is_some());
    let by_type = heapsnap_out(&["top", p, "--by", "type"]);
    assert!(!by_type.status.success() && String::from_utf8_lossy(&by_type.stderr).contains("heapsnap annotate"));

    let prefix = toolchain_prefix("5.3.0");
    let build = build_dir(&toolchain_samples("5.3.0").unwrap());
    let out = heapsnap_out(&["annotate", p, "--ocaml", prefix.to_str().unwrap(), "--cmt", build.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["program_units"], 2, "cache_leak and heapsnap_sample: {done}");
    let after = analyse("top", &[&path], &["--by", "root", "--limit", "1"]);
    assert_eq!(after["groups"][0]["name"], "Cache_leak.cache");
    let by_type = analyse("top", &[&path], &["--by", "type", "--limit", "1"]);
    assert_eq!(by_type["groups"][0]["name"], "(string, Cache_leak.entry) Hashtbl.t");
    // summary's largest groups speak OCaml too: they are the type groups.
    let summary = analyse("summary", &[&path], &["--limit", "3"]);
    assert_eq!(summary["top_groups_by"], "type", "{summary:#}");
    assert_eq!(summary["top_groups"][0], by_type["groups"][0], "{summary:#}");
    // The file stays owner-only.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
}

/// Bad inputs: `.cmt` files of another OCaml version, of another build of the program, corrupt
/// ones, and a toolchain of another version, are refused with a message; the snapshot still
/// analyses.
#[test]
fn bad_cmt_files_and_toolchains_are_refused_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = unnamed_cache_leak(dir.path());
    let p = path.to_str().unwrap();
    let prefix = toolchain_prefix("5.3.0");
    let ocaml = prefix.to_str().unwrap();

    // A toolchain of another version: an error, the snapshot unchanged.
    if let Some(old_samples) = toolchain_samples("5.1.0") {
        let old_prefix = toolchain_prefix("5.1.0");
        let out = heapsnap_out(&["annotate", p, "--ocaml", old_prefix.to_str().unwrap(), "--json"]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is 5.1.0") && err.contains("OCaml 5.3.0") && err.contains("--ocaml DIR"), "{err}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["error"]["kind"], "names");

        // .cmt files of another version: left out, with a message.
        let other = build_dir(&old_samples);
        let out = heapsnap_out(&["annotate", p, "--ocaml", ocaml, "--cmt", other.to_str().unwrap()]);
        assert!(out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cache_leak.cmt: not readable by OCaml 5.3.0"), "{err}");
        let top = analyse("top", &[&path], &["--by", "root", "--limit", "1"]);
        assert_eq!(top["groups"][0]["name"], "Cache_leak.1", "no names from another version's .cmt");
    }

    // Another build of the program: a cache_leak.ml with one more global.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("cache_leak.ml"), "let a = ref 1\nlet b = ref 2\nlet c = ref 3\nlet d = ref 4\nlet e = ref 5\n").unwrap();
    let ok = Command::new(prefix.join("bin/ocamlopt")).args(["-bin-annot", "-c", "cache_leak.ml"]).current_dir(&other).status().unwrap();
    assert!(ok.success());
    let out = heapsnap_out(&["annotate", p, "--ocaml", ocaml, "--cmt", other.to_str().unwrap()]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Cache_leak has 5 module fields here but 4 in the snapshot"), "{err}");
    let info = heapsnap_out(&["info", p]);
    assert!(String::from_utf8_lossy(&info.stdout).contains("left out"), "info lists what was left out");

    // Another build with as many fields, two of them in the other order: the sizes agree, so
    // only the heap tells that `next_id` (an `int ref`) holds the table and `cache` the ref.
    // The unit loses its field names (numbered, as without names) rather than keep wrong ones,
    // and `info` says why.
    let swapped = dir.path().join("swapped");
    std::fs::create_dir(&swapped).unwrap();
    let source = "let payload_bytes = 1000\nlet next_id = ref 0\nlet cache : (string, int) Hashtbl.t = Hashtbl.create 16\nlet lookup k = Hashtbl.find cache k + !next_id\n";
    std::fs::write(swapped.join("cache_leak.ml"), source).unwrap();
    let ok = Command::new(prefix.join("bin/ocamlopt")).args(["-bin-annot", "-c", "cache_leak.ml"]).current_dir(&swapped).status().unwrap();
    assert!(ok.success());
    let out = heapsnap_out(&["annotate", p, "--ocaml", ocaml, "--cmt", swapped.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Cache_leak: the snapshot contradicts these names (field 1 `next_id` should hold a block of tag 0 and 1 fields but holds a block of tag 0 and 4 fields, and 1 more)"),
        "{err}"
    );
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The standard library's units (their module blocks checked too) keep their names; the
    // program's, cache_leak (contradicted) and heapsnap_sample (not in that directory), do not.
    assert_eq!(done["program_units"], 0, "{done}");
    assert_eq!(done["units"].as_u64().unwrap() + 2, done["snapshot_units"].as_u64().unwrap(), "{done}");
    let top = analyse("top", &[&path], &["--by", "root", "--limit", "1"]);
    assert_eq!(top["groups"][0]["name"], "Cache_leak.1", "the table's field is numbered, not named `next_id`");
    let info = String::from_utf8_lossy(&heapsnap_out(&["info", p]).stdout).to_string();
    assert!(info.contains("the snapshot contradicts these names"), "{info}");

    // A corrupt .cmt: a message, never a crash; the analysis goes on.
    let corrupt = dir.path().join("corrupt");
    std::fs::create_dir(&corrupt).unwrap();
    let mut bytes = std::fs::read(build_dir(&toolchain_samples("5.3.0").unwrap()).join("cache_leak.cmt")).unwrap();
    let half = bytes.len() / 2;
    bytes.truncate(half);
    std::fs::write(corrupt.join("cache_leak.cmt"), &bytes).unwrap();
    let out = heapsnap_out(&["annotate", p, "--ocaml", ocaml, "--cmt", corrupt.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cache_leak.cmt:"), "{}", String::from_utf8_lossy(&out.stderr));
    analyse("top", &[&path], &["--by", "type"]);
    analyse("dominators", &[&path], &[]);
}

/// A damaged names section (hostile JSON) reads as no names: every report works, info says so.
#[test]
fn a_damaged_names_section_reads_as_no_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = unnamed_cache_leak(dir.path());
    for junk in ["{\"units\": [{\"unit\": 5}]", "[1,2,3]", "{\"units\":[{\"unit\":\"Cache_leak\",\"fields\":[{\"name\":\"x\",\"path\":\"x\",\"type\":{\"c\":\"Cache_leak.t\",\"a\":[{\"v\":1}]}}],\"types\":[{\"path\":\"Cache_leak.t\",\"params\":[1,1,1],\"manifest\":{\"c\":\"Cache_leak.t\",\"a\":[{\"c\":\"Cache_leak.t\",\"a\":[]}]},\"kind\":\"abstract\"}],\"modules\":[{\"path\":\"Cache_leak.M\",\"alias\":\"Cache_leak.M\"}]}]}"] {
        heapsnap_format::replace_ocaml_names(&path, junk).unwrap();
        let info = heapsnap_out(&["info", path.to_str().unwrap()]);
        assert!(info.status.success());
        analyse("top", &[&path], &["--by", "root"]);
        analyse("dominators", &[&path], &[]);
        let out = heapsnap_out(&["top", path.to_str().unwrap(), "--by", "type"]);
        assert!(out.status.code() == Some(0) || out.status.code() == Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// OCaml 4.14 programs get names too, with both 4.14 toolchains (the reserved-bits build's
/// reader is its own): `annotate` of a 4.14 snapshot names every unit, the `include struct`
/// binding and the submodule's (whose fields 4.14 numbers unlike 5.x) among them, and the
/// reports use them. A 5.x toolchain is refused for it, the snapshot unchanged.
#[test]
fn ocaml_4_14_programs_get_names() {
    for toolchain in ["4.14.0", "4.14.0-rhb16"] {
        let Some(samples) = toolchain_samples(toolchain) else { continue };
        let dir = tempfile::tempdir().unwrap();
        let mut sample = Sample::start(&samples.join("typed_values"), &[]);
        sample.wait_ready(1);
        let snap = dir.path().join("t.snap");
        dump_ok(sample.pid(), &snap, &[]);
        drop(sample);
        let p = snap.to_str().unwrap();
        assert!(Snapshot::open(&snap).unwrap().ocaml_names().is_none(), "{toolchain}: no .cmt beside the sources");

        let other = toolchain_prefix("5.3.0");
        let out = heapsnap_out(&["annotate", p, "--ocaml", other.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("is 5.3.0") && err.contains("OCaml 4.14.0"), "{toolchain}: {err}");
        assert!(Snapshot::open(&snap).unwrap().ocaml_names().is_none(), "{toolchain}: the snapshot was changed");

        let prefix = toolchain_prefix(toolchain);
        let build = build_dir(&samples);
        let out = heapsnap_out(&["annotate", p, "--ocaml", prefix.to_str().unwrap(), "--cmt", build.to_str().unwrap(), "--json"]);
        assert!(out.status.success(), "{toolchain}: {}", String::from_utf8_lossy(&out.stderr));
        let done: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(done["program_units"], 2, "{toolchain}: typed_values and heapsnap_sample: {done}");
        assert_eq!(done["refused"], serde_json::json!([]), "{toolchain}: every unit's fields fit its module block: {done}");
        assert_eq!(done["units"], done["snapshot_units"], "{toolchain}: {done}");

        let snapshot = Snapshot::open(&snap).unwrap();
        let names = heapsnap_analyze::Names::new(&snapshot);
        let labels: Vec<String> =
            snapshot.roots().iter().filter(|r| r.root_kind() == RootKind::Global).map(|r| names.root_label(r)).collect();
        let ours: Vec<&String> = labels.iter().filter(|l| l.starts_with("Typed_values.")).collect();
        for global in ["Typed_values.stbl", "Typed_values.tags", "Typed_values.Registry.entries", "Typed_values.(method cache)"] {
            assert!(ours.iter().any(|l| *l == global), "{toolchain}: {global} not in {ours:?}");
        }
        assert!(!labels.iter().any(|l| l.rsplit('.').next().is_some_and(|f| f.parse::<u64>().is_ok())), "{toolchain}: a numbered global");
        let top = analyse("top", &[&snap], &["--by", "root", "--limit", "0"]);
        let groups: Vec<&str> = top["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
        assert!(groups.contains(&"Typed_values.stbl") && groups.contains(&"Typed_values.tags"), "{toolchain}: top --by root");
        let by_type = analyse("top", &[&snap], &["--by", "type", "--limit", "0"]);
        let types: Vec<&str> = by_type["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
        assert!(
            types.contains(&"(string, Typed_values.point) Hashtbl.t") && types.contains(&"(int * string) list ref"),
            "{toolchain}: {types:?}"
        );
    }
}
