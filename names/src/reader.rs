//! heapsnap's `.cmt` reader (`names/ocaml/`): an OCaml program built on first use with the
//! user's toolchain (its compiler-libs read `.cmt` files of that version only), cached by
//! version and source under `$XDG_CACHE_HOME/heapsnap/cmt-reader/`, and run on `.cmt` files.

use crate::NamesError;
use std::path::{Path, PathBuf};
use std::process::Command;

const MAIN: &str = include_str!("../ocaml/heapsnap_cmt.ml");
/// The shims that adapt the reader to compiler-libs' changes, by the name the registry of
/// releases (`releases.tsv`'s `cmt` column, names joined by `+`) gives them:
/// `names/ocaml/compat_NAME.ml`. A release's shims are concatenated into the reader's `Compat`.
const SHIMS: &[(&str, &str)] = &[
    ("before_5_1", include_str!("../ocaml/compat_before_5_1.ml")),
    ("since_5_1", include_str!("../ocaml/compat_since_5_1.ml")),
    ("before_5_2", include_str!("../ocaml/compat_before_5_2.ml")),
    ("since_5_2", include_str!("../ocaml/compat_since_5_2.ml")),
];

/// An OCaml toolchain: `ocamlopt` (through `ocamlfind` when that is what was found).
#[derive(Debug, Clone)]
pub struct Toolchain {
    ocamlfind: Option<PathBuf>,
    ocamlopt: PathBuf,
    pub version: String,
    /// The standard library's directory (`ocamlopt -where`), where its `.cmt` files are.
    pub stdlib: PathBuf,
}

impl Toolchain {
    /// The toolchain in `dir` (its prefix or its `bin/`), else `ocamlfind` or `ocamlopt` on
    /// `PATH`.
    pub fn find(dir: Option<&Path>) -> Result<Toolchain, NamesError> {
        let (ocamlfind, ocamlopt) = match dir {
            Some(d) => {
                let exe = [d.join("bin/ocamlopt"), d.join("ocamlopt")].into_iter().find(|p| p.is_file());
                match exe {
                    Some(e) => (None, e),
                    None => return Err(NamesError::Toolchain(format!("no ocamlopt in {} or {}/bin", d.display(), d.display()))),
                }
            }
            None => match (on_path("ocamlfind"), on_path("ocamlopt")) {
                (Some(f), _) => (Some(f), PathBuf::from("ocamlopt")),
                (None, Some(o)) => (None, o),
                (None, None) => {
                    return Err(NamesError::Toolchain(
                        "no ocamlfind or ocamlopt on PATH: give the program's OCaml toolchain with --ocaml DIR".into(),
                    ))
                }
            },
        };
        let mut tc = Toolchain { ocamlfind, ocamlopt, version: String::new(), stdlib: PathBuf::new() };
        tc.version = tc.query("-version")?;
        tc.stdlib = PathBuf::from(tc.query("-where")?);
        Ok(tc)
    }

    /// Where installed libraries' `.cmt` files are: `ocamlfind printconf path` when the
    /// toolchain came through `ocamlfind`, `$OCAMLPATH`, the standard library's directory (its
    /// own `unix/`, `threads/`, and packages installed inside it) and, in an opam switch, the
    /// switch's `lib/`.
    pub fn library_dirs(&self) -> Vec<PathBuf> {
        let findlib = self.ocamlfind.as_ref().and_then(|f| {
            let out = Command::new(f).args(["printconf", "path"]).output().ok()?;
            out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        });
        library_dirs(
            &self.stdlib,
            findlib.as_deref(),
            std::env::var_os("OCAMLPATH").as_deref(),
            std::env::var_os("OPAM_SWITCH_PREFIX").as_deref(),
        )
    }

    /// The native compiler, ready for arguments (through `ocamlfind` when that is how it was
    /// found).
    pub fn compiler(&self) -> Command {
        self.command()
    }

    fn command(&self) -> Command {
        match &self.ocamlfind {
            Some(f) => {
                let mut c = Command::new(f);
                c.arg("ocamlopt");
                c
            }
            None => Command::new(&self.ocamlopt),
        }
    }

