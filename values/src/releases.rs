//! The one registry of the OCaml releases heapsnap supports: `releases.tsv` at the
//! repository's root, compiled in. The scripts read the same file (`scripts/releases.sh`), so
//! the toolchains the tests build, the releases the dumper accepts, the pool geometries and
//! the `.cmt` reader's shims cannot drift apart. The file's header says what each column means.
//!
//! The registry is parsed once, on first use; a malformed file is a bug of heapsnap's own
//! source, caught by this module's tests, not an input.

use crate::PoolGeometry;
use std::sync::OnceLock;

/// The registry's text.
pub const REGISTRY: &str = include_str!("../../releases.tsv");

/// The dumper's runtime families: how different runtimes are, more than releases differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// OCaml 5: domains, pools, fibers.
    Ocaml5,
    /// OCaml 4.14: one runtime state, heap chunks, system stacks.
    Ocaml4,
}

impl Family {
    fn parse(s: &str) -> Result<Family, String> {
        match s {
            "ocaml5" => Ok(Family::Ocaml5),
            "ocaml4" => Ok(Family::Ocaml4),
            _ => Err(format!("unknown family {s:?} (expected ocaml5 or ocaml4)")),
        }
    }
}

/// One toolchain the tests build (a line of the registry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toolchain {
    /// "5.3.0-rhb16".
    pub name: String,
    /// "5.3.0".
    pub version: String,
    /// "npm:ocaml@5.3.0" or "file:ocaml-5.2.0.tar.gz".
    pub origin: String,
    /// Extra `configure` flags.
    pub configure: Vec<String>,
    /// The release series it belongs to ("5.3").
    pub series: String,
    /// Not a release heapsnap knows (feature `unseen`): built only so that the tests can check
    /// that the dumper reads a runtime it has no file for by probing it.
    pub unseen: bool,
}

/// One release series (major.minor): what every toolchain of it shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// "5.3": what `Sys.ocaml_version` starts with.
    pub series: String,
    pub family: Family,
    /// The name of its shared heap's pool geometry ([`PoolGeometry::named`]), if it has pools.
    pub pools: Option<String>,
    /// The `.cmt` reader's shim for it (`names/ocaml/compat_SHIM.ml`).
    pub cmt_shim: String,
    /// Whether `Gc.compact` compacts, and a counter counts it.
    pub compaction: bool,
    /// Whether statmemprof is there (memprof roots).
    pub memprof: bool,
    /// Whether it has effects (and continuations).
    pub effects: bool,
    /// Whether it has domains.
    pub domains: bool,
}

impl Release {
    /// Its shared heap's pool geometry, if it has pools.
    pub fn pool_geometry(&self) -> Option<PoolGeometry> {
        self.pools.as_deref().and_then(PoolGeometry::named)
    }
}

/// The parsed registry.
#[derive(Debug)]
pub struct Registry {
    /// In the file's order.
    pub toolchains: Vec<Toolchain>,
    /// One per series heapsnap knows, oldest first. Unseen releases are not among them.
    pub releases: Vec<Release>,
}

const FEATURES: &[&str] = &["compaction", "memprof", "effects", "domains", "unseen"];

/// Parses a registry's text (see `releases.tsv` for the format).
pub fn parse(text: &str) -> Result<Registry, String> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
    let expected = ["toolchain", "version", "family", "origin", "configure", "pools", "cmt", "features"];
    match lines.next() {
        Some((_, header)) if header.split('\t').eq(expected) => {}
        _ => return Err(format!("the first line that is not a comment must be the header {:?}", expected.join("\t"))),
    }
    let mut toolchains: Vec<Toolchain> = Vec::new();
    let mut releases: Vec<Release> = Vec::new();
    for (n, line) in lines {
        let at = |e: String| format!("line {}: {e}", n + 1);
        let cols: Vec<&str> = line.split('\t').collect();
        let [name, version, family, origin, configure, pools, cmt, features] = cols[..] else {
            return Err(at(format!("{} columns, not {}", cols.len(), expected.len())));
        };
        let series = series_of(version).ok_or_else(|| at(format!("version {version:?} is not MAJOR.MINOR.PATCH")))?;
        if toolchains.iter().any(|t| t.name == name) {
            return Err(at(format!("toolchain {name} is listed twice")));
        }
        let list = |s: &str| if s == "-" { Vec::new() } else { s.split(',').map(str::to_string).collect() };
        let features = list(features);
        if let Some(unknown) = features.iter().find(|f| !FEATURES.contains(&f.as_str())) {
            return Err(at(format!("unknown feature {unknown:?} (known: {})", FEATURES.join(", "))));
        }
        let has = |f: &str| features.iter().any(|g| g == f);
        let unseen = has("unseen");
        let release = Release {
            series: format!("{}.{}", series.0, series.1),
            family: Family::parse(family).map_err(at)?,
            pools: (pools != "-").then(|| pools.to_string()),
            cmt_shim: cmt.to_string(),
            compaction: has("compaction"),
            memprof: has("memprof"),
            effects: has("effects"),
            domains: has("domains"),
        };
        if release.pools.is_some() && release.pool_geometry().is_none() {
            return Err(at(format!("no pool geometry is named {pools:?}")));
        }
        if unseen && release.pools.is_some() {
            return Err(at("an unseen release has no pool geometry of heapsnap's: the probe finds it".to_string()));
        }
        let unseen_before = toolchains.iter().any(|t| t.unseen && t.series == release.series);
        let known_before = releases.iter().any(|r| r.series == release.series);
        if (unseen && known_before) || (!unseen && unseen_before) {
            return Err(at(format!("OCaml {} is listed as unseen and as a release heapsnap knows", release.series)));
        }
        match releases.iter().find(|r| r.series == release.series) {
            Some(known) if *known != release => {
                return Err(at(format!("toolchain {name} says other things of OCaml {} than an earlier line", release.series)))
            }
            Some(_) => {}
            None if unseen => {}
            None => releases.push(release),
        }
        toolchains.push(Toolchain {
            name: name.to_string(),
            version: version.to_string(),
            origin: origin.to_string(),
            configure: list(configure),
            series: format!("{}.{}", series.0, series.1),
            unseen,
        });
    }
    releases.sort_by_key(|r| series_of(&format!("{}.0", r.series)));
    Ok(Registry { toolchains, releases })
}

