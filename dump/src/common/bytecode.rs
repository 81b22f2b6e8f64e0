//! What every runtime running bytecode (`ocamlrun`, or an executable with the interpreter
//! linked in) has that a native one has not, read the same way in every release: the
//! program's bytecode and its names (globals, functions, frames' variables: see
//! [`super::bytecode_file`]), where code pointers sit among a stack's values (the code
//! fragments), and the primitives through which the interpreter calls C. Where each release
//! keeps these is its family's business (`crate::ocaml5::bytecode`).

use super::bytecode_file::{functions, globals_of_section_table, BytecodeSections, DebugEvent, Global};
use super::unwind::{Frame, Unwinder};
use crate::debuginfo::DebugSearch;
use crate::elf::Executable;
use crate::error::{DumpError, Result};
use crate::source::{FileIdentity, FileView, Mapping, MemorySource, ReadExt, Registers};
use std::collections::HashMap;
use std::path::PathBuf;

/// The most primitives read from `caml_prim_table` (a release has about 400).
const MAX_PRIMITIVES: usize = 1 << 16;

/// What the dumper knows of a bytecode program before it stops it.
#[derive(Clone, Debug)]
pub struct BytecodeProgram {
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
    /// `exe_name` is where the runtime keeps the name of the file it opened (a `char *`).
    pub fn find(exe: &Executable, bias: u64, source: &dyn MemorySource, exe_name: u64) -> BytecodeProgram {
        let mut notes = Vec::new();
        let mut frames = HashMap::new();
        let (globals, from, functions) = match read_program(exe, bias, source, exe_name) {
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
        BytecodeProgram { globals, from, functions, frames, notes }
    }
}

type Globals = Vec<(usize, Global)>;
type Events = Option<std::result::Result<Vec<DebugEvent>, String>>;

/// The table of globals and the debug events, and where they were read.
fn read_program(
    exe: &Executable,
    bias: u64,
    source: &dyn MemorySource,
    exe_name: u64,
) -> std::result::Result<(Globals, String, Events), String> {
    if let Some(sections) = BytecodeSections::parse(exe.data().to_vec()) {
        return Ok((sections.globals()?, exe.path.display().to_string(), sections.debug_events()));
    }
    if let Some(table) = exe.symbol("caml_sections").filter(|s| s.size > 0) {
        let bytes = source.read_bytes(bias + table.address, table.size as usize).map_err(|e| format!("caml_sections: {e}"))?;
        // The section table linked into the executable has no debug events.
        return Ok((globals_of_section_table(&bytes)?, format!("{}'s caml_sections", exe.path.display()), None));
    }
    let name =
        source.read_u64(exe_name).and_then(|p| source.read_c_string(p, 4096)).map_err(|e| format!("the interpreter's exe_name: {e}"))?;
    let path = PathBuf::from(&name);
    // The target's own file: a relative path is its working directory's, and the path is
    // resolved inside its root.
    let view = FileView::of(source);
    if path.is_relative() && view == FileView::Here {
        return Err(format!("the bytecode file {name} is relative, and the target's working directory unknown"));
    }
    let sections = match view.read(&path).map(BytecodeSections::parse) {
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
    /// The fragments `(start, end)`, in any order.
    pub fn new(mut fragments: Vec<(u64, u64)>) -> CodeFragments {
        fragments.sort_unstable();
        CodeFragments(fragments)
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

/// The C functions the interpreter calls for `C_CALL` instructions, as loaded in the
/// runtime's `caml_prim_table` (an `ext_table`: `size`, then `contents` at the offsets given):
/// the interpreter saves its stack pointer (`Setup_for_c_call`) before calling any of them.
pub fn primitives(table: u64, (size_at, contents_at): (u64, u64), source: &dyn MemorySource) -> Result<Vec<u64>> {
    let size = source.read_i32(table + size_at)?;
    let contents = source.read_u64(table + contents_at)?;
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

/// Where a thread of a bytecode program was stopped, as far as the interpreter is concerned.
pub enum InterpreterStop {
    /// In the interpreter's own code, which keeps its stack pointer, accumulator and
    /// environment in registers.
    Interpreting,
    /// In C code that could not be unwound (the pc is said).
    NotUnwound(u64),
    /// In C code: its frames, innermost first, down to the interpreter's frame if it was
    /// called from bytecode (`called` is then an address in the function the interpreter
    /// called, whose frame is the last of `c_frames`).
    InC { c_frames: Vec<Frame>, called: Option<u64> },
}

/// Where the thread with registers `regs` was stopped: in the interpreter (the function of
/// `exe`, loaded `bias` away) or in C code, unwound up to the interpreter's frame.
pub fn interpreter_stop(unwinder: &Unwinder, source: &dyn MemorySource, regs: &Registers, exe: &Executable, bias: u64) -> InterpreterStop {
    let Some(interpreter) = super::program::interpreter_symbol(exe) else { return InterpreterStop::NotUnwound(regs.rip) };
    let start = bias.wrapping_add(interpreter.address);
    let interpreting = |pc: u64| (start..start + interpreter.size.max(1)).contains(&pc);
    if interpreting(regs.rip) {
        return InterpreterStop::Interpreting;
    }
    let Some(mut frames) = unwinder.unwind(source, regs, 256, |pc| !interpreting(pc)) else {
        return InterpreterStop::NotUnwound(regs.rip);
    };
    if !frames.last().is_some_and(|f| interpreting(f.pc)) {
        return InterpreterStop::InC { c_frames: frames, called: None };
    }
    frames.pop();
    // A return address may be the first byte after its function: look the call up.
    let called = frames.last().map(|f| if frames.len() == 1 { f.pc } else { f.pc.wrapping_sub(1) });
    InterpreterStop::InC { c_frames: frames, called }
}

/// Whether the interpreter saved its stack pointer before calling the function at `at`
/// (named `name`): a primitive (one of `primitives`, matched by the function's start as
/// the unwind tables give it, so that primitives in shared libraries count too), or one of
/// the runtime functions `saves_for` lists, which its release's interp.c calls after
/// `Setup_for_c_call` or `Setup_for_event`.
pub fn saved_before_calling(unwinder: &Unwinder, at: u64, name: &str, primitives: &[u64], saves_for: &[&str]) -> bool {
    unwinder.function_start(at).is_some_and(|s| primitives.binary_search(&s).is_ok()) || saves_for.contains(&name)
}

/// The file name of systhreads as a shared library: `ocamlrun` loads it for a bytecode program
/// linked with `threads.cma` (`-custom` links its code into the executable instead).
pub const SYSTHREADS_LIBRARY: &str = "dllthreads.so";

/// A shared library the target loaded, opened with its debug info, and how far it was moved.
pub struct LoadedLibrary {
    pub file: Executable,
    pub bias: u64,
}

/// systhreads as a bytecode program loaded it ([`SYSTHREADS_LIBRARY`]), if it did. Its thread
/// table and its structures' layouts are read through its own DWARF: a library without it is
/// refused.
pub fn systhreads_library(source: &dyn MemorySource) -> Result<Option<LoadedLibrary>> {
    let mappings = source.mappings()?;
    let is_systhreads = |m: &&Mapping| m.path.as_ref().is_some_and(|p| p.file_name().is_some_and(|n| n == SYSTHREADS_LIBRARY));
    let Some(loaded) = mappings.iter().filter(is_systhreads).min_by_key(|m| (m.offset, m.start)) else { return Ok(None) };
    let path = loaded.path.clone().unwrap_or_default();
    let view = FileView::of(source);
    let opened = view.open_mapped(loaded).map_err(|source| DumpError::Io { path: path.clone(), source })?;
    let mut file = Executable::open_target_file(opened)?;
    let search = DebugSearch { target: view, exe_is_targets: true, debug_root: PathBuf::from(crate::debuginfo::DEBUG_ROOT) };
    crate::debuginfo::attach(&mut file, None, &search)?;
    if !file.has_dwarf() {
        return Err(DumpError::BytecodeLibraryUnsupported {
            library: path.display().to_string(),
            why: "it has no DWARF debug info, through which heapsnap reads its thread table".into(),
        });
    }
    let bias = file.load_bias(&mappings, &FileIdentity::named(&path))?;
    file.check_loaded(bias, source).map_err(|why| DumpError::BytecodeLibraryUnsupported { library: path.display().to_string(), why })?;
    Ok(Some(LoadedLibrary { file, bias }))
}

/// The refusal of a bytecode program whose `caml_scan_roots_hook` (at `hook`) is not
/// systhreads': the library that installed it scans roots of its own.
pub fn unknown_hook(source: &dyn MemorySource, hook: u64) -> Result<DumpError> {
    let library = source.mappings()?.into_iter().find(|m| m.start <= hook && hook < m.end).and_then(|m| m.path);
    Ok(DumpError::BytecodeLibraryUnsupported {
        library: library.map_or_else(|| format!("the code at {hook:#x}"), |p| p.display().to_string()),
        why: "it scans roots of its own (caml_scan_roots_hook), which heapsnap does not know".into(),
    })
}

/// A loaded library's code: its source files (from its DWARF) and its symbols, at their
/// addresses in the target.
pub struct LibraryCode {
    /// (begin, end, file name), target addresses, sorted.
    units: Vec<(u64, u64, String)>,
    file: Executable,
    bias: u64,
}

impl LibraryCode {
    /// The code of `library`, whose DWARF is `types`.
    pub fn new(library: LoadedLibrary, types: &crate::dwarf::TypeIndex) -> LibraryCode {
        let bias = library.bias;
        let file_name = |f: String| f.rsplit('/').next().map(str::to_string).unwrap_or(f);
        let mut units: Vec<_> =
            types.code_units().into_iter().map(|(b, e, f)| (b.wrapping_add(bias), e.wrapping_add(bias), file_name(f))).collect();
        units.sort_unstable();
        LibraryCode { units, file: library.file, bias }
    }

    /// The source file of the library's code at target address `address`, if it is the
    /// library's.
    pub fn file_at(&self, address: u64) -> Option<&str> {
        let after = self.units.partition_point(|u| u.0 <= address);
        self.units[..after].iter().rev().take(8).find(|u| address < u.1).map(|u| u.2.as_str())
    }

    /// The library's function or variable holding target address `address`, if any.
    pub fn symbol_name_at(&self, address: u64) -> Option<&str> {
        self.file.symbol_at(address.wrapping_sub(self.bias)).map(|s| s.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_pointers_are_told_from_values_by_the_fragments() {
        let code = CodeFragments::new(vec![(0x5000, 0x5008), (0x1000, 0x2000)]);
        assert!(code.contains(0x1000) && code.contains(0x1ff8) && code.contains(0x5000));
        assert!(!code.contains(0x2000) && !code.contains(0xff8) && !code.contains(0x5008));
        assert!(!is_scannable(0x1008, &code), "a return address is not a value");
        assert!(is_scannable(0x3000, &code), "a block outside the code is");
        assert!(!is_scannable(0x3001, &code) && !is_scannable(0, &code), "integers and null are not");
    }
}
