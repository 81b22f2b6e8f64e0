//! Every root the runtime's own scanning visits (`caml_do_roots`, `caml_scan_global_roots`,
//! `caml_final_do_roots`, `caml_memprof_scan_roots`, systhreads' `caml_thread_scan_roots`),
//! plus the stacks of suspended continuations, each with its kind and origin.

use super::probe;
use super::versions::Indirection;
use super::Runtime;
use crate::common::bytecode::CodeFragments;
use crate::common::bytecode_roots::RunningBytecode;
use crate::common::copied_world::{Capture, CapturedRoot, RootName};
use crate::common::frames::walk_stack;
use crate::common::regions::{find_continuations, CapturedRegion, RegionIndex};
use crate::error::{DumpError, Result, UnsafeStop};
use crate::source::{MemorySource, ReadExt};
use heapsnap_format::{
    MemprofRecord, ProbedFact, RegionKind, RootKind, MEMPROF_ALLOC_YOUNG, MEMPROF_DEALLOCATED, MEMPROF_DELETED, MEMPROF_OFFSET,
    MEMPROF_PROMOTED, MEMPROF_TABLE_DOMAIN, MEMPROF_TABLE_ORPHAN, MEMPROF_TABLE_THREAD, NO_DOMAIN, ROOT_FLAG_CONSERVATIVE, ROOT_FLAG_WEAK,
};
use heapsnap_values::HeaderFormat;
use std::collections::{HashMap, HashSet};

use crate::common::root_chains::{self, StateSpan, MAX_CHAIN};

struct Ctx<'a> {
    rt: &'a Runtime,
    source: &'a dyn MemorySource,
    roots: Vec<CapturedRoot>,
    /// Fiber stacks already captured (stack_info addresses).
    stacks: HashSet<u64>,
    new_regions: Vec<CapturedRegion>,
    warnings: Vec<String>,
    /// Statmemprof's entries, as the snapshot records them.
    memprof: Vec<MemprofRecord>,
    /// A bytecode runtime's code fragments: its stacks are scanned word by word, these words
    /// being code pointers (native stacks are walked by their frame tables).
    code: Option<CodeFragments>,
    /// Where a bytecode program's main code starts (`caml_start_code`): its functions' and
    /// frames' offsets are from there.
    code_start: u64,
}

impl Ctx<'_> {
    #[allow(clippy::too_many_arguments)]
    fn push(&mut self, kind: RootKind, domain: u16, thread: u64, slot: u64, value: u64, origin: u64, name: RootName, flags: u32) {
        self.roots.push(CapturedRoot { kind, domain, flags, thread, slot, value, origin, name });
    }

    fn word(&self, address: u64) -> Result<u64> {
        self.source.read_u64(address)
    }
}

/// A systhread of one domain (st_stubs.c `caml_thread_struct`).
struct SysThread {
    id: u64,
    descr_slot: u64,
    descr: u64,
    backtrace_slot: u64,
    current_stack: u64,
    local_roots: u64,
    gc_regs: u64,
    active: bool,
}

