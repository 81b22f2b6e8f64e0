//! What an OCaml 5 runtime running bytecode (`ocamlrun`, or an executable with the
//! interpreter linked in) has that a native one has not: the interpreter's stacks, where code
//! pointers sit among values, and the primitives through which the interpreter calls C.
//!
//! The heap, the domains, the global and local roots, finalisers and memprof are the same C
//! code in both, and read as for native programs; only the stacks and the globals differ:
//! - `caml_global_data` (a generational global root, interp.c) holds every compilation unit's
//!   module block, so the registered roots carry the globals;
//! - a fiber's stack holds values and code pointers word by word, and the runtime scans every
//!   word from `sp` to the stack's top that is a block and not in a code fragment
//!   (fiber.c `caml_scan_stack`, the same in 5.1 to 5.3).

use crate::dwarf::TypeIndex;
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};

/// The most code fragments read: the toplevel registers one per phrase, so a long session
/// has thousands; a corrupt list is cut here.
const MAX_FRAGMENTS: usize = 1 << 20;

/// The most primitives read from `caml_prim_table` (a release has about 400).
const MAX_PRIMITIVES: usize = 1 << 16;

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
            prim_table: t.variable("caml_prim_table", "")?.address,
            ext_table_size: t.offset_of("ext_table", "size")?,
            ext_table_contents: t.offset_of("ext_table", "contents")?,
        })
    }
}

/// The code fragments of a stopped bytecode runtime, sorted: a word of a stack inside one is
/// a code pointer, not a value.
#[derive(Clone, Debug, Default)]
pub struct CodeFragments(Vec<(u64, u64)>);

impl CodeFragments {
    /// Reads the fragments, walking the skip list's bottom level from its head to its tail
    /// (pointers carry a deletion mark in their low bit, lf_skiplist.c `LF_SK_UNMARK`).
    pub fn read(l: &BytecodeLayout, bias: u64, source: &dyn MemorySource) -> Result<CodeFragments> {
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
        fragments.sort_unstable();
        Ok(CodeFragments(fragments))
    }

    /// Is `address` in a fragment's code (fiber.c: `caml_find_code_fragment_by_pc`)?
    pub fn contains(&self, address: u64) -> bool {
        let after = self.0.partition_point(|&(start, _)| start <= address);
        after > 0 && address < self.0[after - 1].1
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The C functions the interpreter calls for `C_CALL` instructions, as loaded: the
/// interpreter saves its stack pointer (`Setup_for_c_call`) before calling any of them.
pub fn primitives(l: &BytecodeLayout, bias: u64, source: &dyn MemorySource) -> Result<Vec<u64>> {
    let table = bias + l.prim_table;
    let size = source.read_i32(table + l.ext_table_size)?;
    let contents = source.read_u64(table + l.ext_table_contents)?;
    let count = usize::try_from(size)
        .ok()
        .filter(|&n| n <= MAX_PRIMITIVES)
        .ok_or_else(|| DumpError::Inconsistent(format!("caml_prim_table holds {size} primitives")))?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut functions = source.read_words(contents, count)?;
    functions.sort_unstable();
    functions.dedup();
    Ok(functions)
}

/// Is a stack word one the runtime scans as a value: a block, and no code pointer?
pub fn is_scannable(word: u64, code: &CodeFragments) -> bool {
    word & 1 == 0 && word != 0 && !code.contains(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_pointers_are_told_from_values_by_the_fragments() {
        let code = CodeFragments(vec![(0x1000, 0x2000), (0x5000, 0x5008)]);
        assert!(code.contains(0x1000) && code.contains(0x1ff8) && code.contains(0x5000));
        assert!(!code.contains(0x2000) && !code.contains(0xff8) && !code.contains(0x5008));
        assert!(!is_scannable(0x1008, &code), "a return address is not a value");
        assert!(is_scannable(0x3000, &code), "a block outside the code is");
        assert!(!is_scannable(0x3001, &code) && !is_scannable(0, &code), "integers and null are not");
    }
}
