//! How a stopped world is copied, whichever family's runtime it runs: buffers prepared before
//! the stop ([`SpareBuffers`]), the minor heaps (checked to parse), the static data of the
//! program and its plugins, all in batched reads from the memory source.

use crate::common::copied_world::Capture;
use crate::common::plugins::PluginData;
use crate::common::regions::CapturedRegion;
use crate::error::{Result, UnsafeStop};
use crate::source::{zeroed_buffer, MemorySource, ReadExt, ReadRequest};
use heapsnap_format::{RegionKind, NO_DOMAIN};
use heapsnap_values::{HeaderFormat, CLOSURE_TAG, INFIX_TAG, NO_SCAN_TAG};
use std::collections::BTreeMap;

/// What to do with a minor heap that does not parse (a domain caught between the bump of its
/// allocation pointer and the write of the new block's header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TornMinorHeap {
    /// Fail with `UnsafeStop`: a live process is stopped again a moment later.
    Fail,
    /// Start the region's walk at the first header from which it parses to its end, and say so
    /// in a warning: a core cannot be taken again.
    SkipTornBlock,
}

/// Copies every domain's minor heap from its allocation pointer, and checks that it parses (a
/// live stop fails with `UnsafeStop`; a core skips the torn block and blanks stale fields).
pub(crate) fn copy_minor_heaps(
    source: &dyn MemorySource,
    cap: &mut Capture,
    spare: &mut SpareBuffers,
    format: HeaderFormat,
    torn: TornMinorHeap,
) -> Result<()> {
    capture_minor_heaps(source, cap, spare)?;
    match torn {
        TornMinorHeap::Fail => {
            check_minor_heaps(cap, format)?;
            if let Some(f) = stale_youngest_fields(cap, format).first() {
                return Err(f.unsafe_stop(cap).into());
            }
        }
        TornMinorHeap::SkipTornBlock => {
            skip_torn_blocks(cap, format);
            blank_stale_fields(cap, format);
        }
    }
    Ok(())
}

fn capture_minor_heaps(source: &dyn MemorySource, cap: &mut Capture, spare: &mut SpareBuffers) -> Result<()> {
    let mut regions: Vec<CapturedRegion> = cap
        .domains
        .iter()
        .filter(|d| d.info.young_ptr < d.info.minor_end)
        .map(|d| CapturedRegion {
            kind: RegionKind::MinorHeap,
            domain: d.id,
            base: d.info.young_ptr,
            block_wsize: 0,
            first_block: 0,
            owner: 0,
            bytes: Vec::new(),
        })
        .collect();
    for r in regions.iter_mut() {
        let d = cap.domains.iter().find(|d| d.id == r.domain).expect("region of a domain");
        r.bytes = spare.take_region(r.base, (d.info.minor_end - r.base) as usize)?;
    }
    read_regions(source, cap, regions)
}

/// Buffers allocated and touched before the world stops, so that the pause is spent copying,
/// not allocating and faulting in memory (page faults are most of the cost of a copy into
/// fresh memory). They are guessed from the target while it runs: pool-sized buffers for the
/// pools, and one buffer for each minor heap, large allocation and static data span. A region
/// the guess missed gets a fresh buffer during the stop. What was not used is freed with this,
/// after the target is resumed.
pub struct SpareBuffers {
    pool_size: usize,
    pools: Vec<Vec<u8>>,
    /// Pools expected on the heap lists (the OCaml 5 family lists them while the target runs).
    pub candidates: Vec<u64>,
    /// Other regions' buffers, by the target address they were made for.
    regions: BTreeMap<u64, Vec<u8>>,
    /// The loaded plugins' static data, as found while the target ran (the stop reuses it).
    plugins: Option<PluginData>,
}

impl SpareBuffers {
    /// The loaded plugins' static data, as found while the target ran.
    pub fn plugins(&self) -> Option<&PluginData> {
        self.plugins.as_ref()
    }

    pub fn set_plugins(&mut self, plugins: PluginData) {
        self.plugins = Some(plugins);
    }

    /// Buffers for regions `(address, length)` guessed while the target runs, every page
    /// faulted in. A guess too big to allocate is no reason to fail: the stop allocates then.
    pub fn add_spans(&mut self, spans: impl IntoIterator<Item = (u64, usize)>) {
        for (address, len) in spans {
            if len as u64 > MAX_GUESSED_REGION {
                continue;
            }
            if let Ok(buf) = faulted_buffer(len) {
                self.regions.insert(address, buf);
            }
        }
    }

