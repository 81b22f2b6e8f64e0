//! Offsets and sizes of the OCaml runtime structures the dumper reads: taken from the
//! executable's DWARF by name, or, for an executable without debug info, from the tables
//! heapsnap carries for its version (generated from DWARF by `scripts/gen-layout-tables.sh`).
//! A missing structure or member is a clear error, never a guess. Addresses of the runtime's
//! variables are not layouts: see [`super::statics`].

use super::facts::Facts;
use crate::common::custom_ops::{custom, CustomLayout};
use crate::dwarf::TypeIndex;
use crate::error::{DumpError, Result};
use serde::{Deserialize, Serialize};

/// `caml_domain_state` (runtime/caml/domain_state.tbl).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainStateLayout {
    pub young_ptr: u64,
    pub young_start: u64,
    pub young_end: u64,
    pub current_stack: u64,
    pub gc_regs: u64,
    pub local_roots: u64,
    pub ephe_info: u64,
    pub final_info: u64,
    pub shared_heap: u64,
    pub id: u64,
    /// `Caml_state->memprof` (5.3: statmemprof's per-domain tables).
    pub memprof: Option<u64>,
    /// Every member, to name global roots that live inside a domain state.
    pub members: Vec<(String, u64)>,
    pub size: u64,
}

/// `struct dom_internal` and domain.c's `stw_domains`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainsLayout {
    pub internal_state: u64,
    pub internal_domain_lock: u64,
    pub stw_participating: u64,
    /// `stw_domains.domains`: an array of `dom_internal*` inline in 5.1 and 5.2, a pointer to
    /// one in 5.3 (see [`Facts::domain_table`]).
    pub stw_domains_array: u64,
}

/// glibc's `pthread_mutex_t` (the runtime's `caml_plat_mutex`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutexLayout {
    pub lock: u64,
    pub owner: u64,
}

/// shared_heap.c: pools and large allocations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapLayout {
    pub avail_pools: u64,
    pub full_pools: u64,
    pub unswept_avail_pools: u64,
    pub unswept_full_pools: u64,
    pub swept_large: u64,
    pub unswept_large: u64,
    pub num_sizeclasses: u64,
    pub pool_next: u64,
    pub pool_sz: u64,
    pub pool_header_bytes: u64,
    pub large_next: u64,
    pub large_header_bytes: u64,
    /// Members of `pool_freelist`.
    pub freelist_lock: u64,
    pub global_avail_pools: u64,
    pub global_full_pools: u64,
    pub global_large: u64,
    /// Members of `caml_global_heap_state`.
    pub marked: u64,
    pub unmarked: u64,
    pub garbage: u64,
}

/// caml/fiber.h.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FiberLayout {
    pub stack_sp: u64,
    pub stack_handler: u64,
    pub handler_value: u64,
    pub handler_exn: u64,
    pub handler_effect: u64,
    pub handler_parent: u64,
    pub handler_size: u64,
    pub stack_info_size: u64,
}

/// frame_descriptors.c `current_frame_descrs.frametables` and the list cell layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FramesLayout {
    pub frametables: u64,
    pub frametable_list_table: u64,
    pub frametable_list_next: u64,
}

/// Global roots, local roots, finalisers, ephemerons.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootsLayout {
    pub roots_block_next: u64,
    pub roots_block_ntables: u64,
    pub roots_block_nitems: u64,
    pub roots_block_tables: u64,
    pub roots_block_max_tables: u64,
    pub skiplist_forward: u64,
    pub skipcell_key: u64,
    pub skipcell_forward: u64,
    /// globroots.c's `struct link` (the list `caml_dyn_globals`).
    pub link_data: u64,
    pub link_next: u64,
    pub final_first_table: u64,
    pub final_first_young: u64,
    pub final_last_table: u64,
    pub final_last_young: u64,
    pub final_todo_head: u64,
    pub final_fun: u64,
    pub final_val: u64,
    pub final_size: u64,
    pub todo_next: u64,
    pub todo_size: u64,
    pub todo_item: u64,
    pub final_info_next: u64,
    pub ephe_todo: u64,
    pub ephe_live: u64,
    /// Members of major_gc.c's `orph_structs`.
    pub orph_ephe_live: u64,
    pub orph_final_info: u64,
    /// Where native code's frame tables are: absent from a bytecode runtime.
    #[serde(flatten)]
    pub frames: Option<FramesLayout>,
}

