//! The OCaml 4.14 family, read through any [`MemorySource`]. Its differences from OCaml 5 are
//! too deep for release data, so it is a family of its own ([`family`] makes it a
//! [`crate::common::family::RuntimeFamily`]); what is shared (executables, frame tables,
//! unwinding, the captured world, the copy) comes from [`crate::common`].
//!
//! What differs from OCaml 5:
//! - **One runtime state**: `Caml_state` is a global pointer to the only `caml_domain_state`;
//!   OCaml code keeps it in r14 and the allocation pointer in r15. There is one minor heap.
//! - **The major heap** is a list of chunks (`caml_heap_start`, each chunk's `heap_chunk_head`
//!   just below it, linked by `next`), tiled with blocks, free blocks and fragments; no pools.
//!   Colours are fixed (white 0, gray 1, blue 2, black 3) and their meaning depends on the
//!   major GC's phase (`caml_gc_phase`, `caml_gc_sweep_hp`), recorded in the metadata's
//!   `ocaml4_gc`. Blue blocks are free; the best-fit policy also keeps white small free blocks
//!   on `bf_small_fl`, recorded in the snapshot's `free_blocks`.
//! - **Stacks** are system stacks: the running thread's from its registers or from
//!   `Caml_state->bottom_of_stack`/`last_return_address`/`gc_regs`, other systhreads' from
//!   their `caml_thread_struct`; each is walked with the frame tables, across C code through
//!   the `caml_context` left by `caml_start_program` (see [`stack`]).
//! - **One lock**: systhreads' master lock says whether a thread holds the runtime; the
//!   thread that does runs OCaml code or C code called from it (see [`safety`]).
//! - **Roots**: `caml_globals`, `caml_dyn_globals`, local roots, the three global-root skip
//!   lists, finalisers (`finalisable_first`/`_last`, `to_do_hd`), memprof's entry arrays
//!   (`entries_global` and each thread's), `caml_ephe_list_head` (see [`roots`]).
//! - **Compactions** are counted in `Caml_state->stat_compactions`.

pub mod bytecode;
pub mod capture;
pub mod family;
pub mod layout;
pub mod roots;
pub mod safety;
pub mod stack;

use crate::common::bytecode::BytecodeProgram;
use crate::common::code::CodeMap;
use crate::common::frames::FrameTable;
use crate::common::program::{debug_file_wanted, LayoutsFrom, ProgramKind};
use crate::common::unwind;
use crate::dwarf::TypeIndex;
use crate::elf::Executable;
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};
use bytecode::{BytecodeLayout4, Interpreter4, SysthreadsLibrary4};
use layout::{Layout4, Statics4, ThreadStatics};

/// The release series this module reads.
pub const SERIES: &str = "4.14";

/// Everything about a 4.14 target's runtime that does not change while it runs. Addresses in
/// [`Statics4`] and the executable's symbols are link-time; add [`Runtime4::bias`].
pub struct Runtime4 {
    pub exe: Executable,
    pub layout: Layout4,
    pub statics: Statics4,
    pub layouts_from: LayoutsFrom,
    pub code: CodeMap,
    pub bias: u64,
    pub version: String,
    pub detected_reserved_bits: Option<u8>,
    pub frames: FrameTable,
    pub unwinder: unwind::Unwinder,
    /// Code ranges of the C source files, from DWARF: (begin, end, file), link-time, sorted.
    pub units: Vec<(u64, u64, String)>,
    /// The interpreter's structures, when the program runs bytecode (see [`bytecode`]).
    pub bytecode: Option<Interpreter4>,
    /// systhreads loaded as a shared library by a bytecode program (see [`bytecode`]).
    pub systhreads_library: Option<SysthreadsLibrary4>,
    pub notes: Vec<String>,
}