    /// `count` buffers of `size` bytes, every page already faulted in.
    pub fn new(count: usize, size: usize, candidates: Vec<u64>) -> Result<SpareBuffers> {
        let pools = (0..count).map(|_| faulted_buffer(size)).collect::<Result<_>>()?;
        Ok(SpareBuffers { pool_size: size, pools, candidates, regions: BTreeMap::new(), plugins: None })
    }

    pub fn none() -> SpareBuffers {
        SpareBuffers { pool_size: 0, pools: Vec::new(), candidates: Vec::new(), regions: BTreeMap::new(), plugins: None }
    }

    pub(crate) fn take(&mut self, address: u64, size: usize) -> Result<Vec<u8>> {
        if size == self.pool_size {
            if let Some(b) = self.pools.pop() {
                return Ok(b);
            }
        }
        zeroed_buffer(address, size)
    }

    /// A buffer for `len` bytes at `address`: the one prepared for a span that holds them (a
    /// minor heap's buffer serves the part from its allocation pointer), else a new one.
    pub(crate) fn take_region(&mut self, address: u64, len: usize) -> Result<Vec<u8>> {
        let covering = self.regions.range(..=address).next_back().map(|(&start, buf)| (start, buf.len()));
        if let Some((start, size)) = covering {
            if address + len as u64 <= start + size as u64 {
                let mut buf = self.regions.remove(&start).expect("listed");
                // From the front: those are the pages `faulted_buffer` touched like the rest.
                buf.truncate(len);
                return Ok(buf);
            }
        }
        zeroed_buffer(address, len)
    }
}

/// Regions guessed before the stop are prepared up to this size (64 GiB); a bigger guess is a
/// torn read of a changing list.
pub const MAX_GUESSED_REGION: u64 = 64 << 30;

/// A zeroed buffer of `len` bytes with every page faulted in.
fn faulted_buffer(len: usize) -> Result<Vec<u8>> {
    let mut b = zeroed_buffer(0, len)?;
    for page in b.chunks_mut(4096) {
        page[0] = 0;
    }
    Ok(b)
}

/// Every minor heap must parse from `young_ptr` to its end: a domain stopped between the bump
/// of its allocation pointer and the write of the new header (in C code we could not see
/// into) shows here.
fn check_minor_heaps(cap: &Capture, format: HeaderFormat) -> Result<()> {
    for r in cap.regions.iter().filter(|r| r.kind == RegionKind::MinorHeap) {
        let mut at = 0usize;
        while at + 8 <= r.bytes.len() {
            let header = r.word(at);
            if header == 0 {
                return Err(UnsafeStop::ZeroMinorHeader { domain: r.domain, address: r.base + at as u64 }.into());
            }
            at += 8 * (format.wosize(header) as usize + 1);
        }
        if at != r.bytes.len() {
            return Err(UnsafeStop::MinorHeapUnparsed(r.domain).into());
        }
    }
    Ok(())
}

/// A field of the youngest block of a minor heap (the one at its allocation pointer) that
/// points where no block of that minor heap is: below the allocation pointer, where nothing is
/// allocated yet, or between its blocks. C code that allocates with `caml_alloc_small` or the
/// `Alloc_small` macro writes the fields after the allocation, and until it does they hold
/// whatever that memory held in an earlier cycle of the minor heap; the safety check cannot
/// see that window in C code it does not know. (A stale field that happens to name a block goes
/// unnoticed; a stale integer or a pointer outside this minor heap is harmless to the walk.)
struct StaleField {
    /// Index of the minor heap in `Capture::regions`, and the field's byte offset in it.
    region: usize,
    offset: usize,
    value: u64,
}

impl StaleField {
    fn unsafe_stop(&self, cap: &Capture) -> UnsafeStop {
        let r = &cap.regions[self.region];
        UnsafeStop::UninitialisedField { domain: r.domain, address: r.base + self.offset as u64, value: self.value }
    }
}

