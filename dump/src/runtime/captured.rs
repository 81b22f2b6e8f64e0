//! What a dump copies while the world is stopped: the domains, regions and roots, before they
//! are written as a snapshot.

use super::heap::CapturedRegion;
use heapsnap_format::{ColourEncoding, DomainInfo, RootKind};

/// A domain as captured.
#[derive(Clone, Debug)]
pub struct CapturedDomain {
    pub id: u16,
    pub state: u64,
    /// The whole `caml_domain_state`, as it was.
    pub state_bytes: Vec<u8>,
    pub info: DomainInfo,
    /// Registers of the thread running OCaml code in this domain, if one was.
    pub running: Option<crate::source::ThreadState>,
}

impl CapturedDomain {
    pub fn field(&self, offset: u64) -> u64 {
        let o = offset as usize;
        u64::from_le_bytes(self.state_bytes[o..o + 8].try_into().expect("8 bytes"))
    }
}

/// Everything copied while the world was stopped.
#[derive(Debug, Default)]
pub struct Capture {
    pub domains: Vec<CapturedDomain>,
    pub regions: Vec<CapturedRegion>,
    pub roots: Vec<CapturedRoot>,
    /// Ephemerons and weak arrays the runtime knows.
    pub ephemerons: Vec<u64>,
    pub colours: Option<ColourEncoding>,
    pub compactions: Option<u64>,
    /// Registered custom operations: (address of `struct custom_operations`, identifier).
    pub custom_ops: Vec<(u64, String)>,
    /// Symbols of the loaded Dynlink plugins, at target addresses (the executable's are in
    /// [`Runtime`]).
    pub plugin_symbols: Vec<crate::elf::Symbol>,
    /// DWARF sections of the loaded Dynlink plugins: (load bias, section name, bytes).
    pub plugin_dwarf: Vec<(u64, &'static str, std::sync::Arc<[u8]>)>,
    /// Free blocks whose colour does not say so (OCaml 4.14's best-fit small free lists).
    pub free_blocks: Vec<u64>,
    /// Statmemprof's entries; `None` on a runtime without statmemprof (before 5.3).
    pub memprof: Option<Vec<heapsnap_format::MemprofRecord>>,
    /// The frame descriptors the tracked blocks' call stacks name, with their return addresses.
    pub memprof_frames: Vec<heapsnap_format::FrameDescrRecord>,
    pub warnings: Vec<String>,
    /// How long each step of the copy took (ns), for reports and benchmarks.
    pub phases: Vec<(&'static str, u64)>,
}

/// How a root will be named in the snapshot (resolved after the target is resumed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootName {
    None,
    Text(String),
    /// The function containing this code address.
    CodeAt(u64),
    /// The data symbol containing this address.
    DataAt(u64),
}

#[derive(Clone, Debug)]
pub struct CapturedRoot {
    pub kind: RootKind,
    pub domain: u16,
    pub flags: u32,
    pub thread: u64,
    pub slot: u64,
    pub value: u64,
    pub origin: u64,
    pub name: RootName,
}