impl Runtime4 {
    /// Reads what the dump needs to know about a 4.14 target whose executable (with its debug
    /// file attached), load bias, version and kind are known.
    pub fn discover(source: &dyn MemorySource, exe: Executable, bias: u64, version: String, kind: ProgramKind) -> Result<Runtime4> {
        if kind == ProgramKind::Bytecode && !exe.has_dwarf() {
            return Err(DumpError::BytecodeNeedsDwarf { path: exe.path.clone(), debug_file: debug_file_wanted(&exe) });
        }
        layout::require_dwarf(&exe, &version)?;
        let types = TypeIndex::load(&exe)?;
        let mut layout = Layout4::load(&types, kind)?;
        let statics = Statics4::find(&exe, &types, kind)?;
        let layouts_from = if exe.debug_file.is_some() { LayoutsFrom::DebugFile } else { LayoutsFrom::Dwarf };
        let mut notes = Vec::new();
        if exe.symbols_from == crate::elf::SymbolTable::Dynsym {
            notes.push(format!("{} has no .symtab: only exported symbols name functions and data", exe.path.display()));
        }
        let (frames, bytecode) = match (kind, statics.frametables) {
            (ProgramKind::Native, Some(frametables)) => {
                // Every frametable the runtime registered: the executable's and natdynlinked
                // units'.
                let (data, next) = (layout.link_data, layout.link_next);
                let mut frames = FrameTable::read(source, bias + frametables, data, next)?;
                if frames.is_empty() {
                    frames.read_linked(source, &exe, bias)?;
                }
                (frames, None)
            }
            _ => {
                let layout = BytecodeLayout4::load(&exe, &types)?;
                let program = BytecodeProgram::find(&exe, bias, source, bias + layout.exe_name);
                notes.extend(program.notes.iter().cloned());
                (FrameTable::default(), Some(Interpreter4 { layout, program }))
            }
        };
        let systhreads_library = match kind {
            ProgramKind::Bytecode if layout.threads.is_none() => SysthreadsLibrary4::find(source, &mut layout)?,
            _ => None,
        };
        let detected_reserved_bits = crate::common::program::detect_reserved_bits(&exe);
        let code = CodeMap::new(&exe);
        let unwinder = unwind::Unwinder::new(source, &source.mappings()?);
        Ok(Runtime4 {
            layout,
            statics,
            layouts_from,
            code,
            bias,
            version,
            detected_reserved_bits,
            frames,
            unwinder,
            units: types.code_units(),
            bytecode,
            systhreads_library,
            notes,
            exe,
        })
    }

    /// Target address of a link-time address.
    pub fn addr(&self, link: u64) -> u64 {
        link.wrapping_add(self.bias)
    }

    /// Target address of symbol `name`.
    pub fn symbol(&self, name: &str) -> Result<u64> {
        Ok(self.addr(self.exe.require(name)?))
    }

    /// The executable's symbol holding target address `address`, if any.
    pub fn symbol_name_at(&self, address: u64) -> Option<&str> {
        if let Some(name) = self.systhreads_library.as_ref().and_then(|l| l.code.symbol_name_at(address)) {
            return Some(name);
        }
        self.exe.symbol_at(address.wrapping_sub(self.bias)).map(|s| s.name.as_str())
    }

    /// systhreads' variables (target addresses), when systhreads is linked in or loaded.
    pub fn thread_statics(&self) -> Option<ThreadStatics> {
        match &self.systhreads_library {
            Some(library) => Some(library.statics),
            None => {
                self.statics.threads.map(|t| ThreadStatics { master_lock: self.addr(t.master_lock), curr_thread: self.addr(t.curr_thread) })
            }
        }
    }

    /// The C source file whose code holds target address `address`, if DWARF knows it.
    pub fn unit_file_at(&self, address: u64) -> Option<&str> {
        if let Some(file) = self.systhreads_library.as_ref().and_then(|l| l.code.file_at(address)) {
            return Some(file);
        }
        let link = address.wrapping_sub(self.bias);
        let after = self.units.partition_point(|u| u.0 <= link);
        let unit = self.units[..after].iter().rev().take(8).find(|u| link < u.1)?;
        Some(unit.2.rsplit('/').next().unwrap_or(&unit.2))
    }

    /// The address of `Caml_state`'s runtime state, and of its compaction counter.
    pub fn state(&self, source: &dyn MemorySource) -> Result<u64> {
        let state = source.read_u64(self.addr(self.statics.caml_state))?;
        if state == 0 {
            return Err(DumpError::Inconsistent("Caml_state is NULL: the runtime is not initialised yet".into()));
        }
        Ok(state)
    }
}

/// Where a running OCaml 4.14 process counts its compactions: `Caml_state->stat_compactions`
/// (through the `Caml_state` pointer, NULL until the runtime starts), found without stopping
/// it. `None` when the program has no `Caml_state` (it is no OCaml 4.14 program).
pub fn compactions_counter(pid: u32) -> Result<Option<crate::watch::CompactionsCounter>> {
    let Ok(state) = crate::watch::symbol_address(pid, "Caml_state") else { return Ok(None) };
    // The running file itself, and its debug file as the target sees it.
    let mut exe = Executable::open(&std::path::PathBuf::from(format!("/proc/{pid}/exe")))?;
    let search = crate::debuginfo::DebugSearch {
        target: crate::source::FileView::Process(pid),
        exe_is_targets: true,
        debug_root: std::path::PathBuf::from(crate::debuginfo::DEBUG_ROOT),
    };
    crate::debuginfo::attach(&mut exe, None, &search)?;
    let offset = TypeIndex::load(&exe)?.offset_of("caml_domain_state", "stat_compactions")?;
    Ok(Some(crate::watch::CompactionsCounter::InRuntimeState { state, offset }))
}

#[cfg(test)]
mod tests {
    use heapsnap_values::releases::{self, Family};

    #[test]
    fn the_registry_lists_this_series_as_an_ocaml4_release() {
        assert_eq!(releases::find(super::SERIES).map(|r| r.family), Some(Family::Ocaml4));
        assert_eq!(releases::find("4.14.2+flambda").map(|r| r.series.as_str()), Some(super::SERIES));
    }
}
