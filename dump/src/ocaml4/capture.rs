//! Copying a stopped OCaml 4.14 world: the minor heap, every chunk of the major heap, the
//! static data and the atoms; the major GC's phase; the best-fit allocator's small free blocks;
//! then the roots (see [`super::roots`]).

use super::Runtime4;
use crate::common::copied_world::{Capture, CapturedDomain};
use crate::common::copy::{copy_minor_heaps, copy_static_data, data_segments, read_regions, SpareBuffers, TornMinorHeap};
use crate::common::custom_ops::registered_custom_ops;
use crate::common::regions::{CapturedRegion, RegionIndex};
use crate::common::world_check::WorldCheck;
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};
use heapsnap_format::{ColourEncoding, DomainInfo, RegionKind, NO_DOMAIN};
use heapsnap_values::ocaml4::{GcPhase, Ocaml4Gc};
use heapsnap_values::HeaderFormat;

/// freelist.c: `caml_allocation_policy` of the best-fit allocator, and its number of small
/// free lists (`BF_NUM_SMALL`; `bf_small_fl` has one more, unused, entry 0).
const POLICY_BEST_FIT: u64 = 2;
const BF_NUM_SMALL: u64 = 16;

/// The colours as a reader that does not know `ocaml4_gc` should take them (FORMAT.md §5).
pub const COLOURS: ColourEncoding = ColourEncoding { marked: 3, unmarked: 0, garbage: 1, not_markable: 2 };

/// Bigger chunks than this (1 TiB) are a torn read.
const MAX_CHUNK_BYTES: u64 = 1 << 40;

