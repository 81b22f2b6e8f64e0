//! What differs between the OCaml 5 releases heapsnap knows: one file per release (`v5_1.rs`,
//! `v5_2.rs`, `v5_3.rs`) says everything its runtime does differently, as data; the code
//! that reads the runtime is shared and asks the [`Release`] where it must choose. What the
//! registry of releases (`releases.tsv`, [`heapsnap_values::releases`]) says of a release (its
//! features, its pool geometry) is read from there, not repeated here. Structure offsets are
//! not listed here either: they come from the executable's DWARF, or, for an executable
//! without debug info, from the release's generated tables (`tables/VERSION.json`, see
//! [`super::tables`]).
//!
//! A new release is its line in `releases.tsv`, a new file here, its tables, and a line in
//! [`RELEASES`] (a test fails until the registry and [`RELEASES`] list the same releases).

mod v5_1;
mod v5_2;
mod v5_3;

use heapsnap_values::releases::{self, Family};
use heapsnap_values::PoolGeometry;

/// Whether a runtime table is stored inline in a static variable or reached through a pointer
/// the variable holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Indirection {
    InlineArray,
    Pointer,
}

/// One OCaml release series (major.minor) as the dumper sees it.
#[derive(Debug)]
pub struct Release {
    /// "5.1": what `Sys.ocaml_version` starts with.
    pub series: &'static str,
    /// The exact version whose layouts `tables` holds (for executables without debug info).
    pub tables_version: &'static str,
    /// The generated layout tables (JSON).
    pub tables: &'static str,
    /// Fields of a continuation block (`Cont_tag`).
    pub continuation_fields: u64,
    /// `stw_domains.domains`, the domains taking part in stop-the-world sections.
    pub domain_table: Indirection,
    /// systhreads' `thread_table`, one `caml_thread_table` per domain.
    pub thread_table: Indirection,
}

impl Release {
    /// What the registry says of this release.
    pub fn registered(&self) -> &'static releases::Release {
        releases::find(self.series).unwrap_or_else(|| panic!("OCaml {} is in RELEASES but not in releases.tsv", self.series))
    }

    /// The shared heap's pool geometry.
    pub fn pools(&self) -> PoolGeometry {
        self.registered().pool_geometry().unwrap_or_else(|| panic!("releases.tsv gives OCaml {} no pool geometry", self.series))
    }

    /// Whether `Gc.compact` compacts, counted in `caml_compactions_count`.
    pub fn compaction(&self) -> bool {
        self.registered().compaction
    }

    /// Whether statmemprof is there (`Caml_state->memprof`'s entry tables, memprof.c's orphans).
    pub fn memprof(&self) -> bool {
        self.registered().memprof
    }
}

/// Every release heapsnap knows, oldest first.
pub const RELEASES: &[&Release] = &[&v5_1::RELEASE, &v5_2::RELEASE, &v5_3::RELEASE];

/// The release of OCaml version `version` (e.g. "5.2.0", "5.3.1+dev"), if the registry lists
/// its series as an OCaml 5 release.
pub fn find(version: &str) -> Option<&'static Release> {
    let registered = releases::find(version).filter(|r| r.family == Family::Ocaml5)?;
    RELEASES.iter().copied().find(|r| r.series == registered.series)
}

/// The newest release heapsnap knows: what a forced dump of an unknown version reads as.
pub fn newest() -> &'static Release {
    RELEASES[RELEASES.len() - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_map_to_their_series() {
        assert_eq!(find("5.3.0").map(|r| r.series), Some("5.3"));
        assert_eq!(find("5.3.1+dev").map(|r| r.series), Some("5.3"));
        assert_eq!(find("5.1.0").map(|r| r.series), Some("5.1"));
        assert_eq!(find("5.2.1~beta").map(|r| r.series), Some("5.2"));
        assert!(find("5.4.0").is_none());
        assert!(find("4.14.2").is_none());
        assert!(find("5.30.0").is_none());
        assert!(find("nonsense").is_none());
        assert_eq!(newest().series, "5.3");
    }

    /// The registry and [`RELEASES`] list the same OCaml 5 releases, in the same order, and
    /// the registry's features are what the code finds: a new line in one without the other
    /// fails here.
    #[test]
    fn the_registry_and_the_release_files_agree() {
        let registered: Vec<&str> =
            releases::registry().releases.iter().filter(|r| r.family == Family::Ocaml5).map(|r| r.series.as_str()).collect();
        let here: Vec<&str> = RELEASES.iter().map(|r| r.series).collect();
        assert_eq!(registered, here);
        assert_eq!(newest().series, releases::newest(Family::Ocaml5).expect("an OCaml 5 release").series);
        // Every toolchain of a release builds the version its tables were made from.
        for t in releases::registry().toolchains.iter().filter(|t| here.contains(&t.series.as_str())) {
            let release = find(&t.version).expect("registered");
            assert_eq!(release.tables_version, t.version, "toolchain {}", t.name);
        }
    }

    #[test]
    fn each_release_has_tables_for_its_own_version() {
        for r in RELEASES {
            assert!(r.tables_version.starts_with(&format!("{}.", r.series)));
            let tables = crate::ocaml5::tables::Tables::parse(r).expect("tables parse");
            assert_eq!(tables.version, r.tables_version);
            assert_eq!(r.pools().problem(), None);
        }
    }
}
