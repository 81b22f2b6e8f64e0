//! What differs between the OCaml releases heapsnap knows: one file per release (`v5_1.rs`,
//! `v5_2.rs`, `v5_3.rs`) says everything its runtime does differently, as data; the code
//! that reads the runtime is shared and asks the [`Release`] where it must choose. Structure
//! offsets are not listed here: they come from the executable's DWARF, or, for an executable
//! without debug info, from the release's generated tables (`tables/VERSION.json`, see
//! [`super::tables`]).
//!
//! A new release is a new file here, its tables, and a line in [`RELEASES`].

mod v5_1;
mod v5_2;
mod v5_3;

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
    /// The shared heap's pool geometry.
    pub pools: fn() -> PoolGeometry,
    /// Fields of a continuation block (`Cont_tag`).
    pub continuation_fields: u64,
    /// Whether `Gc.compact` compacts, counted in `caml_compactions_count`.
    pub compaction: bool,
    /// Whether statmemprof is there (`Caml_state->memprof`'s entry tables, memprof.c's orphans).
    pub memprof: bool,
    /// `stw_domains.domains`, the domains taking part in stop-the-world sections.
    pub domain_table: Indirection,
    /// systhreads' `thread_table`, one `caml_thread_table` per domain.
    pub thread_table: Indirection,
}

/// Every release heapsnap knows, oldest first.
pub const RELEASES: &[&Release] = &[&v5_1::RELEASE, &v5_2::RELEASE, &v5_3::RELEASE];

/// The release of OCaml version `version` (e.g. "5.2.0", "5.3.1+dev"), if heapsnap knows it.
pub fn find(version: &str) -> Option<&'static Release> {
    let series = series_of(version)?;
    RELEASES.iter().copied().find(|r| r.series == series)
}

/// The newest release heapsnap knows: what a forced dump of an unknown version reads as.
pub fn newest() -> &'static Release {
    RELEASES[RELEASES.len() - 1]
}

/// "5.1, 5.2, 5.3".
pub fn supported() -> String {
    RELEASES.iter().map(|r| r.series).collect::<Vec<_>>().join(", ")
}

/// "5.3" of "5.3.1+dev".
fn series_of(version: &str) -> Option<String> {
    let mut parts = version.split(['.', '+', '~', '-']);
    let (major, minor) = (parts.next()?, parts.next()?);
    let numeric = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    (numeric(major) && numeric(minor)).then(|| format!("{major}.{minor}"))
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
        assert_eq!(supported(), "5.1, 5.2, 5.3");
        assert_eq!(newest().series, "5.3");
    }

    #[test]
    fn each_release_has_tables_for_its_own_version() {
        for r in RELEASES {
            assert!(r.tables_version.starts_with(&format!("{}.", r.series)));
            let tables = crate::runtime::tables::Tables::parse(r).expect("tables parse");
            assert_eq!(tables.version, r.tables_version);
            assert_eq!((r.pools)().problem(), None);
        }
    }
}
