//! OCaml 5.3, the newest release heapsnap knows; the others are said relative to it.
//!
//! - Statmemprof is back: per-domain, per-thread and orphaned entry tables, whose user data
//!   and configuration blocks are roots and whose tracked blocks are weak.
//! - `Max_domains` became a runtime parameter, so `stw_domains.domains` and systhreads'
//!   `thread_table` point to arrays allocated at start-up.

use super::{Indirection, Release};

pub const RELEASE: Release = Release {
    series: "5.3",
    tables_version: "5.3.0",
    tables: include_str!("tables/5.3.0.json"),
    continuation_fields: 2,
    domain_table: Indirection::Pointer,
    thread_table: Indirection::Pointer,
};