pub fn capture_roots(rt: &Runtime, source: &dyn MemorySource, cap: &mut Capture, format: HeaderFormat) -> Result<()> {
    let code = rt.bytecode.as_ref().map(|b| b.code_fragments(rt.bias, source)).transpose()?;
    let code_start = match rt.bytecode {
        Some(_) => source.read_u64(rt.symbol("caml_start_code")?)?,
        None => 0,
    };
    let mut cx = Ctx {
        rt,
        source,
        roots: Vec::new(),
        stacks: HashSet::new(),
        new_regions: Vec::new(),
        warnings: Vec::new(),
        memprof: Vec::new(),
        code,
        code_start,
    };
    let l = &rt.layout;
    check_hook(&mut cx)?;
    // Bytecode's globals are the fields of `caml_global_data`, a registered root.
    if rt.bytecode.is_none() {
        globals(&mut cx, format)?;
        dyn_globals(&mut cx, format)?;
    }
    global_root_lists(&mut cx, cap)?;
    if let (Some(interpreter), Some(code)) = (&rt.bytecode, &cx.code) {
        // Bytecode's globals: the slots of `caml_global_data`, a registered root.
        let running = RunningBytecode { program: &interpreter.program, code, code_start: cx.code_start };
        let data = source.read_u64(rt.symbol("caml_global_data")?)?;
        running.global_roots(source, data, format, &cap.regions, &mut cx.roots, &mut cx.warnings)?;
        cap.plugin_symbols.extend(running.function_symbols());
    }

    for d in &cap.domains {
        let threads = systhreads(&mut cx, d.id)?;
        let active_id = threads.iter().find(|t| t.active).map_or(0, |t| t.id);
        // The domain's running (or last running) thread: Caml_state holds its stack and roots.
        local_roots(&mut cx, d.field(l.domain_state.local_roots), d.id, active_id)?;
        let gc_regs = d.field(l.domain_state.gc_regs);
        let current = d.field(l.domain_state.current_stack);
        current_stack(&mut cx, d.id, active_id, current, gc_regs, d.running.as_ref())?;
        for t in &threads {
            cx.push(RootKind::Thread, d.id, t.id, t.descr_slot, t.descr, 0, RootName::Text("descr".into()), 0);
            let exn = cx.word(t.backtrace_slot)?;
            cx.push(RootKind::Thread, d.id, t.id, t.backtrace_slot, exn, 0, RootName::Text("backtrace_last_exn".into()), 0);
            if !t.active && t.current_stack != 0 {
                local_roots(&mut cx, t.local_roots, d.id, t.id)?;
                current_stack(&mut cx, d.id, t.id, t.current_stack, t.gc_regs, None)?;
            }
        }
        let final_info = d.field(l.domain_state.final_info);
        if final_info != 0 {
            finalisers(&mut cx, final_info, d.id)?;
        }
        let memprof = l.domain_state.memprof.map_or(0, |m| d.field(m));
        if memprof != 0 {
            memprof_domain(&mut cx, memprof, d.id)?;
        }
        let ephe_info = d.field(l.domain_state.ephe_info);
        if ephe_info != 0 {
            for list in [l.roots.ephe_todo, l.roots.ephe_live] {
                let head = cx.word(ephe_info + list)?;
                cap.ephemerons.extend(root_chains::ephemeron_list(source, &cap.regions, head)?);
            }
        }
    }

    // Work left by terminated domains.
    let orph_structs = rt.addr(rt.statics.orph_structs);
    let mut orphan = cx.word(orph_structs + l.roots.orph_final_info)?;
    let mut n = 0;
    while orphan != 0 && n < MAX_CHAIN {
        finalisers(&mut cx, orphan, NO_DOMAIN)?;
        orphan = cx.word(orphan + l.roots.final_info_next)?;
        n += 1;
    }
    let orphans = cx.word(orph_structs + l.roots.orph_ephe_live)?;
    cap.ephemerons.extend(root_chains::ephemeron_list(source, &cap.regions, orphans)?);
    if let (Some(m), Some((memprof_orphans, _))) = (&l.memprof, rt.statics.memprof_orphans) {
        let mut table = cx.word(rt.addr(memprof_orphans))?;
        let mut n = 0;
        while table != 0 && n < MAX_CHAIN {
            memprof_entries(&mut cx, table + m.orphan_entries, NO_DOMAIN, MEMPROF_TABLE_ORPHAN)?;
            table = cx.word(table + m.orphan_next)?;
            n += 1;
        }
    }

    // Suspended continuations own their fiber stacks: what those reference is attributed to
    // the continuation (kind SuspendedStack, origin = the stack), not made a root.
    let fields = continuation_fields(rt, cap, format)?;
    let conts = find_continuations(&cap.regions, format, rt.continuation_shape(fields));
    let index = RegionIndex::new(&cap.regions);
    let fibers: Vec<u64> = conts.iter().filter_map(|&c| index.word(c)).filter(|&f| f & 1 == 1 && f > 1).map(|f| f - 1).collect();
    drop(index);
    for head in fibers {
        suspended_stack(&mut cx, head)?;
    }

    cap.regions.append(&mut cx.new_regions);
    cap.memprof_frames = root_chains::memprof_frames(source, &cx.memprof, &rt.frames, format);
    cap.roots = cx.roots;
    cap.memprof = rt.facts.memprof.then_some(cx.memprof);
    cap.warnings.append(&mut cx.warnings);
    Ok(())
}

/// The fields of a continuation: the release's (checked on the copy after the stop, by
/// [`check_continuations`]); or, for a probed runtime, measured on the continuations in the
/// heap (none: no stack is held by one, and the fact matters to nothing here).
fn continuation_fields(rt: &Runtime, cap: &mut Capture, format: HeaderFormat) -> Result<u64> {
    if let Some(known) = rt.facts.continuation_fields {
        return Ok(known);
    }
    let measured = probe::measure_continuation_fields(cap.regions.iter(), format).map_err(|why| DumpError::ProbeFailed {
        version: rt.version.clone(),
        fact: "fields of a continuation",
        why,
    })?;
    let (value, from) = match measured {
        Some(n) => (n.to_string(), "the continuations in the stopped heap".to_string()),
        None => ("not needed".to_string(), "no continuation is in the heap".to_string()),
    };
    cap.probed.push(ProbedFact { fact: "fields of a continuation".into(), value, from });
    Ok(measured.unwrap_or(0))
}

/// The continuations of the copy, once the target runs again, have the fields the release
/// says: a runtime that makes them otherwise is not the release, and its suspended stacks
/// were not found.
pub fn check_continuations(rt: &Runtime, cap: &Capture, format: HeaderFormat) -> Result<()> {
    let Some(known) = rt.facts.continuation_fields else { return Ok(()) };
    let disagrees = |probed: String| DumpError::ProbeDisagrees {
        version: rt.version.clone(),
        fact: "fields of a continuation",
        probed,
        release: rt.release.series,
        says: known.to_string(),
    };
    match probe::measure_continuation_fields(cap.regions.iter(), format) {
        Ok(Some(n)) if n != known => Err(disagrees(n.to_string())),
        Ok(_) => Ok(()),
        Err(why) => Err(disagrees(why)),
    }
}

