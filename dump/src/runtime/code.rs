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
    text_address: u64,
    text: Vec<u8>,
    eh_frame_address: u64,
    eh_frame: Vec<u8>,
}

impl CodeMap {
    pub fn new(exe: &Executable) -> CodeMap {
        let mut begins: HashMap<&str, u64> = HashMap::new();
        let mut ends: HashMap<&str, u64> = HashMap::new();
        for s in &exe.symbols {
            if let Some(unit) = s.name.strip_suffix(".code_begin") {
                begins.insert(unit, s.address);
            } else if let Some(unit) = s.name.strip_suffix(".code_end") {
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
        let (eh_frame_address, eh_frame) =
            exe.section_data(".eh_frame").map(|(a, b)| (a, b.into_owned())).unwrap_or_default();
        CodeMap {
            ocaml_units,
            system,
            caml_call_gc: exe.symbol("caml_call_gc").map(|s| s.address),
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

    /// `CFA - rsp` at `pc`: the return address of the function executing at `pc` is at
    /// `rsp + offset - 8`. `None` when the unwind table does not say it that simply.
    pub fn cfa_offset(&self, pc: u64) -> Option<u64> {
        if self.eh_frame.is_empty() {
            return None;
        }
        let eh = EhFrame::new(&self.eh_frame, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(self.eh_frame_address).set_text(self.text_address);
        let mut ctx = UnwindContext::new();
        let row = eh.unwind_info_for_address(&bases, &mut ctx, pc, EhFrame::cie_from_offset).ok()?;
        match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } if *register == gimli::X86_64::RSP && *offset >= 8 => {
                Some(*offset as u64)
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
        // (49 81 ef id), each followed by `cmp (%r14),%r15` (4d 3b 3e).
        let mut candidates = Vec::new();
        for i in 0..before.min(window.len().saturating_sub(3)) {
            if window[i] == 0x49 && window[i + 2] == 0xef {
                let cmp_at = match window[i + 1] {
                    0x83 => i + 4,
                    0x81 => i + 7,
                    _ => continue,
                };
                if window.get(cmp_at..cmp_at + 3) == Some(&[0x4d, 0x3b, 0x3e]) {
                    candidates.push(start + i as u64);
                }
            }
        }
        match candidates.last() {
            Some(&site) => self.window_open_at(site, pc),
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

    /// Decodes from the allocation at `site` up to `pc`; true if some allocated word is still
    /// unwritten when `pc` is reached.
    fn window_open_at(&self, site: u64, pc: u64) -> bool {
        let Some(bytes) = self.code_at(site, (pc - site) as usize + 16) else { return false };
        let mut decoder = Decoder::with_ip(64, bytes, site, DecoderOptions::NONE);
        let mut insn = Instruction::default();
        let mut pending: Vec<i64> = Vec::new();
        // Registers that hold r15 + offset.
        let mut aliases: HashMap<Register, i64> = HashMap::new();
        let mut first = true;
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
            if first {
                first = false;
                let size = insn.immediate(1) as i64;
                if !matches!(insn.code(), Code::Sub_rm64_imm8 | Code::Sub_rm64_imm32)
                    || insn.op0_register() != Register::R15
                    || size <= 0
                    || size % 8 != 0
                {
                    return false;
                }
                pending = (0..size / 8).map(|w| w * 8).collect();
                aliases.insert(Register::R15, 0);
                continue;
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
        0x49, 0x83, 0xef, 0x20, 0x4d, 0x3b, 0x3e, 0x72, 0x20, 0x49, 0x8d, 0x7f, 0x08, 0x48, 0x89, 0x7c, 0x24, 0x10,
        0x48, 0xc7, 0x47, 0xf8, 0x00, 0x0c, 0x00, 0x00, 0x48, 0x8b, 0x1c, 0x24, 0x48, 0x89, 0x1f, 0x48, 0x89, 0x47,
        0x08, 0x48, 0xc7, 0x47, 0x10, 0x01, 0x00, 0x00, 0x00, 0xc3,
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
    fn kinds() {
        let m = map(ALLOC);
        assert_eq!(m.kind(0x1004), CodeKind::OCaml);
        assert_eq!(m.kind(0x8000), CodeKind::Other);
    }
}