fn stale_youngest_fields(cap: &Capture, format: HeaderFormat) -> Vec<StaleField> {
    let mut stale = Vec::new();
    for (region, r) in cap.regions.iter().enumerate().filter(|(_, r)| r.kind == RegionKind::MinorHeap) {
        let Some(d) = cap.domains.iter().find(|d| d.id == r.domain) else { continue };
        let youngest = r.first_block as usize;
        if youngest + 8 > r.bytes.len() {
            continue;
        }
        let header = r.word(youngest);
        let fields = format.wosize(header) as usize;
        if format.tag(header) >= NO_SCAN_TAG || youngest + 8 * (fields + 1) > r.bytes.len() {
            continue;
        }
        // The fields that point into this minor heap; the walk over its blocks (in the pause)
        // only when there are some.
        let offsets = (youngest + 8..youngest + 8 * (fields + 1)).step_by(8);
        let inside: Vec<usize> =
            offsets.filter(|&o| r.word(o) & 1 == 0 && (d.info.minor_start..d.info.minor_end).contains(&r.word(o))).collect();
        if inside.is_empty() {
            continue;
        }
        let blocks = r.blocks(format);
        // Whether `value` is a block of this minor heap, or an infix pointer into a closure.
        let names_block = |value: u64| {
            let Some(at) = value.checked_sub(r.base + 8).map(|a| a as usize) else { return false };
            let i = blocks.partition_point(|&(b, _)| b <= at);
            let Some(&(start, hd)) = i.checked_sub(1).map(|i| &blocks[i]) else { return false };
            start == at || (format.tag(hd) == CLOSURE_TAG && at + 8 <= r.bytes.len() && format.tag(r.word(at)) == INFIX_TAG)
        };
        stale.extend(inside.into_iter().filter(|&o| !names_block(r.word(o))).map(|offset| StaleField {
            region,
            offset,
            value: r.word(offset),
        }));
    }
    stale
}

/// In a core, which cannot be taken again: the stale fields become `()` (what `caml_alloc`
/// would have put there), and a warning says so.
fn blank_stale_fields(cap: &mut Capture, format: HeaderFormat) {
    for f in stale_youngest_fields(cap, format) {
        let warning = format!("{}; recorded as ()", f.unsafe_stop(cap));
        cap.regions[f.region].bytes[f.offset..f.offset + 8].copy_from_slice(&1u64.to_le_bytes());
        cap.warnings.push(warning);
    }
}

/// Fills `regions` from the target in one batched read and adds them to the capture.
pub(crate) fn read_regions(source: &dyn MemorySource, cap: &mut Capture, mut regions: Vec<CapturedRegion>) -> Result<()> {
    let mut requests: Vec<ReadRequest<'_>> = regions.iter_mut().map(|r| ReadRequest { address: r.base, buf: &mut r.bytes }).collect();
    source.read_many(&mut requests)?;
    cap.regions.extend(regions);
    Ok(())
}

/// The largest block a minor heap holds, in words (`Max_young_wosize` + its header): a torn block
/// at the allocation pointer is never longer.
const MAX_YOUNG_WHSIZE: usize = 257;

/// Whether the minor heap `r` parses from byte `from` exactly to its end.
fn parses_from(r: &CapturedRegion, format: HeaderFormat, from: usize) -> bool {
    let mut at = from;
    while at + 8 <= r.bytes.len() {
        let header = r.word(at);
        if header == 0 {
            return false;
        }
        at += 8 * (format.wosize(header) as usize + 1);
    }
    at == r.bytes.len()
}

/// For each minor heap that does not parse from its allocation pointer, moves `first_block`
/// past the torn block (to the first word, within one maximal young block, from which the walk
/// reaches the end exactly) and records what was skipped.
fn skip_torn_blocks(cap: &mut Capture, format: HeaderFormat) {
    for r in cap.regions.iter_mut().filter(|r| r.kind == RegionKind::MinorHeap) {
        let start = r.first_block as usize;
        if parses_from(r, format, start) {
            continue;
        }
        let limit = r.bytes.len().min(start + 8 * MAX_YOUNG_WHSIZE);
        let resumed = (start + 8..=limit).step_by(8).find(|&at| parses_from(r, format, at)).unwrap_or(r.bytes.len());
        r.first_block = resumed as u32;
        cap.warnings.push(format!(
            "domain {}: the minor heap was caught mid-allocation; {} bytes at {:#x} were skipped",
            r.domain,
            resumed - start,
            r.base + start as u64
        ));
    }
}

