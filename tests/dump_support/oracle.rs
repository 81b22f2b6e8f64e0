//! A minimal reachability oracle over a snapshot: the blocks reachable from the roots must be
//! exactly the live blocks of the major heap (weakly held data aside), and no scanned field
//! may point outside every region.
#![allow(dead_code)]

use heapsnap_format::{RegionKind, RootKind, Snapshot};
use heapsnap_values::Colour;
use std::collections::{HashMap, HashSet};

const CLOSURE_TAG: u8 = 247;
const INFIX_TAG: u8 = 249;
const NO_SCAN_TAG: u8 = 251;
const CONT_TAG: u8 = 245;

#[derive(Clone, Copy, Debug)]
struct Block {
    header: u64,
    kind: RegionKind,
}

/// What the oracle found.
#[derive(Debug, Default)]
pub struct Reachability {
    /// Live blocks of the major heap (pools, large allocations).
    pub major_live: usize,
    pub minor_blocks: usize,
    pub reachable: usize,
    /// Major-heap blocks reachable from no root, not even weakly: a missed root.
    pub missed: Vec<u64>,
    /// Scanned fields that point to no region: a missed region. (from block, field value)
    pub dangling: Vec<(u64, u64)>,
    /// Pointers into a heap region that do not name a block.
    pub misaligned: Vec<(u64, u64)>,
    /// Block count by region kind.
    pub by_kind: HashMap<&'static str, usize>,
    /// Minor heaps and large allocations whose block walk does not end exactly at their end.
    pub broken_walks: Vec<u64>,
}

impl Reachability {
    pub fn assert_exact(&self, what: &str) {
        self.assert_well_formed(what);
        assert!(
            self.missed.is_empty() && self.dangling.is_empty() && self.misaligned.is_empty(),
            "{what}: {} missed of {} live major blocks (first {:x?}), {} dangling (first {:x?}), {} misaligned (first {:x?})",
            self.missed.len(),
            self.major_live,
            &self.missed[..self.missed.len().min(8)],
            self.dangling.len(),
            &self.dangling[..self.dangling.len().min(8)],
            self.misaligned.len(),
            &self.misaligned[..self.misaligned.len().min(8)],
        );
    }
}

impl Reachability {
    /// The heap parses and every reference from the roots leads to a block: what must hold of
    /// any consistent snapshot, even of a busy program full of garbage.
    pub fn assert_well_formed(&self, what: &str) {
        assert!(self.broken_walks.is_empty(), "{what}: block walks overrun regions at {:x?}", self.broken_walks);
        assert!(
            self.dangling.is_empty() && self.misaligned.is_empty(),
            "{what}: {} dangling (first {:x?}), {} misaligned (first {:x?})",
            self.dangling.len(),
            &self.dangling[..self.dangling.len().min(8)],
            self.misaligned.len(),
            &self.misaligned[..self.misaligned.len().min(8)],
        );
    }
}

fn wosize(header: u64, reserved: u8) -> u64 {
    (header >> 10) & ((1u64 << (54 - reserved as u32)) - 1)
}

/// Marks from the roots and compares with the blocks found in the regions.
pub fn reachability(snap: &Snapshot) -> Reachability {
    reachability_from(snap, |_| true)
}

