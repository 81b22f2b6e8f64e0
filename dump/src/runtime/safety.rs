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
//!   outside an inline allocation: OCaml code changes the heap only through allocation (the
//!   window between the bump of `young_ptr` and the last initialising store is detected by
//!   decoding the code) and `caml_modify`-free stores, which leave every block well-formed.
//!   A domain holding its lock in C code or in the assembly glue may be in the middle of a
//!   major slice, a pool sweep or a stack reallocation: unsafe.

use super::code::CodeKind;
use super::Runtime;
use crate::error::Result;
use crate::source::{MemorySource, ReadExt, ThreadState};

/// One domain taking part in stop-the-world sections, as found in the stopped target.
#[derive(Clone, Debug)]
pub struct DomainView {
    /// Address of its `dom_internal`.
    pub internal: u64,
    /// Address of its `caml_domain_state`.
    pub state: u64,
    /// The thread that holds the domain and executes OCaml code, if any: its `r15` is the
    /// domain's allocation pointer and its innermost frame is live in registers.
    pub running: Option<ThreadState>,
}

/// The verdict on one stop of the world.
#[derive(Clone, Debug, Default)]
pub struct WorldCheck {
    pub domains: Vec<DomainView>,
    /// Why the stop is not consistent; empty when it is.
    pub unsafe_reasons: Vec<String>,
}

impl WorldCheck {
    pub fn is_safe(&self) -> bool {
        self.unsafe_reasons.is_empty()
    }
}

/// glibc mutex state: the lock word and the owning thread id.
fn mutex_state(rt: &Runtime, source: &dyn MemorySource, address: u64) -> Result<(u32, u32)> {
    let m = rt.layout.mutex;
    Ok((source.read_u32(address + m.lock)?, source.read_u32(address + m.owner)?))
}

pub fn check_world(rt: &Runtime, source: &dyn MemorySource) -> Result<WorldCheck> {
    let l = &rt.layout;
    let mut check = WorldCheck::default();
    if source.read_u64(rt.addr(l.domains.stw_leader))? != 0 {
        check.unsafe_reasons.push("a stop-the-world section (minor GC, major GC phase change or compaction) is in progress".into());
    }
    let mut locks = vec![
        ("all_domains_lock", l.domains.all_domains_lock),
        ("pool_freelist.lock", l.heap.pool_freelist + l.heap.freelist_lock),
        ("roots_mutex", l.roots.roots_mutex),
        ("orphaned_lock", l.roots.orphaned_lock),
    ];
    if let Some(m) = &l.memprof {
        locks.push(("memprof orphans_lock", m.orphans_lock));
    }
    for (name, link) in locks {
        if mutex_state(rt, source, rt.addr(link))?.0 != 0 {
            check.unsafe_reasons.push(format!("the runtime lock {name} is held"));
        }
    }

    let stw = rt.addr(l.domains.stw_domains);
    let count = source.read_i32(stw + l.domains.stw_participating)?;
    if !(0..=4096).contains(&count) {
        return Err(crate::error::DumpError::Inconsistent(format!("{count} domains take part in stop-the-world sections")));
    }
    let array = source.read_u64(stw + l.domains.stw_domains_array)?;
    let internals = if count > 0 { source.read_words(array, count as usize)? } else { Vec::new() };
    for (index, internal) in internals.into_iter().enumerate() {
        let state = source.read_u64(internal + l.domains.internal_state)?;
        let (lock, owner) = mutex_state(rt, source, internal + l.domains.internal_domain_lock)?;
        let mut view = DomainView { internal, state, running: None };
        if lock != 0 {
            match source.threads().iter().find(|t| t.tid == owner && owner != 0) {
                None => check.unsafe_reasons.push(format!("domain #{index}'s lock is being taken or released")),
                Some(thread) => {
                    let pc = thread.regs.rip;
                    let link_pc = pc.wrapping_sub(rt.bias);
                    let function = rt.symbol_name_at(pc).unwrap_or("?").to_string();
                    match rt.code.kind(link_pc) {
                        CodeKind::OCaml if rt.code.in_allocation(link_pc) => check.unsafe_reasons.push(format!(
                            "domain #{index} (thread {}) is initialising a block it just allocated, at {pc:#x} in {function}",
                            thread.tid
                        )),
                        CodeKind::OCaml => view.running = Some(thread.clone()),
                        CodeKind::System => check.unsafe_reasons.push(format!(
                            "domain #{index} (thread {}) is in the runtime's OCaml/C glue ({function})",
                            thread.tid
                        )),
                        CodeKind::Other => check.unsafe_reasons.push(format!(
                            "domain #{index} (thread {}) runs C code holding the runtime ({function})",
                            thread.tid
                        )),
                    }
                }
            }
        }
        check.domains.push(view);
    }
    Ok(check)
}
