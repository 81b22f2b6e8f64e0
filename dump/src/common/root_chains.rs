//! The root structures OCaml 4.14 and OCaml 5 lay out alike, read the same way for both:
//! the module blocks of `caml_globals` and of natdynlinked units, `CAMLparam`/`CAMLlocal`
//! chains, the skip lists of registered global roots, finaliser tables, and the live slots a
//! stack walk finds. Where the structures sit (offsets, variables) is each release's business.

use crate::common::copied_world::{CapturedRoot, RootName};
use crate::common::frames::{FrameTable, LiveSlot, SlotPlace};
use crate::common::regions::{CapturedRegion, RegionIndex};
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};
use heapsnap_format::{FrameDescrRecord, MemprofRecord, RootKind, NO_DOMAIN, ROOT_FLAG_WEAK};
use heapsnap_values::HeaderFormat;
use std::collections::HashSet;

/// Longest chain followed in any runtime list, to stay finite on a corrupt target.
pub const MAX_CHAIN: usize = 10_000_000;

/// amd64 gc_regs bucket order (amd64.S, both releases): rax rbx rdi rsi rdx rcx r8 r9 r12 r13
/// r10 r11 rbp, as DWARF register numbers.
pub const GC_REGS_DWARF: [u64; 13] = [0, 3, 5, 4, 1, 2, 8, 9, 12, 13, 10, 11, 6];

#[allow(clippy::too_many_arguments)]
fn root(kind: RootKind, domain: u16, thread: u64, slot: u64, value: u64, origin: u64, name: RootName, flags: u32) -> CapturedRoot {
    CapturedRoot { kind, domain, flags, thread, slot, value, origin, name }
}

/// `caml_globals` (at `table`): each compilation unit's zero-terminated array of module
/// blocks, whose fields are roots.
pub fn globals(source: &dyn MemorySource, table: u64, format: HeaderFormat, out: &mut Vec<CapturedRoot>) -> Result<()> {
    for i in 0..MAX_CHAIN as u64 {
        let unit = source.read_u64(table + 8 * i)?;
        if unit == 0 {
            break;
        }
        unit_blocks(source, unit, RootKind::Global, format, out)?;
    }
    Ok(())
}

/// The fields of the module blocks of one unit's zero-terminated array.
fn unit_blocks(source: &dyn MemorySource, unit: u64, kind: RootKind, format: HeaderFormat, out: &mut Vec<CapturedRoot>) -> Result<()> {
    for j in 0..MAX_CHAIN as u64 {
        let block = source.read_u64(unit + 8 * j)?;
        if block == 0 {
            break;
        }
        let header = source.read_u64(block - 8)?;
        for (k, v) in source.read_words(block, format.wosize(header) as usize)?.into_iter().enumerate() {
            out.push(root(kind, NO_DOMAIN, 0, block + 8 * k as u64, v, k as u64, RootName::DataAt(block), 0));
        }
    }
    Ok(())
}

/// The runtime's `struct link` list of natdynlinked units' globals (`caml_dyn_globals`, whose
/// head is at `head`): `data` and `next` are the link's member offsets.
pub fn dyn_globals(
    source: &dyn MemorySource,
    head: u64,
    (data, next): (u64, u64),
    format: HeaderFormat,
    out: &mut Vec<CapturedRoot>,
) -> Result<()> {
    let mut link = source.read_u64(head)?;
    let mut n = 0;
    while link != 0 && n < MAX_CHAIN {
        unit_blocks(source, source.read_u64(link + data)?, RootKind::DynGlobal, format, out)?;
        link = source.read_u64(link + next)?;
        n += 1;
    }
    Ok(())
}

/// memory.h `caml__roots_block`: member offsets, and the length of its `tables` array.
#[derive(Clone, Copy, Debug)]
pub struct RootsBlockShape {
    pub next: u64,
    pub ntables: u64,
    pub nitems: u64,
    pub tables: u64,
    pub max_tables: u64,
}

