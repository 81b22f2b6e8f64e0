//! Every root OCaml 4.14's `caml_do_roots` visits (roots_nat.c), with systhreads'
//! `caml_thread_scan_roots`, each with its kind and origin; and the ephemeron list.

use super::bytecode::Interpreter4;
use super::layout::ThreadStack;
use super::stack::{walk, StackStart};
use super::Runtime4;
use crate::common::bytecode_roots::RunningBytecode;
use crate::common::copied_world::{Capture, CapturedRoot, RootName};
use crate::common::root_chains::{self, FinalShape, RootsBlockShape, SkipListShape, StateSpan, MAX_CHAIN};
use crate::error::{DumpError, Result, UnsafeStop};
use crate::source::{MemorySource, ReadExt, ThreadState};
use heapsnap_format::{
    MemprofRecord, RootKind, MEMPROF_ALLOC_YOUNG, MEMPROF_DEALLOCATED, MEMPROF_DELETED, MEMPROF_PROMOTED, MEMPROF_TABLE_DOMAIN,
    MEMPROF_TABLE_THREAD, NO_DOMAIN, ROOT_FLAG_CONSERVATIVE, ROOT_FLAG_WEAK,
};
use heapsnap_values::HeaderFormat;

/// The one runtime state's domain number in the snapshot.
const DOMAIN: u16 = 0;

/// The most words of an interpreter's stack read (its limit, `l=` in OCAMLRUNPARAM, is 1M words
/// by default; a program may raise it).
const MAX_STACK_WORDS: u64 = 1 << 27;

struct Ctx<'a> {
    rt: &'a Runtime4,
    source: &'a dyn MemorySource,
    roots: Vec<CapturedRoot>,
    memprof: Vec<MemprofRecord>,
    warnings: Vec<String>,
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

/// The systhreads descriptors, from `curr_thread` round the ring (empty without systhreads).
pub fn thread_ring(rt: &Runtime4, source: &dyn MemorySource) -> Result<Vec<u64>> {
    let (Some(t), Some(ts)) = (&rt.layout.threads, rt.thread_statics()) else { return Ok(Vec::new()) };
    let curr = source.read_u64(ts.curr_thread)?;
    let mut ring = Vec::new();
    let mut th = curr;
    while th != 0 && ring.len() < MAX_CHAIN {
        ring.push(th);
        th = source.read_u64(th + t.next)?;
        if th == curr {
            break;
        }
    }
    Ok(ring)
}

