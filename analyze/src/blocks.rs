//! Finding the blocks: every live block of every region gets a node id, and every address can be
//! turned back into a node in constant time.
//!
//! Node ids are dense `u32`s: first the super-root and one node per root kind (see
//! [`crate::graph`]), then the blocks of the heap regions (pools, minor heaps, large
//! allocations) region by region in address order, then the static blocks. Within a region,
//! node ids follow addresses. A per-region bitmap with one bit per word, set where a block's
//! first field is, plus a running count every 64 words (rank), maps an address to its node
//! without any per-node table: 16 bytes per 64 heap words.
//!
//! Free slots (zero headers) and unswept garbage (the snapshot's GARBAGE colour) are counted
//! per region and never become nodes. OCaml 4.14's heap chunks hold blocks one after another;
//! their free blocks (blue, or listed in the snapshot's free-block section) and the blocks the
//! GC's phase shows dead (see `ocaml4::Ocaml4Gc`) are counted the same way.

use crate::address_index::AddressIndex;
use heapsnap_format::{RegionKind, Snapshot, NO_DOMAIN};
use heapsnap_values::ocaml4::Ocaml4Gc;
use heapsnap_values::{self as ocaml, Colour, Header, HeaderLayout, PoolGeometry};
use rayon::prelude::*;
use std::ops::Range;

pub type NodeId = u32;
pub const NO_NODE: NodeId = u32::MAX;

/// 64 words of a region: which of them start a block's fields, and the node id of the first.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct RankWord {
    bits: u64,
    base: u32,
}

/// How blocks are found inside one region.
#[derive(Clone, Copy, Debug)]
enum Lookup {
    /// No blocks (fiber stacks, other memory).
    None,
    /// A bitmap starting at this index of the rank table.
    Bitmap { start: usize },
    /// A single block (a large allocation) whose first field is this word of the region.
    Single { word: u64 },
}

/// Counts for one region.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RegionCounts {
    pub live_blocks: u64,
    pub live_bytes: u64,
    pub free_slots: u64,
    pub free_bytes: u64,
    pub garbage_blocks: u64,
    pub garbage_bytes: u64,
}

impl RegionCounts {
    pub fn add(&mut self, o: &RegionCounts) {
        self.live_blocks += o.live_blocks;
        self.live_bytes += o.live_bytes;
        self.free_slots += o.free_slots;
        self.free_bytes += o.free_bytes;
        self.garbage_blocks += o.garbage_blocks;
        self.garbage_bytes += o.garbage_bytes;
    }
}

/// One snapshot region, as the analysis sees it.
pub struct RegionBlocks<'s> {
    pub kind: RegionKind,
    pub domain: Option<u16>,
    pub base: u64,
    pub words: &'s [u64],
    pub nodes: Range<NodeId>,
    pub counts: RegionCounts,
    lookup: Lookup,
}

impl RegionBlocks<'_> {
    pub fn end(&self) -> u64 {
        self.base + self.words.len() as u64 * 8
    }
}

/// A block header that cannot be right, or a region that does not look like what it claims.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Malformed {
    /// Address of the header (or of the region, for region-level problems).
    pub address: u64,
    pub region_kind: &'static str,
    pub reason: String,
}

/// What a pointer-looking word points to: a block's node, nothing the heap holds, or a bad
/// place inside a block-holding region (not `dump`'s `Target`, the process it reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointsTo {
    Node(NodeId),
    /// Outside every region that holds OCaml blocks: code, C data, the runtime's atoms...
    External,
    /// Into a region that holds blocks, but not to a block.
    Bad(BadPointer),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BadPointer {
    /// Not 8-byte aligned.
    Misaligned,
    /// Into a free pool slot.
    FreeSlot,
    /// Into a block the GC already found dead (GARBAGE colour).
    Garbage,
    /// Inside a block but not at its first field (and not an infix header of a closure).
    Interior,
    /// Into a block-holding region, between blocks (a pool header, a slot tail...).
    BetweenBlocks,
    /// Into a domain's minor heap below `young_ptr`: a block that no longer exists.
    DeadMinor,
    /// Into static data where no valid header precedes the address.
    NoHeader,
}

