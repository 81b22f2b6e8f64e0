//! OCaml 5.2: what its runtime does differently from the newest release.
//!
//! - Compaction is back (`caml_compactions_count`), and pools put their wasted words first,
//!   as in 5.3, with 5.3's size classes.
//! - Continuations have two fields, as in 5.3.
//! - Statmemprof is only a skeleton (`Gc.Memprof.start` fails): `Caml_state->memprof` exists
//!   but holds no entry tables, and there are no memprof roots.
//! - `stw_domains.domains` and systhreads' `thread_table` are arrays inline in the static
//!   variables (`Max_domains` = 128 entries), not pointers to heap arrays.
//! - (Offsets of `caml_domain_state` and `dom_internal` members differ; DWARF or the tables
//!   say where they are.)

use super::{Indirection, Release};

pub const RELEASE: Release = Release {
    series: "5.2",
    tables_version: "5.2.0",
    tables: include_str!("tables/5.2.0.json"),
    continuation_fields: 2,
    domain_table: Indirection::InlineArray,
    thread_table: Indirection::InlineArray,
};
