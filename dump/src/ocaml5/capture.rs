//! Copying the stopped world: every domain's minor heap, every pool and large allocation,
//! the static data, the fiber stacks; then the roots (see [`super::roots`]).

use super::free_runs;
use super::roots;
use super::Runtime;
use crate::common::copied_world::{Capture, CapturedDomain};
use crate::common::copy::{
    copy_minor_heaps, copy_static_data, data_segments, read_regions, SpareBuffers, TornMinorHeap, MAX_GUESSED_REGION,
};
use crate::common::custom_ops::registered_custom_ops;
use crate::common::regions::CapturedRegion;
use crate::common::world_check::WorldCheck;
use crate::error::{DumpError, Result};
use crate::source::{bytemuck_words, MemorySource, ReadExt, ReadRequest};
use heapsnap_format::{ColourEncoding, DomainInfo, RegionKind, NO_DOMAIN};
use heapsnap_values::HeaderFormat;
use std::collections::HashSet;

/// No large allocation is bigger than this (2^40 words, 8 TiB): a bigger header is corrupt.
const MAX_LARGE_WORDS: u64 = 1 << 40;

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
    cap.compactions = match rt.facts.compaction {
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
    free_slots(rt, &mut cap, format)?;
    lap(&mut cap, "pools and large allocations");
    let data_segments = rt.symbol("caml_data_segments").ok();
    copy_static_data(source, &mut cap, spare, static_spans(rt, source)?, (rt.dyn_globals(), data_segments))?;
    lap(&mut cap, "static data");
    roots::capture_roots(rt, source, &mut cap, format)?;
    lap(&mut cap, "roots and stacks");
    cap.custom_ops = registered_custom_ops(source, rt.addr(rt.statics.custom_ops_table), &rt.layout.custom);
    Ok(cap)
}

/// Free pool slots marked as runs (OCaml 5.4's encoding, [`free_runs`]): a release read by its
/// file that has them is not that release; a runtime read by probing has them cleared in the
/// copy, so that its free slots read as free, and says so among its probed facts.
fn free_slots(rt: &Runtime, cap: &mut Capture, format: HeaderFormat) -> Result<()> {
    let not_markable = cap.colours.map_or(3, |c| c.not_markable);
    let runs = free_runs::find_runs(&cap.regions, format, not_markable);
    if rt.probe.is_none() {
        let probed = match runs {
            Ok(runs) if runs.is_empty() => return Ok(()),
            Ok(runs) => format!("{} run headers, NOT_MARKABLE with No_scan_tag, that count the free slots after them", runs.len()),
            Err(why) => why,
        };
        let (version, release) = (rt.version.clone(), rt.release.series);
        return Err(DumpError::ProbeDisagrees { version, fact: free_runs::FACT, probed, release, says: free_runs::ZERO_HEADER.into() });
    }
    let runs = runs.map_err(|why| DumpError::ProbeFailed { version: rt.version.clone(), fact: free_runs::FACT, why })?;
    free_runs::clear_runs(cap, &runs);
    let slots = runs.iter().map(|&(_, _, following)| following + 1).sum();
    cap.probed.push(free_runs::probed_fact(runs.len(), slots));
    Ok(())
}

/// Buffers for every region of the running target, listed racily: the pools on its heap
/// lists (and some more, for pools it may take before the stop), its minor heaps whole,
/// its large allocations and its static data.
pub fn prepare(rt: &Runtime, source: &dyn MemorySource, domain_states: &[u64], format: HeaderFormat) -> Result<SpareBuffers> {
    let candidates = candidate_pools(rt, source, domain_states);
    let count = candidates.len() + candidates.len() / 8 + 16;
    let mut spare = SpareBuffers::new(count, rt.facts.pools.pool_wsize as usize * 8, candidates)?;
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
    let plugins = crate::common::plugins::data_spans(rt.dyn_globals(), rt.symbol("caml_data_segments").ok(), source, None);
    spans.extend(
        static_spans(rt, source).unwrap_or_default().into_iter().chain(plugins.spans.iter().copied()).map(|(b, e)| (b, (e - b) as usize)),
    );
    spare.set_plugins(plugins);
    spare.add_spans(spans);
    Ok(spare)
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
pub fn pool_list_heads(rt: &Runtime, source: &dyn MemorySource, domain_states: &[u64]) -> Vec<(u16, u64, u64)> {
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

/// Every pool and large allocation of every domain, and those orphaned by terminated domains.
fn capture_heaps(rt: &Runtime, source: &dyn MemorySource, cap: &mut Capture, format: HeaderFormat, spare: &mut SpareBuffers) -> Result<()> {
    let h = &rt.layout.heap;
    let states: Vec<u64> = cap.domains.iter().map(|d| d.state).collect();
    let pool_lists = pool_list_heads(rt, source, &states);
    let heaps: Vec<(u16, u64)> = cap.domains.iter().map(|d| (d.id, d.field(rt.layout.domain_state.shared_heap))).collect();
    let large_lists = large_list_heads(rt, &heaps);

    // Copy the candidate pools in one batch, then follow the lists in our copy; a pool the
    // candidates missed (the lists moved since) is read on its own.
    let pool_bytes = rt.facts.pools.pool_wsize as usize * 8;
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
            let class = rt.facts.pools.size_classes.get(sz as usize).ok_or_else(|| {
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

/// weak.c's static dummy block, which `caml_ephe_none` (the value of an empty weak or
/// ephemeron slot) points into. It is found from where `caml_ephe_none` points, because its
/// name changes: the global `caml_dummy` up to 5.3, a file-local `weak_dummy` in 5.4's runtime.
fn ephe_none_block<'a>(rt: &'a Runtime, source: &dyn MemorySource) -> Option<&'a crate::elf::Symbol> {
    let pointed = rt.exe.symbol("caml_ephe_none").and_then(|none| source.read_u64(rt.addr(none.address)).ok());
    let block = pointed.and_then(|value| rt.exe.symbol_at(value.wrapping_sub(rt.bias)));
    block.filter(|s| !s.is_function).or_else(|| rt.exe.symbol("caml_dummy")).filter(|s| s.size > 0)
}

/// The spans of static data, merged where they touch (they do not change while the program
/// runs, so they may be listed before the stop).
fn static_spans(rt: &Runtime, source: &dyn MemorySource) -> Result<Vec<(u64, u64)>> {
    // Bytecode has no static data of its own: its constants are in the heap, read from the
    // bytecode file at startup.
    let mut spans = match rt.bytecode {
        None => data_segments(source, rt.symbol("caml_data_segments")?)?,
        Some(_) => Vec::new(),
    };
    // The runtime's atoms are static blocks too (what `caml_alloc(0, tag)` returns).
    if let Some((atoms, size)) = rt.statics.atoms {
        spans.push((rt.addr(atoms), rt.addr(atoms) + size.div_ceil(8) * 8));
    }
    if let Some(dummy) = ephe_none_block(rt, source) {
        spans.push((rt.addr(dummy.address), rt.addr(dummy.address) + dummy.size.div_ceil(8) * 8));
    }
    // Units' segments follow each other; merge any that touch so regions never overlap.
    Ok(crate::common::plugins::merge(spans))
}