pub struct BlockMap<'s> {
    pub snap: &'s Snapshot,
    pub layout: HeaderLayout,
    /// OCaml 4.14's GC state, which gives heap-chunk colours their meaning.
    pub gc4: Option<Ocaml4Gc>,
    /// Free blocks whose colour does not show it (first fields, sorted).
    free_blocks: Vec<u64>,
    pub index: AddressIndex,
    /// In the snapshot's region order (address order).
    pub regions: Vec<RegionBlocks<'s>>,
    rank: Vec<RankWord>,
    /// `(first node, region index)` of every region with blocks, sorted by node.
    node_regions: Vec<(NodeId, u32)>,
    /// Node ids below this are not blocks (super-root and root-kind nodes).
    pub first_block_node: NodeId,
    pub node_count: NodeId,
    pub malformed: Vec<Malformed>,
    pub malformed_count: u64,
    /// Live part `young_ptr..young_end` excluded: the dead part of each domain's minor heap.
    dead_minor: Vec<(u64, u64)>,
    /// Pointers from the heap blocks' scanned fields into static data (found during the walk),
    /// until [`BlockMap::add_static_blocks`].
    pub static_seeds: Vec<u64>,
}

const MAX_REPORTED: usize = 1000;

/// A block found in a region: its first field's word index and its header.
#[derive(Clone, Copy, Debug)]
pub struct BlockRef<'s> {
    pub node: NodeId,
    pub address: u64,
    pub header: Header,
    pub fields: &'s [u64],
    pub region: u32,
}

impl<'s> BlockMap<'s> {
    /// Walks every pool, minor heap and large allocation. Static blocks are added later by
    /// [`BlockMap::add_static_blocks`], once the pointers that reach them are known.
    pub fn build(snap: &'s Snapshot, first_block_node: NodeId) -> Result<Self, crate::error::AnalyzeError> {
        let meta = snap.metadata();
        let layout = HeaderLayout::new(meta.reserved_header_bits, meta.colours);
        let pools = meta.pools.clone().unwrap_or_else(PoolGeometry::ocaml_5_2);
        let gc4 = meta.ocaml4_gc;
        let free_blocks = snap.free_blocks();
        let index = AddressIndex::new(snap);
        let mut regions = Vec::with_capacity(snap.region_count());
        let mut rank_len = 0usize;
        for (i, r) in snap.regions().enumerate() {
            let words = r.words();
            if words.len() as u64 >= (u32::MAX as u64) * 64 {
                return Err(crate::error::AnalyzeError::TooLarge(format!("region {i} at {:#x} has {} words", r.base(), words.len())));
            }
            let lookup = match r.kind() {
                RegionKind::Pool | RegionKind::MinorHeap | RegionKind::Static | RegionKind::HeapChunk => {
                    let start = rank_len;
                    rank_len += words.len().div_ceil(64);
                    Lookup::Bitmap { start }
                }
                RegionKind::Large => Lookup::Single { word: u64::MAX },
                _ => Lookup::None,
            };
            regions.push(RegionBlocks {
                kind: r.kind(),
                domain: (r.header.domain != NO_DOMAIN).then_some(r.header.domain),
                base: r.base(),
                words,
                nodes: 0..0,
                counts: RegionCounts::default(),
                lookup,
            });
        }
        let mut rank = vec![RankWord::default(); rank_len];

        // Pass 1, in parallel: find the blocks of each region, set their bits, count them.
        let mut slices: Vec<(usize, &mut [RankWord])> = Vec::new();
        {
            let mut rest: &mut [RankWord] = &mut rank;
            let mut consumed = 0usize;
            for (i, rb) in regions.iter().enumerate() {
                if let Lookup::Bitmap { start } = rb.lookup {
                    let len = rb.words.len().div_ceil(64);
                    let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - consumed);
                    let (mine, tail) = tail.split_at_mut(len);
                    rest = tail;
                    consumed = start + len;
                    slices.push((i, mine));
                }
            }
        }
        let headers: Vec<_> = snap.regions().map(|r| *r.header).collect();
        let is_static: Vec<bool> = regions.iter().map(|r| r.kind == RegionKind::Static).collect();
        let lo = regions.iter().filter(|r| r.kind == RegionKind::Static).map(|r| r.base).min().unwrap_or(0);
        let hi = regions.iter().filter(|r| r.kind == RegionKind::Static).map(|r| r.end()).max().unwrap_or(0);
        let statics = StaticSpan { lo, hi, index: &index, is_static };
        // (region, counts, malformed headers listed, malformed count, a large block's word,
        // pointers into static data)
        type Walked = (usize, RegionCounts, Vec<Malformed>, u64, Option<u64>, Vec<u64>);
        let walked: Vec<Walked> = {
            let regions_ref = &regions;
            let mut by_region: Vec<Option<&mut [RankWord]>> = (0..regions.len()).map(|_| None).collect();
            for (i, s) in slices {
                by_region[i] = Some(s);
            }
            by_region
                .into_par_iter()
                .enumerate()
                .map(|(i, bits)| {
                    let rb = &regions_ref[i];
                    let mut w = Walk {
                        layout: &layout,
                        pools: &pools,
                        gc4: gc4.as_ref(),
                        free_blocks: &free_blocks,
                        counts: RegionCounts::default(),
                        malformed: Vec::new(),
                        malformed_count: 0,
                        statics: &statics,
                        static_pointers: Vec::new(),
                    };
                    let single = match rb.kind {
                        RegionKind::Pool => {
                            w.pool(rb, &headers[i], bits.expect("pools have bitmaps"));
                            None
                        }
                        RegionKind::MinorHeap => {
                            w.minor(rb, &headers[i], bits.expect("minor heaps have bitmaps"));
                            None
                        }
                        RegionKind::Large => w.large(rb, &headers[i]),
                        RegionKind::HeapChunk => {
                            w.chunk(rb, &headers[i], bits.expect("heap chunks have bitmaps"));
                            None
                        }
                        _ => None,
                    };
                    (i, w.counts, w.malformed, w.malformed_count, single, w.static_pointers)
                })
                .collect()
        };
        let mut malformed = Vec::new();
        let mut malformed_count = 0;
        let mut static_seeds = Vec::new();
        for (i, counts, m, n, single, seeds) in walked {
            static_seeds.extend(seeds);
            regions[i].counts = counts;
            if let Some(word) = single {
                regions[i].lookup = Lookup::Single { word };
            } else if matches!(regions[i].lookup, Lookup::Single { .. }) {
                regions[i].lookup = Lookup::None;
            }
            malformed_count += n;
            malformed.extend(m.into_iter().take(MAX_REPORTED.saturating_sub(malformed.len())));
        }