/// The static data of every OCaml compilation unit (`caml_data_segments`) and of the units of
/// loaded Dynlink plugins (see [`crate::common::plugins`]).
///
/// `spans` are the executable's; `(dyn_globals, data_segments)` the target addresses of the
/// runtime's `caml_dyn_globals` and `caml_data_segments`, which find the plugins' (OCaml 4.14
/// and 5 alike).
pub(crate) fn copy_static_data(
    source: &dyn MemorySource,
    cap: &mut Capture,
    spare: &mut SpareBuffers,
    spans: Vec<(u64, u64)>,
    (dyn_globals, data_segments): (Option<u64>, Option<u64>),
) -> Result<()> {
    let plugins = crate::common::plugins::data_spans(dyn_globals, data_segments, source, spare.plugins.as_ref());
    cap.warnings.extend(plugins.warnings);
    cap.plugin_symbols = plugins.symbols;
    cap.plugin_dwarf = plugins.dwarf;
    // Merged where they touch, so that regions never overlap.
    let regions: Vec<CapturedRegion> = crate::common::plugins::merge(spans.into_iter().chain(plugins.spans).collect())
        .into_iter()
        .map(|(b, e)| {
            Ok(CapturedRegion {
                kind: RegionKind::Static,
                domain: NO_DOMAIN,
                base: b,
                block_wsize: 0,
                first_block: 0,
                owner: 0,
                bytes: spare.take_region(b, (e - b) as usize)?,
            })
        })
        .collect::<Result<_>>()?;
    read_regions(source, cap, regions)
}

