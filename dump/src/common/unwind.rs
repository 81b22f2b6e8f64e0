//! Unwinding the C frames of a stopped thread with the `.eh_frame` tables of the executable and
//! of the shared libraries it maps (libc...), to learn which runtime functions are active and
//! what the registers were in the OCaml frame that called into C.

use crate::elf::build_id_loaded;
use crate::source::{FileView, Mapping, MemorySource, ReadExt, Registers, TargetFile};
use gimli::{BaseAddresses, CfaRule, EhFrame, LittleEndian, RegisterRule, UnwindContext, UnwindSection};
use object::{Object, ObjectSection, ObjectSegment};
use std::collections::HashMap;
use std::path::PathBuf;

/// One mapped ELF file's unwind table.
struct Module {
    /// Target address range of its executable mapping(s).
    start: u64,
    end: u64,
    bias: u64,
    eh_frame_address: u64,
    text_address: u64,
    eh_frame: Vec<u8>,
}

/// The unwind tables of every executable mapping of the target.
pub struct Unwinder {
    modules: Vec<Module>,
}

/// One frame: its program counter and the registers as they were in it.
#[derive(Clone, Debug)]
pub struct Frame {
    pub pc: u64,
    pub regs: Registers,
}

const DWARF_RA: u16 = 16;

/// The value of DWARF register `n` (x86-64 numbering; 16 is the return address/rip).
pub(crate) fn register(regs: &Registers, n: u16) -> Option<u64> {
    Some(match n {
        0 => regs.rax,
        1 => regs.rdx,
        2 => regs.rcx,
        3 => regs.rbx,
        4 => regs.rsi,
        5 => regs.rdi,
        6 => regs.rbp,
        7 => regs.rsp,
        8 => regs.r8,
        9 => regs.r9,
        10 => regs.r10,
        11 => regs.r11,
        12 => regs.r12,
        13 => regs.r13,
        14 => regs.r14,
        15 => regs.r15,
        16 => regs.rip,
        _ => return None,
    })
}

fn set(regs: &mut Registers, n: u16, v: u64) {
    match n {
        0 => regs.rax = v,
        1 => regs.rdx = v,
        2 => regs.rcx = v,
        3 => regs.rbx = v,
        4 => regs.rsi = v,
        5 => regs.rdi = v,
        6 => regs.rbp = v,
        7 => regs.rsp = v,
        8 => regs.r8 = v,
        9 => regs.r9 = v,
        10 => regs.r10 = v,
        11 => regs.r11 = v,
        12 => regs.r12 = v,
        13 => regs.r13 = v,
        14 => regs.r14 = v,
        15 => regs.r15 = v,
        16 => regs.rip = v,
        _ => {}
    }
}

impl Unwinder {
    /// Loads the unwind tables of every file the target maps executable, read as the target
    /// sees them ([`FileView`]); a file whose build id is not the one the target loaded is
    /// left out (its frames do not unwind, which the stop's check says).
    pub fn new(source: &dyn MemorySource, mappings: &[Mapping]) -> Unwinder {
        // path -> (its mapping at offset 0 with the lowest start, exec start, exec end)
        let mut files: HashMap<PathBuf, (Option<&Mapping>, u64, u64)> = HashMap::new();
        for m in mappings {
            let Some(path) = &m.path else { continue };
            let e = files.entry(path.clone()).or_insert((None, u64::MAX, 0));
            if m.offset == 0 && e.0.is_none_or(|first| m.start < first.start) {
                e.0 = Some(m);
            }
            if m.executable {
                e.1 = e.1.min(m.start);
                e.2 = e.2.max(m.end);
            }
        }
        let view = FileView::of(source);
        let mut modules = Vec::new();
        for (first, start, end) in files.into_values() {
            let Some(first) = first.filter(|_| start != u64::MAX) else { continue };
            let Ok(data) = view.open_mapped(first).and_then(TargetFile::read_all) else { continue };
            let Ok(file) = object::File::parse(&*data) else { continue };
            let Some(first_vaddr) = file.segments().map(|s| s.address()).min() else { continue };
            let bias = first.start.wrapping_sub(first_vaddr & !0xfff);
            if build_id_loaded(&file, bias, source).is_err() {
                continue;
            }
            let Some(eh) = file.section_by_name(".eh_frame") else { continue };
            let Ok(eh_frame) = eh.uncompressed_data() else { continue };
            let text_address = file.section_by_name(".text").map_or(0, |t| t.address());
            modules.push(Module { start, end, bias, eh_frame_address: eh.address(), text_address, eh_frame: eh_frame.into_owned() });
        }
        Unwinder { modules }
    }

