//! Copying the stopped world: every domain's minor heap, every pool and large allocation,
//! the static data, the fiber stacks; then the roots (see [`super::roots`]).

use super::captured::{Capture, CapturedDomain};
use super::heap::{CapturedRegion, RegionIndex};
use super::layout::CustomLayout;
use super::plugins::PluginData;
use super::roots;
use super::safety::WorldCheck;
use super::Runtime;
use crate::error::{DumpError, Result, UnsafeStop};
use crate::source::{bytemuck_words, zeroed_buffer, MemorySource, ReadExt, ReadRequest};
use heapsnap_format::{ColourEncoding, DomainInfo, RegionKind, NO_DOMAIN};
use heapsnap_values::{HeaderFormat, CLOSURE_TAG, INFIX_TAG, NO_SCAN_TAG};
use std::collections::{BTreeMap, HashSet};

/// No large allocation is bigger than this (2^40 words, 8 TiB): a bigger header is corrupt.
const MAX_LARGE_WORDS: u64 = 1 << 40;

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

/// Copies the world. `world` is the verdict of [`super::safety::check_world`] for this stop.
pub fn capture(
    rt: &Runtime,
    source: &dyn MemorySource,
    world: &WorldCheck,
    format: HeaderFormat,
    spare: &mut SpareBuffers,
    torn: TornMinorHeap,
) -> Result<Capture> {
    let mut cap = Capture::default();
    let l = &rt.layout;
    for view in &world.domains {
        let state_bytes = source.read_bytes(view.state, l.domain_state.size.max(l.domain_state.memprof.map_or(0, |m| m + 8)) as usize)?;
        let mut d = CapturedDomain {
            id: 0,
            state: view.state,
            state_bytes,
            info: DomainInfo { id: 0, minor_start: 0, minor_end: 0, young_ptr: 0 },
            running: view.running.clone(),
        };
        let id = d.field(l.domain_state.id) as u32 as i32;
        d.id = u16::try_from(id).map_err(|_| DumpError::Inconsistent(format!("domain id {id}")))?;
        let young_start = d.field(l.domain_state.young_start);
        let young_end = d.field(l.domain_state.young_end);
        // A domain running OCaml code keeps its allocation pointer in r15 (runtime/amd64.S);
        // Caml_state->young_ptr is only written when it enters the runtime.
        let young_ptr = match &view.running {
            Some(t) => t.regs.r15,
            None => d.field(l.domain_state.young_ptr),
        };
        if !(young_start <= young_ptr && young_ptr <= young_end) || young_ptr % 8 != 0 {
            return Err(DumpError::Inconsistent(format!(
                "domain {id}: young_ptr {young_ptr:#x} outside its minor heap {young_start:#x}..{young_end:#x}"
            )));
        }
        d.info = DomainInfo { id: d.id, minor_start: young_start, minor_end: young_end, young_ptr };
        cap.domains.push(d);
    }
    cap.domains.sort_by_key(|d| d.id);

    read_colours(rt, source, &mut cap)?;
    cap.compactions = match rt.release.compaction {
        true => source.read_u64(rt.symbol("caml_compactions_count")?).ok(),
        false => None,
    };

    let mut clock = std::time::Instant::now();
    let mut lap = |cap: &mut Capture, name: &'static str| {
        cap.phases.push((name, clock.elapsed().as_nanos() as u64));
        clock = std::time::Instant::now();
    };
    copy_minor_heaps(source, &mut cap, spare, format, torn)?;
    lap(&mut cap, "minor heaps");
    capture_heaps(rt, source, &mut cap, format, spare)?;
    lap(&mut cap, "pools and large allocations");
    let data_segments = rt.symbol("caml_data_segments").ok();
    copy_static_data(source, &mut cap, spare, static_spans(rt, source)?, (rt.dyn_globals(), data_segments))?;
    lap(&mut cap, "static data");
    roots::capture_roots(rt, source, &mut cap, format)?;
    lap(&mut cap, "roots and stacks");
    cap.custom_ops = registered_custom_ops(source, rt.addr(rt.statics.custom_ops_table), &rt.layout.custom);
    Ok(cap)
}

