//! The verdict on one stop of the world, in the same shape for every runtime family: which
//! runtime states (domains) it found, which thread runs OCaml code in each, and why the stop
//! is not consistent, if it is not.

use crate::error::UnsafeStop;
use crate::source::ThreadState;

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
    pub unsafe_reasons: Vec<UnsafeStop>,
}

impl WorldCheck {
    pub fn is_safe(&self) -> bool {
        self.unsafe_reasons.is_empty()
    }
}