/// Copies the world. `world` is the verdict of [`super::safety::check_world`] for this stop.
pub fn capture(
    rt: &Runtime4,
    source: &dyn MemorySource,
    world: &WorldCheck,
    format: HeaderFormat,
    spare: &mut SpareBuffers,
    torn: TornMinorHeap,
) -> Result<(Capture, Ocaml4Gc)> {
    let view = world.domains.first().ok_or_else(|| DumpError::Inconsistent("no runtime state".into()))?;
    let s = &rt.layout.state;
    let mut cap = Capture::default();
    let state_bytes = source.read_bytes(view.state, s.size as usize)?;
    let mut d = CapturedDomain {
        id: 0,
        state: view.state,
        state_bytes,
        info: DomainInfo { id: 0, minor_start: 0, minor_end: 0, young_ptr: 0 },
        running: view.running.clone(),
    };
    let (young_start, young_end) = (d.field(s.young_start), d.field(s.young_end));
    // OCaml code keeps the allocation pointer in r15 (amd64.S); Caml_state->young_ptr is
    // written when it calls C.
    let young_ptr = match &view.running {
        Some(t) => t.regs.r15,
        None => d.field(s.young_ptr),
    };
    if !(young_start <= young_ptr && young_ptr <= young_end) || young_ptr % 8 != 0 {
        return Err(DumpError::Inconsistent(format!("young_ptr {young_ptr:#x} outside the minor heap {young_start:#x}..{young_end:#x}")));
    }
    d.info = DomainInfo { id: 0, minor_start: young_start, minor_end: young_end, young_ptr };
    cap.compactions = Some(d.field(s.stat_compactions));
    cap.domains.push(d);
    cap.colours = Some(COLOURS);
    let gc = gc_state(rt, source)?;

    let mut clock = std::time::Instant::now();
    let mut lap = |cap: &mut Capture, name: &'static str| {
        cap.phases.push((name, clock.elapsed().as_nanos() as u64));
        clock = std::time::Instant::now();
    };
    copy_minor_heaps(source, &mut cap, spare, format, torn)?;
    lap(&mut cap, "minor heap");
    let chunks = heap_chunks(rt, source)?
        .into_iter()
        .map(|(base, len)| {
            Ok(CapturedRegion {
                kind: RegionKind::HeapChunk,
                domain: NO_DOMAIN,
                base,
                block_wsize: 0,
                first_block: rt.layout.chunk.head_size as u32,
                owner: 0,
                bytes: spare.take_region(base, len as usize)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    read_regions(source, &mut cap, chunks)?;
    lap(&mut cap, "heap chunks");
    let data_segments = rt.symbol("caml_data_segments").ok();
    copy_static_data(source, &mut cap, spare, static_spans(rt, source)?, (rt.statics.dyn_globals.map(|a| rt.addr(a)), data_segments))?;
    lap(&mut cap, "static data");
    cap.free_blocks = small_free_blocks(rt, source, &cap)?;
    super::roots::capture_roots(rt, source, &mut cap, view.state, view.running.as_ref(), format)?;
    lap(&mut cap, "roots and stacks");
    cap.custom_ops = registered_custom_ops(source, rt.addr(rt.statics.custom_ops_table), &rt.layout.custom);
    Ok((cap, gc))
}

/// Buffers for the minor heap, the heap chunks and the static data, guessed while the target
/// runs (the pause is then spent copying, not allocating).
pub fn prepare(rt: &Runtime4, source: &dyn MemorySource) -> Result<SpareBuffers> {
    let mut spare = SpareBuffers::none();
    let s = &rt.layout.state;
    let mut spans = Vec::new();
    if let Ok(state) = rt.state(source) {
        if let (Ok(start), Ok(end)) = (source.read_u64(state + s.young_start), source.read_u64(state + s.young_end)) {
            if start < end {
                spans.push((start, (end - start) as usize));
            }
        }
    }
    spans.extend(heap_chunks(rt, source).unwrap_or_default().into_iter().map(|(b, len)| (b, len as usize)));
    spans.extend(static_spans(rt, source).unwrap_or_default().into_iter().map(|(b, e)| (b, (e - b) as usize)));
    // The mapped plugins' files are parsed now, not during the stop.
    let plugins =
        crate::common::plugins::data_spans(rt.statics.dyn_globals.map(|a| rt.addr(a)), rt.symbol("caml_data_segments").ok(), source, None);
    spans.extend(plugins.spans.iter().map(|&(b, e)| (b, (e - b) as usize)));
    spare.set_plugins(plugins);
    spare.add_spans(spans);
    Ok(spare)
}

/// The major GC's phase and sweep pointer, which give the chunks' colours their meaning.
fn gc_state(rt: &Runtime4, source: &dyn MemorySource) -> Result<Ocaml4Gc> {
    let phase = source.read_i32(rt.addr(rt.statics.gc_phase))?;
    let phase = u64::try_from(phase)
        .ok()
        .and_then(GcPhase::from_code)
        .ok_or_else(|| DumpError::Inconsistent(format!("caml_gc_phase is {phase}")))?;
    Ok(Ocaml4Gc { phase, sweep_pointer: source.read_u64(rt.addr(rt.statics.gc_sweep_hp))? })
}

/// Every chunk of the major heap: (address of its `heap_chunk_head`, bytes with the head).
/// The list does not change while the program runs without collecting, so a running target may
/// be read too (to prepare buffers).
pub fn heap_chunks(rt: &Runtime4, source: &dyn MemorySource) -> Result<Vec<(u64, u64)>> {
    let c = &rt.layout.chunk;
    let mut out = Vec::new();
    let mut chunk = source.read_u64(rt.addr(rt.statics.heap_start))?;
    while chunk != 0 {
        if out.len() > 10_000_000 {
            return Err(DumpError::Inconsistent("the list of heap chunks does not end".into()));
        }
        let head = chunk.checked_sub(c.head_size).ok_or_else(|| DumpError::Inconsistent(format!("heap chunk at {chunk:#x}")))?;
        let size = source.read_u64(head + c.size)?;
        if size == 0 || size % 8 != 0 || size > MAX_CHUNK_BYTES {
            return Err(DumpError::Inconsistent(format!("heap chunk at {chunk:#x} of {size} bytes")));
        }
        out.push((head, c.head_size + size));
        chunk = source.read_u64(head + c.next)?;
    }
    Ok(out)
}

/// The static data of every OCaml compilation unit (`caml_data_segments`) and the atom table
/// (`caml_atom_table`, 256 empty blocks the runtime allocated at startup), merged where they
/// touch. Bytecode has no static data of its own: its constants are in the heap, read from
/// the bytecode file at startup.
pub fn static_spans(rt: &Runtime4, source: &dyn MemorySource) -> Result<Vec<(u64, u64)>> {
    let mut spans = match rt.bytecode {
        None => data_segments(source, rt.symbol("caml_data_segments")?)?,
        Some(_) => Vec::new(),
    };
    let atoms = source.read_u64(rt.addr(rt.statics.atom_table))?;
    if atoms != 0 {
        spans.push((atoms, atoms + 8 * 257));
    }
    Ok(crate::common::plugins::merge(spans))
}

/// The best-fit allocator's small free blocks (`bf_small_fl[1..=16]`, linked through field 0),
/// which may be white: without this list they would read as live or garbage blocks.
fn small_free_blocks(rt: &Runtime4, source: &dyn MemorySource, cap: &Capture) -> Result<Vec<u64>> {
    if source.read_u64(rt.addr(rt.statics.allocation_policy))? != POLICY_BEST_FIT {
        return Ok(Vec::new());
    }
    let index = RegionIndex::new(&cap.regions);
    let lists = rt.addr(rt.statics.bf_small_fl);
    // Each entry is `{ value free; value *merge; }`.
    let mut out = Vec::new();
    for size in 1..=BF_NUM_SMALL {
        let mut block = source.read_u64(lists + 16 * size)?;
        while block != 0 && block & 1 == 0 {
            if out.len() > 100_000_000 {
                return Err(DumpError::Inconsistent("a small free list does not end".into()));
            }
            out.push(block);
            block = match index.word(block) {
                Some(next) => next,
                None => return Err(DumpError::Inconsistent(format!("small free block {block:#x} is in no heap chunk"))),
            };
        }
    }
    out.sort_unstable();
    Ok(out)
}
