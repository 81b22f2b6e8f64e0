//! Finding the runtime's file-static variables in an executable with neither DWARF nor
//! `.symtab`, by the code that uses them.
//!
//! A stripped OCaml executable keeps its global symbols in `.dynsym` (OCaml links with
//! `-Wl,-E`), so the runtime's exported functions are still named. A [`Locator`] says: "decode
//! exported function F (or the `via_call`-th function it calls directly); the `nth` distinct
//! address its RIP-relative operands name, less `delta`, is the variable". Locators are
//! generated from an executable that has DWARF (`scripts/gen-layout-tables.sh`), where both
//! the variable and the code are known, choosing functions that reference few addresses. A
//! variable has up to three locators in different functions, and more than half of those that
//! resolve must agree ([`super::statics`]): a compiler that lays the code out differently makes
//! them disagree or miss, which is an error, never a guess.

use crate::elf::Executable;
use iced_x86::{Decoder, DecoderOptions, FlowControl, OpKind, Register};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Locator {
    /// An exported function (in `.dynsym`).
    pub function: String,
    /// Decode the `via_call`-th distinct function that `function` calls directly instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via_call: Option<u32>,
    /// Which distinct RIP-relative address, in order of first appearance.
    pub nth: u32,
    /// How far into the variable that address is (a member's offset).
    pub delta: u64,
}

/// The addresses a function's code names: distinct RIP-relative memory operands and distinct
/// direct call targets, each in order of first appearance.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct References {
    pub data: Vec<u64>,
    pub calls: Vec<u64>,
}

/// Most bytes decoded for one function whose extent is not known.
const MAX_FUNCTION_BYTES: u64 = 16 << 10;

/// The references of the function at link-time `address`, decoded over its extent: `size`
/// bytes when known, else its `.eh_frame` entry's range.
pub fn references(exe: &Executable, address: u64, size: u64) -> Option<References> {
    let size = if size > 0 { size } else { eh_frame_extent(exe, address)? };
    let (text_address, text) = exe.section_data(".text")?;
    let start = address.checked_sub(text_address)? as usize;
    let end = start.checked_add(size.min(MAX_FUNCTION_BYTES) as usize)?.min(text.len());
    let code = text.get(start..end)?;
    let mut refs = References::default();
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    for insn in &mut decoder {
        if insn.is_invalid() {
            break;
        }
        for op in 0..insn.op_count() {
            if insn.op_kind(op) == OpKind::Memory && insn.memory_base() == Register::RIP {
                let target = insn.memory_displacement64();
                if !refs.data.contains(&target) {
                    refs.data.push(target);
                }
            }
        }
        if insn.flow_control() == FlowControl::Call && insn.op0_kind() == OpKind::NearBranch64 {
            let target = insn.near_branch64();
            if !refs.calls.contains(&target) {
                refs.calls.push(target);
            }
        }
    }
    Some(refs)
}

/// The extent of the function starting at `address`, from its `.eh_frame` entry.
fn eh_frame_extent(exe: &Executable, address: u64) -> Option<u64> {
    use gimli::{BaseAddresses, EhFrame, LittleEndian, UnwindSection};
    let (eh_address, eh) = exe.section_data(".eh_frame")?;
    let (text_address, _) = exe.section_data(".text")?;
    let eh_frame = EhFrame::new(&eh, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(eh_address).set_text(text_address);
    let fde = eh_frame.fde_for_address(&bases, address, EhFrame::cie_from_offset).ok()?;
    (fde.initial_address() == address).then(|| fde.len())
}

/// Where `locator` says the variable is, if its function is there and names enough addresses.
pub fn resolve(exe: &Executable, locator: &Locator) -> Option<u64> {
    let f = exe.symbol(&locator.function).filter(|s| s.is_function)?;
    let mut refs = references(exe, f.address, f.size)?;
    if let Some(k) = locator.via_call {
        let callee = *refs.calls.get(k as usize)?;
        refs = references(exe, callee, 0)?;
    }
    refs.data.get(locator.nth as usize)?.checked_sub(locator.delta)
}

/// Up to `max` locators of the variable at `address` (`size` bytes), in the exported functions
/// that name the fewest addresses, one per function. Called on an executable with symbols.
pub fn generate(exe: &Executable, address: u64, size: u64, max: usize) -> Vec<Locator> {
    let within = |a: u64| a >= address && a < address + size.max(1);
    let mut found: Vec<(usize, Locator)> = Vec::new();
    let mut exported: Vec<&crate::elf::Symbol> = exe.symbols.iter().filter(|s| s.is_function && s.is_global && s.size > 0).collect();
    exported.sort_by(|a, b| a.name.cmp(&b.name));
    exported.dedup_by(|a, b| a.name == b.name);
    for f in exported {
        let Some(refs) = references(exe, f.address, f.size) else { continue };
        if let Some(nth) = refs.data.iter().position(|&a| within(a)) {
            let delta = refs.data[nth] - address;
            found.push((refs.data.len(), Locator { function: f.name.clone(), via_call: None, nth: nth as u32, delta }));
            continue;
        }
        // One call deep, into functions without an exported name (split or static helpers).
        for (k, &callee) in refs.calls.iter().enumerate() {
            if exe.symbol_at(callee).is_some_and(|s| s.is_global) {
                continue;
            }
            let Some(inner) = references(exe, callee, 0) else { continue };
            if let Some(nth) = inner.data.iter().position(|&a| within(a)) {
                let delta = inner.data[nth] - address;
                let cost = refs.data.len() + inner.data.len() + 8;
                found.push((cost, Locator { function: f.name.clone(), via_call: Some(k as u32), nth: nth as u32, delta }));
                break;
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.function.cmp(&b.1.function)));
    found.into_iter().take(max).map(|(_, l)| l).collect()
}
