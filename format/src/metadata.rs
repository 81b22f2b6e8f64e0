//! The metadata section: what the snapshot is of. Stored as JSON (small, and open to new fields:
//! a reader ignores the fields it does not know).

use serde::{Deserialize, Serialize};

/// Which 2-bit header colour means what. OCaml 5 rotates the meaning of three of the four
/// values at each major cycle, so a snapshot must say which assignment was in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColourEncoding {
    pub marked: u8,
    pub unmarked: u8,
    pub garbage: u8,
    pub not_markable: u8,
}

impl ColourEncoding {
    /// OCaml 5's encoding before its first major cycle ends (`caml_global_heap_state` initial value).
    pub const OCAML5_INITIAL: ColourEncoding = ColourEncoding { marked: 0, unmarked: 1, garbage: 2, not_markable: 3 };

    /// The four values must be a permutation of 0..=3.
    pub fn is_valid(&self) -> bool {
        let mut seen = [false; 4];
        for c in [self.marked, self.unmarked, self.garbage, self.not_markable] {
            if c > 3 || seen[c as usize] {
                return false;
            }
            seen[c as usize] = true;
        }
        true
    }
}

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
