//! Block headers (runtime/caml/mlvalues.h) and walks over the blocks of captured regions.

use crate::source::copy_threads;
use heapsnap_format::RegionKind;
use heapsnap_values::{Colour, HeaderFormat, HeaderLayout, CONT_TAG, INFIX_TAG, STRING_TAG};

/// A memory region copied from the target.
#[derive(Clone, Debug)]
pub struct CapturedRegion {
    pub kind: RegionKind,
    pub domain: u16,
    pub base: u64,
    pub block_wsize: u32,
    pub first_block: u32,
    pub owner: u64,
    pub bytes: Vec<u8>,
}

impl CapturedRegion {
    pub fn end(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    pub fn word(&self, offset: usize) -> u64 {
        u64::from_le_bytes(self.bytes[offset..offset + 8].try_into().expect("8 bytes"))
    }

    /// The header offsets of a pool's slots, free or not (none for a region without slots).
    pub fn slot_offsets(&self) -> impl Iterator<Item = usize> + '_ {
        let stride = self.block_wsize as usize * 8;
        let slots = if self.kind == RegionKind::Pool && stride > 0 {
            self.bytes.len().saturating_sub(self.first_block as usize) / stride
        } else {
            0
        };
        (0..slots).map(move |i| self.first_block as usize + i * stride)
    }

    /// The header offsets of the blocks of a heap region (minor heap, pool, large allocation or
    /// heap chunk): `(header offset, header)`. Free pool slots (header 0) are skipped.
    pub fn blocks(&self, format: HeaderFormat) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        match self.kind {
            RegionKind::Pool => {
                for at in self.slot_offsets() {
                    let hd = self.word(at);
                    if hd != 0 {
                        out.push((at, hd));
                    }
                }
            }
            RegionKind::MinorHeap | RegionKind::Large | RegionKind::HeapChunk => {
                let mut at = self.first_block as usize;
                while at + 8 <= self.bytes.len() {
                    let hd = self.word(at);
                    out.push((at, hd));
                    at += 8 * (format.wosize(hd) as usize + 1);
                }
            }
            _ => {}
        }
        out
    }
}

/// Captured regions sorted by address, to read target words from the copy.
pub struct RegionIndex<'a> {
    regions: Vec<&'a CapturedRegion>,
}

impl<'a> RegionIndex<'a> {
    pub fn new(regions: &'a [CapturedRegion]) -> Self {
        let mut regions: Vec<&CapturedRegion> = regions.iter().collect();
        regions.sort_by_key(|r| r.base);
        RegionIndex { regions }
    }

    pub fn region_of(&self, address: u64) -> Option<&'a CapturedRegion> {
        let after = self.regions.partition_point(|r| r.base <= address);
        let r = *self.regions.get(after.checked_sub(1)?)?;
        (address < r.end()).then_some(r)
    }

    pub fn word(&self, address: u64) -> Option<u64> {
        let r = self.region_of(address)?;
        let offset = (address - r.base) as usize;
        (offset + 8 <= r.bytes.len()).then(|| r.word(offset))
    }

    /// Whether `value` names a block that the analysis will find: the start of a live heap block
    /// (those of regions walked block by block, minor heaps and heap chunks, are listed in
    /// `walked`), or the first field of a block of static data. A free pool slot, a garbage
    /// block, a slot whose header the analysis would call malformed, the inside of a block and
    /// a word of static data not preceded by a static block's header name no block.
    pub fn names_block(&self, value: u64, walked: &std::collections::HashSet<u64>, layout: &HeaderLayout) -> bool {
        if value & 7 != 0 || value < 8 {
            return false;
        }
        let Some(r) = self.region_of(value) else { return false };
        // The first word of a region is a header (or a stack's), never a block.
        let Some(header_at) = (value - 8).checked_sub(r.base) else { return false };
        let live_header_fits = |hd: u64, words: u64| {
            let h = layout.decode(hd);
            hd != 0 && h.wosize > 0 && h.wosize < words && h.tag != INFIX_TAG && h.colour != Colour::Garbage
        };
        match r.kind {
            RegionKind::MinorHeap | RegionKind::HeapChunk => walked.contains(&value),
            RegionKind::Pool => {
                let stride = r.block_wsize as u64 * 8;
                header_at >= r.first_block as u64
                    && stride > 0
                    && (header_at - r.first_block as u64).is_multiple_of(stride)
                    && header_at + stride <= r.bytes.len() as u64
                    && live_header_fits(r.word(header_at as usize), r.block_wsize as u64)
            }
            RegionKind::Large => {
                header_at == r.first_block as u64 && live_header_fits(r.word(header_at as usize), (r.bytes.len() as u64 - header_at) / 8)
            }
            // ocamlopt emits static blocks with the colour no collector marks (NOT_MARKABLE in
            // OCaml 5, black in 4.14: both 3), and the block must fit in the region, as the
            // analysis requires; a register holding any other address of the data section is
            // no root.
            RegionKind::Static => {
                let hd = r.word(header_at as usize);
                let fields = layout.wosize(hd);
                layout.format().colour_bits(hd) == 3
                    && fields > 0
                    && header_at + 8 + fields * 8 <= r.bytes.len() as u64
                    && layout.format().tag(hd) != INFIX_TAG
            }
            _ => false,
        }
    }
}

