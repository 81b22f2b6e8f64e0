//! The target's runtime, whichever OCaml it runs: an OCaml 5 release ([`crate::runtime`]) or
//! OCaml 4.14 ([`crate::ocaml4`]). A dump asks it everything only the runtime knows; the rest
//! of the dump (stopping, retrying, writing) is the same for both.

use crate::elf::Executable;
use crate::error::Result;
use crate::ocaml4::{self, Runtime4};
use crate::runtime::capture::{SpareBuffers, TornMinorHeap};
use crate::runtime::captured::Capture;
use crate::runtime::layout::CustomLayout;
use crate::runtime::safety::{self, WorldCheck};
use crate::runtime::{open_program, DiscoverOptions, LayoutsFrom, Runtime};
use crate::source::MemorySource;
use heapsnap_values::ocaml4::Ocaml4Gc;
use heapsnap_values::{HeaderFormat, PoolGeometry};
use std::time::Duration;

// One per dump: the size difference of the variants does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Target {
    Ocaml5(Runtime),
    Ocaml4(Runtime4),
}

/// What one stop copied, with what the release adds to the metadata.
pub struct Copied {
    pub cap: Capture,
    /// OCaml 4.14's major GC state.
    pub ocaml4_gc: Option<Ocaml4Gc>,
}

impl Target {
    /// Reads what the dump needs to know about the target before stopping it.
    pub fn discover(source: &dyn MemorySource, options: &DiscoverOptions) -> Result<Target> {
        let program = open_program(source, options)?;
        if ocaml4::is_ocaml4(&program.version) {
            return Ok(Target::Ocaml4(Runtime4::discover(source, program.exe, program.bias, program.version)?));
        }
        Ok(Target::Ocaml5(Runtime::from_program(source, program, options)?))
    }

    pub fn exe(&self) -> &Executable {
        match self {
            Target::Ocaml5(rt) => &rt.exe,
            Target::Ocaml4(rt) => &rt.exe,
        }
    }

    pub fn bias(&self) -> u64 {
        match self {
            Target::Ocaml5(rt) => rt.bias,
            Target::Ocaml4(rt) => rt.bias,
        }
    }

    pub fn version(&self) -> &str {
        match self {
            Target::Ocaml5(rt) => &rt.version,
            Target::Ocaml4(rt) => &rt.version,
        }
    }

    /// The release whose knowledge reads the target ("5.3", "4.14").
    pub fn read_as(&self) -> &'static str {
        match self {
            Target::Ocaml5(rt) => rt.release.series,
            Target::Ocaml4(_) => ocaml4::SERIES,
        }
    }

    /// Whether an unknown version is read as [`Target::read_as`] (`--force`).
    pub fn forced(&self) -> bool {
        matches!(self, Target::Ocaml5(rt) if rt.forced)
    }

    pub fn notes(&self) -> &[String] {
        match self {
            Target::Ocaml5(rt) => &rt.notes,
            Target::Ocaml4(rt) => &rt.notes,
        }
    }

    pub fn layouts_from(&self) -> LayoutsFrom {
        match self {
            Target::Ocaml5(rt) => rt.layouts_from,
            Target::Ocaml4(rt) => rt.layouts_from,
        }
    }

    pub fn detected_reserved_bits(&self) -> Option<u8> {
        match self {
            Target::Ocaml5(rt) => rt.detected_reserved_bits,
            Target::Ocaml4(rt) => rt.detected_reserved_bits,
        }
    }

    /// The executable's symbol holding target address `address`, if any.
    pub fn symbol_name_at(&self, address: u64) -> Option<&str> {
        self.exe().symbol_at(address.wrapping_sub(self.bias())).map(|s| s.name.as_str())
    }

    pub fn pools(&self) -> Option<PoolGeometry> {
        match self {
            Target::Ocaml5(rt) => Some(rt.pools.clone()),
            Target::Ocaml4(_) => None,
        }
    }

    pub fn custom_layout(&self) -> &CustomLayout {
        match self {
            Target::Ocaml5(rt) => &rt.layout.custom,
            Target::Ocaml4(rt) => &rt.layout.custom,
        }
    }

    /// Buffers for the copy, prepared while the target runs.
    pub fn prepare(&self, source: &dyn MemorySource, format: HeaderFormat) -> Result<SpareBuffers> {
        match self {
            Target::Ocaml5(rt) => {
                let domain_states = safety::domain_states(rt, source).unwrap_or_default();
                SpareBuffers::prepare(rt, source, &domain_states, format)
            }
            Target::Ocaml4(rt) => ocaml4::capture::prepare(rt, source),
        }
    }

    /// Waits, reading the running target, until a stop is likely to be consistent.
    pub fn wait_quiet(&self, running: &dyn MemorySource, timeout: Duration) {
        match self {
            Target::Ocaml5(rt) => {
                safety::wait_outside_stw(rt, running, timeout);
            }
            // 4.14 has no stop-the-world sections; its collections are short and detected.
            Target::Ocaml4(_) => {}
        }
    }

    /// Is the stopped world consistent?
    pub fn check_world(&self, source: &dyn MemorySource) -> Result<WorldCheck> {
        match self {
            Target::Ocaml5(rt) => safety::check_world(rt, source),
            Target::Ocaml4(rt) => ocaml4::safety::check_world(rt, source),
        }
    }

    /// Copies the stopped world.
    pub fn capture(
        &self,
        source: &dyn MemorySource,
        world: &WorldCheck,
        format: HeaderFormat,
        spare: &mut SpareBuffers,
        torn: TornMinorHeap,
    ) -> Result<Copied> {
        match self {
            Target::Ocaml5(rt) => {
                Ok(Copied { cap: crate::runtime::capture::capture(rt, source, world, format, spare, torn)?, ocaml4_gc: None })
            }
            Target::Ocaml4(rt) => {
                let (cap, gc) = ocaml4::capture::capture(rt, source, world, format, spare, torn)?;
                Ok(Copied { cap, ocaml4_gc: Some(gc) })
            }
        }
    }
}