/// memprof.c.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemprofLayout {
    pub domain_entries: u64,
    pub domain_orphans: u64,
    pub domain_threads: u64,
    pub thread_entries: u64,
    pub thread_next: u64,
    pub orphan_entries: u64,
    pub orphan_next: u64,
    pub entries_t: u64,
    pub entries_size: u64,
    pub entries_config: u64,
    pub entry_block: u64,
    pub entry_user_data: u64,
    pub entry_size: u64,
    pub entry_samples: u64,
    pub entry_wosize: u64,
    /// Bit fields of `entry_s`: (bit offset in the entry, width).
    pub entry_source: (u64, u64),
    pub entry_offset: (u64, u64),
    pub entry_alloc_young: (u64, u64),
    pub entry_promoted: (u64, u64),
    pub entry_deallocated: (u64, u64),
    pub entry_deleted: (u64, u64),
}

/// otherlibs/systhreads/st_stubs.c, present only when the threads library is linked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadsLayout {
    /// `thread_table` holds one `caml_thread_table` per domain: inline in 5.1 and 5.2, through
    /// a pointer in 5.3 (see [`Facts::thread_table`]).
    pub table_active_thread: u64,
    pub table_size: u64,
    pub descr: u64,
    pub next: u64,
    pub current_stack: u64,
    pub local_roots: u64,
    pub backtrace_last_exn: u64,
    pub gc_regs: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub domain_state: DomainStateLayout,
    pub domains: DomainsLayout,
    pub mutex: MutexLayout,
    pub heap: HeapLayout,
    pub fiber: FiberLayout,
    pub roots: RootsLayout,
    /// statmemprof's tables (5.3 and later).
    pub memprof: Option<MemprofLayout>,
    /// systhreads, when the threads library is linked in.
    pub threads: Option<ThreadsLayout>,
    pub custom: CustomLayout,
}

impl Layout {
    /// The layouts, from DWARF, of a runtime with `facts` (which structures it has). Whether
    /// its tables are inline or behind pointers is the probe's to check ([`super::probe`]).
    pub fn load(t: &TypeIndex, facts: &Facts) -> Result<Layout> {
        let threads = match t.variable("thread_table", "st_stubs.c") {
            Ok(_) => Some(threads(t)?),
            Err(_) => None,
        };
        Ok(Layout {
            domain_state: domain_state(t, facts)?,
            domains: domains(t)?,
            mutex: MutexLayout {
                lock: t.offset_of("pthread_mutex_t", "__data.__lock")?,
                owner: t.offset_of("pthread_mutex_t", "__data.__owner")?,
            },
            heap: heap(t)?,
            fiber: fiber(t)?,
            roots: roots(t)?,
            memprof: if facts.memprof { Some(memprof(t)?) } else { None },
            threads,
            custom: custom(t)?,
        })
    }
}

fn domain_state(t: &TypeIndex, facts: &Facts) -> Result<DomainStateLayout> {
    let ty = t.type_named("caml_domain_state")?;
    let f = |m: &str| Ok::<u64, DumpError>(t.field_of(ty, "caml_domain_state", m)?.offset);
    Ok(DomainStateLayout {
        young_ptr: f("young_ptr")?,
        young_start: f("young_start")?,
        young_end: f("young_end")?,
        current_stack: f("current_stack")?,
        gc_regs: f("gc_regs")?,
        local_roots: f("local_roots")?,
        ephe_info: f("ephe_info")?,
        final_info: f("final_info")?,
        shared_heap: f("shared_heap")?,
        id: f("id")?,
        memprof: if facts.memprof { Some(f("memprof")?) } else { None },
        members: t.members(ty),
        size: t.size_of(ty).unwrap_or(0),
    })
}

