//! What a dump copies while the world is stopped: the domains, regions and roots, before they
//! are written as a snapshot.

use crate::common::regions::{CapturedRegion, RegionIndex};
use heapsnap_format::{ColourEncoding, DomainInfo, RegionKind, RootKind, ROOT_FLAG_CONSERVATIVE};
use heapsnap_values::ocaml4::{chunk_block_colour, Ocaml4Gc};
use heapsnap_values::{Colour, HeaderFormat, HeaderLayout};

/// A domain as captured.
#[derive(Clone, Debug)]
pub struct CapturedDomain {
    pub id: u16,
    pub state: u64,
    /// The whole `caml_domain_state`, as it was.
    pub state_bytes: Vec<u8>,
    pub info: DomainInfo,
    /// Registers of the thread running OCaml code in this domain, if one was.
    pub running: Option<crate::source::ThreadState>,
}

impl CapturedDomain {
    pub fn field(&self, offset: u64) -> u64 {
        let o = offset as usize;
        u64::from_le_bytes(self.state_bytes[o..o + 8].try_into().expect("8 bytes"))
    }
}

/// Everything copied while the world was stopped.
#[derive(Debug, Default)]
pub struct Capture {
    pub domains: Vec<CapturedDomain>,
    pub regions: Vec<CapturedRegion>,
    pub roots: Vec<CapturedRoot>,
    /// Ephemerons and weak arrays the runtime knows.
    pub ephemerons: Vec<u64>,
    pub colours: Option<ColourEncoding>,
    pub compactions: Option<u64>,
    /// Registered custom operations: (address of `struct custom_operations`, identifier).
    pub custom_ops: Vec<(u64, String)>,
    /// Symbols of the loaded Dynlink plugins, at target addresses (the executable's are in
    /// the family's runtime).
    pub plugin_symbols: Vec<crate::elf::Symbol>,
    /// DWARF sections of the loaded Dynlink plugins: (load bias, section name, bytes).
    pub plugin_dwarf: Vec<(u64, &'static str, std::sync::Arc<[u8]>)>,
    /// Free blocks whose colour does not say so (OCaml 4.14's best-fit small free lists).
    pub free_blocks: Vec<u64>,
    /// Statmemprof's entries; `None` on a runtime without statmemprof (before 5.3).
    pub memprof: Option<Vec<heapsnap_format::MemprofRecord>>,
    /// The frame descriptors the tracked blocks' call stacks name, with their return addresses.
    pub memprof_frames: Vec<heapsnap_format::FrameDescrRecord>,
    pub warnings: Vec<String>,
    /// How long each step of the copy took (ns), for reports and benchmarks.
    pub phases: Vec<(&'static str, u64)>,
    /// Facts of the runtime measured on the stopped heap, for a runtime read by probing.
    pub probed: Vec<heapsnap_format::ProbedFact>,
}

/// How a root will be named in the snapshot (resolved after the target is resumed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootName {
    None,
    Text(String),
    /// The function containing this code address.
    CodeAt(u64),
    /// The data symbol containing this address.
    DataAt(u64),
}

#[derive(Clone, Debug)]
pub struct CapturedRoot {
    pub kind: RootKind,
    pub domain: u16,
    pub flags: u32,
    pub thread: u64,
    pub slot: u64,
    pub value: u64,
    pub origin: u64,
    pub name: RootName,
}

impl Capture {
    /// Conservative roots (the words and registers of an OCaml frame caught between call sites)
    /// are kept only when they name a block the analysis will find (a register may well hold
    /// an interior pointer, or any address of the data section): a root that names no block
    /// would make `verify` fail on a good snapshot. `gc4` is OCaml 4.14's GC state, which says
    /// which heap-chunk blocks are live.
    pub fn keep_plausible_conservative_roots(&mut self, format: HeaderFormat, gc4: Option<&Ocaml4Gc>) {
        let conservative: std::collections::HashSet<u64> =
            self.roots.iter().filter(|r| r.flags & ROOT_FLAG_CONSERVATIVE != 0).map(|r| r.value).collect();
        if conservative.is_empty() {
            return;
        }
        let layout = HeaderLayout::new(format.reserved_bits, self.colours.unwrap_or(ColourEncoding::OCAML5_INITIAL));
        let free_blocks: std::collections::HashSet<u64> = self.free_blocks.iter().copied().collect();
        // Blocks of the regions walked block by block that some conservative root names. A
        // block of a 4.14 heap chunk is live by the GC's phase and sweep pointer (or its
        // colour); a free one (blue, or on a free list) is no block; nor is a block of size 0.
        let walked: std::collections::HashSet<u64> = self
            .regions
            .iter()
            .filter(|r| matches!(r.kind, RegionKind::MinorHeap | RegionKind::HeapChunk))
            .flat_map(|r| {
                let chunk = r.kind == RegionKind::HeapChunk;
                let (layout, free_blocks) = (&layout, &free_blocks);
                r.blocks(format).into_iter().filter_map(move |(at, hd)| {
                    let header_at = r.base + at as u64;
                    let live = if chunk {
                        let colour = chunk_block_colour(layout, gc4, header_at, hd, free_blocks.contains(&(header_at + 8)));
                        !matches!(colour, Colour::Garbage | Colour::Free)
                    } else {
                        format.wosize(hd) > 0
                    };
                    live.then_some(header_at + 8)
                })
            })
            .filter(|b| conservative.contains(b))
            .collect();
        let index = RegionIndex::new(&self.regions);
        let keep: Vec<bool> = self
            .roots
            .iter()
            .map(|r| {
                r.flags & ROOT_FLAG_CONSERVATIVE == 0
                    || (r.kind != RootKind::SuspendedStack && index.names_block(r.value, &walked, &layout))
            })
            .collect();
        drop(index);
        let mut keep = keep.into_iter();
        self.roots.retain(|_| keep.next().expect("one flag per root"));
    }
}
