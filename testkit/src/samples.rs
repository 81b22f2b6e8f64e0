//! The OCaml toolchains and the sample programs the end-to-end tests run: built by the
//! repository's scripts when missing (each takes a lock, so parallel tests wait for one build).

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The repository's root (the workspace this crate is a member of).
pub fn repo() -> PathBuf {
    let testkit = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    testkit.parent().expect("testkit/ is a folder of the repository").to_path_buf()
}

/// Every toolchain the tests build samples with (scripts/ocaml-toolchain.sh): one per OCaml
/// release heapsnap supports, and 5.3.0 and 4.14.0 with 16 reserved header bits.
pub const TOOLCHAINS: [&str; 6] = ["4.14.0", "4.14.0-rhb16", "5.1.0", "5.2.0", "5.3.0", "5.3.0-rhb16"];

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

/// The samples built by `toolchain`, or `None` when its source is not on this machine (OCaml
/// 5.2.0 comes from ../shared/sources): then a line on stderr says it was not covered.
pub fn toolchain_samples(toolchain: &str) -> Option<PathBuf> {
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
            eprintln!("NOT COVERED: OCaml {toolchain}: its source is not on this machine (see scripts/ocaml-toolchain.sh)");
            None
        }
        _ => panic!("samples/build.sh {toolchain} failed"),
    };
    dirs.push((toolchain.to_string(), dir.clone()));
    dir
}

/// The toolchains whose samples could be built here, with their sample directories.
pub fn available_toolchains() -> Vec<(&'static str, PathBuf)> {
    TOOLCHAINS.iter().filter_map(|&t| Some((t, toolchain_samples(t)?))).collect()
}

/// The OCaml 5.3.0 toolchain's prefix (scripts/ocaml-toolchain.sh).
pub fn toolchain() -> PathBuf {
    toolchain_prefix("5.3.0")
}

/// A toolchain's prefix (scripts/ocaml-toolchain.sh TOOLCHAIN).
pub fn toolchain_prefix(toolchain: &str) -> PathBuf {
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
