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

    /// The threads to let run on alone, when all that keeps the stop from being consistent is
    /// where they are: every other domain stays at rest while they move on. `None` when the
    /// world as a whole is busy (a stop-the-world section, a runtime lock, a torn heap), which
    /// only letting every thread run can end.
    pub fn busy_threads(&self) -> Option<Vec<u32>> {
        let threads: Option<Vec<u32>> = self
            .unsafe_reasons
            .iter()
            .map(|reason| match reason {
                UnsafeStop::DomainBusy { thread, .. } => Some(*thread),
                _ => None,
            })
            .collect();
        threads.filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BusyPlace;

    fn busy(thread: u32) -> UnsafeStop {
        UnsafeStop::DomainBusy { domain: 0, thread, place: BusyPlace::Interpreting }
    }

    #[test]
    fn only_threads_in_the_way_run_on_alone() {
        let check = |unsafe_reasons| WorldCheck { domains: Vec::new(), unsafe_reasons };
        assert_eq!(check(vec![busy(7), busy(9)]).busy_threads(), Some(vec![7, 9]));
        // A stop-the-world section or a held lock needs every thread.
        assert_eq!(check(vec![busy(7), UnsafeStop::StopTheWorld]).busy_threads(), None);
        assert_eq!(check(vec![UnsafeStop::LockHeld("roots_mutex"), busy(7)]).busy_threads(), None);
        // A consistent stop has none to run.
        assert_eq!(check(Vec::new()).busy_threads(), None);
    }
}
