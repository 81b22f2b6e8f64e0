//! Is the stopped world consistent?
//!
//! Choice: we *detect* an unsafe stop and let the caller resume the target for a few
//! milliseconds and retry, rather than driving every domain to a safepoint. Driving domains
//! to a safepoint needs either a write to the target (`young_limit`, as
//! `caml_interrupt_self` does) or hardware breakpoints/single-stepping; a dumper killed at the
//! wrong moment would then leave a breakpoint or trap flag armed and the target would die of
//! SIGTRAP. Detection reads only, so the target is never changed, whatever happens to us;
//! unsafe windows are short, so a few retries are enough in practice.
//!
//! A stop is safe when:
//! - no stop-the-world section runs (`stw_leader == 0`): no minor collection, major-GC phase
//!   change or compaction is in progress in any domain;
//! - none of the runtime's global locks is held (pool free lists, global roots, orphaned
//!   work, the domain table, memprof orphans): the structures they guard are not half-updated;
//! - every domain either has released its domain lock (it is in a blocking section, so its
//!   heap, stacks and roots are at rest), or the thread holding it is executing OCaml code
//!   outside an inline allocation (OCaml code changes the heap only by allocating, and the
//!   window between the bump of `young_ptr` and the last initialising store is found by
//!   decoding the code), or it runs C code whose frames, unwound with `.eh_frame` up to the
//!   OCaml code that called it, include no runtime function that leaves heap structures
//!   half-updated (a major slice sweeping pools, an allocation, a stack reallocation...), and
//!   whose innermost frame is not the code of a C allocator (between the lowering of
//!   `young_ptr` and the header store). The assembly glue between OCaml and C is a
//!   transition: unsafe.
//! - and, checked by the capture itself, every minor heap parses from `young_ptr` to its end
//!   (no block header is being written), and the youngest block of each points only at blocks
//!   of its minor heap (C code that allocated it has written its fields; until then they hold
//!   an earlier minor cycle's words).

use super::versions::Indirection;
use super::Runtime;
use crate::common::bytecode::{interpreter_stop, saved_before_calling, InterpreterStop};
use crate::common::code::CodeKind;
use crate::common::world_check::{DomainView, WorldCheck};
use crate::error::{BusyPlace, Result, UnsafeStop};
use crate::source::{MemorySource, ReadExt, ThreadState};

/// Runtime source files whose functions leave heap structures half-updated while they run
/// (pool lists being swept or refilled, blocks allocated but not yet initialised, stacks
/// being moved, finaliser and memprof tables being rebuilt, systhreads switching): a domain
/// stopped with one of them on its C stack is not at rest.
const UNSAFE_RUNTIME_FILES: &[&str] = &[
    "shared_heap.c",
    "minor_gc.c",
    "major_gc.c",
    "memory.c",
    "alloc.c",
    "array.c",
    "fiber.c",
    "signals_nat.c",
    "finalise.c",
    "weak.c",
    "memprof.c",
    "intern.c",
    "obj.c",
    "custom.c",
    "st_stubs.c",
];

/// Functions of those files that change nothing half-way themselves (the frames they call are
/// still checked): the loops that *request* a collection and wait for the stop-the-world
/// section to start; the write barrier (a field is one store; the remembered set it adds to is
/// not part of a snapshot).
const SAFE_FUNCTIONS: &[&str] = &["caml_empty_minor_heaps_once", "caml_initialize", "caml_modify"];

/// Allocators of those files that are safe while they wait for a function they call: they
/// write the new block's header before calling anything, and a string's contents are never
/// scanned. In their own code (the innermost frame) they may be between the lowering of
/// `young_ptr` and the header store: unsafe.
const SAFE_WHILE_CALLING: &[&str] = &["caml_alloc_string", "caml_alloc_initialized_string", "caml_alloc_sprintf", "caml_copy_string"];

/// Runtime source files whose own code allocates inline (the `Alloc_small` macro: lower
/// `young_ptr`, then write the header) besides those already in [`UNSAFE_RUNTIME_FILES`]: a
/// thread stopped in their code, as its innermost frame, may be between the two stores, and the
/// stale words below the minor heap's old start can even parse as blocks. (`Alloc_small`
/// calls nothing on its fast path, so the window is only ever in the innermost frame.)
const INLINE_ALLOCATION_FILES: &[&str] = &["floats.c"];

/// The runtime glue a C call from OCaml goes through: the domain's state was saved in it.
const C_CALL_GLUE: &[&str] = &["caml_c_call", "caml_c_call_stack_args"];

enum Holder {
    /// Running OCaml code (or a `[@@noalloc]` C function called directly from it): the
    /// registers of the innermost OCaml frame.
    Ocaml(ThreadState),
    /// In C code called through `caml_c_call`, none of it unsafe: Caml_state holds all.
    InRuntime,
    Unsafe(BusyPlace),
}

