//! OCaml 4.14's major heap: a list of chunks whose blocks follow one another, free blocks among
//! them, and four colours whose meaning depends on where the major GC is (runtime/caml/gc.h,
//! major_gc.c). A snapshot of 4.14 records the GC's phase and sweep pointer; [`Ocaml4Gc`] tells
//! from them what a block's colour says.

use crate::{Colour, HeaderLayout};
use serde::{Deserialize, Serialize};

/// The colour bits of 4.14 headers (gc.h).
pub const WHITE: u8 = 0;
pub const GRAY: u8 = 1;
pub const BLUE: u8 = 2;
pub const BLACK: u8 = 3;

/// `caml_gc_phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GcPhase {
    Idle,
    Mark,
    Clean,
    Sweep,
}

impl GcPhase {
    /// `Phase_mark` 0, `Phase_clean` 1, `Phase_sweep` 2, `Phase_idle` 3.
    pub fn from_code(code: u64) -> Option<GcPhase> {
        match code {
            0 => Some(GcPhase::Mark),
            1 => Some(GcPhase::Clean),
            2 => Some(GcPhase::Sweep),
            3 => Some(GcPhase::Idle),
            _ => None,
        }
    }
}

/// The state of 4.14's major GC when the snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ocaml4Gc {
    pub phase: GcPhase,
    /// `caml_gc_sweep_hp`: in the sweep phase, blocks below it are swept, the others not yet.
    #[serde(default)]
    pub sweep_pointer: u64,
}

impl Ocaml4Gc {
    /// What colour bits `bits` mean for the heap-chunk block whose header is at `header`:
    /// blue blocks are free; black ones are live; white ones are live, except in the clean phase
    /// and in the unswept part of the heap during sweeping, where marking has shown them dead.
    /// (Gray only appears inside a marking or compaction step, which a snapshot never sees; it
    /// counts as live.)
    pub fn colour(&self, bits: u8, header: u64) -> Colour {
        match bits & 3 {
            BLUE => Colour::Free,
            BLACK | GRAY => Colour::Marked,
            _ => match self.phase {
                GcPhase::Idle | GcPhase::Mark => Colour::Unmarked,
                GcPhase::Clean => Colour::Garbage,
                GcPhase::Sweep if header < self.sweep_pointer => Colour::Unmarked,
                GcPhase::Sweep => Colour::Garbage,
            },
        }
    }
}

/// What the heap-chunk block whose header, `hd`, is at `header_at` is, free blocks included: a
/// fragment (size 0) or a block on one of the runtime's free lists (`listed_free`: the snapshot's
/// free blocks) is `Free`; the others have the colour 4.14's GC state gives them, or without it
/// the colour encoding's. The dumper and the analysis both ask this, so that a block the dumper
/// keeps a root to is a block the analysis finds.
pub fn chunk_block_colour(layout: &HeaderLayout, gc: Option<&Ocaml4Gc>, header_at: u64, hd: u64, listed_free: bool) -> Colour {
    if layout.wosize(hd) == 0 || listed_free {
        return Colour::Free;
    }
    match gc {
        Some(gc) => gc.colour(layout.format().colour_bits(hd), header_at),
        None => layout.decode(hd).colour,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_depend_on_the_phase_and_the_sweep_pointer() {
        let at = |phase, sweep_pointer, bits, header| Ocaml4Gc { phase, sweep_pointer }.colour(bits, header);
        for phase in [GcPhase::Idle, GcPhase::Mark, GcPhase::Clean, GcPhase::Sweep] {
            assert_eq!(at(phase, 0x5000, BLUE, 0x1000), Colour::Free);
            assert_eq!(at(phase, 0x5000, BLACK, 0x9000), Colour::Marked);
        }
        assert_eq!(at(GcPhase::Idle, 0, WHITE, 0x1000), Colour::Unmarked);
        assert_eq!(at(GcPhase::Mark, 0, WHITE, 0x1000), Colour::Unmarked);
        assert_eq!(at(GcPhase::Clean, 0, WHITE, 0x1000), Colour::Garbage);
        assert_eq!(at(GcPhase::Sweep, 0x5000, WHITE, 0x4ff8), Colour::Unmarked);
        assert_eq!(at(GcPhase::Sweep, 0x5000, WHITE, 0x5000), Colour::Garbage);
        assert_eq!(GcPhase::from_code(2), Some(GcPhase::Sweep));
        assert_eq!(GcPhase::from_code(4), None);
    }
}
