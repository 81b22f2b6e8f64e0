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

use crate::common::bytecode_file::{functions, globals_of_section_table, BytecodeSections, DebugEvent, Global};
use crate::dwarf::TypeIndex;
use crate::elf::Executable;
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};
use std::collections::HashMap;
use std::path::PathBuf;

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

/// What the dumper knows of a bytecode program before it stops it.
#[derive(Clone, Debug)]
pub struct BytecodeProgram {
    pub layout: BytecodeLayout,
    /// Which compilation unit (or predefined exception) each slot of `caml_global_data`
    /// holds, from the program's table of globals; empty when it could not be read (`note`
    /// says why).
    pub globals: Vec<(usize, Global)>,
    /// Where the table of globals was read.
    pub from: Option<String>,
    /// The code's functions, named by the debug events: (offset in the main code, length,
    /// name); empty without debug events.
    pub functions: Vec<(u64, u64, String)>,
    /// The frames' variables at each return point, by offset in the main code (events with
    /// variables in the stack).
    pub frames: HashMap<u64, FrameVariables>,
    /// What the report says once about what could not be read.
    pub notes: Vec<String>,
}

impl BytecodeProgram {
    /// The function holding `offset` of the main code, by the debug events.
    pub fn function_at(&self, offset: u64) -> Option<&str> {
        let after = self.functions.partition_point(|f| f.0 <= offset);
        let (start, size, name) = self.functions.get(after.checked_sub(1)?)?;
        (offset < start + size).then_some(name.as_str())
    }
}

/// What the debug event at a return point says of the frame that returns there.
#[derive(Clone, Debug)]
pub struct FrameVariables {
    /// The frame runs a compilation unit's initialisation (named so).
    pub initialising: Option<String>,
    pub stack_size: u32,
    pub locals: Vec<(String, u32)>,
}

impl FrameVariables {
    /// The variable in local `index` of the frame (`Locals(frame)[index]`, debugger.c).
    pub fn local(&self, index: u64) -> Option<&str> {
        self.locals
            .iter()
            .find(|(_, position)| u64::from(self.stack_size).checked_sub(u64::from(*position)) == Some(index))
            .map(|(n, _)| n.as_str())
    }
}

/// The frames' variables of the debug events that have some.
fn frame_variables(events: &[DebugEvent]) -> HashMap<u64, FrameVariables> {
    let mut frames = HashMap::new();
    for e in events.iter().filter(|e| !e.locals.is_empty()) {
        frames.entry(e.pos).or_insert_with(|| FrameVariables {
            initialising: (e.defname == e.module).then(|| e.module.clone()),
            stack_size: e.stack_size,
            locals: e.locals.clone(),
        });
    }
    frames
}

impl BytecodeProgram {
    /// Finds the program's bytecode and reads its table of globals: in the executable itself
    /// (`-custom`: the bytecode follows the interpreter), in its `caml_sections` array
    /// (`-output-complete-exe`), or in the file the interpreter opened (`params.exe_name`,
    /// relative to the target's working directory when it is relative). A file whose code is
    /// not the size of the running code is another build: not used.
    pub fn find(layout: BytecodeLayout, exe: &Executable, bias: u64, source: &dyn MemorySource) -> BytecodeProgram {
        let mut notes = Vec::new();
        let mut frames = HashMap::new();
        let (globals, from, functions) = match read_program(&layout, exe, bias, source) {
            Ok((globals, from, events)) => {
                let functions = match events {
                    Some(Ok(events)) => {
                        frames = frame_variables(&events);
                        functions(&events)
                    }
                    Some(Err(why)) => {
                        notes.push(format!("the bytecode's debug events could not be read ({why}): its frames and closures are not named"));
                        Vec::new()
                    }
                    None => {
                        notes.push(format!("{from} has no debug events (ocamlc -g): its frames and closures are not named"));
                        Vec::new()
                    }
                };
                (globals, Some(from), functions)
            }
            Err(why) => {
                notes.push(format!("the bytecode's globals, frames and closures are not named: {why}"));
                (Vec::new(), None, Vec::new())
            }
        };
        BytecodeProgram { layout, globals, from, functions, frames, notes }
    }
}

type Globals = Vec<(usize, Global)>;
type Events = Option<std::result::Result<Vec<DebugEvent>, String>>;

/// The table of globals and the debug events, and where they were read.
fn read_program(
    l: &BytecodeLayout,
    exe: &Executable,
    bias: u64,
    source: &dyn MemorySource,
) -> std::result::Result<(Globals, String, Events), String> {
    if let Ok(Some(sections)) = BytecodeSections::read(&exe.path) {
        return Ok((sections.globals()?, exe.path.display().to_string(), sections.debug_events()));
    }
    if let Some(table) = exe.symbol("caml_sections").filter(|s| s.size > 0) {
        let bytes = source.read_bytes(bias + table.address, table.size as usize).map_err(|e| format!("caml_sections: {e}"))?;
        // The section table linked into the executable has no debug events.
        return Ok((globals_of_section_table(&bytes)?, format!("{}'s caml_sections", exe.path.display()), None));
    }
    let name = source
        .read_u64(bias + l.exe_name)
        .and_then(|p| source.read_c_string(p, 4096))
        .map_err(|e| format!("the interpreter's exe_name: {e}"))?;
    let mut path = PathBuf::from(&name);
    if path.is_relative() {
        let cwd = source.pid().map(|pid| PathBuf::from(format!("/proc/{pid}/cwd")));
        path = cwd.ok_or_else(|| format!("the bytecode file {name} is relative, and the target's working directory unknown"))?.join(path);
    }
    let sections = match BytecodeSections::read(&path) {
        Ok(Some(s)) => s,
        Ok(None) => return Err(format!("{} is not a bytecode file", path.display())),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let running = exe.symbol("caml_code_size").map(|s| source.read_u64(bias + s.address));
    let in_file = sections.section("CODE").map_or(0, |c| c.len() as u64);
    if let Some(Ok(running)) = running {
        if running != in_file {
            return Err(format!("{} holds {in_file} bytes of code, the program runs {running}: another build", path.display()));
        }
    }
    Ok((sections.globals()?, path.display().to_string(), sections.debug_events()))
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
