//! OCaml names of installed libraries (issue 17). memtrace/scripts/build-ocaml-programs.sh
//! installs memtrace as `ocamlfind install` would, its `.cmt` files only in `lib/memtrace/`,
//! and links a sample with it. `heapsnap annotate` with no `--cmt` names memtrace's units
//! through `ocamlfind printconf path`; a `.cmt` of the same unit compiled elsewhere, found
//! first, is refused rather than trusted.

use crate::dump_support::*;
use heapsnap_format::{RootKind, Snapshot};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// memtrace's units that the sample links.
const MEMTRACE_UNITS: [&str; 3] = ["Trace", "Memprof_tracer", "Memtrace"];

/// A stand-in for `ocamlfind` (findlib is not built here), answering the two calls heapsnap
/// makes: `printconf path` prints `path`; `ocamlopt ARGS` runs the toolchain's ocamlopt with
/// findlib's `-package compiler-libs.common -linkpkg` turned into what it means.
fn fake_ocamlfind(dir: &Path, path: &[&Path], prefix: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let lines: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
    let script = format!(
        r#"#!/usr/bin/env bash
case "$1" in
  printconf) [ "$2" = path ] && printf '%s\n' {lines}; exit 0 ;;
  ocamlopt)
    shift; args=()
    while [ $# -gt 0 ]; do
      case "$1" in
        -package) shift; [ "$1" = compiler-libs.common ] && args+=(-I +compiler-libs ocamlcommon.cmxa) ;;
        -linkpkg) ;;
        *) args+=("$1") ;;
      esac
      shift
    done
    exec {ocamlopt} "${{args[@]}}" ;;
esac
exit 2
"#,
        lines = lines.iter().map(|l| format!("'{l}'")).collect::<Vec<_>>().join(" "),
        ocamlopt = prefix.join("bin/ocamlopt").display()
    );
    let exe = bin.join("ocamlfind");
    std::fs::write(&exe, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `heapsnap annotate SNAP ARGS` with `PATH` starting at `path_first` (when given), the reader
/// cached under `cache`, and no `OCAMLPATH` or opam switch from the environment.
fn annotate(snap: &Path, args: &[&str], path_first: Option<&Path>, cache: &Path) -> (serde_json::Value, String) {
    let mut cmd = Command::new(heapsnap());
    cmd.arg("annotate").arg(snap).args(args).arg("--json");
    cmd.env("XDG_CACHE_HOME", cache).env_remove("OCAMLPATH").env_remove("OPAM_SWITCH_PREFIX");
    if let Some(first) = path_first {
        let path =
            std::env::join_paths(std::iter::once(first.to_path_buf()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())));
        cmd.env("PATH", path.unwrap());
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "annotate failed: {stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

/// The units whose module-block fields the snapshot's names name.
fn named_units(snap: &Path) -> BTreeSet<String> {
    let snap = Snapshot::open(snap).unwrap();
    let names = heapsnap_analyze::Names::new(&snap);
    let mut units = BTreeSet::new();
    for r in snap.roots().iter().filter(|r| r.root_kind() == RootKind::Global) {
        let Some(symbol) = snap.string(r.name) else { continue };
        if names.global_field(symbol, r.origin).is_some() {
            units.insert(symbol.trim_start_matches("caml").to_string());
        }
    }
    units
}

#[test]
fn installed_libraries_are_named_through_ocamlfind_and_foreign_ones_refused() {
    let _one = one_core_at_a_time();
    let Some(programs) = memtrace_programs() else { return };
    let prefix = toolchain_prefix("5.3.0");
    let dir = tempfile::tempdir().unwrap();
    let (snap, cache) = (dir.path().join("m.heapsnap"), dir.path().join("cache"));
    let env = [("MEMTRACE", dir.path().join("m.ctf").into_os_string())];
    let env: Vec<(&str, &std::ffi::OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let mut sample = Sample::start_with_env(&programs.join("alloc_sites_memtrace"), &["200", "--steps", "1"], &env);
    sample.wait_ready(1);
    dump_ok(sample.pid(), &snap, &[]);
    let (_, status) = sample.finish();
    assert!(status.success());

    // The toolchain alone: the standard library's units are named, memtrace's are not.
    let (plain, _) = annotate(&snap, &["--ocaml", prefix.to_str().unwrap()], None, &cache);
    let units = named_units(&snap);
    assert!(units.contains("Stdlib__Hashtbl"), "{units:?}");
    assert!(MEMTRACE_UNITS.iter().all(|u| !units.contains(*u)), "memtrace's .cmt files are only in its lib/: {units:?}");

    // Through ocamlfind (no --ocaml, no --cmt): memtrace's units too.
    let lib = programs.join("lib");
    let bin = fake_ocamlfind(&dir.path().join("findlib"), &[&lib], &prefix);
    let (found, _) = annotate(&snap, &[], Some(&bin), &cache);
    let units = named_units(&snap);
    assert!(MEMTRACE_UNITS.iter().all(|u| units.contains(*u)), "{units:?}");
    assert!(found["units"].as_u64() > plain["units"].as_u64(), "{found} vs {plain}");

    // Another build of memtrace's Trace (the same source compiled elsewhere: as many fields),
    // earlier on ocamlfind's path: refused for not being the executable's, not trusted; the
    // executable's own, found after it, is the one named (and said so).
    let other = dir.path().join("other/memtrace");
    std::fs::create_dir_all(&other).unwrap();
    for f in ["trace.ml", "trace.mli"] {
        std::fs::copy(programs.join("build/src").join(f), other.join(f)).unwrap();
    }
    let include = lib.join("memtrace");
    for args in [
        &["-bin-annot", "-I", "+unix", "-I", include.to_str().unwrap(), "-c", "trace.mli"][..],
        &["-bin-annot", "-I", "+unix", "-I", include.to_str().unwrap(), "-c", "trace.ml"],
    ] {
        let ok = Command::new(prefix.join("bin/ocamlopt")).args(args).current_dir(&other).status().unwrap();
        assert!(ok.success());
    }
    let bin = fake_ocamlfind(&dir.path().join("findlib2"), &[&dir.path().join("other"), &lib], &prefix);
    let (_, stderr) = annotate(&snap, &[], Some(&bin), &cache);
    let foreign = format!("{}: Trace: compiled from another source than the executable's", other.join("trace.cmt").display());
    assert!(stderr.contains(&foreign), "{stderr}");
    let chosen = format!(
        "Trace: {}: of 3 candidates, the one compiled from the source file the executable names",
        include.join("trace.cmt").display()
    );
    assert!(stderr.contains(&chosen), "{stderr}");
    let units = named_units(&snap);
    assert!(units.contains("Trace") && units.contains("Memprof_tracer"), "{units:?}");
}