        // Node ids: heap regions in address order.
        let mut next = u64::from(first_block_node);
        for rb in regions.iter_mut() {
            if matches!(rb.kind, RegionKind::Pool | RegionKind::MinorHeap | RegionKind::Large | RegionKind::HeapChunk) {
                let start = next;
                next += rb.counts.live_blocks;
                if next >= u64::from(NO_NODE >> 1) {
                    return Err(crate::error::AnalyzeError::TooLarge(format!("more than {} blocks", NO_NODE >> 1)));
                }
                rb.nodes = start as NodeId..next as NodeId;
            }
        }
        let dead_minor = meta.domains.iter().flat_map(|d| [(d.minor_start, d.young_ptr)]).filter(|(a, b)| b > a).collect();
        let mut map = BlockMap {
            snap,
            layout,
            gc4,
            free_blocks,
            index,
            regions,
            rank,
            node_regions: Vec::new(),
            first_block_node,
            node_count: next as NodeId,
            malformed,
            malformed_count,
            dead_minor,
            static_seeds,
        };
        map.fill_rank_bases(|k| matches!(k, RegionKind::Pool | RegionKind::MinorHeap | RegionKind::HeapChunk));
        map.index_node_regions();
        Ok(map)
    }

    /// Pass 2: the node id of the first block of every 64-word group.
    fn fill_rank_bases(&mut self, which: impl Fn(RegionKind) -> bool + Sync) {
        let mut jobs: Vec<(NodeId, &mut [RankWord])> = Vec::new();
        let mut rest: &mut [RankWord] = &mut self.rank;
        let mut consumed = 0usize;
        for rb in &self.regions {
            if let Lookup::Bitmap { start } = rb.lookup {
                let len = rb.words.len().div_ceil(64);
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - consumed);
                let (mine, tail) = tail.split_at_mut(len);
                rest = tail;
                consumed = start + len;
                if which(rb.kind) {
                    jobs.push((rb.nodes.start, mine));
                }
            }
        }
        jobs.into_par_iter().for_each(|(mut base, words)| {
            for w in words {
                w.base = base;
                base += w.bits.count_ones();
            }
        });
    }

    fn index_node_regions(&mut self) {
        self.node_regions =
            self.regions.iter().enumerate().filter(|(_, r)| !r.nodes.is_empty()).map(|(i, r)| (r.nodes.start, i as u32)).collect();
        self.node_regions.sort_unstable();
    }

    /// Adds the static blocks whose first-field word indices (per static region) are given,
    /// sorted and without duplicates. Their node ids follow every heap node.
    pub fn add_static_blocks(&mut self, per_region: Vec<(usize, Vec<u64>)>) {
        let mut next = self.node_count;
        for (region, words) in per_region {
            let rb = &mut self.regions[region];
            let Lookup::Bitmap { start } = rb.lookup else { continue };
            let mut bytes = 0;
            for &w in &words {
                self.rank[start + (w / 64) as usize].bits |= 1 << (w % 64);
                bytes += self.layout.decode(rb.words[(w - 1) as usize]).bytes();
            }
            rb.nodes = next..next + words.len() as NodeId;
            rb.counts.live_blocks = words.len() as u64;
            rb.counts.live_bytes = bytes;
            next += words.len() as NodeId;
        }
        self.node_count = next;
        self.fill_rank_bases(|k| k == RegionKind::Static);
        self.index_node_regions();
    }

    /// Where a pointer-looking word (even, non-zero) goes.
    #[inline]
    pub fn resolve(&self, value: u64) -> PointsTo {
        let Some(r) = self.index.region_of(value) else {
            return if self.dead_minor.iter().any(|&(a, b)| (a..b).contains(&value)) {
                PointsTo::Bad(BadPointer::DeadMinor)
            } else {
                PointsTo::External
            };
        };
        self.resolve_in(r, value)
    }

    #[inline]
    fn resolve_in(&self, r: usize, value: u64) -> PointsTo {
        let rb = &self.regions[r];
        let offset = value - rb.base;
        match rb.lookup {
            Lookup::None => PointsTo::External,
            _ if !offset.is_multiple_of(8) => PointsTo::Bad(BadPointer::Misaligned),
            Lookup::Single { word } => {
                let w = offset / 8;
                if w == word {
                    PointsTo::Node(rb.nodes.start)
                } else {
                    self.resolve_infix(rb, w).map_or(PointsTo::Bad(self.classify_bad(r, value)), PointsTo::Node)
                }
            }
            Lookup::Bitmap { start } => {
                let w = offset / 8;
                let rw = &self.rank[start + (w / 64) as usize];
                let bit = 1u64 << (w % 64);
                if rw.bits & bit != 0 {
                    PointsTo::Node(rw.base + (rw.bits & (bit - 1)).count_ones())
                } else {
                    self.resolve_infix(rb, w).map_or_else(|| PointsTo::Bad(self.classify_bad(r, value)), PointsTo::Node)
                }
            }
        }
    }

    /// The block a pointer points at, when it points at its first field (not an infix or bad
    /// pointer): what `resolve` then `block` give, without the node-to-block search.
    #[inline]
    pub fn block_of_pointer(&self, value: u64) -> Option<BlockRef<'s>> {
        let r = self.index.region_of(value)?;
        let rb = &self.regions[r];
        let offset = value - rb.base;
        if !offset.is_multiple_of(8) {
            return None;
        }
        let w = offset / 8;
        let node = match rb.lookup {
            Lookup::None => return None,
            Lookup::Single { word } => (w == word).then_some(rb.nodes.start)?,
            Lookup::Bitmap { start } => {
                let rw = self.rank.get(start + (w / 64) as usize)?;
                let bit = 1u64 << (w % 64);
                (rw.bits & bit != 0).then(|| rw.base + (rw.bits & (bit - 1)).count_ones())?
            }
        };
        Some(self.block_at(r as u32, rb, node, w))
    }

    /// A pointer to an infix header's field resolves to the enclosing closure.
    fn resolve_infix(&self, rb: &RegionBlocks<'_>, w: u64) -> Option<NodeId> {
        let hd = *rb.words.get(w.checked_sub(1)? as usize)?;
        let h = self.layout.decode(hd);
        if h.tag != ocaml::INFIX_TAG {
            return None;
        }
        let start = w.checked_sub(h.wosize)?;
        let node = self.node_at_word(rb, start)?;
        let closure = self.layout.decode(*rb.words.get(start.checked_sub(1)? as usize)?);
        (closure.tag == ocaml::CLOSURE_TAG).then_some(node)
    }

    fn node_at_word(&self, rb: &RegionBlocks<'_>, w: u64) -> Option<NodeId> {
        match rb.lookup {
            Lookup::None => None,
            Lookup::Single { word } => (w == word).then_some(rb.nodes.start),
            Lookup::Bitmap { start } => {
                let rw = self.rank.get(start + (w / 64) as usize)?;
                let bit = 1u64 << (w % 64);
                (rw.bits & bit != 0).then(|| rw.base + (rw.bits & (bit - 1)).count_ones())
            }
        }
    }

    /// Why a pointer into a block-holding region reaches no block (the slow path, for reports).
    fn classify_bad(&self, r: usize, value: u64) -> BadPointer {
        BadPointerFacts { snap: self.snap, layout: &self.layout, gc4: self.gc4.as_ref(), free_blocks: &self.free_blocks }.classify(r, value)
    }

    /// The colour of the heap-chunk block whose header is word `p` of a region at `base`.
    fn chunk_colour(&self, base: u64, p: usize, hd: u64) -> Colour {
        chunk_colour(&self.layout, self.gc4.as_ref(), base + 8 * p as u64, hd)
    }

    /// Checks that a pointer into a static region lands on a plausible block (resolving infix
    /// pointers to their closure) and returns the word index of the block's first field.
    pub fn static_block_at(&self, r: usize, value: u64) -> Result<u64, BadPointer> {
        let rb = &self.regions[r];
        let offset = value - rb.base;
        if !offset.is_multiple_of(8) {
            return Err(BadPointer::Misaligned);
        }
        let mut w = offset / 8;
        let header_of = |w: u64| -> Option<Header> { Some(self.layout.decode(*rb.words.get(w.checked_sub(1)? as usize)?)) };
        let mut h = header_of(w).ok_or(BadPointer::NoHeader)?;
        if h.tag == ocaml::INFIX_TAG {
            w = w.checked_sub(h.wosize).ok_or(BadPointer::NoHeader)?;
            h = header_of(w).ok_or(BadPointer::NoHeader)?;
            if h.tag != ocaml::CLOSURE_TAG {
                return Err(BadPointer::Interior);
            }
        }
        if w + h.wosize > rb.words.len() as u64 {
            return Err(BadPointer::NoHeader);
        }
        Ok(w)
    }

    /// The region index holding a block-holding address (None outside every region).
    pub fn region_index_of(&self, address: u64) -> Option<usize> {
        self.index.region_of(address)
    }

    pub fn is_block(&self, node: NodeId) -> bool {
        node >= self.first_block_node && node < self.node_count
    }

    /// The region index of a block node.
    pub fn region_of_node(&self, node: NodeId) -> Option<u32> {
        if !self.is_block(node) {
            return None;
        }
        let i = self.node_regions.partition_point(|&(start, _)| start <= node).checked_sub(1)?;
        let r = self.node_regions[i].1;
        self.regions[r as usize].nodes.contains(&node).then_some(r)
    }

    /// The block behind a node (log time: meant for single lookups, not for sweeps).
    pub fn block(&self, node: NodeId) -> Option<BlockRef<'s>> {
        let r = self.region_of_node(node)?;
        let rb = &self.regions[r as usize];
        let word = match rb.lookup {
            Lookup::Single { word } => word,
            Lookup::Bitmap { start } => {
                let len = rb.words.len().div_ceil(64);
                let ranks = &self.rank[start..start + len];
                // The first group whose blocks end after the node holds it.
                let i = ranks.partition_point(|rw| rw.base + rw.bits.count_ones() <= node);
                let rw = *ranks.get(i)?;
                (i as u64) * 64 + u64::from(nth_set_bit(rw.bits, node - rw.base))
            }
            Lookup::None => return None,
        };
        Some(self.block_at(r, rb, node, word))
    }

    fn block_at(&self, r: u32, rb: &RegionBlocks<'s>, node: NodeId, word: u64) -> BlockRef<'s> {
        let hd = rb.words[word as usize - 1];
        let mut header = self.layout.decode(hd);
        if rb.kind == RegionKind::HeapChunk {
            header.colour = self.chunk_colour(rb.base, word as usize - 1, hd);
        }
        let end = (word + header.wosize).min(rb.words.len() as u64);
        BlockRef { node, address: rb.base + word * 8, header, fields: &rb.words[word as usize..end as usize], region: r }
    }

    /// Every block of one region, in address (and node) order.
    pub fn region_blocks(&self, r: usize) -> impl Iterator<Item = BlockRef<'s>> + '_ {
        let rb = &self.regions[r];
        let (start, len, single) = match rb.lookup {
            Lookup::Bitmap { start } if !rb.nodes.is_empty() => (start, rb.words.len().div_ceil(64), None),
            Lookup::Single { word } if !rb.nodes.is_empty() => (0, 0, Some(word)),
            _ => (0, 0, None),
        };
        let bitmap = self.rank[start..start + len].iter().enumerate().flat_map(|(i, rw)| {
            let mut bits = rw.bits;
            let mut node = rw.base;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let w = i as u64 * 64 + u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                node += 1;
                Some((node - 1, w))
            })
        });
        let single = single.map(|w| (rb.nodes.start, w));
        bitmap.chain(single).map(move |(node, w)| self.block_at(r as u32, rb, node, w))
    }

    /// Indices of the regions that hold blocks (including static regions once added).
    pub fn block_regions(&self) -> impl Iterator<Item = usize> + '_ {
        self.regions.iter().enumerate().filter(|(_, r)| !r.nodes.is_empty()).map(|(i, _)| i)
    }

    /// Bytes this map holds on the heap (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.rank.len() * std::mem::size_of::<RankWord>()
            + self.index.heap_bytes()
            + self.regions.len() * std::mem::size_of::<RegionBlocks<'_>>()
    }
}

