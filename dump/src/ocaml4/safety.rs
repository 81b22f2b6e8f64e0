//! Is the stopped OCaml 4.14 world consistent? The same choice as OCaml 5's
//! (`crate::ocaml5::safety`): detect an unsafe stop and retry, never drive the target.
//!
//! 4.14 has one runtime lock (systhreads' master lock). A stop is safe when:
//! - no minor collection runs (`Caml_state->in_minor_collection`), and the master lock's
//!   mutex is free (no thread is taking or giving the runtime);
//! - every thread is at rest or runs OCaml code outside an inline allocation. A thread is at
//!   rest when it never entered OCaml (a C thread, systhreads' tick thread), or when its C
//!   frames, unwound up to the OCaml code that called them, include no runtime function that
//!   leaves heap structures half-updated and it left OCaml where a saved state says (the
//!   `bottom_of_stack` and return address that `caml_c_call` stored in `Caml_state`, or that
//!   `caml_thread_enter_blocking_section` saved in the thread's descriptor). A thread in C
//!   called directly (`[@@noalloc]`) from OCaml is running OCaml code, whose frame is live in
//!   its registers. systhreads' own code is at rest only while it waits on a futex (for the
//!   master lock or a mutex, in a blocking section); elsewhere a thread is switching in or out.
//! - and, checked by the capture, the minor heap parses from `young_ptr` to its end and its
//!   youngest block points only at blocks of the minor heap.

use super::layout::ThreadStack;
use super::Runtime4;
use crate::common::bytecode::{interpreter_stop, saved_before_calling, InterpreterStop};
use crate::common::code::CodeKind;
use crate::common::world_check::{DomainView, WorldCheck};
use crate::error::{BusyPlace, Result, UnsafeStop};
use crate::source::{MemorySource, ReadExt, ThreadState};

/// Runtime files whose functions leave heap structures half-updated while they run.
const UNSAFE_RUNTIME_FILES: &[&str] = &[
    "minor_gc.c",
    "major_gc.c",
    "compact.c",
    "freelist.c",
    "memory.c",
    "alloc.c",
    "array.c",
    "signals_nat.c",
    "finalise.c",
    "weak.c",
    "memprof.c",
    "intern.c",
    "obj.c",
    "custom.c",
    "globroots.c",
    "roots_nat.c",
    "st_stubs.c",
];

/// Functions of those files that change nothing half-way themselves: the write barrier (one
/// store; the remembered set is not part of a snapshot) and systhreads' tick thread, which only
/// records a signal.
const SAFE_FUNCTIONS: &[&str] = &["caml_initialize", "caml_modify", "caml_thread_tick"];

/// Allocators that write the new block's header before calling anything: safe while they wait
/// for a function they call, not in their own code.
const SAFE_WHILE_CALLING: &[&str] = &["caml_alloc_string", "caml_alloc_initialized_string", "caml_alloc_sprintf", "caml_copy_string"];

/// Files whose own code allocates inline with `Alloc_small` (unsafe as the innermost frame).
const INLINE_ALLOCATION_FILES: &[&str] = &["floats.c", "str.c", "ints.c"];

/// The systhreads file whose code is at rest only while it waits on a futex.
const SYSTHREADS_FILE: &str = "st_stubs.c";

enum Place {
    /// Running OCaml code: the registers of its innermost OCaml frame.
    Ocaml(ThreadState),
    AtRest,
    Unsafe(BusyPlace),
}

/// The functions 4.14's interpreter calls after saving its stack pointer besides primitives
/// (interp.c: `Setup_for_event` before the first, `Setup_for_c_call` before the other).
const INTERPRETER_SAVES_SP_FOR: &[&str] = &["caml_process_pending_actions", "caml_raise_zero_divide"];

/// Where a thread of a bytecode program is. The interpreter keeps its stack pointer,
/// accumulator and environment in registers while it interprets, and saves them before it
/// calls C code that may look at the stack: a primitive (`Setup_for_c_call`), a collection
/// (`Setup_for_gc`, in files unsafe anyway), pending actions. A thread is at rest when it is
/// in such a call and its C frames are safe by the native rules (systhreads' code only while
/// it waits on a futex: for the master lock, in a blocking section), or when it never entered
/// the interpreter (a C thread; the program's start or exit).
fn classify_bytecode(rt: &Runtime4, source: &dyn MemorySource, thread: &ThreadState, primitives: &[u64]) -> Place {
    let function = |pc: u64| rt.symbol_name_at(pc).unwrap_or("?").to_string();
    let (c_frames, called) = match interpreter_stop(&rt.unwinder, source, &thread.regs, &rt.exe, rt.bias) {
        InterpreterStop::Interpreting => return Place::Unsafe(BusyPlace::Interpreting),
        InterpreterStop::NotUnwound(pc) => return Place::Unsafe(BusyPlace::NotUnwound(function(pc))),
        InterpreterStop::InC { c_frames, called } => (c_frames, called),
    };
    let waiting = thread.regs.waiting_on_futex();
    for (depth, f) in c_frames.iter().enumerate() {
        let at = if depth == 0 { f.pc } else { f.pc.wrapping_sub(1) };
        if rt.unit_file_at(at) == Some(SYSTHREADS_FILE) && waiting && depth > 0 {
            continue;
        }
        if let Some(place) = unsafe_frame(rt, depth == 0, at, &function(at)) {
            return Place::Unsafe(place);
        }
    }
    if let Some(at) = called {
        let name = function(at);
        if !saved_before_calling(&rt.unwinder, at, &name, primitives, INTERPRETER_SAVES_SP_FOR) {
            return Place::Unsafe(BusyPlace::CalledByInterpreter(name));
        }
    }
    Place::AtRest
}

