//! OCaml 5.3 value representation, as the runtime defines it (runtime/caml/mlvalues.h,
//! caml/gc.h, caml/sizeclasses.h, caml/weak.h). Nothing here reads a snapshot: these are the
//! rules the rest of the crate applies to the words it reads.

use heapsnap_format::ColourEncoding;

pub const FORCING_TAG: u8 = 244;
pub const CONT_TAG: u8 = 245;
pub const LAZY_TAG: u8 = 246;
pub const CLOSURE_TAG: u8 = 247;
pub const OBJECT_TAG: u8 = 248;
pub const INFIX_TAG: u8 = 249;
pub const FORWARD_TAG: u8 = 250;
/// Tags at or above this one have no fields for the GC to scan.
pub const NO_SCAN_TAG: u8 = 251;
pub const ABSTRACT_TAG: u8 = 251;
pub const STRING_TAG: u8 = 252;
pub const DOUBLE_TAG: u8 = 253;
pub const DOUBLE_ARRAY_TAG: u8 = 254;
pub const CUSTOM_TAG: u8 = 255;

/// Words in a pool (32 KiB), and in a pool's header (`struct pool`).
pub const POOL_WSIZE: usize = 4096;
pub const POOL_HEADER_WSIZE: usize = 4;
/// Blocks of at most this many words, header included, live in pools; bigger ones are large allocations.
pub const SIZECLASS_MAX: usize = 128;
/// `wsize_sizeclass` of caml/sizeclasses.h: words per slot (header included) of each size class.
pub const WSIZE_SIZECLASS: [u32; 32] =
    [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 17, 19, 22, 25, 28, 32, 33, 37, 42, 47, 53, 59, 65, 73, 81, 89, 99, 108, 118, 128];
/// `wastage_sizeclass`: words left unused between a pool's header and its first slot.
pub const WASTAGE_SIZECLASS: [u32; 32] =
    [0, 0, 0, 0, 2, 0, 4, 4, 2, 0, 4, 12, 12, 7, 0, 17, 4, 28, 0, 22, 18, 3, 11, 21, 62, 4, 42, 87, 33, 96, 80, 124];
/// Bytes of `struct large_alloc` (owner, next) before a large block's header.
pub const LARGE_ALLOC_HEADER_BYTES: usize = 16;

/// `CAML_EPHE_DATA_OFFSET` and `CAML_EPHE_FIRST_KEY` (field 0 is the runtime's link).
pub const EPHE_DATA_FIELD: usize = 1;
pub const EPHE_FIRST_KEY_FIELD: usize = 2;

/// The smallest size class whose slots hold a block of `whsize` words (header included).
pub fn sizeclass_of_whsize(whsize: usize) -> Option<usize> {
    WSIZE_SIZECLASS.iter().position(|&w| w as usize >= whsize).filter(|_| whsize >= 1)
}

/// Byte offset of the first slot in a pool of size class `sizeclass` (`POOL_FIRST_BLOCK`).
pub fn pool_first_block_bytes(sizeclass: usize) -> usize {
    (POOL_HEADER_WSIZE + WASTAGE_SIZECLASS[sizeclass] as usize) * 8
}

/// What a header's two colour bits mean under the snapshot's encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Colour {
    Marked,
    Unmarked,
    Garbage,
    NotMarkable,
}

/// How to take a header apart, given the number of reserved header bits and the colour encoding
/// in force when the snapshot was taken.
#[derive(Clone, Copy, Debug)]
pub struct HeaderLayout {
    reserved_bits: u32,
    wosize_mask: u64,
    colours: [Colour; 4],
}

impl HeaderLayout {
    pub fn new(reserved_bits: u8, encoding: ColourEncoding) -> Self {
        let reserved_bits = u32::from(reserved_bits.min(31));
        let wosize_bits = 64 - 8 - 2 - reserved_bits;
        let mut colours = [Colour::Marked; 4];
        colours[usize::from(encoding.marked & 3)] = Colour::Marked;
        colours[usize::from(encoding.unmarked & 3)] = Colour::Unmarked;
        colours[usize::from(encoding.garbage & 3)] = Colour::Garbage;
        colours[usize::from(encoding.not_markable & 3)] = Colour::NotMarkable;
        HeaderLayout { reserved_bits, wosize_mask: (1u64 << wosize_bits) - 1, colours }
    }

