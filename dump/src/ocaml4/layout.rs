//! Offsets and sizes of the OCaml 4.14 runtime structures the dumper reads, and the addresses
//! of its variables, all from the executable's DWARF. (4.14 executables without debug info
//! are refused: heapsnap carries no layout tables for 4.14.)

use crate::common::custom_ops::CustomLayout;
use crate::common::program::ProgramKind;
use crate::dwarf::TypeIndex;
use crate::elf::Executable;
use crate::error::{DumpError, Result};

/// `caml_domain_state` (runtime/caml/domain_state.tbl): 4.14's one runtime state.
#[derive(Clone, Debug)]
pub struct StateLayout {
    pub young_ptr: u64,
    pub young_start: u64,
    pub young_end: u64,
    pub in_minor_collection: u64,
    pub bottom_of_stack: u64,
    pub last_return_address: u64,
    pub gc_regs: u64,
    pub local_roots: u64,
    pub stat_compactions: u64,
    /// Every member, to name global roots that live inside the state.
    pub members: Vec<(String, u64)>,
    pub size: u64,
}

/// memory.h `caml__roots_block`, the `CAMLparam`/`CAMLlocal` chains.
#[derive(Clone, Debug)]
pub struct LocalRootsLayout {
    pub next: u64,
    pub ntables: u64,
    pub nitems: u64,
    pub tables: u64,
    pub max_tables: u64,
}

/// major_gc.h `heap_chunk_head`, which sits just below each chunk of the major heap.
#[derive(Clone, Debug)]
pub struct ChunkLayout {
    pub head_size: u64,
    pub size: u64,
    pub next: u64,
}

/// globroots.c's skip lists of registered roots.
#[derive(Clone, Debug)]
pub struct SkipListLayout {
    pub list_forward: u64,
    pub cell_key: u64,
    pub cell_forward: u64,
}

/// finalise.c: `struct finalisable`, `struct final`, `struct to_do`.
#[derive(Clone, Debug)]
pub struct FinaliseLayout {
    pub table: u64,
    pub young: u64,
    pub fun: u64,
    pub val: u64,
    pub final_size: u64,
    pub todo_next: u64,
    pub todo_size: u64,
    pub todo_item: u64,
}

/// systhreads' `caml_thread_struct` and `st_masterlock`.
#[derive(Clone, Debug)]
pub struct ThreadLayout {
    pub descr: u64,
    pub next: u64,
    /// Where a thread that does not hold the runtime keeps its stack.
    pub stack: ThreadStack,
    pub local_roots: u64,
    pub backtrace_last_exn: u64,
    pub memprof_ctx: u64,
    /// `st_masterlock.lock.__data.__lock`: nonzero while a thread takes or gives the runtime.
    pub masterlock_mutex: u64,
    pub masterlock_busy: u64,
}

/// Where `caml_thread_struct` saves a thread's stack: native code's exit from OCaml, or the
/// interpreter's own stack (each thread has one).
#[derive(Clone, Debug)]
pub enum ThreadStack {
    Native {
        bottom_of_stack: u64,
        last_retaddr: u64,
        gc_regs: u64,
    },
    /// `sp` (the saved `Caml_state->extern_sp`) up to `stack_high`.
    Bytecode {
        sp: u64,
        stack_high: u64,
    },
}

/// memprof.c: `struct tracked`, `struct entry_array`, `struct caml_memprof_th_ctx`.
#[derive(Clone, Debug)]
pub struct MemprofLayout {
    pub ctx_entries: u64,
    pub array_t: u64,
    pub array_len: u64,
    pub tracked_size: u64,
    pub block: u64,
    pub n_samples: u64,
    pub wosize: u64,
    pub user_data: u64,
    /// Bit fields: (bit offset, width).
    pub alloc_young: (u64, u64),
    pub source: (u64, u64),
    pub promoted: (u64, u64),
    pub deallocated: (u64, u64),
    pub deleted: (u64, u64),
}

/// Every layout the 4.14 dumper reads.
#[derive(Clone, Debug)]
pub struct Layout4 {
    pub state: StateLayout,
    pub local_roots: LocalRootsLayout,
    pub chunk: ChunkLayout,
    pub skiplist: SkipListLayout,
    pub finalise: FinaliseLayout,
    pub threads: Option<ThreadLayout>,
    pub memprof: MemprofLayout,
    pub custom: CustomLayout,
    /// roots_nat.c `struct link` (the list of natdynlinked units' globals).
    pub link_data: u64,
    pub link_next: u64,
}

