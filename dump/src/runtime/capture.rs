//! Copying the stopped world: every domain's minor heap, every pool and large allocation,
//! the static data, the fiber stacks; then the roots (see [`super::roots`]).

use super::heap::{CapturedRegion, HeaderFormat, RegionIndex, CONT_TAG};
use super::roots::{self, CapturedRoot};
use super::safety::WorldCheck;
use super::Runtime;
use crate::error::{DumpError, Result};
use crate::source::{zeroed_buffer, MemorySource, ReadExt, ReadRequest};
use heapsnap_format::{ColourEncoding, DomainInfo, RegionKind, NO_DOMAIN};
use std::collections::HashSet;

/// No large allocation is bigger than this (2^40 words, 8 TiB): a bigger header is corrupt.
const MAX_LARGE_WORDS: u64 = 1 << 40;

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
    pub warnings: Vec<String>,
    /// How long each step of the copy took (ns), for reports and benchmarks.
    pub phases: Vec<(&'static str, u64)>,
}

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
        let state_bytes = source.read_bytes(view.state, l.domain_state.size.max(l.domain_state.memprof + 8) as usize)?;
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
    cap.compactions = source.read_u64(rt.symbol("caml_compactions_count")?).ok();

    let mut clock = std::time::Instant::now();
    let mut lap = |cap: &mut Capture, name: &'static str| {
        cap.phases.push((name, clock.elapsed().as_nanos() as u64));
        clock = std::time::Instant::now();
    };
    capture_minor_heaps(source, &mut cap)?;
    match torn {
        TornMinorHeap::Fail => check_minor_heaps(&cap, format)?,
        TornMinorHeap::SkipTornBlock => skip_torn_blocks(&mut cap, format),
    }
    lap(&mut cap, "minor heaps");
    capture_heaps(rt, source, &mut cap, format, spare)?;
    lap(&mut cap, "pools and large allocations");
    capture_static_data(rt, source, &mut cap)?;
    lap(&mut cap, "static data");
    roots::capture_roots(rt, source, &mut cap, format)?;
    lap(&mut cap, "roots and stacks");
    capture_custom_ops(rt, source, &mut cap);
    Ok(cap)
}

fn read_colours(rt: &Runtime, source: &dyn MemorySource, cap: &mut Capture) -> Result<()> {
    let h = &rt.layout.heap;
    let base = rt.addr(h.global_heap_state);
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

fn capture_minor_heaps(source: &dyn MemorySource, cap: &mut Capture) -> Result<()> {
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
        r.bytes = zeroed_buffer(r.base, (d.info.minor_end - r.base) as usize)?;
    }
    read_regions(source, cap, regions)
}

/// Pool-sized buffers allocated and touched before the world stops, so that the pause is
/// spent copying, not allocating and zeroing memory.
pub struct SpareBuffers {
    size: usize,
    buffers: Vec<Vec<u8>>,
    /// Pools expected on the heap lists (from [`candidate_pools`]).
    pub candidates: Vec<u64>,
}

impl SpareBuffers {
    /// `count` buffers of `size` bytes, every page already faulted in.
    pub fn new(count: usize, size: usize, candidates: Vec<u64>) -> Result<SpareBuffers> {
        let mut buffers = Vec::with_capacity(count);
        for _ in 0..count {
            let mut b = zeroed_buffer(0, size)?;
            for page in b.chunks_mut(4096) {
                page[0] = 0;
            }
            buffers.push(b);
        }
        Ok(SpareBuffers { size, buffers, candidates })
    }

    pub fn none() -> SpareBuffers {
        SpareBuffers { size: 0, buffers: Vec::new(), candidates: Vec::new() }
    }

    fn take(&mut self, address: u64, size: usize) -> Result<Vec<u8>> {
        match self.buffers.pop() {
            Some(b) if size == self.size => Ok(b),
            _ => zeroed_buffer(address, size),
        }
    }
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
    let freelist = rt.addr(h.pool_freelist);
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
                return Err(DumpError::UnsafeStop(format!("domain {}: a zero header at {:#x} in the minor heap", r.domain, r.base + at as u64)));
            }
            at += 8 * (format.wosize(header) as usize + 1);
        }
        if at != r.bytes.len() {
            return Err(DumpError::UnsafeStop(format!("domain {}: the minor heap does not parse up to its end", r.domain)));
        }
    }
    Ok(())
}