/// A `CAMLparam`/`CAMLlocal` chain from `block`.
pub fn local_roots(
    source: &dyn MemorySource,
    mut block: u64,
    shape: RootsBlockShape,
    (domain, thread): (u16, u64),
    out: &mut Vec<CapturedRoot>,
) -> Result<()> {
    let mut n = 0;
    while block != 0 && n < MAX_CHAIN {
        let ntables = source.read_u64(block + shape.ntables)?;
        let nitems = source.read_u64(block + shape.nitems)?;
        if ntables > shape.max_tables || nitems > 1 << 24 {
            return Err(DumpError::Inconsistent(format!("local roots block {block:#x}: {ntables} tables of {nitems}")));
        }
        for i in 0..ntables {
            let table = source.read_u64(block + shape.tables + 8 * i)?;
            for (j, v) in source.read_words(table, nitems as usize)?.into_iter().enumerate().filter(|(_, v)| *v != 0) {
                out.push(root(RootKind::LocalRoot, domain, thread, table + 8 * j as u64, v, 0, RootName::None, 0));
            }
        }
        block = source.read_u64(block + shape.next)?;
        n += 1;
    }
    Ok(())
}

/// globroots.c's skip lists: the offset of a list's first forward pointer, and a cell's key
/// and first forward pointer.
#[derive(Clone, Copy, Debug)]
pub struct SkipListShape {
    pub list_forward: u64,
    pub cell_key: u64,
    pub cell_forward: u64,
}

/// A runtime state roots may be registered inside: its domain, address, size and members.
pub struct StateSpan<'a> {
    pub domain: u16,
    pub address: u64,
    pub size: u64,
    pub members: &'a [(String, u64)],
}