/// The runtime's variables the dumper reads (link-time addresses).
#[derive(Clone, Debug)]
pub struct Statics4 {
    /// `Caml_state`, a pointer to the runtime state.
    pub caml_state: u64,
    pub heap_start: u64,
    pub gc_phase: u64,
    pub gc_sweep_hp: u64,
    pub atom_table: u64,
    /// roots_nat.c's list of natdynlinked units' globals (native code only).
    pub dyn_globals: Option<u64>,
    /// roots_nat.c's list of every registered frametable, the executable's and plugins'
    /// (native code only).
    pub frametables: Option<u64>,
    pub global_roots: [u64; 3],
    pub finalisable_first: u64,
    pub finalisable_last: u64,
    pub to_do_hd: u64,
    pub ephe_list_head: u64,
    pub allocation_policy: u64,
    /// freelist.c's `bf_small_fl`, the best-fit policy's lists of small free blocks.
    pub bf_small_fl: u64,
    pub entries_global: u64,
    pub memprof_main_ctx: u64,
    pub memprof_lambda: u64,
    pub custom_ops_table: u64,
    /// systhreads linked in: `caml_master_lock`, `curr_thread` (see
    /// [`super::Runtime4::thread_statics`] for where they are in the target).
    pub threads: Option<ThreadStatics>,
}

#[derive(Clone, Copy, Debug)]
pub struct ThreadStatics {
    pub master_lock: u64,
    pub curr_thread: u64,
}

impl Layout4 {
    /// The layouts of a 4.14 runtime running `kind` code.
    pub fn load(t: &TypeIndex, kind: ProgramKind) -> Result<Layout4> {
        let state = t.type_named("caml_domain_state")?;
        let s = |m: &str| Ok::<u64, DumpError>(t.field_of(state, "caml_domain_state", m)?.offset);
        let block = t.type_named("caml__roots_block")?;
        let tables = t.field_of(block, "caml__roots_block", "tables")?;
        let threads = match t.variable("curr_thread", "st_stubs.c") {
            Ok(_) => Some(thread_layout(t, kind)?),
            Err(_) => None,
        };
        Ok(Layout4 {
            state: StateLayout {
                young_ptr: s("young_ptr")?,
                young_start: s("young_start")?,
                young_end: s("young_end")?,
                in_minor_collection: s("in_minor_collection")?,
                bottom_of_stack: s("bottom_of_stack")?,
                last_return_address: s("last_return_address")?,
                gc_regs: s("gc_regs")?,
                local_roots: s("local_roots")?,
                stat_compactions: s("stat_compactions")?,
                members: t.members(state),
                size: t.size_of(state).unwrap_or(0),
            },
            local_roots: LocalRootsLayout {
                next: t.offset_of("caml__roots_block", "next")?,
                ntables: t.offset_of("caml__roots_block", "ntables")?,
                nitems: t.offset_of("caml__roots_block", "nitems")?,
                tables: tables.offset,
                max_tables: tables.ty.and_then(|ty| t.array_len(ty)).unwrap_or(5),
            },
            chunk: ChunkLayout {
                head_size: t.size_of_named("heap_chunk_head")?,
                size: t.offset_of("heap_chunk_head", "size")?,
                next: t.offset_of("heap_chunk_head", "next")?,
            },
            skiplist: SkipListLayout {
                list_forward: t.offset_of("skiplist", "forward")?,
                cell_key: t.offset_of("skipcell", "key")?,
                cell_forward: t.offset_of("skipcell", "forward")?,
            },
            finalise: FinaliseLayout {
                table: t.offset_of("finalisable", "table")?,
                young: t.offset_of("finalisable", "young")?,
                fun: t.offset_of("final", "fun")?,
                val: t.offset_of("final", "val")?,
                final_size: t.size_of_named("final")?,
                todo_next: t.offset_of("to_do", "next")?,
                todo_size: t.offset_of("to_do", "size")?,
                todo_item: t.offset_of("to_do", "item")?,
            },
            threads,
            memprof: MemprofLayout {
                ctx_entries: t.offset_of("caml_memprof_th_ctx", "entries")?,
                array_t: t.offset_of("entry_array", "t")?,
                array_len: t.offset_of("entry_array", "len")?,
                tracked_size: t.size_of_named("tracked")?,
                block: t.offset_of("tracked", "block")?,
                n_samples: t.offset_of("tracked", "n_samples")?,
                wosize: t.offset_of("tracked", "wosize")?,
                user_data: t.offset_of("tracked", "user_data")?,
                alloc_young: t.bit_field("tracked", "alloc_young")?,
                source: t.bit_field("tracked", "source")?,
                promoted: t.bit_field("tracked", "promoted")?,
                deallocated: t.bit_field("tracked", "deallocated")?,
                deleted: t.bit_field("tracked", "deleted")?,
            },
            custom: crate::common::custom_ops::custom(t)?,
            // (Bytecode has no natdynlinked units: unused there.)
            link_data: if kind == ProgramKind::Native { t.offset_of("link", "data")? } else { 0 },
            link_next: if kind == ProgramKind::Native { t.offset_of("link", "next")? } else { 0 },
        })
    }
}