/// The registry compiled in.
pub fn registry() -> &'static Registry {
    static PARSED: OnceLock<Registry> = OnceLock::new();
    PARSED.get_or_init(|| parse(REGISTRY).unwrap_or_else(|e| panic!("releases.tsv, compiled into heapsnap, is malformed: {e}")))
}

/// (major, minor) of "5.3.1+dev", "4.14.0~beta1", "5.2".
pub fn series_of(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split(['.', '+', '~', '-']);
    let (major, minor) = (parts.next()?, parts.next()?);
    let number = |p: &str| if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) { p.parse().ok() } else { None };
    Some((number(major)?, number(minor)?))
}

/// The release of OCaml version `version`, if heapsnap supports its series.
pub fn find(version: &str) -> Option<&'static Release> {
    let (major, minor) = series_of(version)?;
    let series = format!("{major}.{minor}");
    registry().releases.iter().find(|r| r.series == series)
}

/// The newest supported release of `family`.
pub fn newest(family: Family) -> Option<&'static Release> {
    registry().releases.iter().rev().find(|r| r.family == family)
}

/// The supported release whose knowledge best fits `version`, known or not: its own, else the
/// newest one older than it, else the oldest.
pub fn nearest(version: &str) -> &'static Release {
    let releases = &registry().releases;
    let wanted = series_of(version);
    releases
        .iter()
        .rev()
        .find(|r| wanted.is_some_and(|w| series_of(&format!("{}.0", r.series)).is_some_and(|s| s <= w)))
        .unwrap_or(&releases[0])
}

