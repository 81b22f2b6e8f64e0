//! Where an OCaml 5 runtime running bytecode (`ocamlrun`, or an executable with the
//! interpreter linked in) keeps what a dump of it reads besides what native runtimes have: its
//! code fragments (a lock-free skip list), its primitives, the name of the bytecode file it
//! opened. What is read the same way in every release is [`crate::common::bytecode`].
//!
//! The heap, the domains, the global and local roots, finalisers and memprof are the same C
//! code in both, and read as for native programs; only the stacks and the globals differ:
//! - `caml_global_data` (a generational global root, interp.c) holds every compilation unit's
//!   module block, so the registered roots carry the globals;
//! - a fiber's stack holds values and code pointers word by word, and the runtime scans every
//!   word from `sp` to the stack's top that is a block and not in a code fragment
//!   (fiber.c `caml_scan_stack`, the same in 5.1 to 5.3);
//! - systhreads, which `ocamlrun` loads as `dllthreads.so`: the same st_stubs.c as when linked
//!   in (a thread's saved `current_stack` is its interpreter's fiber), but its thread table
//!   and layouts are read through that library's DWARF ([`SysthreadsLibrary`]).

use super::facts::Facts;
use super::layout::Layout;
use crate::common::bytecode::{systhreads_library, BytecodeProgram, CodeFragments, LibraryCode};
use crate::dwarf::TypeIndex;
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};

/// The most code fragments read: the toplevel registers one per phrase, so a long session
/// has thousands; a corrupt list is cut here.
const MAX_FRAGMENTS: usize = 1 << 20;

/// Where a bytecode runtime keeps its code fragments and primitives (link-time addresses of
/// variables, offsets from DWARF).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BytecodeLayout {
    /// codefrag.c's `code_fragments_by_pc`, an `lf_skiplist` keyed by each fragment's start.
    pub fragments_by_pc: u64,
    pub skiplist_head: u64,
    pub skiplist_tail: u64,
    pub cell_data: u64,
    pub cell_forward: u64,
    pub fragment_start: u64,
    pub fragment_end: u64,
    /// startup_aux.c's `params.exe_name`: the bytecode file the interpreter opened.
    pub exe_name: u64,
    /// `caml_prim_table`, an `ext_table` of the C functions `C_CALL` instructions call.
    pub prim_table: u64,
    pub ext_table_size: u64,
    pub ext_table_contents: u64,
}

impl BytecodeLayout {
    /// From the runtime's DWARF: a bytecode runtime is read only through it (heapsnap has no
    /// layout tables for interpreters).
    pub fn load(t: &TypeIndex) -> Result<BytecodeLayout> {
        Ok(BytecodeLayout {
            fragments_by_pc: t.variable("code_fragments_by_pc", "codefrag.c")?.address,
            skiplist_head: t.offset_of("lf_skiplist", "head")?,
            skiplist_tail: t.offset_of("lf_skiplist", "tail")?,
            cell_data: t.offset_of("lf_skipcell", "data")?,
            cell_forward: t.offset_of("lf_skipcell", "forward")?,
            fragment_start: t.offset_of("code_fragment", "code_start")?,
            fragment_end: t.offset_of("code_fragment", "code_end")?,
            exe_name: {
                let params = t.variable("params", "startup_aux.c")?;
                params.address + t.variable_field(params, "params", "exe_name")?.offset
            },
            prim_table: t.variable("caml_prim_table", "dynlink.c")?.address,
            ext_table_size: t.offset_of("ext_table", "size")?,
            ext_table_contents: t.offset_of("ext_table", "contents")?,
        })
    }
}

/// A bytecode program on an OCaml 5 runtime: where the runtime keeps what the dump reads, and
/// what was read of the program before the stop.
#[derive(Clone, Debug)]
pub struct Interpreter {
    pub layout: BytecodeLayout,
    pub program: BytecodeProgram,
}

impl Interpreter {
    /// The code fragments of the stopped runtime, walking `code_fragments_by_pc`'s bottom level
    /// from its head to its tail (pointers carry a deletion mark in their low bit,
    /// lf_skiplist.c `LF_SK_UNMARK`).
    pub fn code_fragments(&self, bias: u64, source: &dyn MemorySource) -> Result<CodeFragments> {
        let l = &self.layout;
        let list = bias + l.fragments_by_pc;
        let head = source.read_u64(list + l.skiplist_head)?;
        let tail = source.read_u64(list + l.skiplist_tail)?;
        let mut fragments = Vec::new();
        let mut cell = source.read_u64(head + l.cell_forward)? & !1;
        while cell != tail {
            if cell == 0 || fragments.len() >= MAX_FRAGMENTS {
                return Err(DumpError::Inconsistent(format!(
                    "the code fragments' list does not reach its tail ({} read)",
                    fragments.len()
                )));
            }
            let fragment = source.read_u64(cell + l.cell_data)?;
            let start = source.read_u64(fragment + l.fragment_start)?;
            let end = source.read_u64(fragment + l.fragment_end)?;
            if start <= end {
                fragments.push((start, end));
            }
            cell = source.read_u64(cell + l.cell_forward)? & !1;
        }
        Ok(CodeFragments::new(fragments))
    }

    /// The functions the interpreter calls after saving its stack pointer, as loaded.
    pub fn primitives(&self, bias: u64, source: &dyn MemorySource) -> Result<Vec<u64>> {
        let l = &self.layout;
        crate::common::bytecode::primitives(bias + l.prim_table, (l.ext_table_size, l.ext_table_contents), source)
    }
}

/// systhreads loaded by a bytecode program as a shared library (`dllthreads.so`): its thread
/// table and its code, at their addresses in the target. Its structures are the same C code
/// as when linked in (`-custom`, or native code), read through the library's own DWARF.
pub struct SysthreadsLibrary {
    /// Target address of st_stubs.c's `thread_table`.
    pub thread_table: u64,
    pub code: LibraryCode,
}

impl SysthreadsLibrary {
    /// Reads the library, if the program loaded it, into `layout`'s threads and `facts`'
    /// `thread_table` (an array or a pointer, from its DWARF type).
    pub fn find(source: &dyn MemorySource, layout: &mut Layout, facts: &mut Facts) -> Result<Option<SysthreadsLibrary>> {
        let Some(library) = systhreads_library(source)? else { return Ok(None) };
        let types = TypeIndex::load(&library.file)?;
        let unreadable = |why: String| DumpError::BytecodeLibraryUnsupported { library: library.file.path.display().to_string(), why };
        let table = types.variable("thread_table", "st_stubs.c").map_err(|e| unreadable(e.to_string()))?.address;
        facts.thread_table = super::probe::indirection(&types, "thread_table", "st_stubs.c", "").map_err(unreadable)?;
        layout.threads = Some(super::layout::threads(&types)?);
        let thread_table = library.bias.wrapping_add(table);
        Ok(Some(SysthreadsLibrary { thread_table, code: LibraryCode::new(library, &types) }))
    }
}
