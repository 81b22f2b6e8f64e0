//! Where an OCaml 4.14 runtime running bytecode (`ocamlrun`, or an executable with the
//! interpreter linked in) keeps what a dump of it reads besides what native runtimes have. What
//! is read the same way in every release is [`crate::common::bytecode`] and
//! [`crate::common::bytecode_roots`].
//!
//! What differs from OCaml 5's interpreter (`crate::ocaml5::bytecode`), from 4.14's
//! roots_byt.c, interp.c, codefrag.c and startup_byt.c:
//! - **one stack per thread**: the running thread's interpreter stack is
//!   `Caml_state->stack_low..stack_high`, its values from `Caml_state->extern_sp` up (no
//!   fibers; a callback runs on the same stack); each other systhread saved its own (`sp` to
//!   `stack_high` in its `caml_thread_struct`, st_stubs.c built for bytecode);
//! - **`caml_global_data`** is a plain static variable that `caml_do_roots` visits first, not
//!   a registered root;
//! - **the code fragments** are a plain skip list (skiplist.c), keyed by each fragment's start;
//! - **the bytecode file's name** is sys.c's `caml_exe_name`.
//!
//! The heap, the global and local roots, finalisers and memprof are the same C code as native
//! 4.14's, and read as for native programs.

use super::layout::{thread_layout, thread_statics, Layout4, ThreadStatics};
use crate::common::bytecode::{systhreads_library, BytecodeProgram, CodeFragments, LibraryCode};
use crate::common::program::ProgramKind;
use crate::dwarf::TypeIndex;
use crate::elf::Executable;
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};

/// The most code fragments read: the toplevel registers one per phrase, so a long session has
/// thousands; a corrupt list is cut here.
const MAX_FRAGMENTS: usize = 1 << 20;

/// Where a 4.14 bytecode runtime keeps its code fragments, primitives, stack and globals
/// (link-time addresses of variables, offsets from DWARF).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BytecodeLayout4 {
    /// codefrag.c's `code_fragments_by_pc`, a `struct skiplist` keyed by each fragment's start.
    pub fragments_by_pc: u64,
    pub list_forward: u64,
    pub cell_data: u64,
    pub cell_forward: u64,
    pub fragment_start: u64,
    pub fragment_end: u64,
    /// sys.c's `caml_exe_name`: the bytecode file the interpreter opened.
    pub exe_name: u64,
    /// `caml_prim_table`, an `ext_table` of the C functions `C_CALL` instructions call.
    pub prim_table: u64,
    pub ext_table_size: u64,
    pub ext_table_contents: u64,
    /// interp.c's `caml_global_data`.
    pub global_data: u64,
    /// `Caml_state`'s interpreter stack: its saved stack pointer and its top.
    pub extern_sp: u64,
    pub stack_high: u64,
}

impl BytecodeLayout4 {
    /// From the runtime's DWARF: a bytecode runtime is read only through it.
    pub fn load(exe: &Executable, t: &TypeIndex) -> Result<BytecodeLayout4> {
        Ok(BytecodeLayout4 {
            fragments_by_pc: t.variable("code_fragments_by_pc", "codefrag.c")?.address,
            list_forward: t.offset_of("skiplist", "forward")?,
            cell_data: t.offset_of("skipcell", "data")?,
            cell_forward: t.offset_of("skipcell", "forward")?,
            fragment_start: t.offset_of("code_fragment", "code_start")?,
            fragment_end: t.offset_of("code_fragment", "code_end")?,
            exe_name: exe.require("caml_exe_name")?,
            prim_table: exe.require("caml_prim_table")?,
            ext_table_size: t.offset_of("ext_table", "size")?,
            ext_table_contents: t.offset_of("ext_table", "contents")?,
            global_data: exe.require("caml_global_data")?,
            extern_sp: t.offset_of("caml_domain_state", "extern_sp")?,
            stack_high: t.offset_of("caml_domain_state", "stack_high")?,
        })
    }
}

/// A bytecode program on an OCaml 4.14 runtime: where the runtime keeps what the dump reads,
/// and what was read of the program before the stop.
#[derive(Clone, Debug)]
pub struct Interpreter4 {
    pub layout: BytecodeLayout4,
    pub program: BytecodeProgram,
}

impl Interpreter4 {
    /// The code fragments of the stopped runtime, walking `code_fragments_by_pc`'s bottom
    /// level (`forward[0]`) to its end (skiplist.h `FOREACH_SKIPLIST_ELEMENT`).
    pub fn code_fragments(&self, bias: u64, source: &dyn MemorySource) -> Result<CodeFragments> {
        let l = &self.layout;
        let mut fragments = Vec::new();
        let mut cell = source.read_u64(bias + l.fragments_by_pc + l.list_forward)?;
        while cell != 0 {
            if fragments.len() >= MAX_FRAGMENTS {
                return Err(DumpError::Inconsistent(format!("the code fragments' list does not end ({} read)", fragments.len())));
            }
            let fragment = source.read_u64(cell + l.cell_data)?;
            let start = source.read_u64(fragment + l.fragment_start)?;
            let end = source.read_u64(fragment + l.fragment_end)?;
            if start <= end {
                fragments.push((start, end));
            }
            cell = source.read_u64(cell + l.cell_forward)?;
        }
        Ok(CodeFragments::new(fragments))
    }

    /// The functions the interpreter calls after saving its stack pointer, as loaded.
    pub fn primitives(&self, bias: u64, source: &dyn MemorySource) -> Result<Vec<u64>> {
        let l = &self.layout;
        crate::common::bytecode::primitives(bias + l.prim_table, (l.ext_table_size, l.ext_table_contents), source)
    }
}

/// systhreads loaded by a bytecode program as a shared library (`dllthreads.so`): its
/// variables and its code, at their addresses in the target, read through the library's own
/// DWARF (it is the same st_stubs.c as when linked in, built for bytecode).
pub struct SysthreadsLibrary4 {
    /// `caml_master_lock` and `curr_thread`, target addresses.
    pub statics: ThreadStatics,
    pub code: LibraryCode,
}

impl SysthreadsLibrary4 {
    /// Reads the library, if the program loaded it, into `layout`'s threads.
    pub fn find(source: &dyn MemorySource, layout: &mut Layout4) -> Result<Option<SysthreadsLibrary4>> {
        let Some(library) = systhreads_library(source)? else { return Ok(None) };
        let types = TypeIndex::load(&library.file)?;
        let Some(statics) = thread_statics(&types)? else {
            return Err(DumpError::BytecodeLibraryUnsupported {
                library: library.file.path.display().to_string(),
                why: "its DWARF has no curr_thread (st_stubs.c)".into(),
            });
        };
        layout.threads = Some(thread_layout(&types, ProgramKind::Bytecode)?);
        let bias = library.bias;
        let statics =
            ThreadStatics { master_lock: bias.wrapping_add(statics.master_lock), curr_thread: bias.wrapping_add(statics.curr_thread) };
        Ok(Some(SysthreadsLibrary4 { statics, code: LibraryCode::new(library, &types) }))
    }
}