/// Fills `regions` from the target in one batched read and adds them to the capture.
fn read_regions(source: &dyn MemorySource, cap: &mut Capture, mut regions: Vec<CapturedRegion>) -> Result<()> {
    let mut requests: Vec<ReadRequest<'_>> =
        regions.iter_mut().map(|r| ReadRequest { address: r.base, buf: &mut r.bytes }).collect();
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
    let mut large_lists: Vec<(u16, u64)> = Vec::new();
    for d in &cap.domains {
        let heap = d.field(rt.layout.domain_state.shared_heap);
        if heap != 0 {
            large_lists.push((d.id, heap + h.swept_large));
            large_lists.push((d.id, heap + h.unswept_large));
        }
    }
    large_lists.push((NO_DOMAIN, rt.addr(h.pool_freelist) + h.global_large));

    // Copy the candidate pools in one batch, then follow the lists in our copy; a pool the
    // candidates missed (the lists moved since) is read on its own.
    let pool_bytes = (rt.sizes.pool_wsize * 8) as usize;
    let mut copies: std::collections::HashMap<u64, Vec<u8>> = std::collections::HashMap::new();
    {
        let candidates = std::mem::take(&mut spare.candidates);
        let mut buffers: Vec<(u64, Vec<u8>)> =
            candidates.into_iter().map(|a| Ok((a, spare.take(a, pool_bytes)?))).collect::<Result<_>>()?;
        let mut requests: Vec<ReadRequest<'_>> =
            buffers.iter_mut().map(|(address, buf)| ReadRequest { address: *address, buf }).collect();
        let read = source.read_many_partial(&mut requests);
        drop(requests);
        for ((address, buf), ok) in buffers.into_iter().zip(read) {
            if ok {
                copies.insert(address, buf);
            }
        }
    }
    let mut seen = HashSet::new();
    for (domain, head, sz) in pool_lists {
        let mut pool = source.read_u64(head)?;
        while pool != 0 {
            if !seen.insert(pool) {
                return Err(DumpError::Inconsistent(format!("pool {pool:#x} is on two lists, or a list loops")));
            }
            let bytes = match copies.remove(&pool) {
                Some(b) => b,
                None => {
                    let mut b = spare.take(pool, pool_bytes)?;
                    source.read(pool, &mut b)?;
                    b
                }
            };
            let word = |o: u64| u64::from_le_bytes(bytes[o as usize..o as usize + 8].try_into().expect("8 bytes"));
            let pool_sz = (word(h.pool_sz & !7) >> (8 * (h.pool_sz % 8))) as u32;
            if pool_sz as u64 != sz {
                return Err(DumpError::Inconsistent(format!("pool {pool:#x} of size class {pool_sz} is on the list of class {sz}")));
            }
            let next = word(h.pool_next);
            cap.regions.push(CapturedRegion {
                kind: RegionKind::Pool,
                domain,
                base: pool,
                block_wsize: rt.sizes.wsize[sz as usize],
                first_block: rt.sizes.first_block(sz as usize) as u32,
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
            if !seen.insert(node) {
                return Err(DumpError::Inconsistent(format!("large allocation {node:#x} is on two lists, or a list loops")));
            }
            let link = source.read_words(node, (h.large_header_bytes / 8) as usize + 1)?;
            let header = *link.last().expect("header word");
            let words = format.wosize(header) + 1;
            if words > MAX_LARGE_WORDS {
                return Err(DumpError::Inconsistent(format!(
                    "large allocation at {node:#x} has a header {header:#x} of {words} words (wrong number of reserved header bits?)"
                )));
            }
            let bytes = 8 * words as usize;
            larges.push((domain, node, h.large_header_bytes as usize + bytes));
            node = link[(h.large_next / 8) as usize];
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
                bytes: zeroed_buffer(base, len)?,
            })
        })
        .collect::<Result<_>>()?;
    read_regions(source, cap, regions)
}

