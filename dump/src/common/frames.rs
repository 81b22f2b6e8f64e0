//! OCaml frame descriptors (runtime/caml/frame_descriptors.h) and the precise walk of an OCaml
//! fiber stack, as `caml_scan_stack` does it (runtime/fiber.c, amd64 without frame pointers).

use crate::elf::Executable;
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};
use std::collections::HashMap;

const FRAME_DESCRIPTOR_DEBUG: u16 = 1;
const FRAME_DESCRIPTOR_ALLOC: u16 = 2;
const FRAME_DESCRIPTOR_FLAGS: u16 = 3;
const FRAME_RETURN_TO_C: u16 = 0xFFFF;

/// amd64 stack.h: the chunk header a C-to-OCaml transition leaves on an OCaml stack
/// (trap frame, saved gc_regs, DWARF link), and where the saved gc_regs sit in it.
pub const STACK_HEADER_SIZE: u64 = 32;
const SAVED_GC_REGS_OFFSET: u64 = 24;

/// One frame descriptor.
#[derive(Clone, Debug)]
pub struct FrameDescr {
    /// Frame size in bytes (flags cleared), including the return address slot.
    pub size: u64,
    /// The top of an OCaml stack chunk, where OCaml was entered from C.
    pub return_to_c: bool,
    /// Live slots: even = byte offset from the frame's stack pointer; odd = register index
    /// (`ofs >> 1`) in the gc_regs bucket.
    pub live: Vec<u16>,
    /// The return address of a call into the GC made by an allocation.
    pub allocation: bool,
}

/// All frame descriptors of the target, by return address.
#[derive(Default)]
pub struct FrameTable {
    descriptors: HashMap<u64, FrameDescr>,
    /// Return address by backtrace slot: OCaml 5's raw backtraces name a frame by its
    /// descriptor's address, and an allocation point by its debuginfo's address + 2
    /// (backtrace_nat.c `Slot_debuginfo`), which the allocation's descriptor points to.
    by_slot: HashMap<u64, u64>,
}

impl FrameTable {
    pub fn len(&self) -> usize {
        self.descriptors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.descriptors.is_empty()
    }

    pub fn get(&self, retaddr: u64) -> Option<&FrameDescr> {
        self.descriptors.get(&retaddr)
    }

    /// The return address of the frame a backtrace slot names (a descriptor's address, or an
    /// allocation's debuginfo address + 2).
    pub fn return_address_of(&self, slot: u64) -> Option<u64> {
        self.by_slot.get(&slot).copied()
    }

    /// A table of the given descriptors (for tests of stack walks).
    pub fn from_descriptors(entries: impl IntoIterator<Item = (u64, FrameDescr)>) -> FrameTable {
        FrameTable { descriptors: entries.into_iter().collect(), by_slot: HashMap::new() }
    }

    /// Adds the frametables linked into the executable (its `caml_frametable` array, ended by
    /// a null entry): what a runtime that has not built its table yet will register.
    pub fn read_linked(&mut self, source: &dyn MemorySource, exe: &Executable, bias: u64) -> Result<()> {
        let array = bias + exe.require("caml_frametable")?;
        for i in 0..100_000 {
            let table = source.read_u64(array + 8 * i)?;
            if table == 0 {
                break;
            }
            self.read_one(source, table)?;
        }
        Ok(())
    }

    /// Reads every frametable the runtime registered (`current_frame_descrs.frametables`, which
    /// includes dynlinked code) from target memory.
    pub fn read(source: &dyn MemorySource, list_head: u64, cell_table: u64, cell_next: u64) -> Result<FrameTable> {
        let mut table = FrameTable::default();
        let mut cell = source.read_u64(list_head)?;
        let mut seen = 0;
        while cell != 0 {
            seen += 1;
            if seen > 100_000 {
                return Err(DumpError::Inconsistent("the frametable list does not end".into()));
            }
            let frametable = source.read_u64(cell + cell_table)?;
            table.read_one(source, frametable)?;
            cell = source.read_u64(cell + cell_next)?;
        }
        Ok(table)
    }

