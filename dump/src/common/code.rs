//! Where a stopped thread's program counter is: OCaml code, the runtime's assembly glue, or C;
//! the frame size of an OCaml function at any instruction (from `.eh_frame`); and whether the
//! thread is inside an inline allocation whose block is not yet fully written.

use crate::elf::Executable;
use gimli::{BaseAddresses, CfaRule, EhFrame, LittleEndian, UnwindContext, UnwindSection};
use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, OpKind, Register};
use std::collections::HashMap;

/// Where a program counter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeKind {
    /// Code compiled by ocamlopt.
    OCaml,
    /// The runtime's assembly glue (amd64.S: caml_call_gc, caml_c_call, stack switching...).
    System,
    /// Anything else: the C runtime, C stubs, libc.
    Other,
}

/// The executable's code, as the dumper needs to see it. Addresses are link-time.
pub struct CodeMap {
    /// `camlX.code_begin .. camlX.code_end` of every OCaml compilation unit, sorted.
    ocaml_units: Vec<(u64, u64)>,
    system: Option<(u64, u64)>,
    caml_call_gc: Option<u64>,
    /// caml_alloc1, caml_alloc2, caml_alloc3 (with their sizes in bytes) and caml_allocN (0).
    alloc_stubs: Vec<(u64, i64)>,
    text_address: u64,
    text: Vec<u8>,
    eh_frame_address: u64,
    eh_frame: Vec<u8>,
}

impl CodeMap {
    pub fn new(exe: &Executable) -> CodeMap {
        let mut begins: HashMap<&str, u64> = HashMap::new();
        let mut ends: HashMap<&str, u64> = HashMap::new();
        // `camlM.code_begin` in OCaml 5, `camlM__code_begin` in 4.14.
        for s in exe.symbols.iter().filter(|s| !s.name.starts_with("caml_system")) {
            if let Some(unit) = s.name.strip_suffix(".code_begin").or_else(|| s.name.strip_suffix("__code_begin")) {
                begins.insert(unit, s.address);
            } else if let Some(unit) = s.name.strip_suffix(".code_end").or_else(|| s.name.strip_suffix("__code_end")) {
                ends.insert(unit, s.address);
            }
        }
        let mut ocaml_units: Vec<(u64, u64)> =
            begins.iter().filter_map(|(u, &b)| ends.get(u).map(|&e| (b, e))).filter(|(b, e)| b < e).collect();
        ocaml_units.sort_unstable();
        let system = match (exe.symbol("caml_system__code_begin"), exe.symbol("caml_system__code_end")) {
            (Some(b), Some(e)) => Some((b.address, e.address)),
            _ => None,
        };
        let (text_address, text) = exe.section_data(".text").map(|(a, b)| (a, b.into_owned())).unwrap_or_default();
        let (eh_frame_address, eh_frame) = exe.section_data(".eh_frame").map(|(a, b)| (a, b.into_owned())).unwrap_or_default();
        CodeMap {
            ocaml_units,
            system,
            caml_call_gc: exe.symbol("caml_call_gc").map(|s| s.address),
            alloc_stubs: [("caml_alloc1", 16), ("caml_alloc2", 24), ("caml_alloc3", 32), ("caml_allocN", 0)]
                .iter()
                .filter_map(|&(name, size)| exe.symbol(name).map(|s| (s.address, size)))
                .collect(),
            text_address,
            text,
            eh_frame_address,
            eh_frame,
        }
    }

    pub fn kind(&self, pc: u64) -> CodeKind {
        if self.system.is_some_and(|(b, e)| (b..e).contains(&pc)) {
            return CodeKind::System;
        }
        let after = self.ocaml_units.partition_point(|&(b, _)| b <= pc);
        if after > 0 && pc < self.ocaml_units[after - 1].1 {
            CodeKind::OCaml
        } else {
            CodeKind::Other
        }
    }