/// Zeroes the bytes of every string/bytes block of a heap region, keeping its header and the
/// last byte (which encodes the length).
pub fn redact_strings(region: &mut CapturedRegion, format: HeaderFormat) -> usize {
    let mut count = 0;
    for (at, hd) in region.blocks(format) {
        if format.tag(hd) != STRING_TAG {
            continue;
        }
        let words = format.wosize(hd) as usize;
        let start = at + 8;
        let end = (start + words * 8).min(region.bytes.len());
        if end > start {
            region.bytes[start..end - 1].fill(0);
            count += 1;
        }
    }
    count
}

/// The shape of continuation blocks (`Cont_tag`): how many fields they have (the release
/// says), and the words per slot of the pools that hold them.
#[derive(Clone, Copy, Debug)]
pub struct ContinuationShape {
    pub fields: u64,
    pub slot_wsize: u32,
}

/// Continuation blocks in the captured heap: minor heaps and the pools of the size class that
/// holds them. This runs while the target is stopped and reads a good part of the heap, so the
/// regions are scanned by `copy_threads` threads (the result is in region order all the same).
pub fn find_continuations(regions: &[CapturedRegion], format: HeaderFormat, shape: ContinuationShape) -> Vec<u64> {
    let scanned: Vec<&CapturedRegion> = regions
        .iter()
        .filter(|r| r.kind == RegionKind::MinorHeap || (r.kind == RegionKind::Pool && r.block_wsize == shape.slot_wsize))
        .collect();
    let total: usize = scanned.iter().map(|r| r.bytes.len()).sum();
    let threads = copy_threads().min(total / MIN_SCAN_BYTES_PER_THREAD).max(1);
    if threads == 1 {
        return continuations_in(&scanned, format, shape);
    }
    // Contiguous runs of regions of about equal bytes.
    let share = total.div_ceil(threads);
    let mut runs: Vec<&[&CapturedRegion]> = Vec::with_capacity(threads);
    let (mut start, mut bytes) = (0, 0);
    for (i, r) in scanned.iter().enumerate() {
        bytes += r.bytes.len();
        if bytes >= share && runs.len() + 1 < threads {
            runs.push(&scanned[start..=i]);
            (start, bytes) = (i + 1, 0);
        }
    }
    runs.push(&scanned[start..]);
    std::thread::scope(|scope| {
        let handles: Vec<_> = runs[1..]
            .iter()
            .map(|&run| {
                (
                    run,
                    std::thread::Builder::new()
                        .name("heapsnap-scan".into())
                        .spawn_scoped(scope, move || continuations_in(run, format, shape)),
                )
            })
            .collect();
        let mut out = continuations_in(runs[0], format, shape);
        for (run, handle) in handles {
            match handle {
                Ok(handle) => match handle.join() {
                    Ok(found) => out.extend(found),
                    Err(panic) => std::panic::resume_unwind(panic),
                },
                // No thread to be had: scan that run here.
                Err(_) => out.extend(continuations_in(run, format, shape)),
            }
        }
        out
    })
}