/// [`reachability`] from the roots `keep` accepts only (to check that the oracle notices a
/// missing root).
pub fn reachability_from(snap: &Snapshot, keep: impl Fn(&heapsnap_format::RootRecord) -> bool) -> Reachability {
    let meta = snap.metadata();
    let reserved = meta.reserved_header_bits;
    let garbage = meta.colours.garbage as u64;
    // OCaml 4.14's heap chunks hold free blocks too: blue ones, the best-fit allocator's small
    // ones (listed apart) and empty fragments; what a white block means depends on the phase.
    let free_blocks: HashSet<u64> = snap.free_blocks().into_iter().collect();
    let gc4 = meta.ocaml4_gc;
    let mut blocks: HashMap<u64, Block> = HashMap::new();
    let mut out = Reachability::default();
    for region in snap.regions() {
        let words = region.words();
        let kind = region.kind();
        let mut visit = |offset: usize| {
            let header = words[offset / 8];
            blocks.insert(region.base() + offset as u64 + 8, Block { header, kind });
            wosize(header, reserved)
        };
        match kind {
            RegionKind::Pool => {
                let stride = region.header.block_wsize as usize * 8;
                let mut at = region.header.first_block as usize;
                while stride > 0 && at + stride <= region.bytes.len() {
                    if words[at / 8] != 0 {
                        visit(at);
                    }
                    at += stride;
                }
            }
            RegionKind::HeapChunk => {
                let mut at = region.header.first_block as usize;
                while at + 8 <= region.bytes.len() {
                    let header = words[at / 8];
                    let w = wosize(header, reserved);
                    let block = region.base() + at as u64 + 8;
                    let colour = gc4.map(|gc| gc.colour((header >> 8) as u8, block - 8));
                    let free = w == 0 || free_blocks.contains(&block) || colour == Some(Colour::Free);
                    if !free && colour != Some(Colour::Garbage) {
                        visit(at);
                    }
                    at += 8 * (w as usize + 1);
                }
                if at != region.bytes.len() {
                    out.broken_walks.push(region.base());
                }
            }
            RegionKind::MinorHeap | RegionKind::Large => {
                let mut at = region.header.first_block as usize;
                while at + 8 <= region.bytes.len() {
                    let w = visit(at);
                    at += 8 * (w as usize + 1);
                }
                if at != region.bytes.len() {
                    out.broken_walks.push(region.base());
                }
            }
            _ => {}
        }
    }
    for b in blocks.values() {
        *out.by_kind.entry(b.kind.label()).or_default() += 1;
        match b.kind {
            RegionKind::MinorHeap => out.minor_blocks += 1,
            _ if (b.header >> 8) & 3 == garbage => {}
            _ => out.major_live += 1,
        }
    }

    let word_at = |a: u64| snap.region_of(a).and_then(|r| r.word_at(a));
    // Resolves a pointer to the block it names: itself, the closure holding an infix block,
    // or a static block (its header is the word before it).
    let resolve = |v: u64| -> Option<(u64, u64, RegionKind)> {
        let region = snap.region_of(v)?;
        let kind = region.kind();
        let header = word_at(v - 8)?;
        if header as u8 == INFIX_TAG {
            let outer = v - 8 * wosize(header, reserved);
            return Some((outer, word_at(outer - 8)?, kind));
        }
        Some((v, header, kind))
    };

    let mut strong: HashSet<u64> = HashSet::new();
    let mut weak: HashSet<u64> = HashSet::new();
    let ephemerons: HashSet<u64> = snap.ephemerons().iter().copied().collect();
    let mut stack: Vec<(u64, u64, bool)> = Vec::new(); // (from, value, weak)
    for r in snap.roots() {
        if r.root_kind() == RootKind::SuspendedStack || r.is_conservative() || !keep(r) {
            continue;
        }
        stack.push((r.slot, r.value, r.is_weak()));
    }
    let is_pointer = |v: u64| v != 0 && v & 1 == 0;
    let mut visited: HashSet<(u64, bool)> = HashSet::new();
    // Suspended stacks belong to their continuation: followed when the continuation is.
    let mut suspended: HashMap<u64, Vec<u64>> = HashMap::new();
    for r in snap.roots() {
        if r.root_kind() == RootKind::SuspendedStack {
            suspended.entry(r.origin).or_default().push(r.value);
        }
    }
    while let Some((from, v, is_weak)) = stack.pop() {
        if !is_pointer(v) {
            continue;
        }
        let Some((block, header, kind)) = resolve(v) else {
            // OCaml 4.14's empty weak slot, `caml_ephe_none`, points at a C variable.
            if !(gc4.is_some() && ephemerons.contains(&from)) {
                out.dangling.push((from, v));
            }
            continue;
        };
        if kind.holds_heap_blocks() && !blocks.contains_key(&block) {
            out.misaligned.push((from, v));
            continue;
        }
        if kind == RegionKind::FiberStack || kind == RegionKind::Other {
            continue;
        }
        if !visited.insert((block, is_weak)) || (is_weak && strong.contains(&block)) {
            continue;
        }
        if is_weak {
            weak.insert(block);
        } else {
            strong.insert(block);
        }
        let tag = header as u8;
        let size = wosize(header, reserved);
        if tag == CONT_TAG {
            if let Some(fiber) = word_at(block).filter(|f| f & 1 == 1 && *f > 1) {
                for &value in suspended.get(&(fiber - 1)).map(Vec::as_slice).unwrap_or(&[]) {
                    stack.push((block, value, is_weak));
                }
            }
            continue;
        }
        if tag >= NO_SCAN_TAG && !ephemerons.contains(&block) {
            continue;
        }
        let mut first = 0;
        if tag == CLOSURE_TAG {
            // Field 1 is the closure info: the environment starts at (info << 8) >> 9.
            let info = word_at(block + 8).unwrap_or(0);
            first = (info << 8) >> 9;
        }
        let field_weak = is_weak || ephemerons.contains(&block);
        for i in first..size {
            if ephemerons.contains(&block) && i == 0 {
                continue; // the ephemeron list link
            }
            if let Some(f) = word_at(block + 8 * i) {
                stack.push((block, f, field_weak));
            }
        }
    }
    out.reachable = strong.len();
    for (&addr, b) in &blocks {
        if b.kind == RegionKind::MinorHeap || (b.header >> 8) & 3 == garbage {
            continue;
        }
        if !strong.contains(&addr) && !weak.contains(&addr) {
            out.missed.push(addr);
        }
    }
    out.missed.sort_unstable();
    out
}
