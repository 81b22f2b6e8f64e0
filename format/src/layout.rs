//! On-disk records. Every record is `#[repr(C)]`, little-endian, without padding, and a multiple
//! of 8 bytes long, so that a validated, 8-aligned section can be viewed in place as a slice.

use bytemuck::{Pod, Zeroable};
use std::fmt;

pub const MAGIC: [u8; 8] = *b"HEAPSNAP";
pub const END_MAGIC: [u8; 8] = *b"HSNPEND\0";
pub const VERSION_MAJOR: u16 = 1;
pub const VERSION_MINOR: u16 = 4;
pub const WORD_SIZE: u8 = 8;
pub const BYTE_ORDER_LITTLE: u8 = 1;

/// A reader that does not know a section's kind must refuse the file when this flag is set,
/// and skip the section otherwise.
pub const SECTION_FLAG_REQUIRED: u32 = 1;

/// `RootRecord::domain` / `RegionHeader::domain` when no domain applies (e.g. orphaned pools).
pub const NO_DOMAIN: u16 = u16::MAX;

/// The root's value was found by a conservative scan: it may not really be a live reference.
pub const ROOT_FLAG_CONSERVATIVE: u32 = 1;

/// The root holds its value weakly: the runtime tracks the value but does not keep it alive
/// (the value of a `Gc.finalise`d block, a block sampled by memprof). Reachability from the
/// roots should not start from weak roots.
pub const ROOT_FLAG_WEAK: u32 = 2;

/// The root is a variable a module's initialisation binds, kept in the frame of that
/// initialisation (a bytecode unit's toplevel bindings live on the interpreter's stack until
/// its initialisation ends, and a program's main unit runs inside it); its name is the
/// binding's (`Cache_leak.cache`).
pub const ROOT_FLAG_BINDING: u32 = 4;

/// First 32 bytes of every snapshot.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct FileHeader {
    pub magic: [u8; 8],
    pub version_major: u16,
    pub version_minor: u16,
    pub word_size: u8,
    pub byte_order: u8,
    pub header_size: u16,
    pub reserved: [u8; 16],
}

impl FileHeader {
    pub const SIZE: usize = 32;

    pub fn current() -> Self {
        FileHeader {
            magic: MAGIC,
            version_major: VERSION_MAJOR,
            version_minor: VERSION_MINOR,
            word_size: WORD_SIZE,
            byte_order: BYTE_ORDER_LITTLE,
            header_size: Self::SIZE as u16,
            reserved: [0; 16],
        }
    }
}

/// Last 32 bytes of every snapshot: where the section table is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Trailer {
    pub table_offset: u64,
    pub section_count: u64,
    /// xxh3-64 of the section table's bytes.
    pub table_checksum: u64,
    pub end_magic: [u8; 8],
}

impl Trailer {
    pub const SIZE: usize = 32;
}

/// One entry of the section table.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct SectionEntry {
    pub kind: u32,
    pub flags: u32,
    /// Absolute file offset of the section body; a multiple of 8.
    pub offset: u64,
    /// Length of the body in bytes (the padding to the next multiple of 8 is not counted).
    pub length: u64,
    /// xxh3-64 of the body's `length` bytes.
    pub checksum: u64,
}

impl SectionEntry {
    pub const SIZE: usize = 32;

    pub fn section_kind(&self) -> SectionKind {
        SectionKind::from_code(self.kind)
    }
}

macro_rules! code_enum {
    ($(#[$m:meta])* $name:ident : $repr:ty { $($(#[$vm:meta])* $variant:ident = $value:expr => $label:expr),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vm])* $variant,)*
            /// A code this version does not know.
            Unknown($repr),
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            pub fn from_code(code: $repr) -> Self {
                match code {
                    $($value => $name::$variant,)*
                    other => $name::Unknown(other),
                }
            }

            pub fn code(self) -> $repr {
                match self {
                    $($name::$variant => $value,)*
                    $name::Unknown(other) => other,
                }
            }

            /// A short lowercase name, used in reports and JSON.
            pub fn label(self) -> &'static str {
                match self {
                    $($name::$variant => $label,)*
                    $name::Unknown(_) => "unknown",
                }
            }

            pub fn from_label(label: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|k| k.label() == label)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $name::Unknown(code) => write!(f, "unknown({code})"),
                    known => f.write_str(known.label()),
                }
            }
        }
    };
}

code_enum! {
    /// What a section holds.
    SectionKind: u32 {
        Metadata = 1 => "metadata",
        Strings = 2 => "strings",
        Roots = 3 => "roots",
        Region = 4 => "region",
        Symbols = 5 => "symbols",
        Dwarf = 6 => "dwarf",
        CustomOps = 7 => "custom_ops",
        Ephemerons = 8 => "ephemerons",
    }
}

impl SectionKind {
    /// Sections that may appear at most once.
    pub fn is_singleton(self) -> bool {
        !matches!(self, SectionKind::Region | SectionKind::Dwarf | SectionKind::Unknown(_))
    }
}

code_enum! {
    /// Where a root was found. See FORMAT.md for what `slot`, `origin` and `name` mean per kind.
    RootKind: u16 {
        Global = 1 => "global",
        DynGlobal = 2 => "dynlink_global",
        GlobalRoot = 3 => "global_root",
        GenerationalRoot = 4 => "generational_root",
        LocalRoot = 5 => "local_root",
        Stack = 6 => "stack",
        Register = 7 => "register",
        Finaliser = 8 => "finaliser",
        Memprof = 9 => "memprof",
        Thread = 10 => "thread",
        Domain = 11 => "domain",
        SuspendedStack = 12 => "suspended_stack",
        Other = 13 => "other",
    }
}