fn domains(t: &TypeIndex) -> Result<DomainsLayout> {
    let stw_domains = t.variable("stw_domains", "domain.c")?;
    Ok(DomainsLayout {
        internal_state: t.offset_of("dom_internal", "state")?,
        internal_domain_lock: t.offset_of("dom_internal", "domain_lock")?,
        stw_participating: t.variable_field(stw_domains, "stw_domains", "participating_domains")?.offset,
        stw_domains_array: t.variable_field(stw_domains, "stw_domains", "domains")?.offset,
    })
}

pub fn heap(t: &TypeIndex) -> Result<HeapLayout> {
    let heap_ty = t.type_named("caml_heap_state")?;
    let hf = |m: &str| t.field_of(heap_ty, "caml_heap_state", m);
    let avail = hf("avail_pools")?;
    let num_sizeclasses = avail
        .ty
        .and_then(|ty| t.array_len(ty))
        .ok_or_else(|| DumpError::MissingType { name: "caml_heap_state.avail_pools (an array with a length)".into() })?;
    let freelist = t.variable("pool_freelist", "shared_heap.c")?;
    let ff = |m: &str| t.variable_field(freelist, "pool_freelist", m).map(|f| f.offset);
    let ghs = t.variable("caml_global_heap_state", "shared_heap.c")?;
    let gf = |m: &str| t.variable_field(ghs, "caml_global_heap_state", m).map(|f| f.offset);
    Ok(HeapLayout {
        avail_pools: avail.offset,
        full_pools: hf("full_pools")?.offset,
        unswept_avail_pools: hf("unswept_avail_pools")?.offset,
        unswept_full_pools: hf("unswept_full_pools")?.offset,
        swept_large: hf("swept_large")?.offset,
        unswept_large: hf("unswept_large")?.offset,
        num_sizeclasses,
        pool_next: t.offset_of("pool", "next")?,
        pool_sz: t.offset_of("pool", "sz")?,
        pool_header_bytes: t.size_of_named("pool")?,
        large_next: t.offset_of("large_alloc", "next")?,
        large_header_bytes: t.size_of_named("large_alloc")?,
        freelist_lock: ff("lock")?,
        global_avail_pools: ff("global_avail_pools")?,
        global_full_pools: ff("global_full_pools")?,
        global_large: ff("global_large")?,
        marked: gf("MARKED")?,
        unmarked: gf("UNMARKED")?,
        garbage: gf("GARBAGE")?,
    })
}

fn fiber(t: &TypeIndex) -> Result<FiberLayout> {
    Ok(FiberLayout {
        stack_sp: t.offset_of("stack_info", "sp")?,
        stack_handler: t.offset_of("stack_info", "handler")?,
        handler_value: t.offset_of("stack_handler", "handle_value")?,
        handler_exn: t.offset_of("stack_handler", "handle_exn")?,
        handler_effect: t.offset_of("stack_handler", "handle_effect")?,
        handler_parent: t.offset_of("stack_handler", "parent")?,
        handler_size: t.size_of_named("stack_handler")?,
        stack_info_size: t.size_of_named("stack_info")?,
    })
}