    fn query(&self, flag: &str) -> Result<String, NamesError> {
        let out = self.command().arg(flag).output().map_err(|e| NamesError::Toolchain(format!("running {}: {e}", self.describe())))?;
        if !out.status.success() {
            return Err(NamesError::Toolchain(format!(
                "{} {flag} failed: {}",
                self.describe(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    pub fn describe(&self) -> String {
        match &self.ocamlfind {
            Some(f) => format!("{} ocamlopt", f.display()),
            None => self.ocamlopt.display().to_string(),
        }
    }

    /// Refuses a toolchain of another version than the snapshot's program.
    pub fn check_version(&self, snapshot_version: &str) -> Result<(), NamesError> {
        // `5.3.0+rhb16` and the like: the release is what compiler-libs' format depends on.
        let release = |v: &str| v.split(['+', '~', '-']).next().unwrap_or(v).to_string();
        if release(&self.version) != release(snapshot_version) {
            return Err(NamesError::Toolchain(format!(
                "the OCaml toolchain {} is {}, but the snapshot's program was built with OCaml {snapshot_version}: \
                 give that version's toolchain with --ocaml DIR",
                self.describe(),
                self.version
            )));
        }
        Ok(())
    }

    /// The reader built for this toolchain: from the cache, or compiled now (a few seconds)
    /// and cached atomically.
    pub fn reader(&self, progress: &dyn Fn(&str)) -> Result<PathBuf, NamesError> {
        let compat = shim_for(&self.version)?;
        let key = xxhash_rust::xxh3::xxh3_64(format!("{MAIN}{compat}{}", self.describe()).as_bytes());
        let base = cache_dir().join("cmt-reader");
        let dir = base.join(format!("{}-{key:016x}", self.version));
        let exe = dir.join("heapsnap-cmt");
        if exe.is_file() {
            return Ok(exe);
        }
        progress(&format!("building heapsnap's .cmt reader with OCaml {} (once)", self.version));
        let io = |e: std::io::Error| NamesError::Toolchain(format!("{}: {e}", base.display()));
        std::fs::create_dir_all(&base).map_err(io)?;
        let tmp = tempfile::Builder::new().prefix(".build.").tempdir_in(&base).map_err(io)?;
        std::fs::write(tmp.path().join("compat.ml"), &compat).map_err(io)?;
        std::fs::write(tmp.path().join("heapsnap_cmt.ml"), MAIN).map_err(io)?;
        let mut cmd = self.command();
        match self.ocamlfind {
            Some(_) => cmd.args(["-package", "compiler-libs.common", "-linkpkg"]),
            None => cmd.args(["-I", "+compiler-libs", "ocamlcommon.cmxa"]),
        };
        let out = cmd
            .args(["-w", "-a", "compat.ml", "heapsnap_cmt.ml", "-o", "heapsnap-cmt"])
            .current_dir(tmp.path())
            .output()
            .map_err(|e| NamesError::Toolchain(format!("running {}: {e}", self.describe())))?;
        if !out.status.success() {
            return Err(NamesError::Toolchain(format!(
                "building the .cmt reader with {} failed (are compiler-libs installed?): {}",
                self.describe(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        // Another heapsnap may have finished first: then its reader is as good as ours.
        let built = tmp.keep();
        if std::fs::rename(&built, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&built);
        }
        if exe.is_file() {
            Ok(exe)
        } else {
            Err(NamesError::Toolchain(format!("the .cmt reader was built but {} is missing", exe.display())))
        }
    }
}

/// Runs the reader on `files` and returns its JSON.
pub fn run_reader(exe: &Path, files: &[PathBuf]) -> Result<String, NamesError> {
    run_reader_with(exe, &[], files)
}

/// [`run_reader`] with the reader's options first (`--args`: each unit's command line too).
pub fn run_reader_with(exe: &Path, options: &[&str], files: &[PathBuf]) -> Result<String, NamesError> {
    let out = Command::new(exe)
        .args(options)
        .args(files)
        .output()
        .map_err(|e| NamesError::Toolchain(format!("running {}: {e}", exe.display())))?;
    if !out.status.success() {
        return Err(NamesError::Toolchain(format!("the .cmt reader failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    String::from_utf8(out.stdout).map_err(|_| NamesError::Toolchain("the .cmt reader printed non-UTF-8 output".into()))
}

/// The library directories of a toolchain whose standard library is `stdlib`, given what
/// `ocamlfind printconf path` printed and the environment's `OCAMLPATH` and
/// `OPAM_SWITCH_PREFIX`. The standard library's parent is taken only in an opam switch (a
/// system toolchain's would be `/usr/lib`).
pub fn library_dirs(
    stdlib: &Path,
    findlib_path: Option<&str>,
    ocamlpath: Option<&std::ffi::OsStr>,
    opam_switch: Option<&std::ffi::OsStr>,
) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut add = |d: PathBuf| {
        if d.is_dir() && !dirs.contains(&d) {
            dirs.push(d);
        }
    };
    for line in findlib_path.unwrap_or("").lines().map(str::trim).filter(|l| !l.is_empty()) {
        add(PathBuf::from(line));
    }
    for d in ocamlpath.map(|p| std::env::split_paths(p).collect::<Vec<_>>()).unwrap_or_default() {
        add(d);
    }
    add(stdlib.to_path_buf());
    if let Some(lib) = stdlib.parent() {
        let in_switch = lib.parent().is_some_and(|sw| sw.join(".opam-switch").is_dir());
        if in_switch {
            add(lib.to_path_buf());
        }
    }
    if let Some(sw) = opam_switch {
        add(Path::new(sw).join("lib"));
    }
    dirs
}

/// The shim for OCaml `version`: the one the registry gives its release, or, for a release it
/// does not list, the nearest older one (compiler-libs' format changes with releases).
fn shim_for(version: &str) -> Result<String, NamesError> {
    let release = heapsnap_values::releases::nearest(version);
    let mut text = String::new();
    for name in release.cmt_shim.split('+') {
        let Some((_, shim)) = SHIMS.iter().find(|(known, _)| *known == name) else {
            return Err(NamesError::Toolchain(format!(
                "releases.tsv names the .cmt shim {name:?} for OCaml {}, which heapsnap lacks",
                release.series
            )));
        };
        text.push_str(shim);
    }
    Ok(text)
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// `$XDG_CACHE_HOME/heapsnap`, else `~/.cache/heapsnap`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d).join("heapsnap"),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into())).join(".cache/heapsnap"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn library_dirs_of_findlib_opam_and_ocamlpath() {
        let tmp = tempfile::tempdir().unwrap();
        let d = |p: &str| {
            let path = tmp.path().join(p);
            std::fs::create_dir_all(&path).unwrap();
            path
        };
        let (stdlib, switch_lib, site, extra) = (d("sw/lib/ocaml"), d("sw/lib"), d("site-lib"), d("extra"));
        // A plain prefix: the stdlib only (its parent could be /usr/lib).
        assert_eq!(super::library_dirs(&stdlib, None, None, None), vec![stdlib.clone()]);
        // An opam switch: its lib/ too.
        d("sw/.opam-switch");
        assert_eq!(super::library_dirs(&stdlib, None, None, None), vec![stdlib.clone(), switch_lib.clone()]);
        // ocamlfind's path first, then OCAMLPATH; missing and repeated directories dropped.
        let findlib = format!("{}\n{}\n/no/such/dir\n", site.display(), stdlib.display());
        let ocamlpath = std::env::join_paths([&extra, &site]).unwrap();
        assert_eq!(super::library_dirs(&stdlib, Some(&findlib), Some(&ocamlpath), None), vec![site, stdlib, extra, switch_lib]);
    }

    #[test]
    fn versions_choose_the_shim_the_registry_gives_them() {
        let shim = |v| super::shim_for(v).unwrap();
        let named = |names: &[&str]| names.iter().map(|n| super::SHIMS.iter().find(|s| s.0 == *n).unwrap().1).collect::<String>();
        assert_eq!(shim("5.2.0"), named(&["since_5_2", "since_5_1"]));
        assert_eq!(shim("5.3.0+rhb16"), named(&["since_5_2", "since_5_1"]));
        assert_eq!(shim("5.4.0"), named(&["since_5_2", "since_5_1"]));
        assert_eq!(shim("5.1.0"), named(&["before_5_2", "since_5_1"]));
        assert_eq!(shim("4.14.0"), named(&["before_5_2", "before_5_1"]));
        // Every release the registry lists has its shims here.
        for r in &heapsnap_values::releases::registry().releases {
            for name in r.cmt_shim.split('+') {
                assert!(super::SHIMS.iter().any(|s| s.0 == name), "OCaml {}: no shim {name}", r.series);
            }
        }
    }
}
