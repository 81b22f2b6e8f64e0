//! The one door between a dump and the runtime its target runs: [`RuntimeFamily`]. A dump
//! discovers the target's family once (the `target` module), then asks it everything only the
//! runtime knows through this trait; stopping, retrying, filtering and writing are the dump's
//! own and the same for every family.

use crate::common::copied_world::Capture;
use crate::common::copy::{SpareBuffers, TornMinorHeap};
use crate::common::custom_ops::CustomLayout;
use crate::common::program::LayoutsFrom;
use crate::common::world_check::WorldCheck;
use crate::elf::Executable;
use crate::error::Result;
use crate::source::MemorySource;
use heapsnap_values::ocaml4::Ocaml4Gc;
use heapsnap_values::{HeaderFormat, PoolGeometry};
use std::time::Duration;

/// What one stop copied, with what the family adds to the metadata.
pub struct Copied {
    pub cap: Capture,
    /// The major GC's state, for families whose block colours depend on it (OCaml 4.14: the
    /// metadata's `ocaml4_gc`); `None` where the colours say it all.
    pub gc_state: Option<Ocaml4Gc>,
}

/// One family of OCaml runtimes (today the OCaml 5 releases, and OCaml 4.14), as a dump sees
/// it: everything found about the target before it stops, and what the family does at each
/// step of a dump.
///
/// **Where memory is read from is not the family's business.** Every method that reads the
/// target takes a [`MemorySource`]: a live process (stopped or running), an ELF core, and
/// whatever comes next. A *copy-on-write capture* fits without changing this trait: after
/// [`RuntimeFamily::check_world`] finds a consistent stop, the dump makes the target fork
/// through ptrace, resumes the target, and passes the frozen child (a new `MemorySource`
/// reading the child's memory, with the parent's threads as they were at the stop) to
/// [`RuntimeFamily::capture`]. The family reads the same addresses either way.
///
/// **What the runtime's structures are is all the family's business.** A family owns its
/// layouts, its roots and its notion of code: nothing here assumes native code, frame tables
/// or domains. Bytecode (programs run by `ocamlrun`) is not a family: its heap and runtime
/// structures are the same C code as its release's native ones, so the OCaml 5 family reads
/// both, and what differs (the interpreter's stacks and globals, its safe stops, its names) is
/// [`crate::ocaml5::bytecode`] and [`crate::common::bytecode_file`]. The dump does not change.
pub trait RuntimeFamily {
    /// The executable read (with its debug file attached).
    fn exe(&self) -> &Executable;

    /// Where the executable is loaded: target address minus link-time address.
    fn bias(&self) -> u64;

    /// The OCaml version the target runs (`Sys.ocaml_version`).
    fn version(&self) -> &str;

    /// The release whose knowledge reads the target ("5.3", "4.14").
    fn read_as(&self) -> &'static str;

    /// Whether the program runs bytecode.
    fn bytecode(&self) -> bool {
        false
    }

    /// Whether an unknown version is read as [`RuntimeFamily::read_as`] (`--force`).
    fn forced(&self) -> bool {
        false
    }

    /// How the runtime was read by probing it, for a release heapsnap has no file for;
    /// `measured` is what the stop measured of it.
    fn probed(&self, _measured: &[heapsnap_format::ProbedFact]) -> Option<heapsnap_format::ProbedRuntime> {
        None
    }

    /// How long probing the runtime took, before any stop (0 where nothing was probed).
    fn probe_ns(&self) -> u64 {
        0
    }

    /// What the report says once about what the executable lacks.
    fn notes(&self) -> &[String];

    /// Where the structure layouts came from.
    fn layouts_from(&self) -> LayoutsFrom;

    /// Reserved header bits, when the runtime's code says it.
    fn detected_reserved_bits(&self) -> Option<u8>;

    /// The shared heap's pool geometry, for runtimes with pools.
    fn pools(&self) -> Option<PoolGeometry> {
        None
    }

    /// Where custom.c's structures keep a custom block's operations.
    fn custom_layout(&self) -> &CustomLayout;

    /// The executable's symbol holding target address `address`, if any.
    fn symbol_name_at(&self, address: u64) -> Option<&str> {
        self.exe().symbol_at(address.wrapping_sub(self.bias())).map(|s| s.name.as_str())
    }

    /// Buffers for the copy, prepared while the target runs (`source` is not stopped).
    fn prepare(&self, source: &dyn MemorySource, format: HeaderFormat) -> Result<SpareBuffers>;

    /// Waits, reading the running target, until a stop is likely to be consistent. A family
    /// whose unsafe windows cannot be seen from outside returns at once.
    fn wait_quiet(&self, _running: &dyn MemorySource, _timeout: Duration) {}

    /// Is the stopped world consistent?
    fn check_world(&self, source: &dyn MemorySource) -> Result<WorldCheck>;

    /// Copies the stopped world; `world` is [`RuntimeFamily::check_world`]'s verdict on this
    /// stop.
    fn capture(
        &self,
        source: &dyn MemorySource,
        world: &WorldCheck,
        format: HeaderFormat,
        spare: &mut SpareBuffers,
        torn: TornMinorHeap,
    ) -> Result<Copied>;

    /// Checks the copy, once the target runs again, for what the family could only see in the
    /// whole heap (e.g. that its blocks have the shapes the release says).
    fn check_copy(&self, _cap: &Capture, _format: HeaderFormat) -> Result<()> {
        Ok(())
    }

    /// A world copied at an inconsistent moment that cannot be taken again (a core): adds
    /// conservative roots for the threads caught inside the runtime (whose C locals and
    /// registers may hold blocks no table describes), and says in `warnings` what it added or
    /// why it could not.
    fn add_interrupted_thread_roots(
        &self,
        source: &dyn MemorySource,
        world: &WorldCheck,
        cap: &mut Capture,
        format: HeaderFormat,
        warnings: &mut Vec<String>,
    ) -> Result<()>;
}