/// Below this many bytes a thread's share, fewer threads scan for continuations.
const MIN_SCAN_BYTES_PER_THREAD: usize = 8 << 20;

fn continuations_in(regions: &[&CapturedRegion], format: HeaderFormat, shape: ContinuationShape) -> Vec<u64> {
    let mut out = Vec::new();
    let is_cont = |hd: u64| format.tag(hd) == CONT_TAG && format.wosize(hd) == shape.fields;
    for r in regions {
        match r.kind {
            RegionKind::MinorHeap => {
                for (at, hd) in r.blocks(format) {
                    if is_cont(hd) {
                        out.push(r.base + at as u64 + 8);
                    }
                }
            }
            // A tight loop over the headers (their low byte is the tag).
            RegionKind::Pool if r.block_wsize == shape.slot_wsize => {
                for at in r.slot_offsets() {
                    if r.bytes[at] == CONT_TAG && is_cont(r.word(at)) {
                        out.push(r.base + at as u64 + 8);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(wosize: u64, colour: u64, tag: u8) -> u64 {
        (wosize << 10) | (colour << 8) | tag as u64
    }

    fn region(kind: RegionKind, words: &[u64], block_wsize: u32, first_block: u32) -> CapturedRegion {
        CapturedRegion {
            kind,
            domain: 0,
            base: 0x1000,
            block_wsize,
            first_block,
            owner: 0,
            bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        }
    }

    fn layout() -> HeaderLayout {
        HeaderLayout::new(0, heapsnap_values::ColourEncoding::OCAML5_INITIAL)
    }

    /// The addresses among every word of `regions` (and one past each) that name a block.
    fn named(regions: &[CapturedRegion], walked: &[u64]) -> Vec<u64> {
        let index = RegionIndex::new(regions);
        let walked = walked.iter().copied().collect();
        regions.iter().flat_map(|r| (r.base..r.end() + 8).step_by(8)).filter(|&v| index.names_block(v, &walked, &layout())).collect()
    }

    /// A conservative word may hold any address of a region, its very first word included.
    #[test]
    fn names_block_takes_any_address_of_a_region() {
        let pool = region(RegionKind::Pool, &[0, header(2, 0, 0), 0x11, 0x21, 0, 0, 0], 3, 8);
        let minor = CapturedRegion { base: 0x2000, ..region(RegionKind::MinorHeap, &[header(1, 0, 0), 0x11], 0, 0) };
        assert_eq!(
            named(&[pool, minor], &[0x2008]),
            [0x1010, 0x2008],
            "only the blocks' own addresses name them (the free slot at 0x1028 does not)"
        );
    }

    /// What `verify` calls a pointer to no block is no root either (the OCaml compiler, dumped
    /// mid-compilation, kept a register holding an address of its data section that no static
    /// block starts at, and `verify` failed on the snapshot).
    #[test]
    fn conservative_roots_name_no_block_in_static_data_pool_interiors_or_large_allocations() {
        // OCaml 5's initial encoding: marked 0, unmarked 1, garbage 2, not markable 3.
        let (unmarked, garbage, static_black) = (1, 2, 3);
        // Static data: a 2-field block (black header), then a word that is no header, then a
        // white "header" (C data that looks like one), then a black header whose block would
        // run past the region.
        let statics = CapturedRegion {
            base: 0x3000,
            ..region(
                RegionKind::Static,
                &[header(2, static_black, 0), 0x11, 0x21, 0x5, header(1, 0, 0), 7, header(9, static_black, 0), 1],
                0,
                0,
            )
        };
        assert_eq!(named(&[statics], &[]), [0x3008], "only the first field of the static block");

        // A pool of 3-word slots from byte 8: a live block, a garbage one, a slot whose header
        // is too big for it (malformed), and an infix header where a block should start.
        let pool = region(
            RegionKind::Pool,
            &[
                0,
                header(2, unmarked, 0),
                0x11,
                0x21,
                header(2, garbage, 0),
                1,
                1,
                header(3, unmarked, 0),
                1,
                1,
                header(1, unmarked, INFIX_TAG),
                1,
                1,
            ],
            3,
            8,
        );
        assert_eq!(named(&[pool], &[]), [0x1010], "the live slot's first field, not its interior, a garbage or malformed slot");

        // A large allocation: its block from byte 16, then a garbage one.
        let large = CapturedRegion { base: 0x5000, ..region(RegionKind::Large, &[0, 0, header(3, unmarked, 0), 1, 2, 3], 0, 16) };
        let dead = CapturedRegion { base: 0x6000, ..region(RegionKind::Large, &[0, 0, header(1, garbage, 0), 1], 0, 16) };
        assert_eq!(named(&[large, dead], &[]), [0x5018], "the large block's first field only; a garbage large block is none");
    }

    #[test]
    fn redaction_keeps_headers_and_length_byte() {
        let f = HeaderFormat { reserved_bits: 0 };
        // "secret!" (7 bytes + padding byte 0) then a 1-field block.
        let s = u64::from_le_bytes(*b"secret!\0");
        let mut r = region(RegionKind::MinorHeap, &[header(1, 0, STRING_TAG), s, header(1, 0, 0), 42], 0, 0);
        assert_eq!(redact_strings(&mut r, f), 1);
        assert_eq!(r.word(0), header(1, 0, STRING_TAG));
        assert_eq!(&r.bytes[8..16], &[0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(r.word(24), 42);
    }

    #[test]
    fn pool_blocks_skip_free_slots() {
        let f = HeaderFormat { reserved_bits: 0 };
        let r = region(RegionKind::Pool, &[9, 9, header(1, 0, 0), 1, 0, 0, header(1, 0, 3), 5], 2, 16);
        assert_eq!(r.blocks(f), vec![(16, header(1, 0, 0)), (48, header(1, 0, 3))]);
    }

    fn cont_header() -> u64 {
        header(2, 0, CONT_TAG)
    }

    fn pool(base: u64, blocks: &[u64]) -> CapturedRegion {
        let mut words = vec![0u64; 2]; // a pool header stand-in; blocks start at byte 16
        for &hd in blocks {
            words.extend([hd, 0x11, 0x13]);
        }
        CapturedRegion {
            kind: RegionKind::Pool,
            domain: 0,
            base,
            block_wsize: 3,
            first_block: 16,
            owner: 0,
            bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn continuations_are_found_in_region_order_by_several_threads() {
        let format = HeaderFormat { reserved_bits: 0 };
        // Enough 3-word pools for several threads' shares, with continuations here and there.
        let blocks_per_pool = 2000;
        let pools = 4 * MIN_SCAN_BYTES_PER_THREAD / (24 * blocks_per_pool) + 1;
        let mut regions = Vec::new();
        let mut expected = Vec::new();
        for p in 0..pools as u64 {
            let base = 0x1000_0000 + p * 0x10_0000;
            let mut blocks = vec![header(2, 0, 0); blocks_per_pool];
            for i in [0, 7 * p as usize % blocks_per_pool, blocks_per_pool - 1] {
                if blocks[i] != cont_header() {
                    blocks[i] = cont_header();
                }
            }
            for (i, &hd) in blocks.iter().enumerate() {
                if hd == cont_header() {
                    expected.push(base + 16 + 24 * i as u64 + 8);
                }
            }
            regions.push(pool(base, &blocks));
        }
        // A pool of another size class is not looked at.
        let mut other = pool(0x9000_0000, &[cont_header()]);
        other.block_wsize = 4;
        regions.push(other);
        assert_eq!(find_continuations(&regions, format, ContinuationShape { fields: 2, slot_wsize: 3 }), expected);
    }
}