/// What telling why a pointer reaches no block reads: the snapshot's own data only, so that a
/// reader without a [`BlockMap`] (the analysis index) classifies bad pointers as the analysis does.
pub struct BadPointerFacts<'a> {
    pub snap: &'a Snapshot,
    pub layout: &'a HeaderLayout,
    pub gc4: Option<&'a Ocaml4Gc>,
    /// [`Snapshot::free_blocks`].
    pub free_blocks: &'a [u64],
}

impl BadPointerFacts<'_> {
    /// Why a pointer into block-holding region `r` reaches no block.
    pub fn classify(&self, r: usize, value: u64) -> BadPointer {
        let region = self.snap.region(r);
        let (base, words) = (region.base(), region.words());
        let word = ((value - base) / 8) as usize;
        match region.kind() {
            RegionKind::Pool => {
                let wh = region.header.block_wsize as usize;
                let first = region.header.first_block as usize / 8;
                if wh == 0 || word < first + 1 {
                    return BadPointer::BetweenBlocks;
                }
                let slot = first + (word - first - 1) / wh * wh;
                if slot + wh > words.len() {
                    return BadPointer::BetweenBlocks;
                }
                let hd = words[slot];
                if hd == 0 {
                    return BadPointer::FreeSlot;
                }
                let h = self.layout.decode(hd);
                if h.colour == Colour::Garbage {
                    BadPointer::Garbage
                } else if word <= slot + h.wosize as usize {
                    BadPointer::Interior
                } else {
                    BadPointer::BetweenBlocks
                }
            }
            RegionKind::Large => {
                let first = region.header.first_block as usize / 8;
                match words.get(first) {
                    Some(&hd) if self.layout.decode(hd).colour == Colour::Garbage => BadPointer::Garbage,
                    Some(&hd) if word > first && word <= first + self.layout.wosize(hd) as usize => BadPointer::Interior,
                    _ => BadPointer::BetweenBlocks,
                }
            }
            RegionKind::Static => BadPointer::NoHeader,
            RegionKind::HeapChunk => {
                // The block holding the word: walk the chunk (the slow path is rare).
                let mut p = region.header.first_block as usize / 8;
                while p < word && p < words.len() {
                    let hd = words[p];
                    let end = p + 1 + self.layout.wosize(hd) as usize;
                    if word < end {
                        return match chunk_block_colour(self.layout, self.gc4, self.free_blocks, base + 8 * p as u64, hd) {
                            Colour::Garbage => BadPointer::Garbage,
                            Colour::Free => BadPointer::FreeSlot,
                            _ => BadPointer::Interior,
                        };
                    }
                    p = end;
                }
                BadPointer::BetweenBlocks
            }
            _ => BadPointer::Interior,
        }
    }
}