    pub fn reserved_bits(&self) -> u32 {
        self.reserved_bits
    }

    #[inline]
    pub fn decode(&self, hd: u64) -> Header {
        Header {
            raw: hd,
            tag: (hd & 0xff) as u8,
            colour: self.colours[((hd >> 8) & 3) as usize],
            wosize: (hd >> 10) & self.wosize_mask,
            reserved: if self.reserved_bits == 0 { 0 } else { (hd >> (64 - self.reserved_bits)) as u32 },
        }
    }

    #[inline]
    pub fn wosize(&self, hd: u64) -> u64 {
        (hd >> 10) & self.wosize_mask
    }

    /// Encodes a header (used by the synthetic heap generator and tests).
    pub fn encode(&self, wosize: u64, tag: u8, colour: Colour, reserved: u32) -> u64 {
        let bits = self.colours.iter().position(|&c| c == colour).expect("every colour has an encoding") as u64;
        let reserved = if self.reserved_bits == 0 { 0 } else { u64::from(reserved) << (64 - self.reserved_bits) };
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

    /// Index of the first field the GC scans, or `None` when no field is scanned. Closures are
    /// scanned from their environment; continuations are not scanned as blocks (their stack is).
    pub fn first_scanned_field(&self, fields: &[u64]) -> Option<usize> {
        match self.tag {
            t if t >= NO_SCAN_TAG => None,
            CONT_TAG => None,
            CLOSURE_TAG => {
                let info = *fields.get(1)?;
                Some(start_env_closinfo(info) as usize)
            }
            _ => Some(0),
        }
    }
}

/// `Start_env_closinfo`: the field index where a closure's environment starts.
pub fn start_env_closinfo(info: u64) -> u64 {
    (info << 8) >> 9
}

/// `Arity_closinfo`.
pub fn arity_closinfo(info: u64) -> i64 {
    (info as i64) >> 56
}

/// `Make_closinfo`.
pub fn make_closinfo(arity: i64, start_env: u64) -> u64 {
    ((arity as u64) << 56).wrapping_add(start_env << 1).wrapping_add(1)
}

/// Is this word a pointer the GC would follow? (even and non-zero; OCaml immediates are odd)
#[inline]
pub fn is_pointer(word: u64) -> bool {
    word & 1 == 0 && word != 0
}

/// A human name for a tag.
pub fn tag_name(tag: u8) -> &'static str {
    match tag {
        FORCING_TAG => "forcing",
        CONT_TAG => "continuation",
        LAZY_TAG => "lazy",
        CLOSURE_TAG => "closure",
        OBJECT_TAG => "object",
        INFIX_TAG => "infix",
        FORWARD_TAG => "forward",
        ABSTRACT_TAG => "abstract",
        STRING_TAG => "string",
        DOUBLE_TAG => "float",
        DOUBLE_ARRAY_TAG => "float_array",
        CUSTOM_TAG => "custom",
        _ => "block",
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
            }
        }
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
    fn closinfo_matches_the_runtime_macros() {
        let info = make_closinfo(3, 5);
        assert_eq!(start_env_closinfo(info), 5);
        assert_eq!(arity_closinfo(info), 3);
        assert_eq!(info & 1, 1);
        assert_eq!(arity_closinfo(make_closinfo(-2, 3)), -2);
    }

    #[test]
    fn size_classes() {
        assert_eq!(sizeclass_of_whsize(1), Some(0));
        assert_eq!(sizeclass_of_whsize(9), Some(8));
        assert_eq!(sizeclass_of_whsize(128), Some(31));
        assert_eq!(sizeclass_of_whsize(129), None);
        for sz in 0..32 {
            let slots = (POOL_WSIZE - POOL_HEADER_WSIZE - WASTAGE_SIZECLASS[sz] as usize) / WSIZE_SIZECLASS[sz] as usize;
            assert_eq!(POOL_HEADER_WSIZE + WASTAGE_SIZECLASS[sz] as usize + slots * WSIZE_SIZECLASS[sz] as usize, POOL_WSIZE);
        }
    }
}