/// "4.14, 5.1, 5.2, 5.3".
pub fn supported() -> String {
    registry().releases.iter().map(|r| r.series.as_str()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_parses_and_lists_what_heapsnap_supports() {
        let r = registry();
        let names: Vec<&str> = r.toolchains.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["5.3.0", "5.3.0-rhb16", "5.1.0", "5.2.0", "4.14.0", "4.14.0-rhb16", "5.4.0-trunk"]);
        // The unseen toolchain is built, but its release is not one heapsnap knows.
        assert_eq!(supported(), "4.14, 5.1, 5.2, 5.3");
        assert!(find("5.4.0").is_none());
        let unseen: Vec<&str> = r.toolchains.iter().filter(|t| t.unseen).map(|t| t.name.as_str()).collect();
        assert_eq!(unseen, ["5.4.0-trunk"]);
        assert_eq!(r.toolchains[1].configure, ["--enable-reserved-header-bits=16"]);
        assert_eq!(r.toolchains[2].origin, "npm:ocaml@5.1.4");
        assert_eq!(newest(Family::Ocaml5).map(|r| r.series.as_str()), Some("5.3"));
        assert_eq!(newest(Family::Ocaml4).map(|r| r.series.as_str()), Some("4.14"));
    }

    #[test]
    fn versions_find_their_release() {
        assert_eq!(find("5.3.1+dev").map(|r| r.family), Some(Family::Ocaml5));
        assert_eq!(find("4.14.2").map(|r| r.family), Some(Family::Ocaml4));
        assert_eq!(find("5.2.1~beta").map(|r| r.series.as_str()), Some("5.2"));
        for unknown in ["5.4.0", "5.30.0", "4.13.1", "4.140.0", "nonsense", ""] {
            assert!(find(unknown).is_none(), "{unknown}");
        }
        assert_eq!(nearest("5.4.0").series, "5.3");
        assert_eq!(nearest("5.1.1").series, "5.1");
        assert_eq!(nearest("4.12.0").series, "4.14");
        assert_eq!(nearest("4.15.0").series, "4.14");
    }

    #[test]
    fn releases_carry_their_features() {
        let f = |v| find(v).expect("known");
        assert!(f("5.3.0").memprof && f("5.3.0").compaction);
        assert!(!f("5.2.0").memprof && f("5.2.0").compaction);
        assert!(!f("5.1.0").compaction && f("5.1.0").effects);
        assert!(!f("4.14.0").effects && !f("4.14.0").domains && f("4.14.0").pools.is_none());
        assert_eq!(f("5.1.0").pool_geometry(), Some(PoolGeometry::ocaml_5_1()));
        assert_eq!(f("5.3.0").pool_geometry(), Some(PoolGeometry::ocaml_5_2()));
    }

    /// The scripts read the registry with `scripts/releases.sh`: it must see what this module
    /// sees.
    #[test]
    fn the_scripts_read_the_registry_as_rust_does() {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/releases.sh");
        let run = |args: &[&str]| {
            let out = std::process::Command::new("bash").arg(&script).args(args).output().expect("run scripts/releases.sh");
            (out.status.code(), String::from_utf8(out.stdout).expect("utf-8").trim_end().to_string())
        };
        let r = registry();
        let names: Vec<&str> = r.toolchains.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(run(&["toolchains"]), (Some(0), names.join("\n")));
        let family = |f| {
            r.toolchains
                .iter()
                .filter(|t| find(&t.version).map_or(f == Family::Ocaml5, |r| r.family == f))
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(&["toolchains", "ocaml4"]).1, family(Family::Ocaml4).join("\n"));
        assert_eq!(run(&["toolchains", "ocaml5"]).1, family(Family::Ocaml5).join("\n"));
        for t in r.toolchains.iter().filter(|t| !t.unseen) {
            let release = find(&t.version).unwrap();
            assert_eq!(run(&["get", &t.name, "version"]).1, t.version);
            assert_eq!(run(&["get", &t.name, "origin"]).1, t.origin);
            let configure = if t.configure.is_empty() { "-".to_string() } else { t.configure.join(",") };
            assert_eq!(run(&["get", &t.name, "configure"]).1, configure);
            for (feature, has) in [("effects", release.effects), ("domains", release.domains), ("compaction", release.compaction)] {
                assert_eq!(run(&["has", &t.name, feature]).0, Some(if has { 0 } else { 1 }), "{} {feature}", t.name);
            }
        }
        assert_eq!(run(&["get", "no-such-toolchain", "version"]).0, Some(2));
        assert_eq!(run(&["get", "5.3.0", "no-such-column"]).0, Some(2));
    }

    #[test]
    fn malformed_registries_are_refused_with_the_line() {
        let header = "toolchain\tversion\tfamily\torigin\tconfigure\tpools\tcmt\tfeatures\n";
        let good = "5.3.0\t5.3.0\tocaml5\tnpm:ocaml@5.3.0\t-\t5.2\tsince_5_2\tcompaction\n";
        assert!(parse(&format!("{header}{good}")).is_ok());
        for (bad, why) in [
            ("y\t5.3.0\tocaml6\tnpm:x\t-\t5.2\tsince_5_2\t-\n", "unknown family"),
            ("y\tfive\tocaml5\tnpm:x\t-\t5.2\tsince_5_2\t-\n", "not MAJOR.MINOR"),
            ("y\t5.3.0\tocaml5\tnpm:x\t-\t5.2\tsince_5_2\n", "7 columns"),
            ("y\t5.3.0\tocaml5\tnpm:x\t-\t9.9\tsince_5_2\t-\n", "no pool geometry"),
            ("y\t5.3.0\tocaml5\tnpm:x\t-\t5.2\tsince_5_2\tflying\n", "unknown feature"),
            ("x\t5.3.1\tocaml5\tnpm:x\t-\t5.2\tsince_5_2\t-\n", "says other things of OCaml 5.3"),
            ("x\t5.9.0\tocaml5\tfile:x\t-\t5.2\tsince_5_2\tunseen\n", "unseen release has no pool geometry"),
            ("x\t5.3.1\tocaml5\tnpm:x\t-\t-\tsince_5_2\tunseen\n", "listed as unseen and as a release"),
            (good, "listed twice"),
        ] {
            let err = parse(&format!("{header}{good}{bad}")).expect_err(why);
            assert!(err.starts_with("line ") && err.contains(why), "{err}");
        }
        assert!(parse(good).unwrap_err().contains("header"));
    }
}