/// The colour of a heap-chunk block whose header, `hd`, is at `header_at`: from 4.14's GC state
/// when the snapshot records it, else from the colour encoding.
pub fn chunk_colour(layout: &HeaderLayout, gc4: Option<&Ocaml4Gc>, header_at: u64, hd: u64) -> Colour {
    match gc4 {
        Some(gc) => gc.colour(layout.format().colour_bits(hd), header_at),
        None => layout.decode(hd).colour,
    }
}

/// What a heap-chunk block is, free blocks included (`free_blocks`: the snapshot's, first fields,
/// sorted): the one rule the dumper applies too, `heapsnap_values::ocaml4::chunk_block_colour`.
fn chunk_block_colour(layout: &HeaderLayout, gc4: Option<&Ocaml4Gc>, free_blocks: &[u64], header_at: u64, hd: u64) -> Colour {
    let listed_free = free_blocks.binary_search(&(header_at + 8)).is_ok();
    heapsnap_values::ocaml4::chunk_block_colour(layout, gc4, header_at, hd, listed_free)
}

/// The walk of one region's blocks (pass 1).
struct Walk<'a> {
    layout: &'a HeaderLayout,
    /// The snapshot's pool geometry (5.3's for snapshots that predate its recording).
    pools: &'a PoolGeometry,
    gc4: Option<&'a Ocaml4Gc>,
    free_blocks: &'a [u64],
    counts: RegionCounts,
    malformed: Vec<Malformed>,
    malformed_count: u64,
    /// Where static data is, to collect the pointers into it while the block is in cache.
    statics: &'a StaticSpan<'a>,
    static_pointers: Vec<u64>,
}