/// systhreads' layouts, from the DWARF of the code that holds st_stubs.c (the executable, or
/// `dllthreads.so` as a bytecode program loads it), built for `kind` code.
pub fn thread_layout(t: &TypeIndex, kind: ProgramKind) -> Result<ThreadLayout> {
    let field = |name: &str| t.offset_of("caml_thread_struct", name);
    let stack = match kind {
        ProgramKind::Native => ThreadStack::Native {
            bottom_of_stack: field("bottom_of_stack")?,
            last_retaddr: field("last_retaddr")?,
            gc_regs: field("gc_regs")?,
        },
        ProgramKind::Bytecode => ThreadStack::Bytecode { sp: field("sp")?, stack_high: field("stack_high")? },
    };
    Ok(ThreadLayout {
        descr: field("descr")?,
        next: field("next")?,
        stack,
        local_roots: field("local_roots")?,
        backtrace_last_exn: field("backtrace_last_exn")?,
        memprof_ctx: field("memprof_ctx")?,
        masterlock_mutex: t.offset_of("st_masterlock", "lock")? + t.offset_of("pthread_mutex_t", "__data.__lock")?,
        masterlock_busy: t.offset_of("st_masterlock", "busy")?,
    })
}

/// systhreads' variables (st_stubs.c), as [`Statics4::find`] finds them in the executable
/// (link-time addresses) or a bytecode program's `dllthreads.so` holds them.
pub fn thread_statics(t: &TypeIndex) -> Result<Option<ThreadStatics>> {
    let Ok(curr) = t.variable("curr_thread", "st_stubs.c") else { return Ok(None) };
    Ok(Some(ThreadStatics { master_lock: t.variable("caml_master_lock", "st_stubs.c")?.address, curr_thread: curr.address }))
}

impl Statics4 {
    pub fn find(exe: &Executable, t: &TypeIndex, kind: ProgramKind) -> Result<Statics4> {
        // Exported variables are symbols; file-static ones come from DWARF.
        let symbol = |name: &str| exe.require(name);
        let var = |name: &str, file: &str| Ok::<u64, DumpError>(t.variable(name, file)?.address);
        let native = kind == ProgramKind::Native;
        let threads = thread_statics(t)?;
        Ok(Statics4 {
            caml_state: symbol("Caml_state")?,
            heap_start: symbol("caml_heap_start")?,
            gc_phase: symbol("caml_gc_phase")?,
            gc_sweep_hp: symbol("caml_gc_sweep_hp")?,
            atom_table: symbol("caml_atom_table")?,
            dyn_globals: native.then(|| var("caml_dyn_globals", "roots_nat.c")).transpose()?,
            frametables: native.then(|| var("frametables", "roots_nat.c")).transpose()?,
            global_roots: [symbol("caml_global_roots")?, symbol("caml_global_roots_young")?, symbol("caml_global_roots_old")?],
            finalisable_first: var("finalisable_first", "finalise.c")?,
            finalisable_last: var("finalisable_last", "finalise.c")?,
            to_do_hd: var("to_do_hd", "finalise.c")?,
            ephe_list_head: symbol("caml_ephe_list_head")?,
            allocation_policy: symbol("caml_allocation_policy")?,
            bf_small_fl: var("bf_small_fl", "freelist.c")?,
            entries_global: var("entries_global", "memprof.c")?,
            memprof_main_ctx: symbol("caml_memprof_main_ctx")?,
            memprof_lambda: var("lambda", "memprof.c")?,
            custom_ops_table: var("custom_ops_table", "custom.c")?,
            threads,
        })
    }
}

/// Refuses a 4.14 executable without DWARF, saying what would help.
pub fn require_dwarf(exe: &Executable, version: &str) -> Result<()> {
    if exe.has_dwarf() {
        return Ok(());
    }
    Err(DumpError::NeedsDwarf { path: exe.path.clone(), version: version.to_string() })
}