/// systhreads installs `caml_thread_scan_roots` in `caml_scan_roots_hook`; we scan what it
/// scans. Any other hook scans roots we cannot know of: say so.
fn check_hook(cx: &mut Ctx<'_>) -> Result<()> {
    let Ok(hook_var) = cx.rt.symbol("caml_scan_roots_hook") else { return Ok(()) };
    let hook = cx.word(hook_var)?;
    if hook == 0 {
        return Ok(());
    }
    // (systhreads' code is the executable's, or dllthreads.so's: `unit_files_at` knows both.)
    if cx.rt.bytecode.is_some() && cx.rt.layout.threads.is_some() && cx.rt.unit_files_at(hook) == ["st_stubs.c"] {
        return Ok(());
    }
    if cx.rt.bytecode.is_some() {
        return Err(crate::common::bytecode::unknown_hook(cx.source, hook)?);
    }
    let name = cx.rt.symbol_name_at(hook).unwrap_or("?").to_string();
    // Without .symtab the hook (a static function) has no name: systhreads' file is enough,
    // since it installs no other hook.
    let systhreads = name == "caml_thread_scan_roots"
        || (cx.rt.exe.symbols_from == crate::elf::SymbolTable::Dynsym && cx.rt.unit_files_at(hook) == ["st_stubs.c"]);
    if !systhreads || cx.rt.layout.threads.is_none() {
        cx.warnings.push(format!("unknown root-scanning hook {name} at {hook:#x}: the roots it scans are missing"));
    }
    Ok(())
}

/// `caml_globals`: each compilation unit's `gc_roots`, a zero-terminated array of blocks
/// (the module block) whose fields are roots.
fn globals(cx: &mut Ctx<'_>, format: HeaderFormat) -> Result<()> {
    root_chains::globals(cx.source, cx.rt.symbol("caml_globals")?, format, &mut cx.roots)
}

/// Globals of natdynlinked units (globroots.c `caml_dyn_globals`).
fn dyn_globals(cx: &mut Ctx<'_>, format: HeaderFormat) -> Result<()> {
    let Some(head) = cx.rt.dyn_globals() else { return Ok(()) };
    let link = (cx.rt.layout.roots.link_data, cx.rt.layout.roots.link_next);
    root_chains::dyn_globals(cx.source, head, link, format, &mut cx.roots)
}

/// The three skip lists of registered global roots.
fn global_root_lists(cx: &mut Ctx<'_>, cap: &Capture) -> Result<()> {
    let r = &cx.rt.layout.roots;
    let ds = &cx.rt.layout.domain_state;
    let shape = root_chains::SkipListShape { list_forward: r.skiplist_forward, cell_key: r.skipcell_key, cell_forward: r.skipcell_forward };
    let lists = [
        (cx.rt.symbol("caml_global_roots")?, RootKind::GlobalRoot),
        (cx.rt.symbol("caml_global_roots_young")?, RootKind::GenerationalRoot),
        (cx.rt.symbol("caml_global_roots_old")?, RootKind::GenerationalRoot),
    ];
    let states: Vec<StateSpan<'_>> =
        cap.domains.iter().map(|d| StateSpan { domain: d.id, address: d.state, size: ds.size, members: &ds.members }).collect();
    root_chains::registered_roots(cx.source, &lists, shape, &states, &mut cx.roots)
}

/// The systhreads of domain `domain` (empty without the threads library).
fn systhreads(cx: &mut Ctx<'_>, domain: u16) -> Result<Vec<SysThread>> {
    let (Some(t), Some(thread_table)) = (cx.rt.layout.threads.clone(), cx.rt.thread_table()) else { return Ok(Vec::new()) };
    let table = match cx.rt.facts.thread_table {
        Indirection::InlineArray => thread_table,
        Indirection::Pointer => cx.word(thread_table)?,
    };
    if table == 0 {
        return Ok(Vec::new());
    }
    let active = cx.word(table + domain as u64 * t.table_size + t.table_active_thread)?;
    let mut out = Vec::new();
    let mut th = active;
    while th != 0 && out.len() < MAX_CHAIN {
        let descr = cx.word(th + t.descr)?;
        // Ident(descr) = Field(descr, 0), an OCaml int.
        let id = if descr & 1 == 0 && descr != 0 { cx.word(descr).map(|v| v >> 1).unwrap_or(0) } else { 0 };
        out.push(SysThread {
            id,
            descr_slot: th + t.descr,
            descr,
            backtrace_slot: th + t.backtrace_last_exn,
            current_stack: cx.word(th + t.current_stack)?,
            local_roots: cx.word(th + t.local_roots)?,
            gc_regs: cx.word(th + t.gc_regs)?,
            active: th == active,
        });
        th = cx.word(th + t.next)?;
        if th == active {
            break;
        }
    }
    Ok(out)
}

