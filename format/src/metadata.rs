//! The metadata section: what the snapshot is of. Stored as JSON (small, and open to new fields:
//! a reader ignores the fields it does not know).

use heapsnap_values::ocaml4::Ocaml4Gc;
use heapsnap_values::{ColourEncoding, PoolGeometry};
use serde::{Deserialize, Serialize};

/// What made the dumper take this snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Manual,
    Compaction,
    Signal,
    Interval,
    Exit,
    Core,
    Synthetic,
    /// The program's memory reached an `on-memory` threshold (format 1.4).
    Memory,
}

/// One domain as it was when the world stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainInfo {
    pub id: u16,
    /// `young_start .. young_end`: the whole minor heap reservation.
    pub minor_start: u64,
    pub minor_end: u64,
    /// `young_ptr`: the live part of the minor heap is `young_ptr .. young_end`.
    pub young_ptr: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// The target's OCaml version, e.g. "5.3.0".
    pub ocaml_version: String,
    pub word_size: u8,
    /// Bits at the top of each header reserved for profiling information (0 to 31).
    pub reserved_header_bits: u8,
    pub colours: ColourEncoding,
    pub pid: Option<u32>,
    pub executable: Option<String>,
    /// GNU build-id of the executable, lowercase hex.
    pub build_id: Option<String>,
    /// When the world was stopped, in nanoseconds since the Unix epoch.
    pub time_unix_ns: u64,
    pub trigger: Trigger,
    /// The dumper, e.g. "heapsnap 0.1.0".
    pub dumper: String,
    pub domains: Vec<DomainInfo>,
    /// Value of `caml_compactions_count` when the snapshot was taken, when known.
    #[serde(default)]
    pub compactions: Option<u64>,
    /// Whether string and bytes contents were zeroed before writing (`--redact`).
    #[serde(default)]
    pub redacted: bool,
    /// Anything the dumper wants a reader to know (e.g. a domain caught mid-collection).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The runtime's pool geometry (size classes and where their blocks start). Absent in
    /// snapshots written before format 1.1, which were all of OCaml 5.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<PoolGeometry>,
    /// The program ran bytecode (`ocamlrun`, or an executable with the interpreter linked in):
    /// the executable and its symbols are the interpreter's, and a stack root's origin is the
    /// interpreter's code pointer for its frame (an address in the bytecode as loaded), not
    /// machine code.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bytecode: bool,
    /// The version was not one the dumper knows, and the dump was forced (`--force`): the
    /// runtime was read as the newest known version, and `warnings` says what looked wrong.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced_version: bool,
    /// Where the runtime's structure layouts came from: `dwarf` (the executable's own debug
    /// info), `debug_file` (a separate debug file: build-id, debuglink or `--debug-file`), or
    /// `tables` (heapsnap's tables for the version, for an executable without debug info).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layouts_from: Option<String>,
    /// OCaml 4.14's major GC state, which gives its heap chunks' colours their meaning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ocaml4_gc: Option<Ocaml4Gc>,
    /// How a live process was captured (absent for a core, and in older snapshots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureInfo>,
    /// The runtime was read by probing it, not from a release heapsnap knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probed: Option<ProbedRuntime>,
    /// A live process in other namespaces or another root than the dumper's (a container):
    /// absent when it shares them, for cores, and in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Namespaces>,
    /// The host name of a live process as it sees it (its UTS namespace's), else the dumper's
    /// (FORMAT.md); absent for cores and in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// Where a live process ran, as seen from the dumper: `pid` (in the metadata) is its pid in
/// the dumper's PID namespace, `pid_inside` its own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespaces {
    /// Its pid in its own PID namespace (the last of `NSpid` in its `/proc/PID/status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_inside: Option<u32>,
    /// It runs in another PID namespace than the dumper's.
    pub other_pid_namespace: bool,
    /// It runs in another mount namespace than the dumper's.
    pub other_mount_namespace: bool,
    /// Its root directory is another than the dumper's (its files were read inside it).
    pub other_root: bool,
}

/// How a runtime of a release heapsnap has no file for was read: the facts the dumper found
/// in the executable and the heap instead of in its knowledge of the release.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbedRuntime {
    /// Why it was probed ("OCaml 5.4.0 is not a release heapsnap was tested on").
    pub reason: String,
    /// Each fact: what it is, its value, and where it was read.
    pub facts: Vec<ProbedFact>,
    /// Facts that could not be established and took the newest known release's value
    /// (`--force`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guessed: Vec<String>,
}

/// One probed fact.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbedFact {
    pub fact: String,
    pub value: String,
    /// Where it was read, or why it could not be.
    pub from: String,
}

/// How a live process's memory was captured.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureInfo {
    /// What was asked: `auto`, `fork` or `copy`.
    pub requested: String,
    /// What was done: `fork` (read from a copy-on-write child of the stopped process) or `copy`
    /// (read from the stopped process).
    pub method: String,
    /// Why the process was copied when `auto` was asked, or when a fork failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_copy: Option<String>,
    /// The process's ranges that a fork does not freeze (shared memory, `MADV_DONTFORK`,
    /// `MADV_WIPEONFORK`); the capture read none of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_frozen: Vec<String>,
}

impl Metadata {
    /// Checks the fields whose values the format constrains; returns what is wrong.
    pub(crate) fn problem(&self) -> Option<String> {
        if self.word_size != crate::WORD_SIZE {
            return Some(format!("word_size {} (only 8 is supported)", self.word_size));
        }
        if self.reserved_header_bits > 31 {
            return Some(format!("reserved_header_bits {} (at most 31)", self.reserved_header_bits));
        }
        if let Some(problem) = self.pools.as_ref().and_then(|p| p.problem()) {
            return Some(format!("pools: {problem}"));
        }
        if !self.colours.is_valid() {
            return Some(format!("colours {:?} are not a permutation of 0..=3", self.colours));
        }
        if let Some(d) = self.domains.iter().find(|d| d.minor_start > d.minor_end || !(d.minor_start..=d.minor_end).contains(&d.young_ptr))
        {
            return Some(format!(
                "domain {} minor heap bounds {:#x}..{:#x} with young_ptr {:#x} are inconsistent",
                d.id, d.minor_start, d.minor_end, d.young_ptr
            ));
        }
        None
    }
}