/// Captures the roots into `cap`. `running` is the thread running OCaml code, if one is.
pub fn capture_roots(
    rt: &Runtime4,
    source: &dyn MemorySource,
    cap: &mut Capture,
    state: u64,
    running: Option<&ThreadState>,
    format: HeaderFormat,
) -> Result<()> {
    let mut cx = Ctx { rt, source, roots: Vec::new(), memprof: Vec::new(), warnings: Vec::new() };
    check_hook(&mut cx)?;
    let code = rt.bytecode.as_ref().map(|i| i.code_fragments(rt.bias, source)).transpose()?;
    let bytecode = match (&rt.bytecode, &code) {
        (Some(interpreter), Some(code)) => {
            let code_start = source.read_u64(rt.symbol("caml_start_code")?)?;
            Some((interpreter, RunningBytecode { program: &interpreter.program, code, code_start }))
        }
        _ => None,
    };
    if let Some((interpreter, running)) = &bytecode {
        bytecode_globals(&mut cx, interpreter, running, format, cap)?;
    } else {
        globals(&mut cx, format)?;
        dyn_globals(&mut cx, format)?;
    }
    global_root_lists(&mut cx, state)?;

    // The thread holding the runtime: its stack from its registers when it runs OCaml code,
    // else from what Caml_state saved when it left OCaml.
    let s = &rt.layout.state;
    let ring = thread_ring(rt, source)?;
    let curr_id = match ring.first() {
        Some(&curr) => thread_id(&cx, curr)?,
        None => 0,
    };
    let saved = StackStart {
        sp: cx.word(state + s.bottom_of_stack)?,
        retaddr: cx.word(state + s.last_return_address)?,
        gc_regs: cx.word(state + s.gc_regs)?,
    };
    match (running, &bytecode) {
        (Some(t), _) => running_stack(&mut cx, curr_id, t)?,
        // The interpreter's stack of the thread holding the runtime (or that last held it).
        (None, Some((interpreter, code))) => {
            let l = &interpreter.layout;
            let (sp, high) = (cx.word(state + l.extern_sp)?, cx.word(state + l.stack_high)?);
            interpreter_stack(&mut cx, code, sp, high, curr_id)?
        }
        (None, None) => stack(&mut cx, curr_id, saved)?,
    }
    let locals = cx.word(state + s.local_roots)?;
    local_roots(&mut cx, locals, curr_id)?;
    if let Some(t) = rt.layout.threads.clone() {
        for (i, &th) in ring.iter().enumerate() {
            let id = thread_id(&cx, th)?;
            let descr = cx.word(th + t.descr)?;
            cx.push(RootKind::Thread, DOMAIN, id, th + t.descr, descr, 0, RootName::Text("descr".into()), 0);
            let exn = cx.word(th + t.backtrace_last_exn)?;
            cx.push(RootKind::Thread, DOMAIN, id, th + t.backtrace_last_exn, exn, 0, RootName::Text("backtrace_last_exn".into()), 0);
            if i > 0 {
                match (&t.stack, &bytecode) {
                    (ThreadStack::Native { bottom_of_stack, last_retaddr, gc_regs }, _) => {
                        let start = StackStart {
                            sp: cx.word(th + bottom_of_stack)?,
                            retaddr: cx.word(th + last_retaddr)?,
                            gc_regs: cx.word(th + gc_regs)?,
                        };
                        stack(&mut cx, id, start)?
                    }
                    (ThreadStack::Bytecode { sp, stack_high }, Some((_, code))) => {
                        let (sp, high) = (cx.word(th + sp)?, cx.word(th + stack_high)?);
                        interpreter_stack(&mut cx, code, sp, high, id)?
                    }
                    (ThreadStack::Bytecode { .. }, None) => {
                        return Err(DumpError::Inconsistent("bytecode threads in a program that runs no bytecode".into()))
                    }
                }
                let locals = cx.word(th + t.local_roots)?;
                local_roots(&mut cx, locals, id)?;
            }
        }
    }
    finalisers(&mut cx)?;
    memprof(&mut cx, &ring)?;
    // weak.c's `caml_ephe_list_head`: every ephemeron and weak array.
    let head = cx.word(rt.addr(rt.statics.ephe_list_head))?;
    cap.ephemerons.extend(root_chains::ephemeron_list(source, &cap.regions, head)?);
    cap.memprof_frames = root_chains::memprof_frames(source, &cx.memprof, &rt.frames, format);
    cap.roots = cx.roots;
    cap.memprof = Some(cx.memprof);
    cap.warnings.append(&mut cx.warnings);
    Ok(())
}

/// `Thread.id` of a systhread descriptor (`Ident(descr)`, field 0 of its `descr`).
fn thread_id(cx: &Ctx<'_>, th: u64) -> Result<u64> {
    let t = cx.rt.layout.threads.as_ref().expect("threads layout");
    let descr = cx.word(th + t.descr)?;
    Ok(if descr & 1 == 0 && descr != 0 { cx.word(descr).map(|v| v >> 1).unwrap_or(0) } else { 0 })
}

/// systhreads installs `caml_thread_scan_roots` in `caml_scan_roots_hook`; any other hook
/// scans roots we cannot know of: say so.
fn check_hook(cx: &mut Ctx<'_>) -> Result<()> {
    let hook = cx.word(cx.rt.symbol("caml_scan_roots_hook")?)?;
    if hook == 0 {
        return Ok(());
    }
    let systhreads = cx.rt.unit_file_at(hook) == Some("st_stubs.c") && cx.rt.layout.threads.is_some();
    if cx.rt.bytecode.is_some() && systhreads {
        return Ok(());
    }
    if cx.rt.bytecode.is_some() {
        return Err(crate::common::bytecode::unknown_hook(cx.source, hook)?);
    }
    let name = cx.rt.symbol_name_at(hook).unwrap_or("?").to_string();
    if name != "caml_thread_scan_roots" || cx.rt.layout.threads.is_none() {
        cx.warnings.push(format!("unknown root-scanning hook {name} at {hook:#x}: the roots it scans are missing"));
    }
    Ok(())
}

/// `caml_globals`: each compilation unit's zero-terminated array of module blocks.
fn globals(cx: &mut Ctx<'_>, format: HeaderFormat) -> Result<()> {
    root_chains::globals(cx.source, cx.rt.symbol("caml_globals")?, format, &mut cx.roots)
}