/// The functions the interpreter calls after saving its stack pointer besides primitives
/// (interp.c: `Setup_for_event` before the first, `Setup_for_c_call` before the others).
const INTERPRETER_SAVES_SP_FOR: &[&str] = &[
    "caml_process_pending_actions",
    "caml_raise_stack_overflow",
    "caml_raise_zero_divide",
    "caml_raise_continuation_already_resumed",
    "caml_make_unhandled_effect_exn",
];

/// Whether a C frame of a thread holding a domain leaves heap structures half-updated: `at`
/// is in function `name`, innermost or not.
fn unsafe_frame(rt: &Runtime, innermost: bool, at: u64, name: &str) -> Option<BusyPlace> {
    let exempt = SAFE_FUNCTIONS.contains(&name) || (!innermost && SAFE_WHILE_CALLING.contains(&name));
    // Where source files are known only approximately, a frame between two of them counts
    // as in either.
    for file in rt.unit_files_at(at) {
        let file = file.rsplit('/').next().unwrap_or(file);
        let unsafe_file = UNSAFE_RUNTIME_FILES.contains(&file) && !exempt;
        if unsafe_file || (innermost && INLINE_ALLOCATION_FILES.contains(&file)) {
            return Some(BusyPlace::RuntimeCode { function: name.to_string(), file: file.to_string() });
        }
    }
    None
}

/// Where the thread holding a domain of a bytecode program is. The interpreter keeps its
/// stack pointer, accumulator and environment in registers while it interprets, and saves
/// them before it calls C code that may look at the stack: a primitive (`Setup_for_c_call`),
/// a collection (`Setup_for_gc`, in files unsafe anyway), pending actions. The domain is at
/// rest when the innermost interpreter frame is in such a call and the C frames inside it are
/// safe as for native code. (Outer interpreter frames, below a callback, are at such calls
/// too: the interpreter enters OCaml again only from C code it called after saving.)
fn classify_bytecode_holder(rt: &Runtime, source: &dyn MemorySource, thread: &ThreadState, primitives: &[u64]) -> Holder {
    let function = |pc: u64| rt.symbol_name_at(pc).unwrap_or("?").to_string();
    let (c_frames, called) = match interpreter_stop(&rt.unwinder, source, &thread.regs, &rt.exe, rt.bias) {
        InterpreterStop::Interpreting => return Holder::Unsafe(BusyPlace::Interpreting),
        InterpreterStop::NotUnwound(pc) => return Holder::Unsafe(BusyPlace::NotUnwound(function(pc))),
        InterpreterStop::InC { c_frames, called } => (c_frames, called),
    };
    for (depth, f) in c_frames.iter().enumerate() {
        let at = if depth == 0 { f.pc } else { f.pc.wrapping_sub(1) };
        if let Some(place) = unsafe_frame(rt, depth == 0, at, &function(at)) {
            return Holder::Unsafe(place);
        }
    }
    if let Some(at) = called {
        let name = function(at);
        if !saved_before_calling(&rt.unwinder, at, &name, primitives, INTERPRETER_SAVES_SP_FOR) {
            return Holder::Unsafe(BusyPlace::CalledByInterpreter(name));
        }
    }
    Holder::InRuntime
}

/// Where the thread holding a domain is, and whether the domain is at rest there.
fn classify_holder(rt: &Runtime, source: &dyn MemorySource, thread: &ThreadState) -> Holder {
    let pc = thread.regs.rip;
    let kind = |pc: u64| rt.code.kind(pc.wrapping_sub(rt.bias));
    let function = |pc: u64| rt.symbol_name_at(pc).unwrap_or("?").to_string();
    match kind(pc) {
        CodeKind::OCaml if rt.code.in_allocation(pc.wrapping_sub(rt.bias)) => {
            return Holder::Unsafe(BusyPlace::InitialisingBlock { pc, function: function(pc) })
        }
        CodeKind::OCaml => return Holder::Ocaml(thread.clone()),
        CodeKind::System => return Holder::Unsafe(BusyPlace::Glue(function(pc))),
        CodeKind::Other => {}
    }
    // C code: unwind to the OCaml code that called it.
    let Some(frames) = rt.unwinder.unwind(source, &thread.regs, 128, |pc| kind(pc) == CodeKind::Other) else {
        return Holder::Unsafe(BusyPlace::NotUnwound(function(pc)));
    };
    let (boundary, c_frames) = frames.split_last().expect("at least the innermost frame");
    for (depth, f) in c_frames.iter().enumerate() {
        // A return address may be the first byte after its function: look the call up.
        let at = if depth == 0 { f.pc } else { f.pc.wrapping_sub(1) };
        if let Some(place) = unsafe_frame(rt, depth == 0, at, &function(at)) {
            return Holder::Unsafe(place);
        }
    }
    match kind(boundary.pc) {
        CodeKind::OCaml => {
            // A [@@noalloc] call: ocamlopt switched to the C stack and keeps the OCaml stack
            // pointer in rbx (callee-saved, so restored by the unwind).
            let mut regs = boundary.regs;
            regs.rsp = regs.rbx;
            regs.rip = boundary.pc;
            Holder::Ocaml(ThreadState { tid: thread.tid, own_tid: thread.own_tid, regs })
        }
        CodeKind::System if C_CALL_GLUE.contains(&function(boundary.pc).as_str()) => Holder::InRuntime,
        _ => Holder::Unsafe(BusyPlace::EnteredThrough(function(boundary.pc))),
    }
}