    /// Reads one frametable: a word count, then the descriptors.
    pub fn read_one(&mut self, source: &dyn MemorySource, address: u64) -> Result<()> {
        let count = source.read_u64(address)?;
        if count > 10_000_000 {
            return Err(DumpError::Inconsistent(format!("frametable at {address:#x} claims {count} descriptors")));
        }
        let mut reader = ChunkReader::new(source, address + 8);
        for _ in 0..count {
            let start = reader.position;
            let retaddr = reader.u64()?;
            self.by_slot.insert(start, retaddr);
            let frame_data = reader.u16()?;
            let num_live = reader.u16()?;
            if frame_data == FRAME_RETURN_TO_C {
                // Skip to the (empty) live_ofs, then align to a word.
                reader.align(8);
                self.descriptors.insert(retaddr, FrameDescr { size: 0, return_to_c: true, live: Vec::new(), allocation: false });
                continue;
            }
            let mut live = Vec::with_capacity(num_live as usize);
            for _ in 0..num_live {
                live.push(reader.u16()?);
            }
            let allocation = frame_data & FRAME_DESCRIPTOR_ALLOC != 0;
            let mut num_allocs = 0;
            if allocation {
                num_allocs = reader.u8()? as u64;
                reader.skip(num_allocs);
            }
            if frame_data & FRAME_DESCRIPTOR_DEBUG != 0 {
                reader.align(4);
                if allocation {
                    // One debuginfo offset per allocation, relative to where it is stored.
                    for _ in 0..num_allocs {
                        let at = reader.position;
                        let offset = u64::from(reader.u16()?) | u64::from(reader.u16()?) << 16;
                        if offset != 0 {
                            self.by_slot.insert(at + offset + 2, retaddr);
                        }
                    }
                } else {
                    reader.skip(4);
                }
            }
            reader.align(8);
            debug_assert!(reader.position > start);
            self.descriptors
                .insert(retaddr, FrameDescr { size: (frame_data & !FRAME_DESCRIPTOR_FLAGS) as u64, return_to_c: false, live, allocation });
        }
        Ok(())
    }
}

/// Sequential little-endian reads of target memory, fetched in chunks.
struct ChunkReader<'s> {
    source: &'s dyn MemorySource,
    position: u64,
    chunk_start: u64,
    chunk: Vec<u8>,
}

impl<'s> ChunkReader<'s> {
    fn new(source: &'s dyn MemorySource, position: u64) -> Self {
        ChunkReader { source, position, chunk_start: position, chunk: Vec::new() }
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N]> {
        let end = self.position + N as u64;
        if self.position < self.chunk_start || end > self.chunk_start + self.chunk.len() as u64 {
            // Refill from here, 64 KiB at a time, less near a page boundary the table may end at.
            let mut len = 64 * 1024;
            loop {
                let mut buf = vec![0u8; len];
                match self.source.read(self.position, &mut buf) {
                    Ok(()) => {
                        self.chunk = buf;
                        self.chunk_start = self.position;
                        break;
                    }
                    Err(e) if len <= N => return Err(e),
                    Err(_) => {
                        let to_page = 4096 - (self.position % 4096) as usize;
                        len = if len > to_page { to_page.max(N) } else { N };
                    }
                }
            }
        }
        let at = (self.position - self.chunk_start) as usize;
        self.position = end;
        Ok(self.chunk[at..at + N].try_into().expect("N bytes"))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes::<8>()?))
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.bytes::<2>()?))
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes::<1>()?[0])
    }

    fn skip(&mut self, n: u64) {
        self.position += n;
    }

    fn align(&mut self, to: u64) {
        self.position = self.position.div_ceil(to) * to;
    }
}

/// A live slot found by the precise walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotPlace {
    /// A stack word, at this address.
    Stack(u64),
    /// A register saved in the gc_regs bucket at `bucket`, index `index`.
    Register { bucket: u64, index: u64 },
}

#[derive(Clone, Copy, Debug)]
pub struct LiveSlot {
    pub place: SlotPlace,
    /// Return address of the frame that holds it.
    pub retaddr: u64,
}

/// What the walk of one stack found.
#[derive(Default, Debug)]
pub struct StackWalk {
    pub slots: Vec<LiveSlot>,
    /// Set when the walk stopped early (unknown return address, leaving the stack...).
    pub problem: Option<String>,
}