/// The static data of every OCaml compilation unit (`caml_data_segments`).
fn capture_static_data(rt: &Runtime, source: &dyn MemorySource, cap: &mut Capture) -> Result<()> {
    let table = rt.symbol("caml_data_segments")?;
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
    // The runtime's atoms are static blocks too (what `caml_alloc(0, tag)` returns).
    if let Some((atoms, size)) = rt.layout.heap.atoms {
        spans.push((rt.addr(atoms), rt.addr(atoms) + size.div_ceil(8) * 8));
    }
    // weak.c's `caml_dummy`: `caml_ephe_none`, the value of an empty weak or ephemeron slot,
    // points into it.
    if let Some(dummy) = rt.exe.symbol("caml_dummy").filter(|s| s.size > 0) {
        spans.push((rt.addr(dummy.address), rt.addr(dummy.address) + dummy.size.div_ceil(8) * 8));
    }
    // Units' segments follow each other; merge any that touch so regions never overlap.
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (b, e) in spans {
        match merged.last_mut() {
            Some(last) if b <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((b, e)),
        }
    }
    let regions: Vec<CapturedRegion> = merged
        .into_iter()
        .map(|(b, e)| {
            Ok(CapturedRegion {
                kind: RegionKind::Static,
                domain: NO_DOMAIN,
                base: b,
                block_wsize: 0,
                first_block: 0,
                owner: 0,
                bytes: zeroed_buffer(b, (e - b) as usize)?,
            })
        })
        .collect::<Result<_>>()?;
    read_regions(source, cap, regions)
}

/// Continuation blocks (`Cont_tag`, always 2 fields) in the captured heap: minor heaps and
/// the pools of the size class that holds 3-word blocks.
pub fn find_continuations(regions: &[CapturedRegion], format: HeaderFormat) -> Vec<u64> {
    let mut out = Vec::new();
    let is_cont = |hd: u64| format.tag(hd) == CONT_TAG && format.wosize(hd) == 2;
    for r in regions {
        match r.kind {
            RegionKind::MinorHeap => {
                for (at, hd) in r.blocks(format) {
                    if is_cont(hd) {
                        out.push(r.base + at as u64 + 8);
                    }
                }
            }
            // Only the size class of 3-word blocks can hold one. A tight loop over the headers:
            // this runs while the target is stopped.
            RegionKind::Pool if r.block_wsize == 3 => {
                let mut at = r.first_block as usize;
                while at + 24 <= r.bytes.len() {
                    if r.bytes[at] == CONT_TAG && is_cont(r.word(at)) {
                        out.push(r.base + at as u64 + 8);
                    }
                    at += 24;
                }
            }
            _ => {}
        }
    }
    out
}

/// The custom operations the runtime registered (`custom_ops_table`).
fn capture_custom_ops(rt: &Runtime, source: &dyn MemorySource, cap: &mut Capture) {
    let Some(c) = &rt.layout.custom else { return };
    let mut cell = source.read_u64(rt.addr(c.table)).unwrap_or(0);
    let mut guard = 0;
    while cell != 0 && guard < 100_000 {
        guard += 1;
        let Ok(ops) = source.read_u64(cell + c.list_ops) else { break };
        if let Ok(id) = source.read_u64(ops + c.ops_identifier).and_then(|p| source.read_c_string(p, 256)) {
            cap.custom_ops.push((ops, id));
        }
        cell = source.read_u64(cell + c.list_next).unwrap_or(0);
    }
}

/// Custom blocks' operations not in the registered list, with their identifiers, read from
/// the target (they are static data, so this may run after the target is resumed).
pub fn custom_ops_in_heap(rt: &Runtime, source: &dyn MemorySource, cap: &Capture, format: HeaderFormat) -> Vec<(u64, String)> {
    let known: HashSet<u64> = cap.custom_ops.iter().map(|(a, _)| *a).collect();
    let mut found = HashSet::new();
    for r in &cap.regions {
        if !matches!(r.kind, RegionKind::MinorHeap | RegionKind::Pool | RegionKind::Large) {
            continue;
        }
        for (at, hd) in r.blocks(format) {
            if format.tag(hd) == super::heap::CUSTOM_TAG && format.wosize(hd) >= 1 && at + 16 <= r.bytes.len() {
                let ops = r.word(at + 8);
                if !known.contains(&ops) {
                    found.insert(ops);
                }
            }
        }
    }
    let Some(c) = &rt.layout.custom else { return Vec::new() };
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
    fn a_whole_minor_heap_is_left_alone() {
        let format = HeaderFormat { reserved_bits: 0 };
        let mut cap = Capture { regions: vec![minor_heap(&[header(1), 0x11, header(1), 0x21])], ..Capture::default() };
        check_minor_heaps(&cap, format).unwrap();
        skip_torn_blocks(&mut cap, format);
        assert_eq!(cap.regions[0].first_block, 0);
        assert!(cap.warnings.is_empty());
    }
}