/// A bytecode program's globals (roots_byt.c `caml_do_roots`): `caml_global_data`, a static
/// variable, and its units' fields (see [`RunningBytecode::global_roots`]). The bytecode's
/// functions become the snapshot's symbols.
fn bytecode_globals(
    cx: &mut Ctx<'_>,
    interpreter: &Interpreter4,
    running: &RunningBytecode<'_>,
    format: HeaderFormat,
    cap: &mut Capture,
) -> Result<()> {
    let data_slot = cx.rt.addr(interpreter.layout.global_data);
    let data = cx.word(data_slot)?;
    cx.push(RootKind::Global, NO_DOMAIN, 0, data_slot, data, 0, RootName::Text("caml_global_data".into()), 0);
    running.global_roots(cx.source, data, format, &cap.regions, &mut cx.roots, &mut cx.warnings)?;
    cap.plugin_symbols.extend(running.function_symbols());
    Ok(())
}

/// A thread's interpreter stack, every word from its saved stack pointer `sp` to `high` that
/// is a block and no code pointer (as `caml_do_local_roots_byt` built for naked pointers
/// decides; without that option it visits every word, but a code pointer is outside the heap
/// either way).
fn interpreter_stack(cx: &mut Ctx<'_>, running: &RunningBytecode<'_>, sp: u64, high: u64, thread: u64) -> Result<()> {
    if sp > high || (high - sp) / 8 > MAX_STACK_WORDS || !sp.is_multiple_of(8) {
        return Err(DumpError::Inconsistent(format!("thread {thread}: the interpreter's stack {sp:#x}..{high:#x}")));
    }
    let words = cx.source.read_words(sp, ((high - sp) / 8) as usize)?;
    for root in running.stack_roots(sp, &words) {
        cx.push(RootKind::Stack, DOMAIN, thread, root.slot, root.value, root.frame_pc, root.name, root.flags);
    }
    Ok(())
}

/// Globals of natdynlinked units (roots_nat.c `caml_dyn_globals`).
fn dyn_globals(cx: &mut Ctx<'_>, format: HeaderFormat) -> Result<()> {
    let Some(head) = cx.rt.statics.dyn_globals.map(|a| cx.rt.addr(a)) else { return Ok(()) };
    root_chains::dyn_globals(cx.source, head, (cx.rt.layout.link_data, cx.rt.layout.link_next), format, &mut cx.roots)
}

/// The three skip lists of registered global roots.
fn global_root_lists(cx: &mut Ctx<'_>, state: u64) -> Result<()> {
    let l = &cx.rt.layout.skiplist;
    let shape = SkipListShape { list_forward: l.list_forward, cell_key: l.cell_key, cell_forward: l.cell_forward };
    let [global, young, old] = cx.rt.statics.global_roots.map(|a| cx.rt.addr(a));
    let lists = [(global, RootKind::GlobalRoot), (young, RootKind::GenerationalRoot), (old, RootKind::GenerationalRoot)];
    let s = &cx.rt.layout.state;
    let states = [StateSpan { domain: DOMAIN, address: state, size: s.size, members: &s.members }];
    root_chains::registered_roots(cx.source, &lists, shape, &states, &mut cx.roots)
}

/// `CAMLparam`/`CAMLlocal` chains (memory.h `caml__roots_block`).
fn local_roots(cx: &mut Ctx<'_>, block: u64, thread: u64) -> Result<()> {
    let r = &cx.rt.layout.local_roots;
    let shape = RootsBlockShape { next: r.next, ntables: r.ntables, nitems: r.nitems, tables: r.tables, max_tables: r.max_tables };
    root_chains::local_roots(cx.source, block, shape, (DOMAIN, thread), &mut cx.roots)
}

/// One thread's OCaml frames, from a saved exit.
fn stack(cx: &mut Ctx<'_>, thread: u64, start: StackStart) -> Result<()> {
    let source = cx.source;
    let w = walk(&cx.rt.frames, start, &mut |a| source.read_u64(a));
    if let Some(problem) = w.problem {
        cx.warnings.push(format!("thread {thread}: stack walk stopped early: {problem}"));
    }
    root_chains::stack_slots(&w.slots, (DOMAIN, thread), &mut |a| source.read_u64(a), &mut cx.roots, &mut cx.warnings)
}

/// The stack of the thread running OCaml code: its innermost frame is live in its registers,
/// so that frame's words and the registers are recorded conservatively; its extent comes from
/// the unwind table; the frames above it are walked precisely.
fn running_stack(cx: &mut Ctx<'_>, thread: u64, t: &ThreadState) -> Result<()> {
    let regs = t.regs;
    let pc = regs.rip;
    let Some(cfa) = cx.rt.code.cfa(pc.wrapping_sub(cx.rt.bias), &regs).filter(|&c| regs.rsp < c && c - regs.rsp < 1 << 20) else {
        return Err(UnsafeStop::NoFrame { domain: DOMAIN, pc }.into());
    };
    let mut a = regs.rsp;
    while a < cfa - 8 {
        let v = cx.word(a)?;
        cx.push(RootKind::Stack, DOMAIN, thread, a, v, pc, RootName::CodeAt(pc), ROOT_FLAG_CONSERVATIVE);
        a += 8;
    }
    for (dwarf, v) in regs.ocaml_value_registers() {
        cx.push(RootKind::Register, DOMAIN, thread, 0, v, dwarf, RootName::None, ROOT_FLAG_CONSERVATIVE);
    }
    let retaddr = cx.word(cfa - 8)?;
    stack(cx, thread, StackStart { sp: cfa, retaddr, gc_regs: 0 })
}