impl RootKind {
    /// `SuspendedStack` records are not roots: they are the references held by the stack of a
    /// suspended continuation, and belong to that continuation.
    pub fn is_root(self) -> bool {
        self != RootKind::SuspendedStack
    }
}

code_enum! {
    /// What a memory region is.
    RegionKind: u16 {
        MinorHeap = 1 => "minor_heap",
        Pool = 2 => "pool",
        Large = 3 => "large",
        Static = 4 => "static",
        FiberStack = 5 => "fiber_stack",
        Other = 6 => "other",
        /// A chunk of OCaml 4.14's major heap (format 1.1).
        HeapChunk = 7 => "heap_chunk",
    }
}

impl RegionKind {
    /// Whether the region holds OCaml heap blocks (the minor heap, the major heap's pools, large
    /// allocations and chunks), as opposed to static data, stacks and other memory.
    pub fn holds_heap_blocks(self) -> bool {
        matches!(self, RegionKind::MinorHeap | RegionKind::Pool | RegionKind::Large | RegionKind::HeapChunk)
    }
}

code_enum! {
    SymbolKind: u32 {
        Function = 1 => "function",
        Data = 2 => "data",
        Other = 3 => "other",
    }
}

/// Index of a NUL-terminated string in the strings section: its byte offset.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Pod, Zeroable)]
pub struct StrId(pub u32);

impl StrId {
    pub const NONE: StrId = StrId(u32::MAX);

    pub fn is_none(self) -> bool {
        self == Self::NONE
    }
}

/// One root (or, for `SuspendedStack`, one reference held by a suspended fiber).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct RootRecord {
    pub kind: u16,
    /// Domain id, or [`NO_DOMAIN`].
    pub domain: u16,
    /// `ROOT_FLAG_*` bits.
    pub flags: u32,
    /// Systhread id (0 when not a thread's root).
    pub thread: u64,
    /// Address of the slot holding the value in the target (0 when the value is not stored in memory).
    pub slot: u64,
    /// The OCaml value (a pointer or an immediate), as it was.
    pub value: u64,
    /// Kind-specific (see FORMAT.md §3.3): return address of a stack frame, the head fiber's
    /// `stack_info` address for a suspended stack, field index of a module global, ...
    pub origin: u64,
    /// Kind-specific name: the module or function symbol, the global root's C symbol, ...
    pub name: StrId,
    pub reserved: u32,
}

impl RootRecord {
    pub const SIZE: usize = 48;

    pub fn root_kind(&self) -> RootKind {
        RootKind::from_code(self.kind)
    }

    pub fn is_conservative(&self) -> bool {
        self.flags & ROOT_FLAG_CONSERVATIVE != 0
    }

    pub fn is_weak(&self) -> bool {
        self.flags & ROOT_FLAG_WEAK != 0
    }

    pub fn is_binding(&self) -> bool {
        self.flags & ROOT_FLAG_BINDING != 0
    }
}

/// The fixed header at the start of every region section; the region's bytes follow it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct RegionHeader {
    pub kind: u16,
    /// Owning domain, or [`NO_DOMAIN`].
    pub domain: u16,
    pub flags: u32,
    /// Target address of the first byte.
    pub base: u64,
    /// Pools: words per block (header included) of the size class; 0 for other kinds.
    pub block_wsize: u32,
    /// Pools, minor heaps and large allocations: byte offset of the first block header in the
    /// region's bytes.
    pub first_block: u32,
    /// Fiber stacks: the `stack_info` address that owns the stack; 0 otherwise.
    pub owner: u64,
}

impl RegionHeader {
    pub const SIZE: usize = 32;

    pub fn region_kind(&self) -> RegionKind {
        RegionKind::from_code(self.kind)
    }
}

/// An address range of the executable (or a shared object) and its symbol name.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct SymbolRecord {
    pub start: u64,
    /// Exclusive end; `start` when the size is unknown.
    pub end: u64,
    pub name: StrId,
    pub kind: u32,
}

impl SymbolRecord {
    pub const SIZE: usize = 24;

    pub fn symbol_kind(&self) -> SymbolKind {
        SymbolKind::from_code(self.kind)
    }
}

/// Address of a `struct custom_operations` in the target, and its identifier string.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct CustomOpsRecord {
    pub address: u64,
    pub identifier: StrId,
    pub reserved: u32,
}

impl CustomOpsRecord {
    pub const SIZE: usize = 16;
}

/// Header of a DWARF section: its ELF name, NUL-padded; the section's bytes follow.
pub const DWARF_NAME_LEN: usize = 32;

const _: () = {
    assert!(std::mem::size_of::<FileHeader>() == FileHeader::SIZE);
    assert!(std::mem::size_of::<Trailer>() == Trailer::SIZE);
    assert!(std::mem::size_of::<SectionEntry>() == SectionEntry::SIZE);
    assert!(std::mem::size_of::<RootRecord>() == RootRecord::SIZE);
    assert!(std::mem::size_of::<RegionHeader>() == RegionHeader::SIZE);
    assert!(std::mem::size_of::<SymbolRecord>() == SymbolRecord::SIZE);
    assert!(std::mem::size_of::<CustomOpsRecord>() == CustomOpsRecord::SIZE);
};