/// The static regions, for a quick "does this word point into static data?".
struct StaticSpan<'a> {
    lo: u64,
    hi: u64,
    index: &'a AddressIndex,
    is_static: Vec<bool>,
}

impl StaticSpan<'_> {
    #[inline]
    fn contains(&self, v: u64) -> bool {
        v >= self.lo && v < self.hi && ocaml::is_pointer(v) && self.index.region_of(v).is_some_and(|r| self.is_static[r])
    }
}

impl Walk<'_> {
    /// Pointers from a live block's scanned fields into static data: the seeds of the static
    /// blocks (abstract blocks are skipped: ephemerons are read apart, the rest is C data).
    fn collect_static(&mut self, header: &Header, fields: &[u64]) {
        if self.statics.lo >= self.statics.hi || header.tag == ocaml::ABSTRACT_TAG {
            return;
        }
        let statics = self.statics;
        let found = &mut self.static_pointers;
        header.scanned_fields(fields, |_, v| {
            if statics.contains(v) {
                found.push(v);
            }
        });
    }
}

impl Walk<'_> {
    fn bad(&mut self, address: u64, kind: RegionKind, reason: String) {
        self.malformed_count += 1;
        if self.malformed.len() < MAX_REPORTED {
            self.malformed.push(Malformed { address, region_kind: kind.label(), reason });
        }
    }

    fn pool(&mut self, rb: &RegionBlocks<'_>, hdr: &heapsnap_format::RegionHeader, bits: &mut [RankWord]) {
        let wh = hdr.block_wsize as usize;
        let first = hdr.first_block as usize;
        if wh == 0 || !first.is_multiple_of(8) {
            self.bad(rb.base, rb.kind, format!("pool with block size {wh} words and first block at byte {first}"));
            return;
        }
        if rb.words.len() == self.pools.pool_wsize as usize {
            // The pool's own header says which size class it is (`struct pool`, field `sz`).
            let sz = (rb.words[3] & 0xffff_ffff) as usize;
            let expected = self.pools.size_classes.get(sz).map(|c| (c.wsize as usize, c.first_block as usize));
            if expected != Some((wh, first)) {
                self.bad(rb.base, rb.kind, format!("pool header says size class {sz}, region says {wh} words per block from byte {first}"));
            }
        }
        let words = rb.words;
        let mut p = first / 8;
        while p + wh <= words.len() {
            let hd = words[p];
            if hd == 0 {
                self.counts.free_slots += 1;
                self.counts.free_bytes += wh as u64 * 8;
            } else {
                let h = self.layout.decode(hd);
                if h.wosize == 0 || h.wosize as usize + 1 > wh || h.tag == ocaml::INFIX_TAG {
                    let address = rb.base + p as u64 * 8;
                    self.bad(address, rb.kind, format!("header {hd:#x} (wosize {}, tag {}) in a pool slot of {wh} words", h.wosize, h.tag));
                } else if h.colour == Colour::Garbage {
                    self.garbage(&h);
                } else {
                    self.live(words, bits, p, &h);
                }
            }
            p += wh;
        }
    }

    fn minor(&mut self, rb: &RegionBlocks<'_>, hdr: &heapsnap_format::RegionHeader, bits: &mut [RankWord]) {
        let words = rb.words;
        let mut p = hdr.first_block as usize / 8;
        while p < words.len() {
            let hd = words[p];
            let h = self.layout.decode(hd);
            let end = p as u64 + 1 + h.wosize;
            if hd == 0 || h.tag == ocaml::INFIX_TAG || end > words.len() as u64 {
                self.bad(rb.base + p as u64 * 8, rb.kind, format!("header {hd:#x} (wosize {}, tag {}) in the minor heap", h.wosize, h.tag));
                if end > words.len() as u64 || hd == 0 {
                    // Nothing after a broken size can be trusted: resume at the next word.
                    p += 1;
                    continue;
                }
            } else {
                self.live(words, bits, p, &h);
            }
            p = end as usize;
        }
    }

    /// Counts the block whose header is word `p` of `words` as live, and marks its first field.
    fn live(&mut self, words: &[u64], bits: &mut [RankWord], p: usize, h: &Header) {
        let w = p + 1;
        bits[w / 64].bits |= 1 << (w % 64);
        self.counts.live_blocks += 1;
        self.counts.live_bytes += h.bytes();
        self.collect_static(h, &words[w..w + h.wosize as usize]);
    }

    fn garbage(&mut self, h: &Header) {
        self.counts.garbage_blocks += 1;
        self.counts.garbage_bytes += h.bytes();
    }

    /// An OCaml 4.14 heap chunk: blocks one after another from `first_block` to the end, some
    /// free and some dead, which get no node; a header of size 0 is a free fragment.
    fn chunk(&mut self, rb: &RegionBlocks<'_>, hdr: &heapsnap_format::RegionHeader, bits: &mut [RankWord]) {
        let words = rb.words;
        let mut p = hdr.first_block as usize / 8;
        while p < words.len() {
            let hd = words[p];
            let h = self.layout.decode(hd);
            let end = p as u64 + 1 + h.wosize;
            let header_at = rb.base + 8 * p as u64;
            if end > words.len() as u64 || h.tag == ocaml::INFIX_TAG {
                self.bad(header_at, rb.kind, format!("header {hd:#x} (wosize {}, tag {}) in a heap chunk", h.wosize, h.tag));
                if end > words.len() as u64 {
                    return; // nothing after a broken size can be trusted
                }
            } else {
                let colour = chunk_block_colour(self.layout, self.gc4, self.free_blocks, header_at, hd);
                if colour == Colour::Free {
                    self.counts.free_slots += 1;
                    self.counts.free_bytes += h.bytes();
                } else if colour == Colour::Garbage {
                    self.garbage(&h);
                } else {
                    self.live(words, bits, p, &h);
                }
            }
            p = end as usize;
        }
    }

    fn large(&mut self, rb: &RegionBlocks<'_>, hdr: &heapsnap_format::RegionHeader) -> Option<u64> {
        let p = hdr.first_block as usize / 8;
        let Some(&hd) = rb.words.get(p) else {
            self.bad(rb.base, rb.kind, "large allocation without a header".into());
            return None;
        };
        let h = self.layout.decode(hd);
        if hd == 0 || h.tag == ocaml::INFIX_TAG || p as u64 + 1 + h.wosize > rb.words.len() as u64 {
            self.bad(
                rb.base + p as u64 * 8,
                rb.kind,
                format!("header {hd:#x} (wosize {}, tag {}) of a large allocation of {} words", h.wosize, h.tag, rb.words.len()),
            );
            return None;
        }
        if h.colour == Colour::Garbage {
            self.garbage(&h);
            return None;
        }
        self.counts.live_blocks += 1;
        self.counts.live_bytes += h.bytes();
        self.collect_static(&h, &rb.words[p + 1..p + 1 + h.wosize as usize]);
        Some(p as u64 + 1)
    }
}

/// The position of the `k`-th (from 0) set bit of `bits`, which has more than `k`: whole bytes
/// skipped by their counts, then at most seven bits cleared (a bit at a time, it was up to 63).
fn nth_set_bit(bits: u64, k: u32) -> u32 {
    let (mut bits, mut k, mut shift) = (bits, k, 0);
    loop {
        let in_byte = (bits & 0xff).count_ones();
        if k < in_byte || shift >= 56 {
            break;
        }
        k -= in_byte;
        bits >>= 8;
        shift += 8;
    }
    for _ in 0..k {
        bits &= bits - 1;
    }
    shift + bits.trailing_zeros()
}

#[cfg(test)]
mod tests {
    use super::nth_set_bit;

    #[test]
    fn nth_set_bit_is_the_kth_bit_counted_from_the_lowest() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            for bits in [x, x & (x >> 3), x | 1 << 63, u64::MAX, 1 << 63] {
                let set: Vec<u32> = (0..64).filter(|i| bits >> i & 1 == 1).collect();
                for (k, &at) in set.iter().enumerate() {
                    assert_eq!(nth_set_bit(bits, k as u32), at, "bits {bits:#x}, k {k}");
                }
            }
        }
    }
}