/// finalise.c `caml_final_do_roots`: the functions are roots; the values of the `first` and
/// `last` sets are weak (finalised when unreachable); those already due (`to_do`) are roots.
fn finalisers(cx: &mut Ctx<'_>) -> Result<()> {
    let f = cx.rt.layout.finalise.clone();
    let shape = FinalShape { fun: f.fun, val: f.val, size: f.final_size };
    for (set, name) in [(cx.rt.statics.finalisable_first, "first"), (cx.rt.statics.finalisable_last, "last")] {
        let set = cx.rt.addr(set);
        let table = (cx.word(set + f.table)?, cx.word(set + f.young)?);
        root_chains::finalisable_set(cx.source, table, shape, name, DOMAIN, &mut cx.roots)?;
    }
    let todo = cx.word(cx.rt.addr(cx.rt.statics.to_do_hd))?;
    root_chains::finalisers_due(cx.source, todo, (f.todo_next, f.todo_size, f.todo_item), shape, DOMAIN, &mut cx.roots)
}

/// memprof.c's entry arrays: `entries_global` (blocks whose allocation callback ran) and each
/// thread's own (callbacks not yet run). User data are roots; tracked blocks are weak.
fn memprof(cx: &mut Ctx<'_>, ring: &[u64]) -> Result<()> {
    let m = cx.rt.layout.memprof.clone();
    let rate = f64::from_bits(cx.word(cx.rt.addr(cx.rt.statics.memprof_lambda))?);
    let mut arrays = vec![(cx.rt.addr(cx.rt.statics.entries_global), MEMPROF_TABLE_DOMAIN)];
    let mut contexts = vec![cx.rt.addr(cx.rt.statics.memprof_main_ctx)];
    if let Some(t) = &cx.rt.layout.threads {
        for &th in ring {
            contexts.push(cx.word(th + t.memprof_ctx)?);
        }
    }
    contexts.sort_unstable();
    contexts.dedup();
    arrays.extend(contexts.into_iter().filter(|&c| c != 0).map(|c| (c + m.ctx_entries, MEMPROF_TABLE_THREAD)));
    for (array, table_kind) in arrays {
        let t = cx.word(array + m.array_t)?;
        let len = cx.word(array + m.array_len)?;
        if len > 1 << 28 {
            return Err(DumpError::Inconsistent(format!("memprof entry array {array:#x} has {len} entries")));
        }
        if t == 0 || len == 0 {
            continue;
        }
        let bytes = cx.source.read_bytes(t, (len * m.tracked_size) as usize)?;
        for i in 0..len {
            let e = (i * m.tracked_size) as usize;
            let word = |o: u64| u64::from_le_bytes(bytes[e + o as usize..e + o as usize + 8].try_into().expect("8 bytes"));
            let bits = |(offset, width): (u64, u64)| (word(offset / 64 * 8) >> (offset % 64)) & ((1u64 << width) - 1);
            let flag = |field, bit| if bits(field) != 0 { bit } else { 0 };
            let entry = t + i * m.tracked_size;
            let (block, user_data) = (word(m.block), word(m.user_data));
            cx.memprof.push(MemprofRecord {
                block,
                user_data,
                samples: word(m.n_samples),
                wosize: word(m.wosize),
                profile: 0,
                sampling_rate: rate,
                domain: DOMAIN,
                table: table_kind,
                source: bits(m.source) as u8,
                flags: flag(m.alloc_young, MEMPROF_ALLOC_YOUNG)
                    | flag(m.promoted, MEMPROF_PROMOTED)
                    | flag(m.deallocated, MEMPROF_DEALLOCATED)
                    | flag(m.deleted, MEMPROF_DELETED),
                reserved: [0; 3],
            });
            cx.push(RootKind::Memprof, DOMAIN, 0, entry + m.user_data, user_data, 0, RootName::Text("user_data".into()), 0);
            cx.push(RootKind::Memprof, DOMAIN, 0, entry + m.block, block, 0, RootName::Text("block".into()), ROOT_FLAG_WEAK);
        }
    }
    Ok(())
}