fn read_colours(rt: &Runtime, source: &dyn MemorySource, cap: &mut Capture) -> Result<()> {
    let h = &rt.layout.heap;
    let base = rt.symbol("caml_global_heap_state")?;
    // Each status is a header colour already shifted by HEADER_COLOR_SHIFT (8).
    let colour = |off: u64| -> Result<u8> { Ok(((source.read_u64(base + off)? >> 8) & 3) as u8) };
    let (marked, unmarked, garbage) = (colour(h.marked)?, colour(h.unmarked)?, colour(h.garbage)?);
    let not_markable = (0..4u8).find(|c| ![marked, unmarked, garbage].contains(c)).unwrap_or(3);
    let colours = ColourEncoding { marked, unmarked, garbage, not_markable };
    if !colours.is_valid() {
        return Err(DumpError::Inconsistent(format!("caml_global_heap_state colours {colours:?}")));
    }
    cap.colours = Some(colours);
    Ok(())
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
    /// Pools expected on the heap lists (from [`candidate_pools`]).
    pub candidates: Vec<u64>,
    /// Other regions' buffers, by the target address they were made for.
    regions: BTreeMap<u64, Vec<u8>>,
    /// The loaded plugins' static data, as found while the target ran (the stop reuses it).
    plugins: Option<PluginData>,
}

impl SpareBuffers {
    /// Buffers for every region of the running target, listed racily: the pools on its heap
    /// lists (and some more, for pools it may take before the stop), its minor heaps whole,
    /// its large allocations and its static data.
    pub fn prepare(rt: &Runtime, source: &dyn MemorySource, domain_states: &[u64], format: HeaderFormat) -> Result<SpareBuffers> {
        let candidates = candidate_pools(rt, source, domain_states);
        let count = candidates.len() + candidates.len() / 8 + 16;
        let mut spare = SpareBuffers::new(count, rt.pools.pool_wsize as usize * 8, candidates)?;
        let l = &rt.layout.domain_state;
        let mut spans = Vec::new();
        let mut heaps = Vec::new();
        for &state in domain_states {
            let (Ok(start), Ok(end)) = (source.read_u64(state + l.young_start), source.read_u64(state + l.young_end)) else { continue };
            if start < end && end - start <= MAX_GUESSED_REGION {
                spans.push((start, (end - start) as usize));
            }
            if let (Ok(heap), Ok(id)) = (source.read_u64(state + l.shared_heap), source.read_u32(state + l.id)) {
                heaps.push((id as u16, heap));
            }
        }
        for (_, head) in large_list_heads(rt, &heaps) {
            // The lists may change under us: stop at anything implausible.
            let mut node = source.read_u64(head).unwrap_or(0);
            let mut n = 0;
            while node != 0 && n < 10_000_000 {
                n += 1;
                let Ok(link) = read_large_link(rt, source, node, format) else { break };
                if link.bytes as u64 <= MAX_GUESSED_REGION {
                    spans.push((node, link.bytes));
                }
                node = link.next;
            }
        }
        // The mapped plugins' files are parsed now, not during the stop.
        let plugins = super::plugins::data_spans(rt.dyn_globals(), rt.symbol("caml_data_segments").ok(), source, None);
        spans.extend(
            static_spans(rt, source)
                .unwrap_or_default()
                .into_iter()
                .chain(plugins.spans.iter().copied())
                .map(|(b, e)| (b, (e - b) as usize)),
        );
        spare.plugins = Some(plugins);
        spare.add_spans(spans);
        Ok(spare)
    }

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

