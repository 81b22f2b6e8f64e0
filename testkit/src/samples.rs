//! The OCaml toolchains and the sample programs the end-to-end tests run: built by the
//! repository's scripts when missing (each takes a lock, so parallel tests wait for one build).

use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The repository's root (the workspace this crate is a member of).
pub fn repo() -> PathBuf {
    let testkit = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    testkit.parent().expect("testkit/ is a folder of the repository").to_path_buf()
}

/// Every toolchain the tests build samples with: the registry's (`releases.tsv`), one per OCaml
/// release heapsnap supports and its variants (16 reserved header bits).
pub fn toolchains() -> impl Iterator<Item = &'static str> {
    heapsnap_values::releases::registry().toolchains.iter().filter(|t| !t.unseen).map(|t| t.name.as_str())
}

/// The toolchains of releases heapsnap has no file for (`unseen` in the registry): what the
/// tests of probing dump.
pub fn unseen_toolchains() -> impl Iterator<Item = &'static str> {
    heapsnap_values::releases::registry().toolchains.iter().filter(|t| t.unseen).map(|t| t.name.as_str())
}

/// The OCaml version a toolchain builds ("5.3.0" for "5.3.0-rhb16").
pub fn version_of(toolchain: &str) -> &str {
    toolchain.split('-').next().unwrap_or(toolchain)
}

/// The directory of the 5.3.0 sample executables, built by samples/build.sh when missing.
pub fn samples_dir() -> PathBuf {
    toolchain_samples("5.3.0").expect("the 5.3.0 toolchain is always available")
}

/// The samples built with 16 reserved header bits (the 5.3.0-rhb16 toolchain).
pub fn rhb16_samples_dir() -> PathBuf {
    toolchain_samples("5.3.0-rhb16").expect("the 5.3.0-rhb16 toolchain is always available")
}

/// Says that something could not be tested here. Under CI (`CI=true`) that fails the test:
/// a green CI run must mean everything ran.
pub fn not_covered(what: &str) {
    eprintln!("NOT COVERED: {what}");
    assert!(std::env::var("CI").as_deref() != Ok("true"), "NOT COVERED under CI=true: {what}");
}

/// Notes that the running test uses a program built with `toolchain`, in
/// `$HEAPSNAP_TOOLCHAIN_COVERAGE/TOOLCHAIN` (one test name a line), so that the test command
/// can say how many tests each toolchain's lane covered.
pub fn record_toolchain_use(toolchain: &str) {
    let Some(dir) = std::env::var_os("HEAPSNAP_TOOLCHAIN_COVERAGE") else { return };
    let dir = PathBuf::from(dir);
    let test = std::thread::current().name().unwrap_or("unnamed").to_string();
    let line = format!("{test}\n");
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::OpenOptions::new().create(true).append(true).open(dir.join(toolchain)))
        .and_then(|mut f| f.write_all(line.as_bytes()));
    written.expect("write the toolchain coverage file");
}

/// The samples built by `toolchain`, or `None` when its source is not on this machine (OCaml
/// 5.2.0 comes from ../shared/sources): then a line on stderr says it was not covered.
pub fn toolchain_samples(toolchain: &str) -> Option<PathBuf> {
    record_toolchain_use(toolchain);
    static DIRS: Mutex<Vec<(String, Option<PathBuf>)>> = Mutex::new(Vec::new());
    let mut dirs = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, dir)) = dirs.iter().find(|(t, _)| t == toolchain) {
        return dir.clone();
    }
    let out = Command::new("bash")
        .arg(repo().join("samples/build.sh"))
        .arg(toolchain)
        .stderr(Stdio::inherit())
        .output()
        .expect("run samples/build.sh");
    let dir = match out.status.code() {
        Some(0) => Some(PathBuf::from(String::from_utf8(out.stdout).expect("utf-8").trim())),
        Some(3) => {
            not_covered(&format!("OCaml {toolchain}: its source is not on this machine (see scripts/ocaml-toolchain.sh)"));
            None
        }
        _ => panic!("samples/build.sh {toolchain} failed"),
    };
    dirs.push((toolchain.to_string(), dir.clone()));
    dir
}

/// The toolchains whose samples could be built here, with their sample directories.
pub fn available_toolchains() -> Vec<(&'static str, PathBuf)> {
    toolchains().filter_map(|t| Some((t, toolchain_samples(t)?))).collect()
}

/// The OCaml 5.3.0 toolchain's prefix (scripts/ocaml-toolchain.sh).
pub fn toolchain() -> PathBuf {
    toolchain_prefix("5.3.0")
}

/// A toolchain's prefix (scripts/ocaml-toolchain.sh TOOLCHAIN).
pub fn toolchain_prefix(toolchain: &str) -> PathBuf {
    record_toolchain_use(toolchain);
    let out = Command::new("bash").arg(repo().join("scripts/ocaml-toolchain.sh")).arg(toolchain).output().expect("run ocaml-toolchain.sh");
    assert!(out.status.success(), "scripts/ocaml-toolchain.sh {toolchain} failed");
    PathBuf::from(String::from_utf8(out.stdout).expect("utf-8").trim())
}

/// `samples/manifest.json`: what each sample program holds, and how to run it.
pub fn manifest() -> &'static Value {
    static MANIFEST: OnceLock<Value> = OnceLock::new();
    MANIFEST.get_or_init(|| {
        serde_json::from_str(&std::fs::read_to_string(repo().join("samples/manifest.json")).expect("manifest")).expect("manifest JSON")
    })
}

/// The manifest's entry for the sample `name`.
pub fn manifest_sample(name: &str) -> &'static Value {
    manifest()["samples"].as_array().expect("samples").iter().find(|s| s["name"] == name).expect("sample in manifest")
}
