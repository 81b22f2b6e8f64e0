//! The precise walk of an OCaml 4.14 thread's system stack, as `caml_do_local_roots_nat`
//! (roots_nat.c) does it: from a saved stack pointer and return address, frame by frame
//! through the frame descriptors, and across C code through the `caml_context` that
//! `caml_start_program` leaves where OCaml was entered from C (amd64: `Callback_link(sp)` is
//! `sp + 16`).

use crate::common::frames::{FrameTable, LiveSlot, SlotPlace, StackWalk};
use crate::error::Result;

/// Where the walk starts: the OCaml stack pointer just above the innermost return address,
/// that return address, and the register bucket of the innermost frame (`gc_regs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackStart {
    pub sp: u64,
    pub retaddr: u64,
    pub gc_regs: u64,
}

/// stack.h `Callback_link(sp)` on amd64.
const CALLBACK_LINK: u64 = 16;

/// Walks one thread's OCaml frames, reading the stack with `word`.
pub fn walk(frames: &FrameTable, start: StackStart, word: &mut dyn FnMut(u64) -> Result<u64>) -> StackWalk {
    let mut walk = StackWalk::default();
    let StackStart { mut sp, mut retaddr, gc_regs: mut regs } = start;
    if sp == 0 {
        return walk;
    }
    for _ in 0..10_000_000 {
        let Some(d) = frames.get(retaddr) else {
            walk.problem = Some(format!("no frame descriptor for return address {retaddr:#x}"));
            return walk;
        };
        if d.return_to_c {
            // The top of a stack chunk entered from C: the next chunk's context was saved here.
            let context = sp + CALLBACK_LINK;
            match (word(context), word(context + 8), word(context + 16)) {
                (Ok(next_sp), Ok(next_retaddr), Ok(next_regs)) => {
                    if next_sp == 0 {
                        return walk;
                    }
                    if next_sp <= sp {
                        walk.problem = Some(format!("the stack chunk above {sp:#x} goes back to {next_sp:#x}"));
                        return walk;
                    }
                    (sp, retaddr, regs) = (next_sp, next_retaddr, next_regs);
                }
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    walk.problem = Some(e.to_string());
                    return walk;
                }
            }
            continue;
        }
        for &ofs in &d.live {
            let place = if ofs & 1 == 1 {
                SlotPlace::Register { bucket: regs, index: (ofs >> 1) as u64 }
            } else {
                SlotPlace::Stack(sp + ofs as u64)
            };
            walk.slots.push(LiveSlot { place, retaddr });
        }
        sp += d.size;
        retaddr = match word(sp - 8) {
            Ok(r) => r,
            Err(e) => {
                walk.problem = Some(e.to_string());
                return walk;
            }
        };
    }
    walk.problem = Some("too many frames".into());
    walk
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::frames::FrameDescr;
    use crate::error::DumpError;
    use std::collections::HashMap;

    #[test]
    fn walks_frames_and_crosses_c_through_the_callback_link() {
        let frames = FrameTable::from_descriptors([
            (0x1000, FrameDescr { size: 24, return_to_c: false, live: vec![0, 8], allocation: false }),
            (0x2000, FrameDescr { size: 16, return_to_c: false, live: vec![3], allocation: true }),
            (0x3000, FrameDescr { size: 0, return_to_c: true, live: vec![], allocation: false }),
            (0x4000, FrameDescr { size: 16, return_to_c: false, live: vec![0], allocation: false }),
        ]);
        let mut mem: HashMap<u64, u64> = HashMap::new();
        // Frame A (retaddr 0x1000) spans 0x100..0x118; its caller's return address at 0x110.
        mem.insert(0x110, 0x2000);
        // Frame B spans 0x118..0x128; it was called from caml_start_program (0x3000).
        mem.insert(0x120, 0x3000);
        // caml_start_program's context at sp + 16 = 0x138: the outer chunk starts at 0x800,
        // returning into frame D, with its own register bucket.
        mem.insert(0x138, 0x800);
        mem.insert(0x140, 0x4000);
        mem.insert(0x148, 0xbbbb0);
        // Frame D spans 0x800..0x810 and returns to the outermost caml_start_program, whose
        // context ends the walk.
        mem.insert(0x808, 0x3000);
        mem.insert(0x820, 0);
        mem.insert(0x828, 0);
        mem.insert(0x830, 0);
        let start = StackStart { sp: 0x100, retaddr: 0x1000, gc_regs: 0xaaaa0 };
        let w =
            walk(&frames, start, &mut |a| mem.get(&a).copied().ok_or(DumpError::Read { address: a, len: 8, reason: "unmapped".into() }));
        assert_eq!(w.problem, None);
        let places: Vec<SlotPlace> = w.slots.iter().map(|s| s.place).collect();
        assert_eq!(
            places,
            [SlotPlace::Stack(0x100), SlotPlace::Stack(0x108), SlotPlace::Register { bucket: 0xaaaa0, index: 1 }, SlotPlace::Stack(0x800)]
        );
        assert_eq!(w.slots[3].retaddr, 0x4000);
        // An unknown return address stops the walk with a reason.
        let lost = walk(&frames, StackStart { retaddr: 0x5000, ..start }, &mut |_| Ok(0));
        assert!(lost.problem.unwrap().contains("0x5000"));
        // No saved stack: nothing to walk.
        assert!(walk(&frames, StackStart { sp: 0, ..start }, &mut |_| Ok(0)).slots.is_empty());
    }
}