/// glibc mutex state: the lock word and the owning thread id.
fn mutex_state(rt: &Runtime, source: &dyn MemorySource, address: u64) -> Result<(u32, u32)> {
    let m = rt.layout.mutex;
    Ok((source.read_u32(address + m.lock)?, source.read_u32(address + m.owner)?))
}

/// Waits (reading the target as it runs, without stopping it) until no stop-the-world section
/// is in progress, so that the next stop is likely consistent. Gives up after `timeout`.
pub fn wait_outside_stw(rt: &Runtime, running: &dyn MemorySource, timeout: std::time::Duration) -> bool {
    let leader = rt.addr(rt.statics.stw_leader);
    let start = std::time::Instant::now();
    loop {
        match running.read_u64(leader) {
            Ok(0) => return true,
            Ok(_) if start.elapsed() < timeout => std::thread::yield_now(),
            _ => return false,
        }
    }
}

/// The `dom_internal` address of every domain taking part in stop-the-world sections
/// (`stw_domains.domains[0 .. participating_domains]`).
fn participating_domains(rt: &Runtime, source: &dyn MemorySource) -> Result<Vec<u64>> {
    let l = &rt.layout.domains;
    let stw = rt.addr(rt.statics.stw_domains);
    let count = source.read_i32(stw + l.stw_participating)?;
    if !(0..=4096).contains(&count) {
        return Err(crate::error::DumpError::Inconsistent(format!("{count} domains take part in stop-the-world sections")));
    }
    let array = match rt.facts.domain_table {
        Indirection::InlineArray => stw + l.stw_domains_array,
        Indirection::Pointer => source.read_u64(stw + l.stw_domains_array)?,
    };
    if count == 0 {
        return Ok(Vec::new());
    }
    source.read_words(array, count as usize)
}

/// The `caml_domain_state` address of every domain taking part in stop-the-world sections.
pub fn domain_states(rt: &Runtime, source: &dyn MemorySource) -> Result<Vec<u64>> {
    let l = &rt.layout.domains;
    participating_domains(rt, source)?.into_iter().map(|d| source.read_u64(d + l.internal_state)).collect()
}

pub fn check_world(rt: &Runtime, source: &dyn MemorySource) -> Result<WorldCheck> {
    let l = &rt.layout;
    let mut check = WorldCheck::default();
    let st = &rt.statics;
    if source.read_u64(rt.addr(st.stw_leader))? != 0 {
        check.unsafe_reasons.push(UnsafeStop::StopTheWorld);
    }
    let mut locks = vec![
        ("all_domains_lock", st.all_domains_lock),
        ("pool_freelist.lock", st.pool_freelist + l.heap.freelist_lock),
        ("roots_mutex", st.roots_mutex),
        ("orphaned_lock", st.orphaned_lock),
    ];
    if let Some((_, orphans_lock)) = st.memprof_orphans {
        locks.push(("memprof orphans_lock", orphans_lock));
    }
    for (name, link) in locks {
        if mutex_state(rt, source, rt.addr(link))?.0 != 0 {
            check.unsafe_reasons.push(UnsafeStop::LockHeld(name));
        }
    }

    let primitives = match &rt.bytecode {
        Some(b) => b.primitives(rt.bias, source)?,
        None => Vec::new(),
    };
    for (index, internal) in participating_domains(rt, source)?.into_iter().enumerate() {
        let state = source.read_u64(internal + l.domains.internal_state)?;
        let (lock, owner) = mutex_state(rt, source, internal + l.domains.internal_domain_lock)?;
        let mut view = DomainView { internal, state, running: None };
        if lock != 0 {
            match source.threads().iter().find(|t| t.own_tid == owner && owner != 0) {
                None => check.unsafe_reasons.push(UnsafeStop::DomainLockChanging(index)),
                Some(thread) => match match rt.bytecode {
                    Some(_) => classify_bytecode_holder(rt, source, thread, &primitives),
                    None => classify_holder(rt, source, thread),
                } {
                    Holder::Ocaml(state) => view.running = Some(state),
                    Holder::InRuntime => {}
                    Holder::Unsafe(place) => check.unsafe_reasons.push(UnsafeStop::DomainBusy { domain: index, thread: thread.tid, place }),
                },
            }
        }
        check.domains.push(view);
    }
    Ok(check)
}
