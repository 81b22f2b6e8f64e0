//! What the dumper must know of an OCaml 5 runtime beyond structure layouts, wherever it was
//! learnt: from the release's file ([`super::versions`]) for a release heapsnap knows, or from
//! the target itself ([`super::probe`]) for one it does not. The code that reads the runtime
//! asks these [`Facts`], never the release file, so that both routes read a target the same way.

use super::versions::{Indirection, Release};
use heapsnap_values::PoolGeometry;

/// One runtime's facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The shared heap's pools: size, header, size classes and where their blocks start.
    pub pools: PoolGeometry,
    /// Whether `Gc.compact` compacts, counted in `caml_compactions_count`.
    pub compaction: bool,
    /// Whether statmemprof keeps entry tables (`Caml_state->memprof`, memprof.c's orphans).
    pub memprof: bool,
    /// Fields of a continuation block (`Cont_tag`). `None` when the probe is to measure them
    /// on the continuations in the stopped heap (no DWARF type says it).
    pub continuation_fields: Option<u64>,
    /// `stw_domains.domains`: inline array or pointer.
    pub domain_table: Indirection,
    /// systhreads' `thread_table`: inline array or pointer.
    pub thread_table: Indirection,
}

impl Facts {
    /// The facts a release's file and the registry state.
    pub fn of_release(release: &Release) -> Facts {
        Facts {
            pools: release.pools(),
            compaction: release.compaction(),
            memprof: release.memprof(),
            continuation_fields: Some(release.continuation_fields),
            domain_table: release.domain_table,
            thread_table: release.thread_table,
        }
    }
}
