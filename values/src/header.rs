//! Block headers: `| reserved (R bits) | wosize | colour (2) | tag (8) |` on x86-64
//! (runtime/caml/mlvalues.h, caml/gc.h), and what the colour bits mean.

use serde::{Deserialize, Serialize};

/// Where a header's fields are, given the number of reserved ("profiling info") bits at its top.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderFormat {
    pub reserved_bits: u8,
}

impl HeaderFormat {
    fn wosize_mask(self) -> u64 {
        let bits = 54 - u32::from(self.reserved_bits.min(31));
        (1u64 << bits) - 1
    }

    /// Size in words, header excluded.
    #[inline]
    pub fn wosize(self, header: u64) -> u64 {
        (header >> 10) & self.wosize_mask()
    }

    #[inline]
    pub fn tag(self, header: u64) -> u8 {
        header as u8
    }

    /// The two colour bits, as stored.
    #[inline]
    pub fn colour_bits(self, header: u64) -> u8 {
        ((header >> 8) & 3) as u8
    }

    /// The reserved bits, 0 when there are none.
    #[inline]
    pub fn reserved(self, header: u64) -> u32 {
        let r = u32::from(self.reserved_bits.min(31));
        if r == 0 {
            0
        } else {
            (header >> (64 - r)) as u32
        }
    }
}

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

/// What a header's two colour bits mean under the snapshot's encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Colour {
    Marked,
    Unmarked,
    Garbage,
    NotMarkable,
    /// A free block between live ones (OCaml 4.14's heap chunks).
    Free,
}

/// How to take a header apart, given the number of reserved header bits and the colour encoding
/// in force when the snapshot was taken.
#[derive(Clone, Copy, Debug)]
pub struct HeaderLayout {
    format: HeaderFormat,
    wosize_mask: u64,
    colours: [Colour; 4],
}

impl HeaderLayout {
    pub fn new(reserved_bits: u8, encoding: ColourEncoding) -> Self {
        let format = HeaderFormat { reserved_bits: reserved_bits.min(31) };
        let mut colours = [Colour::Marked; 4];
        colours[usize::from(encoding.marked & 3)] = Colour::Marked;
        colours[usize::from(encoding.unmarked & 3)] = Colour::Unmarked;
        colours[usize::from(encoding.garbage & 3)] = Colour::Garbage;
        colours[usize::from(encoding.not_markable & 3)] = Colour::NotMarkable;
        HeaderLayout { format, wosize_mask: format.wosize_mask(), colours }
    }

    pub fn reserved_bits(&self) -> u32 {
        u32::from(self.format.reserved_bits)
    }

    pub fn format(&self) -> HeaderFormat {
        self.format
    }

    #[inline]
    pub fn decode(&self, hd: u64) -> Header {
        Header {
            raw: hd,
            tag: (hd & 0xff) as u8,
            colour: self.colours[((hd >> 8) & 3) as usize],
            wosize: (hd >> 10) & self.wosize_mask,
            reserved: self.format.reserved(hd),
        }
    }

    #[inline]
    pub fn wosize(&self, hd: u64) -> u64 {
        (hd >> 10) & self.wosize_mask
    }

    /// Encodes a header (used by the synthetic heap generator and tests).
    pub fn encode(&self, wosize: u64, tag: u8, colour: Colour, reserved: u32) -> u64 {
        let bits = self.colours.iter().position(|&c| c == colour).expect("every colour has an encoding") as u64;
        let r = self.reserved_bits();
        let reserved = if r == 0 { 0 } else { u64::from(reserved) << (64 - r) };
        reserved | ((wosize & self.wosize_mask) << 10) | (bits << 8) | u64::from(tag)
    }
}

/// A decoded block header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub raw: u64,
    pub tag: u8,
    pub colour: Colour,
    /// Size in words, header excluded.
    pub wosize: u64,
    /// The reserved ("profiling info") bits, 0 when there are none.
    pub reserved: u32,
}

impl Header {
    /// Size in bytes, header included.
    pub fn bytes(&self) -> u64 {
        (self.wosize + 1) * 8
    }

    /// Calls `f(field_index, word)` for every field the GC would scan that holds a pointer (an
    /// even, non-zero word). No-scan tags have none; closures start at their environment (code
    /// pointers and infix headers skipped); continuations are scanned through their stack, not
    /// as blocks.
    #[inline]
    pub fn scanned_fields(&self, fields: &[u64], mut f: impl FnMut(usize, u64)) {
        let Some(start) = self.first_scanned_field(fields) else { return };
        for (i, &v) in fields.iter().enumerate().skip(start) {
            if crate::is_pointer(v) {
                f(i, v);
            }
        }
    }

    /// Index of the first field the GC scans, or `None` when no field is scanned. Closures are
    /// scanned from their environment; continuations are not scanned as blocks (their stack is).
    pub fn first_scanned_field(&self, fields: &[u64]) -> Option<usize> {
        match self.tag {
            t if t >= crate::NO_SCAN_TAG => None,
            crate::CONT_TAG => None,
            crate::CLOSURE_TAG => {
                let info = *fields.get(1)?;
                Some(crate::start_env_closinfo(info) as usize)
            }
            _ => Some(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_with_and_without_reserved_bits() {
        for bits in [0u8, 8, 16, 31] {
            let layout = HeaderLayout::new(bits, ColourEncoding::OCAML5_INITIAL);
            for colour in [Colour::Marked, Colour::Unmarked, Colour::Garbage, Colour::NotMarkable] {
                let reserved = if bits == 0 { 0 } else { (1u32 << bits.min(31)) - 1 };
                let hd = layout.encode(12345, 7, colour, reserved);
                let h = layout.decode(hd);
                assert_eq!((h.wosize, h.tag, h.colour, h.reserved), (12345, 7, colour, reserved));
                assert_eq!(layout.format().wosize(hd), 12345);
                assert_eq!(layout.format().reserved(hd), reserved);
            }
        }
    }

    #[test]
    fn header_fields_with_reserved_bits() {
        let f = HeaderFormat { reserved_bits: 8 };
        let hd = (0xabu64 << 56) | (5 << 10) | (2 << 8) | 252;
        assert_eq!((f.wosize(hd), f.tag(hd), f.colour_bits(hd), f.reserved(hd)), (5, 252, 2, 0xab));
        assert_eq!(HeaderFormat { reserved_bits: 0 }.wosize(7 << 10), 7);
    }

    #[test]
    fn colours_follow_the_encoding() {
        let enc = ColourEncoding { marked: 2, unmarked: 0, garbage: 1, not_markable: 3 };
        let layout = HeaderLayout::new(0, enc);
        assert_eq!(layout.decode(2 << 8).colour, Colour::Marked);
        assert_eq!(layout.decode(1 << 8).colour, Colour::Garbage);
        assert_eq!(layout.decode(0).colour, Colour::Unmarked);
    }

    #[test]
    fn colour_encodings_must_be_permutations() {
        assert!(ColourEncoding::OCAML5_INITIAL.is_valid());
        assert!(!ColourEncoding { marked: 0, unmarked: 0, garbage: 2, not_markable: 3 }.is_valid());
        assert!(!ColourEncoding { marked: 4, unmarked: 1, garbage: 2, not_markable: 3 }.is_valid());
    }
}
