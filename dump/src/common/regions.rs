//! Block headers (runtime/caml/mlvalues.h) and walks over the blocks of captured regions.

use crate::source::copy_threads;
use heapsnap_format::RegionKind;
use heapsnap_values::{HeaderFormat, CONT_TAG, STRING_TAG};

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

    /// The header offsets of the blocks of a heap region (minor heap, pool, large allocation or
    /// heap chunk): `(header offset, header)`. Free pool slots (header 0) are skipped.
    pub fn blocks(&self, format: HeaderFormat) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        match self.kind {
            RegionKind::Pool => {
                let stride = self.block_wsize as usize * 8;
                if stride == 0 {
                    return out;
                }
                let mut at = self.first_block as usize;
                while at + stride <= self.bytes.len() {
                    let hd = self.word(at);
                    if hd != 0 {
                        out.push((at, hd));
                    }
                    at += stride;
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

    /// Whether `value` names a block of a captured region: the start of a heap block (those of
    /// regions walked block by block, minor heaps and heap chunks, are listed in `walked`), or
    /// any word of static data.
    pub fn names_block(&self, value: u64, walked: &std::collections::HashSet<u64>) -> bool {
        if value & 7 != 0 || value < 8 {
            return false;
        }
        let Some(r) = self.region_of(value) else { return false };
        // The first word of a region is a header (or a stack's), never a block.
        let Some(header_at) = (value - 8).checked_sub(r.base) else { return false };
        match r.kind {
            RegionKind::MinorHeap | RegionKind::HeapChunk => walked.contains(&value),
            RegionKind::Pool => {
                let stride = r.block_wsize as u64 * 8;
                header_at >= r.first_block as u64
                    && stride > 0
                    && (header_at - r.first_block as u64).is_multiple_of(stride)
                    && r.word(header_at as usize) != 0
            }
            RegionKind::Large => header_at == r.first_block as u64,
            RegionKind::Static => true,
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
/// regions are scanned by [`copy_threads`] threads (the result is in region order all the same).
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
    let stride = shape.slot_wsize as usize * 8;
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
            RegionKind::Pool if r.block_wsize == shape.slot_wsize && stride > 0 => {
                let mut at = r.first_block as usize;
                while at + stride <= r.bytes.len() {
                    if r.bytes[at] == CONT_TAG && is_cont(r.word(at)) {
                        out.push(r.base + at as u64 + 8);
                    }
                    at += stride;
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

    /// A conservative word may hold any address of a region, its very first word included.
    #[test]
    fn names_block_takes_any_address_of_a_region() {
        let pool = region(RegionKind::Pool, &[0, header(2, 0, 0), 0x11, 0x21, 0, 0, 0], 3, 8);
        let minor = CapturedRegion { base: 0x2000, ..region(RegionKind::MinorHeap, &[header(1, 0, 0), 0x11], 0, 0) };
        let regions = [pool, minor];
        let index = RegionIndex::new(&regions);
        let minor_blocks = [0x2008u64].into_iter().collect();
        let named: Vec<u64> =
            (0x1000..0x1038).step_by(8).chain((0x2000..0x2010).step_by(8)).filter(|&v| index.names_block(v, &minor_blocks)).collect();
        assert_eq!(named, [0x1010, 0x2008], "only the blocks' own addresses name them (the free slot at 0x1028 does not)");
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
