//! OCaml 5.1: what its runtime does differently from the newest release.
//!
//! - Pools put their blocks right after the pool header; the wasted words are at the end
//!   (shared_heap.c `pool_initialize`). Its size-class tables differ from 5.2's.
//! - A continuation has one field (the stack); 5.2 added a second.
//! - `Gc.compact` is a full major collection: nothing moves, and there is no
//!   `caml_compactions_count`, so `on-compaction` triggers cannot work.
//! - No statmemprof (memprof.c only has stubs that fail): no `Caml_state->memprof`, no
//!   `caml_thread_struct.memprof`, no memprof roots.
//! - `stw_domains.domains` and systhreads' `thread_table` are arrays inline in the static
//!   variables (`Max_domains` = 128 entries), not pointers to heap arrays.
//! - (Offsets of `caml_domain_state` and `dom_internal` members differ; DWARF or the tables
//!   say where they are.)

use super::{Indirection, Release};

pub const RELEASE: Release = Release {
    series: "5.1",
    tables_version: "5.1.0",
    tables: include_str!("tables/5.1.0.json"),
    continuation_fields: 1,
    domain_table: Indirection::InlineArray,
    thread_table: Indirection::InlineArray,
};
