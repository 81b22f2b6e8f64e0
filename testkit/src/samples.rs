//! The OCaml toolchains and the sample programs the end-to-end tests run: built by the
//! repository's scripts when missing (each takes a lock, so parallel tests wait for one build).

pub use crate::coverage::not_covered;
use crate::coverage::record_toolchain_use;
use serde_json::Value;
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

/// Whether samples/build.sh builds the sample `name` with `toolchain` (a release of the
/// registry): it leaves effect_cont out where the release has no effects, and domains_shared
/// where it has no domains.
pub fn builds_sample(toolchain: &str, name: &str) -> bool {
    let release =
        heapsnap_values::releases::find(version_of(toolchain)).unwrap_or_else(|| panic!("{toolchain} is no release of the registry"));
    match name {
        "effect_cont" => release.effects,
        "domains_shared" => release.domains,
        _ => true,
    }
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
/// 5.2.0 comes from ../shared/sources): then the running test's check is [`not_covered`]. The
/// toolchain's use is recorded only once its samples are built.
pub fn toolchain_samples(toolchain: &str) -> Option<PathBuf> {
    let dir = built_samples(toolchain);
    match &dir {
        Some(_) => record_toolchain_use(toolchain),
        None => not_covered(&format!("OCaml {toolchain}: its source is not on this machine (see scripts/ocaml-toolchain.sh)")),
    }
    dir
}

/// samples/build.sh TOOLCHAIN's output directory, built once per test binary (`None`: the
/// toolchain's source is not here).
fn built_samples(toolchain: &str) -> Option<PathBuf> {
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
        Some(3) => None,
        _ => panic!("samples/build.sh {toolchain} failed"),
    };
    dirs.push((toolchain.to_string(), dir.clone()));
    dir
}

/// The toolchains `keep` keeps whose samples could be built here, with their sample
/// directories. The others are not asked for, so that no test counts as having run programs of
/// a toolchain it left out.
pub fn available_toolchains_where(keep: impl Fn(&str) -> bool) -> Vec<(&'static str, PathBuf)> {
    toolchains().filter(|t| keep(t)).filter_map(|t| Some((t, toolchain_samples(t)?))).collect()
}

/// The OCaml 5.3.0 toolchain's prefix (scripts/ocaml-toolchain.sh).
pub fn toolchain() -> PathBuf {
    toolchain_prefix("5.3.0")
}

/// A toolchain's prefix (scripts/ocaml-toolchain.sh TOOLCHAIN).
pub fn toolchain_prefix(toolchain: &str) -> PathBuf {
    let out = Command::new("bash").arg(repo().join("scripts/ocaml-toolchain.sh")).arg(toolchain).output().expect("run ocaml-toolchain.sh");
    assert!(out.status.success(), "scripts/ocaml-toolchain.sh {toolchain} failed");
    record_toolchain_use(toolchain);
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

#[cfg(test)]
mod tests {
    use std::process::Command;

    /// Run only by [`a_toolchain_counts_as_used_only_once_built`], in a child process.
    #[test]
    #[ignore = "run by a_toolchain_counts_as_used_only_once_built"]
    fn asks_for_toolchains() {
        assert!(std::panic::catch_unwind(|| super::toolchain_samples("no-such-toolchain")).is_err());
        assert!(std::panic::catch_unwind(|| super::toolchain_prefix("no-such-toolchain")).is_err());
        assert!(super::toolchain_samples("5.3.0").is_some());
    }

    /// A toolchain is recorded as used by a test only once its samples are built (or its prefix
    /// found): asking for one that cannot be built leaves no trace in the coverage.
    #[test]
    fn a_toolchain_counts_as_used_only_once_built() {
        let dir = std::env::temp_dir().join(format!("heapsnap-toolchain-coverage-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", "samples::tests::asks_for_toolchains", "--include-ignored"])
            .env("HEAPSNAP_TOOLCHAIN_COVERAGE", &dir)
            .output()
            .expect("run the test binary");
        let recorded: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| d.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let used = std::fs::read_to_string(dir.join("5.3.0")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        assert_eq!(recorded, ["5.3.0"]);
        assert_eq!(used, "samples::tests::asks_for_toolchains\n");
    }
}