/// `CAMLparam`/`CAMLlocal` chains (memory.h `caml__roots_block`).
fn local_roots(cx: &mut Ctx<'_>, block: u64, domain: u16, thread: u64) -> Result<()> {
    let r = &cx.rt.layout.roots;
    let shape = root_chains::RootsBlockShape {
        next: r.roots_block_next,
        ntables: r.roots_block_ntables,
        nitems: r.roots_block_nitems,
        tables: r.roots_block_tables,
        max_tables: r.roots_block_max_tables,
    };
    root_chains::local_roots(cx.source, block, shape, (domain, thread), &mut cx.roots)
}

/// One fiber stack: its `stack_info`, live part and handler.
struct Fiber {
    info: u64,
    sp: u64,
    /// `Stack_high`: where the handler starts.
    high: u64,
}

/// Reads a stack chain (`stack_info` and its parents), copying each stack's live part (from
/// `lowest` for the innermost one, when given, else from its saved sp) as a fiber-stack region.
fn fiber_chain(cx: &mut Ctx<'_>, head: u64, lowest: Option<u64>) -> Result<Vec<Fiber>> {
    let f = cx.rt.layout.fiber.clone();
    let mut chain = Vec::new();
    let mut stack = head;
    while stack != 0 && chain.len() < 100_000 {
        let sp = cx.word(stack + f.stack_sp)?;
        let high = cx.word(stack + f.stack_handler)?;
        let parent = cx.word(high + f.handler_parent)?;
        let base = stack + f.stack_info_size;
        let mut low = sp;
        if chain.is_empty() {
            if let Some(rsp) = lowest.filter(|&rsp| base <= rsp && rsp <= sp) {
                low = rsp;
            }
        }
        if !(base <= low && low <= high) || low % 8 != 0 {
            return Err(DumpError::Inconsistent(format!("fiber stack {stack:#x}: sp {low:#x} outside {base:#x}..{high:#x}")));
        }
        if cx.stacks.insert(stack) {
            let end = high + f.handler_size;
            let bytes = cx.source.read_bytes(low, (end - low) as usize)?;
            cx.new_regions.push(CapturedRegion {
                kind: RegionKind::FiberStack,
                domain: NO_DOMAIN,
                base: low,
                block_wsize: 0,
                first_block: 0,
                owner: stack,
                bytes,
            });
        }
        chain.push(Fiber { info: stack, sp, high });
        stack = parent;
    }
    Ok(chain)
}

/// Reads a word of a captured fiber stack (or of the target, for words outside it).
fn stack_word(regions: &[CapturedRegion], source: &dyn MemorySource, address: u64) -> Result<u64> {
    for r in regions.iter().rev() {
        if r.kind == RegionKind::FiberStack && r.base <= address && address + 8 <= r.end() {
            return Ok(r.word((address - r.base) as usize));
        }
    }
    source.read_u64(address)
}