fn roots(t: &TypeIndex) -> Result<RootsLayout> {
    let block = t.type_named("caml__roots_block")?;
    let tables = t.field_of(block, "caml__roots_block", "tables")?;
    let skiplist = t.type_named("skiplist")?;
    let orph = t.variable("orph_structs", "major_gc.c")?;
    Ok(RootsLayout {
        roots_block_next: t.offset_of("caml__roots_block", "next")?,
        roots_block_ntables: t.offset_of("caml__roots_block", "ntables")?,
        roots_block_nitems: t.offset_of("caml__roots_block", "nitems")?,
        roots_block_tables: tables.offset,
        roots_block_max_tables: tables.ty.and_then(|ty| t.array_len(ty)).unwrap_or(5),
        skiplist_forward: t.field_of(skiplist, "skiplist", "forward")?.offset,
        skipcell_key: t.offset_of("skipcell", "key")?,
        skipcell_forward: t.offset_of("skipcell", "forward")?,
        link_data: t.offset_of("link", "data").unwrap_or(0),
        link_next: t.offset_of("link", "next").unwrap_or(8),
        final_first_table: t.offset_of("caml_final_info", "first.table")?,
        final_first_young: t.offset_of("caml_final_info", "first.young")?,
        final_last_table: t.offset_of("caml_final_info", "last.table")?,
        final_last_young: t.offset_of("caml_final_info", "last.young")?,
        final_todo_head: t.offset_of("caml_final_info", "todo_head")?,
        final_fun: t.offset_of("final", "fun")?,
        final_val: t.offset_of("final", "val")?,
        final_size: t.size_of_named("final")?,
        todo_next: t.offset_of("final_todo", "next")?,
        todo_size: t.offset_of("final_todo", "size")?,
        todo_item: t.offset_of("final_todo", "item")?,
        final_info_next: t.offset_of("caml_final_info", "next")?,
        ephe_todo: t.offset_of("caml_ephe_info", "todo")?,
        ephe_live: t.offset_of("caml_ephe_info", "live")?,
        orph_ephe_live: t.variable_field(orph, "orph_structs", "ephe_list_live")?.offset,
        orph_final_info: t.variable_field(orph, "orph_structs", "final_info")?.offset,
        frames: match t.variable("current_frame_descrs", "frame_descriptors.c") {
            Ok(fd) => Some(FramesLayout {
                frametables: t.variable_field(fd, "current_frame_descrs", "frametables")?.offset,
                frametable_list_table: t.offset_of("caml_frametable_list", "frametable")?,
                frametable_list_next: t.offset_of("caml_frametable_list", "next")?,
            }),
            Err(_) => None,
        },
    })
}

fn memprof(t: &TypeIndex) -> Result<MemprofLayout> {
    Ok(MemprofLayout {
        domain_entries: t.offset_of("memprof_domain_s", "entries")?,
        domain_orphans: t.offset_of("memprof_domain_s", "orphans")?,
        domain_threads: t.offset_of("memprof_domain_s", "threads")?,
        thread_entries: t.offset_of("memprof_thread_s", "entries")?,
        thread_next: t.offset_of("memprof_thread_s", "next")?,
        orphan_entries: t.offset_of("memprof_orphan_table_s", "entries")?,
        orphan_next: t.offset_of("memprof_orphan_table_s", "next")?,
        entries_t: t.offset_of("entries_s", "t")?,
        entries_size: t.offset_of("entries_s", "size")?,
        entries_config: t.offset_of("entries_s", "config")?,
        entry_block: t.offset_of("entry_s", "block")?,
        entry_user_data: t.offset_of("entry_s", "user_data")?,
        entry_size: t.size_of_named("entry_s")?,
        entry_samples: t.offset_of("entry_s", "samples")?,
        entry_wosize: t.offset_of("entry_s", "wosize")?,
        entry_source: t.bit_field("entry_s", "source")?,
        entry_offset: t.bit_field("entry_s", "offset")?,
        entry_alloc_young: t.bit_field("entry_s", "alloc_young")?,
        entry_promoted: t.bit_field("entry_s", "promoted")?,
        entry_deallocated: t.bit_field("entry_s", "deallocated")?,
        entry_deleted: t.bit_field("entry_s", "deleted")?,
    })
}

pub(crate) fn threads(t: &TypeIndex) -> Result<ThreadsLayout> {
    Ok(ThreadsLayout {
        table_active_thread: t.offset_of("caml_thread_table", "active_thread")?,
        table_size: t.size_of_named("caml_thread_table")?,
        descr: t.offset_of("caml_thread_struct", "descr")?,
        next: t.offset_of("caml_thread_struct", "next")?,
        current_stack: t.offset_of("caml_thread_struct", "current_stack")?,
        local_roots: t.offset_of("caml_thread_struct", "local_roots")?,
        backtrace_last_exn: t.offset_of("caml_thread_struct", "backtrace_last_exn")?,
        gc_regs: t.offset_of("caml_thread_struct", "gc_regs")?,
    })
}