    fn take(&mut self, address: u64, size: usize) -> Result<Vec<u8>> {
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
const MAX_GUESSED_REGION: u64 = 64 << 30;

/// A zeroed buffer of `len` bytes with every page faulted in.
fn faulted_buffer(len: usize) -> Result<Vec<u8>> {
    let mut b = zeroed_buffer(0, len)?;
    for page in b.chunks_mut(4096) {
        page[0] = 0;
    }
    Ok(b)
}

/// The pools on the target's heap lists, read while it runs: a racy list of candidates that
/// lets the stopped world be copied in one batch (see [`capture`]).
pub fn candidate_pools(rt: &Runtime, source: &dyn MemorySource, domain_states: &[u64]) -> Vec<u64> {
    let mut out = Vec::new();
    for head in pool_list_heads(rt, source, domain_states).into_iter().map(|(_, head, _)| head) {
        let mut pool = source.read_u64(head).unwrap_or(0);
        let mut n = 0;
        while pool != 0 && n < 10_000_000 {
            n += 1;
            out.push(pool);
            pool = source.read_u64(pool + rt.layout.heap.pool_next).unwrap_or(0);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Every pool list: (owning domain, address of the list head, size class).
fn pool_list_heads(rt: &Runtime, source: &dyn MemorySource, domain_states: &[u64]) -> Vec<(u16, u64, u64)> {
    let h = &rt.layout.heap;
    let mut lists = Vec::new();
    for &state in domain_states {
        let Ok(heap) = source.read_u64(state + rt.layout.domain_state.shared_heap) else { continue };
        let id = source.read_u32(state + rt.layout.domain_state.id).unwrap_or(0) as u16;
        if heap == 0 {
            continue;
        }
        for list in [h.avail_pools, h.full_pools, h.unswept_avail_pools, h.unswept_full_pools] {
            lists.extend((0..h.num_sizeclasses).map(|sz| (id, heap + list + 8 * sz, sz)));
        }
    }
    let freelist = rt.addr(rt.statics.pool_freelist);
    for list in [h.global_avail_pools, h.global_full_pools] {
        lists.extend((0..h.num_sizeclasses).map(|sz| (NO_DOMAIN, freelist + list + 8 * sz, sz)));
    }
    lists
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

/// Every pool and large allocation of every domain, and those orphaned by terminated domains.
fn capture_heaps(rt: &Runtime, source: &dyn MemorySource, cap: &mut Capture, format: HeaderFormat, spare: &mut SpareBuffers) -> Result<()> {
    let h = &rt.layout.heap;
    let states: Vec<u64> = cap.domains.iter().map(|d| d.state).collect();
    let pool_lists = pool_list_heads(rt, source, &states);
    let heaps: Vec<(u16, u64)> = cap.domains.iter().map(|d| (d.id, d.field(rt.layout.domain_state.shared_heap))).collect();
    let large_lists = large_list_heads(rt, &heaps);

    // Copy the candidate pools in one batch, then follow the lists in our copy; a pool the
    // candidates missed (the lists moved since) is read on its own.
    let pool_bytes = rt.pools.pool_wsize as usize * 8;
    let mut candidates = std::mem::take(&mut spare.candidates);
    candidates.sort_unstable();
    candidates.dedup();
    let mut copies: Vec<Option<Vec<u8>>> = candidates.iter().map(|&a| spare.take(a, pool_bytes).map(Some)).collect::<Result<_>>()?;
    {
        let mut requests: Vec<ReadRequest<'_>> = candidates
            .iter()
            .zip(copies.iter_mut())
            .map(|(&address, buf)| ReadRequest { address, buf: buf.as_mut().expect("just made") })
            .collect();
        let read = source.read_many_partial(&mut requests);
        drop(requests);
        for (copy, ok) in copies.iter_mut().zip(read) {
            if !ok {
                *copy = None;
            }
        }
    }
    // The header words the walk needs, from every copy in one pass: these loads are
    // independent and overlap, where the walk down a list would wait for each pool's in turn
    // (a cache and TLB miss each, ~1 us in a VM: 30 ms for 1 GB of pools).
    let headers: Vec<(u32, u64)> = copies.iter().map(|c| c.as_deref().map_or((0, 0), |b| pool_header(b, h))).collect();
    let mut taken = vec![false; candidates.len()];
    // Every list head in one batched read.
    let mut heads = vec![0u64; pool_lists.len()];
    {
        let mut requests: Vec<ReadRequest<'_>> = pool_lists
            .iter()
            .zip(heads.iter_mut())
            .map(|(&(_, address, _), word)| ReadRequest { address, buf: bytemuck_words(std::slice::from_mut(word)) })
            .collect();
        source.read_many(&mut requests)?;
    }
    // Pools seen that were not copied with the candidates, and large allocations.
    let mut seen = HashSet::new();
    let twice = |pool: u64| DumpError::Inconsistent(format!("pool {pool:#x} is on two lists, or a list loops"));
    for ((domain, _, sz), mut pool) in pool_lists.into_iter().zip(heads) {
        while pool != 0 {
            let copied = candidates.binary_search(&pool).ok().filter(|&i| copies[i].is_some() || taken[i]);
            let (bytes, (pool_sz, next)) = match copied {
                Some(i) => {
                    if std::mem::replace(&mut taken[i], true) {
                        return Err(twice(pool));
                    }
                    (copies[i].take().expect("copied"), headers[i])
                }
                None => {
                    if !seen.insert(pool) {
                        return Err(twice(pool));
                    }
                    let mut b = spare.take(pool, pool_bytes)?;
                    source.read(pool, &mut b)?;
                    let header = pool_header(&b, h);
                    (b, header)
                }
            };
            if pool_sz as u64 != sz {
                return Err(DumpError::Inconsistent(format!("pool {pool:#x} of size class {pool_sz} is on the list of class {sz}")));
            }
            let class = rt.pools.size_classes.get(sz as usize).ok_or_else(|| {
                DumpError::Inconsistent(format!("pool {pool:#x} is on the list of size class {sz}, which the runtime does not have"))
            })?;
            cap.regions.push(CapturedRegion {
                kind: RegionKind::Pool,
                domain,
                base: pool,
                block_wsize: class.wsize,
                first_block: class.first_block,
                owner: 0,
                bytes,
            });
            pool = next;
        }
    }

    // Large allocations: the `large_alloc` link (owner, next), then one block. The region is
    // both, the block's header at `first_block` (FORMAT.md 3.4).
    let mut larges: Vec<(u16, u64, usize)> = Vec::new();
    for (domain, head) in large_lists {
        let mut node = source.read_u64(head)?;
        while node != 0 {
            let a_pool = candidates.binary_search(&node).is_ok_and(|i| taken[i]);
            if a_pool || !seen.insert(node) {
                return Err(DumpError::Inconsistent(format!("large allocation {node:#x} is on two lists, or a list loops")));
            }
            let link = read_large_link(rt, source, node, format)?;
            larges.push((domain, node, link.bytes));
            node = link.next;
        }
    }
    let regions: Vec<CapturedRegion> = larges
        .into_iter()
        .map(|(domain, base, len)| {
            Ok(CapturedRegion {
                kind: RegionKind::Large,
                domain,
                base,
                block_wsize: 0,
                first_block: h.large_header_bytes as u32,
                owner: 0,
                bytes: spare.take_region(base, len)?,
            })
        })
        .collect::<Result<_>>()?;
    read_regions(source, cap, regions)
}

/// A pool's size class and the next pool on its list, from the pool's first bytes.
fn pool_header(bytes: &[u8], h: &super::layout::HeapLayout) -> (u32, u64) {
    let word = |o: u64| u64::from_le_bytes(bytes[o as usize..o as usize + 8].try_into().expect("8 bytes"));
    ((word(h.pool_sz & !7) >> (8 * (h.pool_sz % 8))) as u32, word(h.pool_next))
}

/// The lists of large allocations: each domain's (from the address of its `caml_heap_state`)
/// and the global one of terminated domains.
fn large_list_heads(rt: &Runtime, heaps: &[(u16, u64)]) -> Vec<(u16, u64)> {
    let h = &rt.layout.heap;
    let mut lists = Vec::new();
    for &(id, heap) in heaps.iter().filter(|(_, heap)| *heap != 0) {
        lists.push((id, heap + h.swept_large));
        lists.push((id, heap + h.unswept_large));
    }
    lists.push((NO_DOMAIN, rt.addr(rt.statics.pool_freelist) + h.global_large));
    lists
}

/// A large allocation's `large_alloc` link, read with the block's header.
struct LargeLink {
    /// The link and the block, in bytes.
    bytes: usize,
    /// The next allocation on the list.
    next: u64,
}

fn read_large_link(rt: &Runtime, source: &dyn MemorySource, node: u64, format: HeaderFormat) -> Result<LargeLink> {
    let h = &rt.layout.heap;
    let link = source.read_words(node, (h.large_header_bytes / 8) as usize + 1)?;
    let header = *link.last().expect("header word");
    let words = format.wosize(header) + 1;
    if words > MAX_LARGE_WORDS {
        return Err(DumpError::Inconsistent(format!(
            "large allocation at {node:#x} has a header {header:#x} of {words} words (wrong number of reserved header bits?)"
        )));
    }
    Ok(LargeLink { bytes: h.large_header_bytes as usize + 8 * words as usize, next: link[(h.large_next / 8) as usize] })
}

/// The static data of every OCaml compilation unit (`caml_data_segments`) and of the units of
/// loaded Dynlink plugins (see [`super::plugins`]).
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
    let plugins = super::plugins::data_spans(dyn_globals, data_segments, source, spare.plugins.as_ref());
    cap.warnings.extend(plugins.warnings);
    cap.plugin_symbols = plugins.symbols;
    cap.plugin_dwarf = plugins.dwarf;
    // Merged where they touch, so that regions never overlap.
    let regions: Vec<CapturedRegion> = super::plugins::merge(spans.into_iter().chain(plugins.spans).collect())
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

/// The spans of static data, merged where they touch (they do not change while the program
/// runs, so they may be listed before the stop).
fn static_spans(rt: &Runtime, source: &dyn MemorySource) -> Result<Vec<(u64, u64)>> {
    let mut spans = data_segments(source, rt.symbol("caml_data_segments")?)?;
    // The runtime's atoms are static blocks too (what `caml_alloc(0, tag)` returns).
    if let Some((atoms, size)) = rt.statics.atoms {
        spans.push((rt.addr(atoms), rt.addr(atoms) + size.div_ceil(8) * 8));
    }
    // weak.c's `caml_dummy`: `caml_ephe_none`, the value of an empty weak or ephemeron slot,
    // points into it.
    if let Some(dummy) = rt.exe.symbol("caml_dummy").filter(|s| s.size > 0) {
        spans.push((rt.addr(dummy.address), rt.addr(dummy.address) + dummy.size.div_ceil(8) * 8));
    }
    // Units' segments follow each other; merge any that touch so regions never overlap.
    Ok(super::plugins::merge(spans))
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

/// The custom operations the runtime registered (custom.c's `custom_ops_table`, at `table`).
pub(crate) fn registered_custom_ops(source: &dyn MemorySource, table: u64, c: &CustomLayout) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut cell = source.read_u64(table).unwrap_or(0);
    let mut guard = 0;
    while cell != 0 && guard < 100_000 {
        guard += 1;
        let Ok(ops) = source.read_u64(cell + c.list_ops) else { break };
        if let Ok(id) = source.read_u64(ops + c.ops_identifier).and_then(|p| source.read_c_string(p, 256)) {
            out.push((ops, id));
        }
        cell = source.read_u64(cell + c.list_next).unwrap_or(0);
    }
    out
}

/// Custom blocks' operations not in the registered list, with their identifiers, read from
/// the target (they are static data, so this may run after the target is resumed).
pub fn custom_ops_in_heap(c: &CustomLayout, source: &dyn MemorySource, cap: &Capture, format: HeaderFormat) -> Vec<(u64, String)> {
    let known: HashSet<u64> = cap.custom_ops.iter().map(|(a, _)| *a).collect();
    let mut found = HashSet::new();
    for r in &cap.regions {
        if !r.kind.holds_heap_blocks() {
            continue;
        }
        for (at, hd) in r.blocks(format) {
            if format.tag(hd) == heapsnap_values::CUSTOM_TAG && format.wosize(hd) >= 1 && at + 16 <= r.bytes.len() {
                let ops = r.word(at + 8);
                if !known.contains(&ops) {
                    found.insert(ops);
                }
            }
        }
    }
    let mut out: Vec<(u64, String)> = found
        .into_iter()
        .filter_map(|ops| {
            let id = source.read_u64(ops + c.ops_identifier).and_then(|p| source.read_c_string(p, 256)).ok()?;
            Some((ops, id))
        })
        .collect();
    out.sort();
    out
}

/// Builds an index over the captured regions.
pub fn index(cap: &Capture) -> RegionIndex<'_> {
    RegionIndex::new(&cap.regions)
}

#[cfg(test)]
mod tests {
    use super::*;

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