    /// The canonical frame address of the function executing at (link-time) `pc` with
    /// registers `regs`: its return address is at `CFA - 8`. OCaml's unwind tables follow the
    /// switch to the C stack around `[@@noalloc]` calls (the CFA is then `rbx`-based).
    pub fn cfa(&self, pc: u64, regs: &crate::source::Registers) -> Option<u64> {
        if self.eh_frame.is_empty() {
            return None;
        }
        let eh = EhFrame::new(&self.eh_frame, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(self.eh_frame_address).set_text(self.text_address);
        let mut ctx = UnwindContext::new();
        let row = eh.unwind_info_for_address(&bases, &mut ctx, pc, EhFrame::cie_from_offset).ok()?;
        match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } if *offset >= 8 => {
                Some(crate::common::unwind::register(regs, register.0)?.wrapping_add(*offset as u64))
            }
            _ => None,
        }
    }

    fn code_at(&self, address: u64, len: usize) -> Option<&[u8]> {
        let start = address.checked_sub(self.text_address)? as usize;
        let end = (start + len).min(self.text.len());
        self.text.get(start..end)
    }

    /// Whether a thread stopped at `pc` (in OCaml code) is between the bump of the allocation
    /// pointer and the last store that initialises the new block(s): then the youngest block
    /// of its minor heap has a stale header or fields, and the world must not be copied now.
    ///
    /// ocamlopt (amd64) allocates with `sub $N,%r15; cmp (%r14),%r15; jb gc; lea 8(%r15),%rX`
    /// followed by the stores of the header(s) and fields; no call or poll comes in between.
    /// We find the nearest such sequence before `pc`, decode forward from it and track which
    /// of the N/8 words have been stored when `pc` is reached.
    pub fn in_allocation(&self, pc: u64) -> bool {
        // At the call of the GC stub, or at the jump back from it: the allocation pointer has
        // been bumped (or is being re-bumped by the runtime) and nothing is written yet.
        if self.is_gc_stub(pc) {
            return true;
        }
        const LOOK_BACK: u64 = 4096;
        let start = pc.saturating_sub(LOOK_BACK).max(self.text_address);
        // The bytes before pc, and a few after it: pc may be on the compare that follows.
        let before = (pc - start) as usize;
        let Some(window) = self.code_at(start, before + 8) else { return false };
        // Candidates, nearest first: `sub $imm8,%r15` (49 83 ef ib) or `sub $imm32,%r15`
        // (49 81 ef id), each followed by `cmp (%r14),%r15` (4d 3b 3e); or, in functions
        // compiled for size (module initialisers), a call to caml_alloc1/2/3 or, after such a
        // `sub`, to caml_allocN, which bump r15 themselves. (start of the stores, size)
        let mut candidates: Vec<(u64, i64)> = Vec::new();
        let sub_at = |i: usize| -> Option<(usize, i64)> {
            if window.get(i) != Some(&0x49) || window.get(i + 2) != Some(&0xef) {
                return None;
            }
            match window.get(i + 1)? {
                0x83 => Some((i + 4, *window.get(i + 3)? as i8 as i64)),
                0x81 => Some((i + 7, i32::from_le_bytes(window.get(i + 3..i + 7)?.try_into().ok()?) as i64)),
                _ => None,
            }
        };
        for i in 0..before.min(window.len().saturating_sub(3)) {
            if let Some((next, size)) = sub_at(i) {
                if window.get(next..next + 3) == Some(&[0x4d, 0x3b, 0x3e]) {
                    candidates.push((start + next as u64, size));
                }
            }
            if window[i] == 0xe8 && i + 5 <= before {
                let rel = i32::from_le_bytes(window[i + 1..i + 5].try_into().expect("4 bytes")) as i64;
                let target = (start as i64 + i as i64 + 5 + rel) as u64;
                if let Some(&(_, size)) = self.alloc_stubs.iter().find(|(a, _)| *a == target) {
                    let size = if size > 0 {
                        size
                    } else {
                        // caml_allocN: the size is in the `sub` just before the call.
                        (i.saturating_sub(7)..i).find_map(|j| sub_at(j).filter(|(n, _)| *n == i).map(|(_, s)| s)).unwrap_or(0)
                    };
                    if size > 0 {
                        candidates.push((start + i as u64 + 5, size));
                    }
                }
            }
        }
        match candidates.last() {
            Some(&(site, size)) => self.window_open_at(site, size, pc),
            None => false,
        }
    }

    fn is_gc_stub(&self, pc: u64) -> bool {
        let Some(gc) = self.caml_call_gc else { return false };
        let calls_gc = |at: u64| -> bool {
            let Some(bytes) = self.code_at(at, 5) else { return false };
            bytes.len() == 5 && bytes[0] == 0xe8 && {
                let rel = i32::from_le_bytes(bytes[1..5].try_into().expect("4 bytes")) as i64;
                (at as i64 + 5 + rel) as u64 == gc
            }
        };
        calls_gc(pc) || (pc >= 5 && calls_gc(pc - 5))
    }

    /// Decodes from `site`, just after `size` bytes were allocated by bumping r15, up to `pc`;
    /// true if some allocated word is still unwritten when `pc` is reached.
    fn window_open_at(&self, site: u64, size: i64, pc: u64) -> bool {
        if size <= 0 || size % 8 != 0 {
            return false;
        }
        if pc == site {
            return true;
        }
        let Some(bytes) = self.code_at(site, (pc - site) as usize + 16) else { return false };
        let mut decoder = Decoder::with_ip(64, bytes, site, DecoderOptions::NONE);
        let mut insn = Instruction::default();
        let mut pending: Vec<i64> = (0..size / 8).map(|w| w * 8).collect();
        // Registers that hold r15 + offset.
        let mut aliases: HashMap<Register, i64> = HashMap::from([(Register::R15, 0)]);
        while decoder.can_decode() {
            decoder.decode_out(&mut insn);
            if insn.is_invalid() {
                return false;
            }
            if insn.ip() == pc {
                return !pending.is_empty();
            }
            if insn.ip() > pc {
                return false; // not on an instruction boundary from here: not this sequence
            }
            match insn.flow_control() {
                FlowControl::Next | FlowControl::ConditionalBranch => {}
                // A call, jump or return ends straight-line initialisation.
                _ => return false,
            }
            let is_store = insn.op_count() >= 1 && insn.op0_kind() == OpKind::Memory;
            if is_store {
                let base = insn.memory_base();
                if let (Some(&offset), Register::None) = (aliases.get(&base), insn.memory_index()) {
                    let at = offset + insn.memory_displacement64() as i64;
                    if insn.memory_size().size() >= 8 {
                        pending.retain(|&w| w != at);
                    }
                }
            } else if insn.op_count() >= 1 && insn.op0_kind() == OpKind::Register {
                let dst = insn.op0_register().full_register();
                let new_alias = match insn.code() {
                    Code::Lea_r64_m if insn.memory_index() == Register::None => {
                        aliases.get(&insn.memory_base()).map(|o| o + insn.memory_displacement64() as i64)
                    }
                    Code::Mov_r64_rm64 | Code::Mov_rm64_r64 if insn.op1_kind() == OpKind::Register => {
                        aliases.get(&insn.op1_register()).copied()
                    }
                    Code::Cmp_r64_rm64 | Code::Cmp_rm64_r64 | Code::Test_rm64_r64 => aliases.get(&dst).copied(),
                    _ => None,
                };
                match new_alias {
                    Some(o) => {
                        aliases.insert(dst, o);
                    }
                    None => {
                        aliases.remove(&dst);
                    }
                }
            }
            if pending.is_empty() {
                return false;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(code: &[u8]) -> CodeMap {
        CodeMap {
            ocaml_units: vec![(0x1000, 0x1000 + code.len() as u64)],
            system: None,
            caml_call_gc: Some(0x9000),
            alloc_stubs: vec![(0x9100, 16), (0x9200, 24), (0x9300, 32), (0x9400, 0)],
            text_address: 0x1000,
            text: code.to_vec(),
            eh_frame_address: 0,
            eh_frame: Vec::new(),
        }
    }

    // The allocation from camlCache_leak.lookup (ocamlopt 5.3):
    //   0: sub $0x20,%r15        49 83 ef 20
    //   4: cmp (%r14),%r15       4d 3b 3e
    //   7: jb  +0x20             72 20
    //   9: lea 0x8(%r15),%rdi    49 8d 7f 08
    //   d: mov %rdi,0x10(%rsp)   48 89 7c 24 10
    //  12: movq $0xc00,-0x8(%rdi) 48 c7 47 f8 00 0c 00 00
    //  1a: mov (%rsp),%rbx       48 8b 1c 24
    //  1e: mov %rbx,(%rdi)       48 89 1f
    //  21: mov %rax,0x8(%rdi)    48 89 47 08
    //  25: movq $0x1,0x10(%rdi)  48 c7 47 10 01 00 00 00
    //  2d: ret                   c3
    const ALLOC: &[u8] = &[
        0x49, 0x83, 0xef, 0x20, 0x4d, 0x3b, 0x3e, 0x72, 0x20, 0x49, 0x8d, 0x7f, 0x08, 0x48, 0x89, 0x7c, 0x24, 0x10, 0x48, 0xc7, 0x47, 0xf8,
        0x00, 0x0c, 0x00, 0x00, 0x48, 0x8b, 0x1c, 0x24, 0x48, 0x89, 0x1f, 0x48, 0x89, 0x47, 0x08, 0x48, 0xc7, 0x47, 0x10, 0x01, 0x00, 0x00,
        0x00, 0xc3,
    ];

    #[test]
    fn detects_the_initialisation_window() {
        let m = map(ALLOC);
        let at = |off: u64| m.in_allocation(0x1000 + off);
        assert!(!at(0x0), "before the bump");
        for inside in [0x4, 0x7, 0x9, 0xd, 0x12, 0x1a, 0x1e, 0x21, 0x25] {
            assert!(at(inside), "at +{inside:#x}");
        }
        assert!(!at(0x2d), "after the last field store");
    }

    #[test]
    fn detects_the_window_after_caml_alloc1() {
        //   0: call caml_alloc1 (0x9100)   e8 fb 80 00 00
        //   5: lea 0x8(%r15),%rax          49 8d 47 08
        //   9: movq $0x400,-0x8(%rax)      48 c7 40 f8 00 04 00 00
        //  11: mov %rbx,(%rax)             48 89 18
        //  14: ret                         c3
        let code =
            [0xe8, 0xfb, 0x80, 0x00, 0x00, 0x49, 0x8d, 0x47, 0x08, 0x48, 0xc7, 0x40, 0xf8, 0x00, 0x04, 0x00, 0x00, 0x48, 0x89, 0x18, 0xc3];
        let m = map(&code);
        assert!(!m.in_allocation(0x1000));
        for inside in [0x5, 0x9, 0x11] {
            assert!(m.in_allocation(0x1000 + inside), "at +{inside:#x}");
        }
        assert!(!m.in_allocation(0x1014));
    }

    #[test]
    fn kinds() {
        let m = map(ALLOC);
        assert_eq!(m.kind(0x1004), CodeKind::OCaml);
        assert_eq!(m.kind(0x8000), CodeKind::Other);
    }
}
