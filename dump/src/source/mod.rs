//! Where target memory and thread state come from. The OCaml-runtime knowledge in this crate
//! only talks to a [`MemorySource`]: a live, stopped process ([`LiveProcess`]) or an ELF core
//! file ([`CoreFile`]).

mod core;
mod files;
mod fork;
mod guardian;
mod hostname;
pub mod inject;
mod live;
mod maps;
mod memory;
mod namespaces;
mod permission;
mod reap;

pub use self::core::{bad_core, CoreFile, MissingRegion};
pub use files::{FileIdentity, FileView, TargetFile};
pub use fork::{test_delay, ForkCost, ForkStep, FrozenCopy};
pub use guardian::Guardian;
pub use hostname::{hostname_of, own_hostname};
pub(crate) use live::copy_threads;
pub use live::{install_interrupt_guard, interrupted, LiveProcess, ProcessMemory};
pub use maps::{parse_maps, Mapping};
pub(crate) use memory::bytemuck_words;
pub use memory::{zeroed_buffer, MemorySource, ReadExt, ReadRequest, Registers, ThreadState};
pub use namespaces::namespaces_of;