    /// Where the function holding code address `pc` starts, by its unwind entry (which every
    /// function of the executable and of the shared libraries has, symbols or not).
    pub fn function_start(&self, pc: u64) -> Option<u64> {
        let module = self.modules.iter().find(|m| (m.start..m.end).contains(&pc))?;
        let eh = EhFrame::new(&module.eh_frame, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(module.eh_frame_address).set_text(module.text_address);
        let fde = eh.fde_for_address(&bases, pc.wrapping_sub(module.bias), EhFrame::cie_from_offset).ok()?;
        Some(fde.initial_address().wrapping_add(module.bias))
    }

    /// Unwinds from `regs` while `go_on(frame pc)` says so, up to `max` frames. The frame where
    /// `go_on` said no is included, last. `None` when a frame cannot be unwound.
    pub fn unwind(
        &self,
        source: &dyn MemorySource,
        regs: &Registers,
        max: usize,
        mut go_on: impl FnMut(u64) -> bool,
    ) -> Option<Vec<Frame>> {
        let mut frames = vec![Frame { pc: regs.rip, regs: *regs }];
        let mut ctx = UnwindContext::new();
        while frames.len() <= max {
            let current = frames.last().expect("one frame").clone();
            if !go_on(current.pc) {
                return Some(frames);
            }
            // A return address points after the call: look the caller up at the call itself.
            let lookup = if frames.len() == 1 { current.pc } else { current.pc - 1 };
            let module = self.modules.iter().find(|m| (m.start..m.end).contains(&lookup))?;
            let eh = EhFrame::new(&module.eh_frame, LittleEndian);
            let bases = BaseAddresses::default().set_eh_frame(module.eh_frame_address).set_text(module.text_address);
            let row = eh.unwind_info_for_address(&bases, &mut ctx, lookup.wrapping_sub(module.bias), EhFrame::cie_from_offset).ok()?;
            let cfa = match row.cfa() {
                CfaRule::RegisterAndOffset { register: r, offset } => register(&current.regs, r.0)?.wrapping_add(*offset as u64),
                CfaRule::Expression(_) => return None,
            };
            let mut next = current.regs;
            for reg in [3u16, 6, 12, 13, 14, 15, DWARF_RA] {
                let rule = row.register(gimli::Register(reg));
                let value = match rule {
                    // An undefined return address marks the outermost frame (clone, _start).
                    Some(RegisterRule::Undefined) if reg == DWARF_RA => return Some(frames),
                    None if reg == DWARF_RA => return None,
                    None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => continue,
                    Some(rule) => rule,
                };
                let value = match value {
                    RegisterRule::Offset(o) => source.read_u64(cfa.wrapping_add(o as u64)).ok()?,
                    RegisterRule::ValOffset(o) => cfa.wrapping_add(o as u64),
                    RegisterRule::Register(r) => register(&current.regs, r.0)?,
                    _ => return None,
                };
                set(&mut next, reg, value);
            }
            next.rsp = cfa;
            if next.rip == 0 {
                return Some(frames); // the outermost frame
            }
            frames.push(Frame { pc: next.rip, regs: next });
        }
        None
    }
}