/// The static data of the executable's OCaml units: `caml_data_segments` (at `table`), pairs
/// of (begin, end) ended by a null one, as word-aligned spans.
pub(crate) fn data_segments(source: &dyn MemorySource, table: u64) -> Result<Vec<(u64, u64)>> {
    let mut spans = Vec::new();
    for i in 0..100_000u64 {
        let pair = source.read_words(table + 16 * i, 2)?;
        if pair[0] == 0 {
            break;
        }
        let (begin, end) = (pair[0] & !7, pair[1].div_ceil(8) * 8);
        if end > begin {
            spans.push((begin, end));
        }
    }
    Ok(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::copied_world::CapturedDomain;
    use crate::error::DumpError;
    use heapsnap_format::DomainInfo;

    fn minor_heap(words: &[u64]) -> CapturedRegion {
        CapturedRegion {
            kind: RegionKind::MinorHeap,
            domain: 0,
            base: 0x1000,
            block_wsize: 0,
            first_block: 0,
            owner: 0,
            bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        }
    }

    fn header(wosize: u64) -> u64 {
        wosize << 10 // tag 0, colour 0
    }

    #[test]
    fn a_block_caught_mid_allocation_is_skipped_with_a_warning() {
        let format = HeaderFormat { reserved_bits: 0 };
        // Three words bumped but not yet written (a fresh minor heap is zeroed), then two
        // complete blocks.
        let words = [0, 0, 0, header(1), 0x11, header(2), 0x21, 0x23];
        let mut cap = Capture { regions: vec![minor_heap(&words)], ..Capture::default() };
        assert!(matches!(check_minor_heaps(&cap, format), Err(DumpError::UnsafeStop(_))));
        skip_torn_blocks(&mut cap, format);
        assert_eq!(cap.regions[0].first_block, 24);
        assert_eq!(cap.regions[0].blocks(format).len(), 2);
        assert_eq!(cap.warnings.len(), 1);
        assert!(cap.warnings[0].contains("24 bytes at 0x1000"), "{}", cap.warnings[0]);
    }

    #[test]
    fn prepared_buffers_serve_the_regions_they_cover_once() {
        let mut spare = SpareBuffers::none();
        spare.regions.insert(0x10_000, faulted_buffer(0x4000).unwrap()); // a minor heap, whole
        spare.regions.insert(0x80_000, faulted_buffer(0x2000).unwrap()); // a large allocation
        let ptr_of = |b: &Vec<u8>| b.as_ptr() as usize;
        let minor_ptr = ptr_of(&spare.regions[&0x10_000]);
        // The minor heap from its allocation pointer: the front of the prepared buffer.
        let minor = spare.take_region(0x13_000, 0x1000).unwrap();
        assert_eq!((minor.len(), ptr_of(&minor)), (0x1000, minor_ptr));
        // Taken once: the same span again gets a new buffer.
        let again = spare.take_region(0x13_000, 0x1000).unwrap();
        assert_ne!(ptr_of(&again), minor_ptr);
        // A region larger than the guess, or outside it, gets a new zeroed buffer.
        let grown = spare.take_region(0x80_000, 0x3000).unwrap();
        assert_eq!(grown.len(), 0x3000);
        assert!(grown.iter().all(|&b| b == 0));
        assert!(spare.regions.contains_key(&0x80_000));
        let large = spare.take_region(0x80_000, 0x2000).unwrap();
        assert_eq!(large.len(), 0x2000);
        assert!(spare.regions.is_empty());
    }

    #[test]
    fn pool_buffers_are_handed_out_then_allocated() {
        let mut spare = SpareBuffers::new(1, 64, Vec::new()).unwrap();
        assert_eq!(spare.take(0x1000, 64).unwrap().len(), 64);
        assert_eq!(spare.take(0x2000, 64).unwrap().len(), 64);
        // Another size never takes a pool buffer.
        let mut spare = SpareBuffers::new(1, 64, Vec::new()).unwrap();
        assert_eq!(spare.take(0x1000, 32).unwrap().len(), 32);
        assert_eq!(spare.pools.len(), 1);
    }

    /// A capture of one domain whose minor heap spans 0x800..0x1000 + 8 * words.len(), with its
    /// allocation pointer at 0x1000.
    fn one_domain_minor_heap(words: &[u64]) -> Capture {
        let r = minor_heap(words);
        let info = DomainInfo { id: 0, minor_start: 0x800, minor_end: r.end(), young_ptr: r.base };
        let domain = CapturedDomain { id: 0, state: 0, state_bytes: Vec::new(), info, running: None };
        Capture { regions: vec![r], domains: vec![domain], ..Capture::default() }
    }

    #[test]
    fn a_youngest_block_with_stale_fields_is_caught() {
        let format = HeaderFormat { reserved_bits: 0 };
        let closure = |wosize: u64| header(wosize) | u64::from(CLOSURE_TAG);
        let infix = |offset: u64| header(offset) | u64::from(INFIX_TAG);
        // 0x1000: youngest, 3 fields; 0x1020: a pair; 0x1038: a closure of 5 fields with an
        // infix header at 0x1050 (its second function at 0x1058).
        let heap = |fields: [u64; 3]| {
            let mut words = vec![header(3), fields[0], fields[1], fields[2], header(2), 0x11, 0x13];
            words.extend([closure(5), 0x5555_0000, 0x0300_0000_0000_0007, infix(3), 0x5555_0100, 0x0100_0000_0000_0005]);
            words
        };
        let stale = |cap: &Capture| stale_youngest_fields(cap, format).iter().map(|f| (f.offset, f.value)).collect::<Vec<_>>();
        // Ints, pointers outside this minor heap, blocks of it, itself, an infix pointer: fine.
        for fields in [[0x1, 0x7f00_0000_0000, 0x1028], [0x1008, 0x1040, 0x1058], [0x600, 0x3, 0x2_0000_0000]] {
            assert_eq!(stale(&one_domain_minor_heap(&heap(fields))), vec![], "{fields:x?}");
        }
        // Below the allocation pointer, in the middle of a block, into a closure but not at an
        // infix header, at the youngest block's own header.
        for (fields, expected) in [
            ([0x1, 0x0900, 0x1028], vec![(0x10, 0x900)]),
            ([0x1030, 0x1, 0x1048], vec![(0x8, 0x1030), (0x18, 0x1048)]),
            ([0x1000, 0x1, 0x1], vec![(0x8, 0x1000)]),
        ] {
            let cap = one_domain_minor_heap(&heap(fields));
            assert_eq!(stale(&cap), expected, "{fields:x?}");
            let f = &stale_youngest_fields(&cap, format)[0];
            assert!(f.unsafe_stop(&cap).to_string().contains(&format!(
                "field at {:#x} that holds {:#x}",
                0x1000 + expected[0].0,
                expected[0].1
            )));
        }
        // Strings are not scanned.
        let mut words = heap([0x900, 0x900, 0x900]);
        words[0] = header(3) | u64::from(NO_SCAN_TAG + 1);
        assert_eq!(stale(&one_domain_minor_heap(&words)), vec![]);
        // In a core the stale fields become (), with a warning each.
        let mut cap = one_domain_minor_heap(&heap([0x900, 0x1028, 0x1030]));
        blank_stale_fields(&mut cap, format);
        assert_eq!([cap.regions[0].word(8), cap.regions[0].word(16), cap.regions[0].word(24)], [1, 0x1028, 1]);
        assert_eq!(cap.warnings.len(), 2);
        assert!(cap.warnings[0].ends_with("recorded as ()"), "{}", cap.warnings[0]);
        assert_eq!(stale(&cap), vec![]);
    }

    #[test]
    fn a_whole_minor_heap_is_left_alone() {
        let format = HeaderFormat { reserved_bits: 0 };
        let mut cap = Capture { regions: vec![minor_heap(&[header(1), 0x11, header(1), 0x21])], ..Capture::default() };
        check_minor_heaps(&cap, format).unwrap();
        skip_torn_blocks(&mut cap, format);
        assert_eq!(cap.regions[0].first_block, 0);
        assert!(cap.warnings.is_empty());
    }
}