/// Whether a C frame leaves heap structures half-updated: `at` is in function `name`,
/// innermost or not.
fn unsafe_frame(rt: &Runtime4, innermost: bool, at: u64, name: &str) -> Option<BusyPlace> {
    let file = rt.unit_file_at(at)?;
    let exempt = SAFE_FUNCTIONS.contains(&name) || (!innermost && SAFE_WHILE_CALLING.contains(&name));
    if (UNSAFE_RUNTIME_FILES.contains(&file) && !exempt) || (innermost && INLINE_ALLOCATION_FILES.contains(&file)) {
        return Some(BusyPlace::RuntimeCode { function: name.to_string(), file: file.to_string() });
    }
    None
}

/// Where a thread left OCaml for C, as a saved state records it: (stack pointer above the
/// return address, return address).
type SavedExit = (u64, u64);

fn classify(rt: &Runtime4, source: &dyn MemorySource, thread: &ThreadState, saved: &[SavedExit]) -> Place {
    let pc = thread.regs.rip;
    let kind = |pc: u64| rt.code.kind(pc.wrapping_sub(rt.bias));
    let function = |pc: u64| rt.symbol_name_at(pc).unwrap_or("?").to_string();
    match kind(pc) {
        CodeKind::OCaml if rt.code.in_allocation(pc.wrapping_sub(rt.bias)) => {
            return Place::Unsafe(BusyPlace::InitialisingBlock { pc, function: function(pc) })
        }
        CodeKind::OCaml => return Place::Ocaml(thread.clone()),
        CodeKind::System => return Place::Unsafe(BusyPlace::Glue(function(pc))),
        CodeKind::Other => {}
    }
    let Some(frames) = rt.unwinder.unwind(source, &thread.regs, 256, |pc| kind(pc) == CodeKind::Other) else {
        return Place::Unsafe(BusyPlace::NotUnwound(function(pc)));
    };
    let waiting = thread.regs.waiting_on_futex();
    let (boundary, c_frames) = frames.split_last().expect("at least the innermost frame");
    let c_frames = if kind(boundary.pc) == CodeKind::Other { &frames[..] } else { c_frames };
    for (depth, f) in c_frames.iter().enumerate() {
        let innermost = depth == 0;
        let at = if innermost { f.pc } else { f.pc.wrapping_sub(1) };
        if rt.unit_file_at(at) == Some(SYSTHREADS_FILE) && waiting && !innermost {
            continue;
        }
        if let Some(place) = unsafe_frame(rt, innermost, at, &function(at)) {
            return Place::Unsafe(place);
        }
    }
    match kind(boundary.pc) {
        // Never entered OCaml (or unwound to the thread's first frame).
        CodeKind::Other => Place::AtRest,
        CodeKind::OCaml if saved.contains(&(boundary.regs.rsp, boundary.pc)) => Place::AtRest,
        // A [@@noalloc] call: 4.14 calls it on the OCaml stack, and the unwind restored the
        // callee-saved registers (r14, r15 among them).
        CodeKind::OCaml => {
            let mut regs = boundary.regs;
            regs.rip = boundary.pc;
            Place::Ocaml(ThreadState { tid: thread.tid, own_tid: thread.own_tid, regs })
        }
        CodeKind::System => Place::Unsafe(BusyPlace::EnteredThrough(function(boundary.pc))),
    }
}

/// The saved exits from OCaml: `Caml_state`'s and every systhread descriptor's.
fn saved_exits(rt: &Runtime4, source: &dyn MemorySource, state: u64) -> Result<Vec<SavedExit>> {
    let s = &rt.layout.state;
    let mut saved = vec![(source.read_u64(state + s.bottom_of_stack)?, source.read_u64(state + s.last_return_address)?)];
    for th in super::roots::thread_ring(rt, source)? {
        let t = rt.layout.threads.as_ref().expect("a ring needs the threads layout");
        if let ThreadStack::Native { bottom_of_stack, last_retaddr, .. } = t.stack {
            saved.push((source.read_u64(th + bottom_of_stack)?, source.read_u64(th + last_retaddr)?));
        }
    }
    Ok(saved)
}

pub fn check_world(rt: &Runtime4, source: &dyn MemorySource) -> Result<WorldCheck> {
    let state = rt.state(source)?;
    let mut check = WorldCheck::default();
    if source.read_u64(state + rt.layout.state.in_minor_collection)? != 0 {
        check.unsafe_reasons.push(UnsafeStop::Collecting("minor collection"));
    }
    if let (Some(t), Some(ts)) = (&rt.layout.threads, rt.thread_statics()) {
        if source.read_u32(ts.master_lock + t.masterlock_mutex)? != 0 {
            check.unsafe_reasons.push(UnsafeStop::LockHeld("caml_master_lock"));
        }
    }
    let saved = saved_exits(rt, source, state)?;
    let primitives = match &rt.bytecode {
        Some(b) => b.primitives(rt.bias, source)?,
        None => Vec::new(),
    };
    let mut view = DomainView { internal: 0, state, running: None };
    for thread in source.threads() {
        let place = match rt.bytecode {
            Some(_) => classify_bytecode(rt, source, thread, &primitives),
            None => classify(rt, source, thread, &saved),
        };
        match place {
            Place::Ocaml(running) => match &view.running {
                Some(other) => check.unsafe_reasons.push(UnsafeStop::SeveralRunning(other.tid, running.tid)),
                None => view.running = Some(running),
            },
            Place::AtRest => {}
            Place::Unsafe(place) => check.unsafe_reasons.push(UnsafeStop::DomainBusy { domain: 0, thread: thread.tid, place }),
        }
    }
    check.domains.push(view);
    Ok(check)
}
