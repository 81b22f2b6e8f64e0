//! OCaml 5 as a [`RuntimeFamily`]: each step of a dump, done by this family's modules.

use super::capture;
use super::roots::interrupted_thread_roots;
use super::safety;
use super::Runtime;
use crate::common::copied_world::Capture;
use crate::common::copy::{SpareBuffers, TornMinorHeap};
use crate::common::custom_ops::CustomLayout;
use crate::common::family::{Copied, RuntimeFamily};
use crate::common::program::LayoutsFrom;
use crate::common::world_check::WorldCheck;
use crate::elf::Executable;
use crate::error::Result;
use crate::source::{MemorySource, ReadExt};
use heapsnap_values::{HeaderFormat, PoolGeometry};
use std::time::Duration;

impl RuntimeFamily for Runtime {
    fn exe(&self) -> &Executable {
        &self.exe
    }

    fn bias(&self) -> u64 {
        self.bias
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn read_as(&self) -> &'static str {
        self.release.series
    }

    fn forced(&self) -> bool {
        self.forced
    }

    fn bytecode(&self) -> bool {
        self.bytecode.is_some()
    }

    fn probed(&self, measured: &[heapsnap_format::ProbedFact]) -> Option<heapsnap_format::ProbedRuntime> {
        Runtime::probed(self, measured)
    }

    fn check_copy(&self, cap: &Capture, format: HeaderFormat) -> Result<()> {
        super::roots::check_continuations(self, cap, format)
    }

    fn probe_ns(&self) -> u64 {
        self.probe_ns
    }

    fn notes(&self) -> &[String] {
        &self.notes
    }

    fn layouts_from(&self) -> LayoutsFrom {
        self.layouts_from
    }

    fn detected_reserved_bits(&self) -> Option<u8> {
        self.detected_reserved_bits
    }

    fn pools(&self) -> Option<PoolGeometry> {
        Some(self.facts.pools.clone())
    }

    fn custom_layout(&self) -> &CustomLayout {
        &self.layout.custom
    }

    fn prepare(&self, source: &dyn MemorySource, format: HeaderFormat) -> Result<SpareBuffers> {
        let domain_states = safety::domain_states(self, source).unwrap_or_default();
        capture::prepare(self, source, &domain_states, format)
    }

    fn wait_quiet(&self, running: &dyn MemorySource, timeout: Duration) {
        safety::wait_outside_stw(self, running, timeout);
    }

    fn check_world(&self, source: &dyn MemorySource) -> Result<WorldCheck> {
        safety::check_world(self, source)
    }

    fn capture(
        &self,
        source: &dyn MemorySource,
        world: &WorldCheck,
        format: HeaderFormat,
        spare: &mut SpareBuffers,
        torn: TornMinorHeap,
    ) -> Result<Copied> {
        Ok(Copied { cap: capture::capture(self, source, world, format, spare, torn)?, gc_state: None })
    }

    /// The threads that hold a domain without running OCaml code (inside the runtime: a
    /// collection, an allocation, the glue) have their registers and C stacks scanned
    /// conservatively (see [`interrupted_thread_roots`]); a warning says how many roots that
    /// added, from which threads.
    fn add_interrupted_thread_roots(
        &self,
        source: &dyn MemorySource,
        world: &WorldCheck,
        cap: &mut Capture,
        format: HeaderFormat,
        warnings: &mut Vec<String>,
    ) -> Result<()> {
        let l = &self.layout;
        let mut added = Vec::new();
        let mut total = 0;
        for view in world.domains.iter().filter(|v| v.running.is_none()) {
            let Some(domain) = cap.domains.iter().find(|d| d.state == view.state).map(|d| d.id) else { continue };
            let lock = view.internal + l.domains.internal_domain_lock;
            // A domain whose lock is free is in a blocking section, at rest.
            if source.read_u32(lock + l.mutex.lock)? == 0 {
                continue;
            }
            let owner = source.read_u32(lock + l.mutex.owner)?;
            let Some(thread) = source.threads().iter().find(|t| t.own_tid == owner && owner != 0) else {
                warnings.push(format!("domain {domain}: its lock is held by no thread of the core: no conservative roots for it"));
                continue;
            };
            // The best snapshot possible: a thread whose stack cannot be scanned costs its roots only.
            let scan = match interrupted_thread_roots(self, source, cap, format, domain, thread) {
                Ok(scan) => scan,
                Err(e) => {
                    warnings.push(format!("domain {domain}: thread {}: no conservative roots: {e}", thread.tid));
                    continue;
                }
            };
            let stack = match scan.stack {
                Some((low, high)) => format!("{} from its stack {low:#x}..{high:#x}", scan.roots.len() - scan.registers),
                None => "none from its stack".into(),
            };
            added.push(format!("thread {} (domain {domain}): {} from registers, {stack}", thread.tid, scan.registers));
            if let Some(problem) = scan.problem {
                warnings.push(format!("domain {domain}: thread {}: {problem}", thread.tid));
            }
            total += scan.roots.len();
            cap.roots.extend(scan.roots);
        }
        if !added.is_empty() {
            warnings.push(format!(
                "{total} conservative roots added for the threads caught inside the runtime (words that point into heap blocks): {}",
                added.join("; ")
            ));
        }
        Ok(())
    }
}