/// Walks every stack of a chain precisely, as `caml_scan_stack` does, recording each live
/// slot and each handler's three closures.
fn walk_chain(
    cx: &mut Ctx<'_>,
    chain: &[Fiber],
    first_sp: Option<u64>,
    gc_regs: u64,
    mut record: impl FnMut(&mut Ctx<'_>, RootKind, u64, u64, u64, RootName, u32),
) -> Result<()> {
    let f = cx.rt.layout.fiber.clone();
    for (i, fiber) in chain.iter().enumerate() {
        let sp = if i == 0 { first_sp.unwrap_or(fiber.sp) } else { fiber.sp };
        if let Some(code) = cx.code.take() {
            let scanned = interpreter_stack(cx, &code, sp, fiber.high, &mut record);
            cx.code = Some(code);
            scanned?;
            handlers(cx, &f, fiber, &mut record)?;
            continue;
        }
        let regions = std::mem::take(&mut cx.new_regions);
        let walk = walk_stack(&cx.rt.frames, sp, fiber.high, gc_regs, &mut |a| stack_word(&regions, cx.source, a));
        cx.new_regions = regions;
        if let Some(problem) = walk.problem {
            cx.warnings.push(format!("fiber stack {:#x}: walk stopped early: {problem}", fiber.info));
        }
        let mut found = Vec::new();
        let regions = std::mem::take(&mut cx.new_regions);
        let read = root_chains::stack_slots(&walk.slots, (0, 0), &mut |a| stack_word(&regions, cx.source, a), &mut found, &mut cx.warnings);
        cx.new_regions = regions;
        read?;
        for r in found {
            record(cx, r.kind, r.slot, r.value, r.origin, r.name, r.flags);
        }
        handlers(cx, &f, fiber, &mut record)?;
    }
    Ok(())
}

/// A fiber's handler: its three closures.
fn handlers(
    cx: &mut Ctx<'_>,
    f: &super::layout::FiberLayout,
    fiber: &Fiber,
    record: &mut impl FnMut(&mut Ctx<'_>, RootKind, u64, u64, u64, RootName, u32),
) -> Result<()> {
    for (offset, name) in [(f.handler_value, "handle_value"), (f.handler_exn, "handle_exn"), (f.handler_effect, "handle_effect")] {
        let address = fiber.high + offset;
        let value = stack_word(&cx.new_regions, cx.source, address)?;
        record(cx, RootKind::Stack, address, value, 0, RootName::Text(name.into()), 0);
    }
    Ok(())
}

/// An interpreter's stack, from `sp` to `high` (see [`RunningBytecode::stack_roots`]).
fn interpreter_stack(
    cx: &mut Ctx<'_>,
    code: &CodeFragments,
    sp: u64,
    high: u64,
    record: &mut impl FnMut(&mut Ctx<'_>, RootKind, u64, u64, u64, RootName, u32),
) -> Result<()> {
    let Some(interpreter) = &cx.rt.bytecode else { return Ok(()) };
    let words: Vec<u64> = {
        let regions = &cx.new_regions;
        (sp..high).step_by(8).map(|a| stack_word(regions, cx.source, a)).collect::<Result<_>>()?
    };
    let running = RunningBytecode { program: &interpreter.program, code, code_start: cx.code_start };
    for root in running.stack_roots(sp, &words) {
        record(cx, RootKind::Stack, root.slot, root.value, root.frame_pc, root.name, root.flags);
    }
    Ok(())
}

/// The current stack of a domain or thread, and its parent fibers. When `running` is given,
/// the innermost OCaml frame is live in the registers of that thread: its extent comes from
/// the unwind table, and its words and the registers are recorded conservatively.
fn current_stack(
    cx: &mut Ctx<'_>,
    domain: u16,
    thread: u64,
    stack: u64,
    gc_regs: u64,
    running: Option<&crate::source::ThreadState>,
) -> Result<()> {
    if stack == 0 {
        return Ok(());
    }
    let mut first_sp = None;
    if let Some(t) = running {
        let regs = t.regs;
        let pc = regs.rip;
        let chain = fiber_chain(cx, stack, Some(regs.rsp))?;
        let cfa = cx.rt.code.cfa(pc.wrapping_sub(cx.rt.bias), &regs);
        let high = chain.first().map_or(0, |f| f.high);
        match cfa.filter(|&c| regs.rsp < c && c <= high) {
            Some(cfa) => {
                let ret_slot = cfa - 8;
                let mut a = regs.rsp;
                while a < ret_slot {
                    let v = stack_word(&cx.new_regions, cx.source, a)?;
                    cx.push(RootKind::Stack, domain, thread, a, v, pc, RootName::CodeAt(pc), ROOT_FLAG_CONSERVATIVE);
                    a += 8;
                }
                first_sp = Some(ret_slot);
            }
            // Without its frame the stack cannot be decoded: try another stop.
            None => return Err(UnsafeStop::NoFrame { domain, pc }.into()),
        }
        for (dwarf, v) in regs.ocaml_value_registers() {
            cx.push(RootKind::Register, domain, thread, 0, v, dwarf, RootName::None, ROOT_FLAG_CONSERVATIVE);
        }
        if first_sp.is_none() {
            return Ok(());
        }
        return walk_chain(cx, &chain, first_sp, gc_regs, |cx, kind, slot, value, origin, name, flags| {
            cx.push(kind, domain, thread, slot, value, origin, name, flags)
        });
    }
    let chain = fiber_chain(cx, stack, None)?;
    walk_chain(cx, &chain, first_sp, gc_regs, |cx, kind, slot, value, origin, name, flags| {
        cx.push(kind, domain, thread, slot, value, origin, name, flags)
    })
}

/// The stack chain of a suspended continuation whose first fiber is `head`.
fn suspended_stack(cx: &mut Ctx<'_>, head: u64) -> Result<()> {
    if cx.stacks.contains(&head) {
        return Ok(()); // already captured as a current stack (or another continuation's)
    }
    let chain = fiber_chain(cx, head, None)?;
    walk_chain(cx, &chain, None, 0, |cx, _kind, slot, value, origin, name, flags| {
        let name = match name {
            RootName::CodeAt(_) => RootName::CodeAt(origin),
            other => other,
        };
        cx.push(RootKind::SuspendedStack, NO_DOMAIN, 0, slot, value, head, name, flags)
    })
}

/// Below a thread's stack pointer, a leaf function may keep values in the 128-byte red zone
/// (System V x86-64 ABI).
const RED_ZONE: u64 = 128;

/// The longest C stack scanned for a thread caught inside the runtime (the used part, from
/// its stack pointer up): deeper than any real one; a bound on a corrupt stack pointer.
const MAX_C_STACK: u64 = 64 << 20;

/// What [`interrupted_thread_roots`] found.
#[derive(Debug, Default)]
pub struct ConservativeScan {
    pub roots: Vec<CapturedRoot>,
    /// How many of the roots come from registers (the rest from the stack).
    pub registers: usize,
    /// The stack range scanned, if any.
    pub stack: Option<(u64, u64)>,
    /// Why the stack could not be scanned (or was cut short), when it could not.
    pub problem: Option<String>,
}

/// The roots of a thread caught inside the runtime (a core taken in a collection): its C locals
/// and registers may be the only references to blocks the runtime is working on, and no table
/// says which words hold values. Every general register and every word of its stack, from its
/// stack pointer (less the red zone) to the top of the stack it runs on (its domain's OCaml
/// fiber, or the mapping that holds its stack pointer), that points into a heap block (minor
/// heap, pool or large allocation; not free or garbage) becomes a root flagged CONSERVATIVE:
/// registers as `register` roots, stack words as `other` roots named after the thread. The root's
/// value is the block's (an interior pointer counts for the block it points into, and is kept
/// as the root's origin).
pub fn interrupted_thread_roots(
    rt: &Runtime,
    source: &dyn MemorySource,
    cap: &Capture,
    format: HeaderFormat,
    domain: u16,
    thread: &crate::source::ThreadState,
) -> Result<ConservativeScan> {
    let blocks = HeapBlocks::new(&cap.regions, format, cap.colours.map(|c| c.garbage));
    let mut scan = ConservativeScan::default();
    let conservative = |kind, slot, value, origin, name| CapturedRoot {
        kind,
        domain,
        flags: ROOT_FLAG_CONSERVATIVE,
        thread: 0,
        slot,
        value,
        origin,
        name,
    };
    let regs = thread.regs;
    let all_registers = [(15, regs.r15), (14, regs.r14)].into_iter().chain(regs.ocaml_value_registers());
    for (dwarf, v) in all_registers {
        if let Some(block) = blocks.block_of(v) {
            scan.roots.push(conservative(RootKind::Register, 0, block, dwarf, RootName::None));
        }
    }
    scan.registers = scan.roots.len();

    let rsp = regs.rsp;
    let range = match fiber_of(rt, source, cap, domain, rsp)? {
        Some((base, end)) => Some((rsp.saturating_sub(RED_ZONE).max(base), end)),
        None => {
            let mapping = source.mappings()?.into_iter().find(|m| m.start <= rsp && rsp < m.end);
            mapping.map(|m| (rsp.saturating_sub(RED_ZONE).max(m.start), m.end))
        }
    };
    let Some((low, mut high)) = range.map(|(l, h)| (l & !7, h & !7)) else {
        scan.problem = Some(format!("its stack pointer {rsp:#x} is in no mapping"));
        return Ok(scan);
    };
    if high - low > MAX_C_STACK {
        scan.problem = Some(format!("its stack from {low:#x} to {high:#x} is longer than {MAX_C_STACK} bytes: only the first are scanned"));
        high = low + MAX_C_STACK;
    }
    let bytes = match source.read_bytes(low, (high - low) as usize) {
        Ok(b) => b,
        Err(e) => {
            scan.problem = Some(format!("its stack {low:#x}..{high:#x} cannot be read: {e}"));
            return Ok(scan);
        }
    };
    scan.stack = Some((low, high));
    let name = RootName::Text(format!("C stack of thread {} (caught in the runtime)", thread.tid));
    for (i, w) in bytes.chunks_exact(8).enumerate() {
        let word = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        if let Some(block) = blocks.block_of(word) {
            scan.roots.push(conservative(RootKind::Other, low + 8 * i as u64, block, word, name.clone()));
        }
    }
    Ok(scan)
}

/// The extent `[stack_info base, end of its handler)` of the fiber of `domain`'s current stack
/// chain that holds `address`, if one does (a thread caught in OCaml code or the runtime's
/// glue runs on it, not on a C stack).
fn fiber_of(rt: &Runtime, source: &dyn MemorySource, cap: &Capture, domain: u16, address: u64) -> Result<Option<(u64, u64)>> {
    let Some(d) = cap.domains.iter().find(|d| d.id == domain) else { return Ok(None) };
    let f = &rt.layout.fiber;
    let mut stack = d.field(rt.layout.domain_state.current_stack);
    for _ in 0..100_000 {
        if stack == 0 {
            break;
        }
        let high = source.read_u64(stack + f.stack_handler)?;
        let (base, end) = (stack + f.stack_info_size, high.saturating_add(f.handler_size));
        if base <= address && address < end {
            return Ok(Some((base, end)));
        }
        stack = source.read_u64(high + f.handler_parent)?;
    }
    Ok(None)
}

/// The blocks of the captured heap, to tell which block a word points into.
struct HeapBlocks<'a> {
    index: RegionIndex<'a>,
    /// Header offsets of each minor heap's blocks, by region base.
    minor: HashMap<u64, Vec<usize>>,
    format: HeaderFormat,
    /// The colour of garbage blocks awaiting sweep, when known.
    garbage: Option<u8>,
}

impl<'a> HeapBlocks<'a> {
    fn new(regions: &'a [CapturedRegion], format: HeaderFormat, garbage: Option<u8>) -> Self {
        let minor = regions
            .iter()
            .filter(|r| r.kind == RegionKind::MinorHeap)
            .map(|r| (r.base, r.blocks(format).into_iter().map(|(at, _)| at).collect()))
            .collect();
        HeapBlocks { index: RegionIndex::new(regions), minor, format, garbage }
    }

    /// The block (address of its first field) whose header or fields hold `address`, if it is
    /// an allocated heap block: not a free pool slot, not garbage awaiting sweep.
    fn block_of(&self, address: u64) -> Option<u64> {
        if address & 7 != 0 {
            return None;
        }
        let r = self.index.region_of(address)?;
        let offset = (address - r.base) as usize;
        let header_at = match r.kind {
            RegionKind::Pool => {
                let (first, stride) = (r.first_block as usize, r.block_wsize as usize * 8);
                if stride == 0 || offset < first {
                    return None;
                }
                let at = first + (offset - first) / stride * stride;
                (at + stride <= r.bytes.len()).then_some(at)?
            }
            RegionKind::Large => (offset >= r.first_block as usize).then_some(r.first_block as usize)?,
            RegionKind::MinorHeap => {
                let starts = self.minor.get(&r.base)?;
                *starts.get(starts.partition_point(|&at| at <= offset).checked_sub(1)?)?
            }
            _ => return None,
        };
        let header = r.word(header_at);
        let end = header_at + 8 * (self.format.wosize(header) as usize + 1);
        let garbage = r.kind != RegionKind::MinorHeap && self.garbage.is_some_and(|g| (header >> 8) & 3 == g as u64);
        (header != 0 && offset < end && !garbage).then_some(r.base + header_at as u64 + 8)
    }
}

/// finalise.c `caml_final_do_roots`: the functions are roots; the values of the `first` and
/// `last` sets are weak (they are finalised when unreachable); those already due are roots.
fn finalisers(cx: &mut Ctx<'_>, info: u64, domain: u16) -> Result<()> {
    let r = cx.rt.layout.roots.clone();
    let shape = root_chains::FinalShape { fun: r.final_fun, val: r.final_val, size: r.final_size };
    for (table, young, set) in [(r.final_first_table, r.final_first_young, "first"), (r.final_last_table, r.final_last_young, "last")] {
        let set_table = (cx.word(info + table)?, cx.word(info + young)?);
        root_chains::finalisable_set(cx.source, set_table, shape, set, domain, &mut cx.roots)?;
    }
    let todo = cx.word(info + r.final_todo_head)?;
    root_chains::finalisers_due(cx.source, todo, (r.todo_next, r.todo_size, r.todo_item), shape, domain, &mut cx.roots)
}

fn memprof_domain(cx: &mut Ctx<'_>, domain_memprof: u64, domain: u16) -> Result<()> {
    let Some(m) = cx.rt.layout.memprof.clone() else { return Ok(()) };
    memprof_entries(cx, domain_memprof + m.domain_entries, domain, MEMPROF_TABLE_DOMAIN)?;
    for (head_off, entries_off, next_off, table) in [
        (m.domain_threads, m.thread_entries, m.thread_next, MEMPROF_TABLE_THREAD),
        (m.domain_orphans, m.orphan_entries, m.orphan_next, MEMPROF_TABLE_ORPHAN),
    ] {
        let mut node = cx.word(domain_memprof + head_off)?;
        let mut n = 0;
        while node != 0 && n < MAX_CHAIN {
            memprof_entries(cx, node + entries_off, domain, table)?;
            node = cx.word(node + next_off)?;
            n += 1;
        }
    }
    Ok(())
}

/// One memprof entries table: its configuration block and each entry's user data are roots;
/// the tracked blocks themselves are weak. Each entry is also recorded whole, with its
/// profile's sampling rate.
fn memprof_entries(cx: &mut Ctx<'_>, entries: u64, domain: u16, table_kind: u8) -> Result<()> {
    let Some(m) = cx.rt.layout.memprof.clone() else { return Ok(()) };
    let config = cx.word(entries + m.entries_config)?;
    const VAL_UNIT: u64 = 1;
    const CONFIG_STATUS_DISCARDED: u64 = 2;
    if config == VAL_UNIT || config & 1 == 1 {
        return Ok(());
    }
    if cx.word(config)? >> 1 == CONFIG_STATUS_DISCARDED {
        return Ok(());
    }
    cx.push(RootKind::Memprof, domain, 0, entries + m.entries_config, config, 0, RootName::Text("config".into()), 0);
    let table = cx.word(entries + m.entries_t)?;
    let size = cx.word(entries + m.entries_size)?;
    if size > 1 << 28 {
        return Err(DumpError::Inconsistent(format!("memprof table {entries:#x} has {size} entries")));
    }
    if size == 0 {
        return Ok(());
    }
    // memprof.c `CONFIG_FIELD_LAMBDA`: the sampling rate, a boxed float.
    const CONFIG_FIELD_LAMBDA: u64 = 1;
    let sampling_rate = f64::from_bits(cx.word(cx.word(config + 8 * CONFIG_FIELD_LAMBDA)?)?);
    let bytes = cx.source.read_bytes(table, (size * m.entry_size) as usize)?;
    for i in 0..size {
        let e = (i * m.entry_size) as usize;
        let word = |o: u64| u64::from_le_bytes(bytes[e + o as usize..e + o as usize + 8].try_into().expect("8 bytes"));
        let entry = table + i * m.entry_size;
        let bits = |(offset, width): (u64, u64)| {
            let w = word(offset / 64 * 8);
            ((w >> (offset % 64)) & ((1u64 << width) - 1)) as u8
        };
        let flag = |field, bit| if bits(field) != 0 { bit } else { 0 };
        cx.memprof.push(MemprofRecord {
            block: word(m.entry_block),
            user_data: word(m.entry_user_data),
            samples: word(m.entry_samples),
            wosize: word(m.entry_wosize),
            profile: config,
            sampling_rate,
            domain,
            table: table_kind,
            source: bits(m.entry_source),
            flags: flag(m.entry_alloc_young, MEMPROF_ALLOC_YOUNG)
                | flag(m.entry_promoted, MEMPROF_PROMOTED)
                | flag(m.entry_deallocated, MEMPROF_DEALLOCATED)
                | flag(m.entry_offset, MEMPROF_OFFSET)
                | flag(m.entry_deleted, MEMPROF_DELETED),
            reserved: [0; 3],
        });
        cx.push(RootKind::Memprof, domain, 0, entry + m.entry_user_data, word(m.entry_user_data), 0, RootName::Text("user_data".into()), 0);
        cx.push(
            RootKind::Memprof,
            domain,
            0,
            entry + m.entry_block,
            word(m.entry_block),
            0,
            RootName::Text("block".into()),
            ROOT_FLAG_WEAK,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(kind: RegionKind, base: u64, block_wsize: u32, first_block: u32, words: &[u64]) -> CapturedRegion {
        let bytes = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        CapturedRegion { kind, domain: 0, base, block_wsize, first_block, owner: 0, bytes }
    }

    /// Header of a block of `wosize` fields, tag 0, colour `colour`.
    fn header(wosize: u64, colour: u64) -> u64 {
        (wosize << 10) | (colour << 8)
    }

    #[test]
    fn conservative_words_name_the_heap_block_they_point_into() {
        let format = HeaderFormat { reserved_bits: 0 };
        const GARBAGE: u8 = 2;
        // A pool of 3-word blocks after a 2-word pool header: a live block, a free slot, a
        // garbage block.
        let pool = region(RegionKind::Pool, 0x1000, 3, 16, &[0, 0, header(2, 0), 0xa, 0xb, 0, 0, 0, header(2, GARBAGE as u64), 0, 0]);
        // A minor heap: a 1-field then a 2-field block.
        let minor = region(RegionKind::MinorHeap, 0x2000, 0, 0, &[header(1, 0), 0x1, header(2, 0), 0x2, 0x3]);
        // A large allocation: a 2-word link, then one block of 2 fields.
        let large = region(RegionKind::Large, 0x3000, 0, 16, &[0, 0, header(2, 0), 0x4, 0x5]);
        let statics = region(RegionKind::Static, 0x4000, 0, 0, &[header(1, 3), 0x6]);
        let regions = [pool, minor, large, statics];
        let blocks = HeapBlocks::new(&regions, format, Some(GARBAGE));
        // Pool: the block itself, its header, an interior pointer; not the pool header, a free
        // slot, a garbage block, or an unaligned word.
        assert_eq!(blocks.block_of(0x1018), Some(0x1018));
        assert_eq!(blocks.block_of(0x1010), Some(0x1018));
        assert_eq!(blocks.block_of(0x1020), Some(0x1018));
        assert_eq!(blocks.block_of(0x1008), None);
        assert_eq!(blocks.block_of(0x1028), None);
        assert_eq!(blocks.block_of(0x1048), None);
        assert_eq!(blocks.block_of(0x101c), None);
        // Minor heap: blocks of different sizes.
        assert_eq!(blocks.block_of(0x2008), Some(0x2008));
        assert_eq!(blocks.block_of(0x2010), Some(0x2018));
        assert_eq!(blocks.block_of(0x2020), Some(0x2018));
        assert_eq!(blocks.block_of(0x2028), None);
        // Large allocation: not its link.
        assert_eq!(blocks.block_of(0x3020), Some(0x3018));
        assert_eq!(blocks.block_of(0x3008), None);
        // Static data and unmapped words are no heap blocks.
        assert_eq!(blocks.block_of(0x4008), None);
        assert_eq!(blocks.block_of(0x9000), None);
    }
}
