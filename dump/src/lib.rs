//! Stop-the-world heap dumper for OCaml native processes (4.14 and 5.x).
//!
//! The crate is split between *where memory comes from* ([`source`]: a live process stopped
//! with ptrace, or an ELF core file) and *what the OCaml runtime looks like*: one runtime
//! family each ([`ocaml5`], [`ocaml4`]) behind one trait
//! ([`common::family::RuntimeFamily`]), with what the families share in [`common`]; so that
//! every memory source reuses all the runtime knowledge. [`target`] picks the family once, from
//! the registry of releases; [`dump_process`] and [`dump_core`] put them together.
// Every unsafe block states the invariant it relies on.
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod capture;
/// The memory cgroups that hold a process (their own crate: the analysis reads them too).
pub use heapsnap_cgroup as cgroup;
pub mod common;
pub mod debuginfo;
pub mod dump;
pub mod dwarf;
pub mod elf;
pub mod error;
pub mod memory_trigger;
pub mod ocaml4;
pub mod ocaml5;
pub mod snapshot;
pub mod source;
pub mod target;
pub mod triggers;
pub mod watch;

pub use capture::CaptureMode;
pub use common::program::DiscoverOptions;
pub use dump::{compactions_counter, dump_core, dump_process, CaptureReport, DumpOptions, DumpReport};
pub use error::{DumpError, Result};
pub use source::install_interrupt_guard;
