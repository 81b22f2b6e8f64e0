//! The roots a bytecode program has that a native one has not, found the same way in every
//! release once its family has read where the runtime keeps them: the words of an
//! interpreter's stack that hold values, named by the frame they belong to; the fields of the
//! units' module blocks in `caml_global_data`, named as native code names its globals; the
//! toplevel's bindings; and the code's functions as symbols.

use super::bytecode::{is_scannable, BytecodeProgram, CodeFragments};
use super::bytecode_file::Global;
use super::copied_world::{CapturedRoot, RootName};
use super::regions::CapturedRegion;
use crate::error::Result;
use crate::source::{MemorySource, ReadExt};
use heapsnap_format::{RootKind, NO_DOMAIN, ROOT_FLAG_BINDING};
use heapsnap_values::HeaderFormat;

/// A bytecode program as it runs: what was read of it before the stop, its code fragments,
/// and where its main code starts (`caml_start_code`: its functions' and frames' offsets are
/// from there).
pub struct RunningBytecode<'a> {
    pub program: &'a BytecodeProgram,
    pub code: &'a CodeFragments,
    pub code_start: u64,
}

/// A word of an interpreter's stack that holds a value.
#[derive(Clone, Debug, PartialEq)]
pub struct StackRoot {
    pub slot: u64,
    pub value: u64,
    /// The code pointer of the frame holding it.
    pub frame_pc: u64,
    pub name: RootName,
    pub flags: u32,
}

impl RunningBytecode<'_> {
    /// An interpreter's stack, the `words` from `sp` up, as the runtime scans it (fiber.c's
    /// bytecode `caml_scan_stack` in OCaml 5, `caml_do_local_roots_byt` in 4.14): every word
    /// that is a block and no code pointer is a root. Each is attributed to the code pointer
    /// nearest below it, the return address pushed under the frame that holds it
    /// (`Setup_for_c_call` pushes the current pc under the innermost frame); words below every
    /// code pointer, to the first one above. A variable of a unit's initialisation is named as
    /// the binding (`Main.cache`) and flagged so.
    pub fn stack_roots(&self, sp: u64, words: &[u64]) -> Vec<StackRoot> {
        let code = self.code;
        let mut frame_pc = words.iter().copied().find(|&w| w & 1 == 0 && code.contains(w)).unwrap_or(0);
        // Where the frame's code pointer is, once past the innermost frame (whose layout is the
        // call's into C: `Setup_for_c_call` or `Setup_for_event`).
        let mut frame_at = None;
        let mut innermost = true;
        let mut roots = Vec::new();
        for (i, &word) in words.iter().enumerate() {
            if word & 1 == 0 && code.contains(word) {
                frame_pc = word;
                frame_at = (!innermost).then_some(i);
                innermost = false;
                continue;
            }
            if !is_scannable(word, code) {
                continue;
            }
            // A frame is `pc, env, extra_args, locals...` (debugger.c `Locals`).
            let local = frame_at.and_then(|at| (i as u64).checked_sub(at as u64 + 3));
            let offset = frame_pc.wrapping_sub(self.code_start);
            let binding = match (local, self.program.frames.get(&offset)) {
                (Some(local), Some(v)) => v.initialising.as_ref().zip(v.local(local)),
                _ => None,
            };
            let (name, flags) = match binding {
                Some((unit, variable)) => (RootName::Text(format!("{unit}.{variable}")), ROOT_FLAG_BINDING),
                // Named by the bytecode's functions only: the interpreter's own symbols do not
                // name bytecode (an executable linked with it holds its code as data).
                None => (self.program.function_at(offset).map_or(RootName::None, |f| RootName::Text(f.to_string())), 0),
            };
            roots.push(StackRoot { slot: sp + 8 * i as u64, value: word, frame_pc, name, flags });
        }
        roots
    }

    /// The globals of the table `caml_global_data` (at `data`): each slot that holds a
    /// compilation unit's module block. Each field of such a block is a root of its own, named
    /// as native code names the unit's (`camlStdlib__List`), so that reports name a global
    /// alike in both; what they reach is reachable from `caml_global_data` anyway, so these
    /// roots change attribution, not reachability. A slot not yet set (a unit still
    /// initialising) holds no block. The toplevel's bindings, read from the copied heap
    /// (`regions`), are roots too.
    pub fn global_roots(
        &self,
        source: &dyn MemorySource,
        data: u64,
        format: HeaderFormat,
        regions: &[CapturedRegion],
        roots: &mut Vec<CapturedRoot>,
        warnings: &mut Vec<String>,
    ) -> Result<()> {
        if data & 1 == 1 || data == 0 {
            return Ok(());
        }
        let slots = format.wosize(source.read_u64(data - 8)?);
        for (slot, global) in &self.program.globals {
            let Global::Unit(unit) = global else { continue };
            if *slot as u64 >= slots {
                warnings
                    .push(format!("the table of globals names slot {slot} ({unit}), past caml_global_data's {slots}: globals not named"));
                return Ok(());
            }
            let block = source.read_u64(data + 8 * *slot as u64)?;
            if block & 1 == 1 || block == 0 {
                continue;
            }
            let fields = source.read_words(block, format.wosize(source.read_u64(block - 8)?) as usize)?;
            for (k, value) in fields.into_iter().enumerate() {
                let name = RootName::Text(format!("caml{unit}"));
                let (slot, origin) = (block + 8 * k as u64, k as u64);
                roots.push(CapturedRoot { kind: RootKind::Global, domain: NO_DOMAIN, flags: 0, thread: 0, slot, value, origin, name });
            }
            // The toplevel keeps the session's bindings in a table of its own, in Topeval,
            // which Toploop includes (and `ocaml` keeps only Toploop's name: `expunge`d).
            let toplevel = unit == "Topeval" || unit == "Toploop";
            if toplevel && !roots.iter().any(|r| r.flags & ROOT_FLAG_BINDING != 0 && r.kind == RootKind::Global) {
                let function_at = |pc: u64| self.program.function_at(pc.wrapping_sub(self.code_start)).map(str::to_string);
                roots.extend(super::toplevel::bindings(regions, block, format, function_at));
            }
        }
        Ok(())
    }

    /// The bytecode's functions as symbols at their addresses in the running code, so that
    /// code pointers (closures, frames) are named as in native code.
    pub fn function_symbols(&self) -> Vec<crate::elf::Symbol> {
        let start = self.code_start;
        self.program
            .functions
            .iter()
            .map(|(offset, size, name)| crate::elf::Symbol {
                name: name.clone(),
                address: start + offset,
                size: *size,
                is_function: true,
                is_global: false,
                file: None,
            })
            .collect()
    }
}