/// The registered global roots of the skip lists `lists` (list address, kind of its roots). A
/// root registered inside a runtime state (the last exception's backtrace, domain-local
/// storage) is kind `Domain`, named after its member.
pub fn registered_roots(
    source: &dyn MemorySource,
    lists: &[(u64, RootKind)],
    shape: SkipListShape,
    states: &[StateSpan<'_>],
    out: &mut Vec<CapturedRoot>,
) -> Result<()> {
    for &(list, kind) in lists {
        let mut cell = source.read_u64(list + shape.list_forward)?;
        let mut n = 0;
        while cell != 0 && n < MAX_CHAIN {
            let slot = source.read_u64(cell + shape.cell_key)?;
            let value = source.read_u64(slot)?;
            match states.iter().find(|s| (s.address..s.address + s.size).contains(&slot)) {
                Some(s) => {
                    let offset = slot - s.address;
                    let field = s.members.iter().find(|(_, o)| *o == offset).map_or_else(|| format!("+{offset}"), |(m, _)| m.clone());
                    out.push(root(RootKind::Domain, s.domain, 0, slot, value, 0, RootName::Text(field), 0));
                }
                None => out.push(root(kind, NO_DOMAIN, 0, slot, value, 0, RootName::DataAt(slot), 0)),
            }
            cell = source.read_u64(cell + shape.cell_forward)?;
            n += 1;
        }
    }
    Ok(())
}

/// finalise's `struct final`: where its function and value are, and its size.
#[derive(Clone, Copy, Debug)]
pub struct FinalShape {
    pub fun: u64,
    pub val: u64,
    pub size: u64,
}

/// One finalisable set (`first` or `last`): `count` entries of `table`. The functions are
/// roots; the values are weak (finalised when unreachable).
pub fn finalisable_set(
    source: &dyn MemorySource,
    (table, count): (u64, u64),
    shape: FinalShape,
    set: &str,
    domain: u16,
    out: &mut Vec<CapturedRoot>,
) -> Result<()> {
    if count > 1 << 28 {
        return Err(DumpError::Inconsistent(format!("finaliser table {table:#x} has {count} entries")));
    }
    for i in 0..count {
        let entry = table + i * shape.size;
        let (fun, val) = (source.read_u64(entry + shape.fun)?, source.read_u64(entry + shape.val)?);
        out.push(root(RootKind::Finaliser, domain, 0, entry + shape.fun, fun, 0, RootName::Text(format!("{set}.fun")), 0));
        out.push(root(RootKind::Finaliser, domain, 0, entry + shape.val, val, 0, RootName::Text(format!("{set}.val")), ROOT_FLAG_WEAK));
    }
    Ok(())
}

/// The finalisers due to run (a `to_do` list from `head`: `next`, `size` and `item` are its
/// member offsets): functions and values are roots.
pub fn finalisers_due(
    source: &dyn MemorySource,
    head: u64,
    (next, size, item): (u64, u64, u64),
    shape: FinalShape,
    domain: u16,
    out: &mut Vec<CapturedRoot>,
) -> Result<()> {
    let mut todo = head;
    let mut n = 0;
    while todo != 0 && n < MAX_CHAIN {
        let count = source.read_i32(todo + size)?.max(0) as u64;
        for i in 0..count {
            let entry = todo + item + i * shape.size;
            let (fun, val) = (source.read_u64(entry + shape.fun)?, source.read_u64(entry + shape.val)?);
            out.push(root(RootKind::Finaliser, domain, 0, entry + shape.fun, fun, 0, RootName::Text("todo.fun".into()), 0));
            out.push(root(RootKind::Finaliser, domain, 0, entry + shape.val, val, 0, RootName::Text("todo.val".into()), 0));
        }
        todo = source.read_u64(todo + next)?;
        n += 1;
    }
    Ok(())
}

/// The live slots a precise stack walk found, as `stack` and `register` roots; `word` reads a
/// stack word (from a copy of the stack, or the target).
pub fn stack_slots(
    slots: &[LiveSlot],
    (domain, thread): (u16, u64),
    word: &mut dyn FnMut(u64) -> Result<u64>,
    out: &mut Vec<CapturedRoot>,
    warnings: &mut Vec<String>,
) -> Result<()> {
    for slot in slots {
        match slot.place {
            SlotPlace::Stack(address) => {
                let value = word(address)?;
                out.push(root(RootKind::Stack, domain, thread, address, value, slot.retaddr, RootName::CodeAt(slot.retaddr), 0));
            }
            SlotPlace::Register { bucket: 0, .. } => {
                warnings.push(format!("frame at {:#x} has a live register but no gc_regs", slot.retaddr));
            }
            SlotPlace::Register { bucket, index } => {
                let address = bucket + 8 * index;
                let value = word(address)?;
                let dwarf = GC_REGS_DWARF.get(index as usize).copied().unwrap_or(u64::MAX);
                out.push(root(RootKind::Register, domain, thread, address, value, dwarf, RootName::None, 0));
            }
        }
    }
    Ok(())
}

/// The frames named by the tracked blocks' user data that are call stacks
/// (`Printexc.raw_backtrace`: a tag-0 block of backtrace slots as OCaml integers), with
/// their return addresses (FORMAT.md §3.14). A block with a field naming no descriptor is
/// something else, and is skipped. Errors reading a block skip it: the user data is the
/// program's, and a stop never fails for it.
pub fn memprof_frames(
    source: &dyn MemorySource,
    entries: &[MemprofRecord],
    frames: &FrameTable,
    format: HeaderFormat,
) -> Vec<FrameDescrRecord> {
    /// Longer call stacks are not read (memprof's `callstack_size` is usually tens of frames).
    const MAX_FRAMES: u64 = 1 << 16;
    let mut seen: HashSet<u64> = HashSet::new();
    let mut out = Vec::new();
    for e in entries {
        let data = e.user_data;
        if data & 7 != 0 || data < 8 || !seen.insert(data) {
            continue;
        }
        let Ok(header) = source.read_u64(data - 8) else { continue };
        let wosize = format.wosize(header);
        if format.tag(header) != 0 || wosize == 0 || wosize > MAX_FRAMES {
            continue;
        }
        let Ok(bytes) = source.read_bytes(data, (wosize * 8) as usize) else { continue };
        let frames: Option<Vec<FrameDescrRecord>> = bytes
            .chunks_exact(8)
            .map(|w| {
                let slot = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                // `Val_backtrace_slot`: the slot (a descriptor's address, or a debuginfo's + 2)
                // with bit 0 set.
                let descriptor = (slot & 1 == 1).then_some(slot - 1)?;
                Some(FrameDescrRecord { descriptor, return_address: frames.return_address_of(descriptor)? })
            })
            .collect();
        out.extend(frames.unwrap_or_default());
    }
    out.sort_unstable_by_key(|r| r.descriptor);
    out.dedup();
    out
}

/// An ephemeron list from `head`, linked through field 0 (weak.h `Ephe_link`), read from the
/// captured heap where it has the words.
pub fn ephemeron_list(source: &dyn MemorySource, regions: &[CapturedRegion], head: u64) -> Result<Vec<u64>> {
    let index = RegionIndex::new(regions);
    let mut out = Vec::new();
    let mut e = head;
    let mut seen = HashSet::new();
    while e != 0 && e & 1 == 0 && out.len() < MAX_CHAIN {
        if !seen.insert(e) {
            return Err(DumpError::Inconsistent(format!("ephemeron list loops at {e:#x}")));
        }
        out.push(e);
        e = match index.word(e) {
            Some(next) => next,
            None => source.read_u64(e)?,
        };
    }
    Ok(out)
}