/// Walks the frames of one fiber stack from `sp` (the address of the innermost return address,
/// as `stack_info.sp` holds it) to `high` (`Stack_high`), reading the stack words with `word`.
/// `gc_regs` is the register bucket of the innermost chunk.
pub fn walk_stack(frames: &FrameTable, sp: u64, high: u64, gc_regs: u64, word: &mut dyn FnMut(u64) -> Result<u64>) -> StackWalk {
    let mut walk = StackWalk::default();
    let mut sp = sp;
    let mut regs = gc_regs;
    let limit = 10_000_000usize;
    let mut steps = 0usize;
    'chunks: loop {
        if sp == high {
            return walk;
        }
        if sp > high {
            walk.problem = Some(format!("stack pointer {sp:#x} above the stack top {high:#x}"));
            return walk;
        }
        // First_frame(sp) = sp + 8; the return address is the word just below it.
        let mut retaddr = match word(sp) {
            Ok(r) => r,
            Err(e) => {
                walk.problem = Some(e.to_string());
                return walk;
            }
        };
        sp += 8;
        loop {
            steps += 1;
            if steps > limit {
                walk.problem = Some("too many frames".into());
                return walk;
            }
            let Some(d) = frames.get(retaddr) else {
                walk.problem = Some(format!("no frame descriptor for return address {retaddr:#x}"));
                return walk;
            };
            if d.return_to_c {
                // Top of a chunk: the next chunk's gc_regs were saved in its header.
                match word(sp + SAVED_GC_REGS_OFFSET) {
                    Ok(r) => regs = r,
                    Err(e) => {
                        walk.problem = Some(e.to_string());
                        return walk;
                    }
                }
                sp += STACK_HEADER_SIZE;
                continue 'chunks;
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(u64, FrameDescr)]) -> FrameTable {
        FrameTable { descriptors: entries.iter().cloned().collect(), by_slot: HashMap::new() }
    }

    #[test]
    fn walks_frames_and_chunks() {
        // Stack (addresses grow upwards), two OCaml frames, then a C-entry chunk header and
        // one more frame in the outer chunk.
        let frames = table(&[
            (0x1000, FrameDescr { size: 24, return_to_c: false, live: vec![0, 8], allocation: false }),
            (0x2000, FrameDescr { size: 16, return_to_c: false, live: vec![3], allocation: true }),
            (0x3000, FrameDescr { size: 0, return_to_c: true, live: vec![], allocation: false }),
            (0x4000, FrameDescr { size: 16, return_to_c: false, live: vec![0], allocation: false }),
        ]);
        let mut mem: HashMap<u64, u64> = HashMap::new();
        // sp = 0x100: return address into frame A (0x1000)
        mem.insert(0x100, 0x1000);
        // frame A spans 0x108..0x120, its return address (into B) at 0x118
        mem.insert(0x118, 0x2000);
        // frame B spans 0x120..0x130, return address into the C-entry (0x3000) at 0x128
        mem.insert(0x128, 0x3000);
        // chunk header 0x130..0x150, saved gc_regs at 0x130 + 24
        mem.insert(0x148, 0xbeef0);
        // next chunk: sp = 0x150, return address into frame D
        mem.insert(0x150, 0x4000);
        // frame D spans 0x158..0x168; it returns to C (the stack's own entry chunk, whose
        // header 0x168..0x188 ends the stack)
        mem.insert(0x160, 0x3000);
        mem.insert(0x168 + 24, 0);
        let walk = walk_stack(&frames, 0x100, 0x188, 0xaaaa0, &mut |a| {
            mem.get(&a).copied().ok_or(DumpError::Read { address: a, len: 8, reason: "unmapped".into() })
        });
        assert_eq!(walk.problem, None);
        let places: Vec<SlotPlace> = walk.slots.iter().map(|s| s.place).collect();
        assert_eq!(
            places,
            [SlotPlace::Stack(0x108), SlotPlace::Stack(0x110), SlotPlace::Register { bucket: 0xaaaa0, index: 1 }, SlotPlace::Stack(0x158),]
        );
        assert_eq!(walk.slots[2].retaddr, 0x2000);
    }
}
