//! The standard library's data structures, recognised from a block's layout: the one place that
//! decides what a block *is*, so that `top`, `dominators`, `path`, `inspect` and `diff` name it
//! the same way.
//!
//! Recognition looks at one block and at most the headers (and one field) of the blocks its
//! fields point to: a few memory reads, no search. A record of another type with the same
//! layout and values gets the same name: names are hints, documented in REPORTS.md. Layouts are
//! those of OCaml 5.1-5.3's stdlib.

use crate::blocks::{BlockMap, BlockRef};
use crate::model::Structure;
use heapsnap_values as ocaml;
use heapsnap_values::Header;

/// A one-line description of a recognised block: its name, and its number of elements where
/// the structure records it.
pub fn describe(s: Structure, b: &BlockRef<'_>) -> String {
    let count = |i: usize| b.fields.get(i).copied().and_then(int).unwrap_or(0);
    match s {
        Structure::Hashtbl => format!("Hashtbl ({} entries)", count(0)),
        Structure::Queue => format!("Queue ({} elements)", count(0)),
        Structure::Stack => format!("Stack ({} elements)", count(1)),
        Structure::Buffer => format!("Buffer ({} bytes)", count(1)),
        _ => s.name().to_string(),
    }
}

/// Header and fields of the block a pointer-looking word points at, when it points at the
/// first field of a block of a block-holding region (no full resolution: a hint suffices).
fn peek<'s>(blocks: &BlockMap<'s>, value: u64) -> Option<(Header, &'s [u64])> {
    if !ocaml::is_pointer(value) {
        return None;
    }
    let rb = &blocks.regions[blocks.region_index_of(value)?];
    let w = ((value - rb.base) / 8).checked_sub(1)? as usize;
    let h = blocks.layout.decode(*rb.words.get(w)?);
    let fields = rb.words.get(w + 1..w + 1 + h.wosize as usize)?;
    Some((h, fields))
}

fn int(w: u64) -> Option<i64> {
    (w & 1 == 1).then_some((w as i64) >> 1)
}

const EMPTY: u64 = 1; // Val_int(0): `[]`, `None`, `Empty`, `Nil`

/// What a block is, when it has the layout of a known structure.
#[inline]
pub fn recognise(blocks: &BlockMap<'_>, b: &BlockRef<'_>) -> Option<Structure> {
    match b.header.tag {
        0 => recognise_tag0(blocks, b.fields),
        ocaml::LAZY_TAG | ocaml::FORCING_TAG => Some(Structure::Lazy),
        ocaml::FORWARD_TAG => Some(Structure::ForcedLazy),
        _ => None,
    }
}

fn recognise_tag0(blocks: &BlockMap<'_>, f: &[u64]) -> Option<Structure> {
    let tag0 = |v: u64, size: u64| peek(blocks, v).is_some_and(|(h, _)| h.tag == 0 && h.wosize == size);
    let list = |v: u64| v == EMPTY || tag0(v, 2);
    match *f {
        [_] => Some(Structure::RefOrSome),
        [hd, tl] => {
            if let (Some(len), true) = (int(tl), hd != EMPTY) {
                // `{c; len}`: a non-empty list and its length.
                if len > 0 && tag0(hd, 2) {
                    return Some(Structure::Stack);
                }
            }
            list(tl).then_some(Structure::ListCell)
        }
        [a, b, c] => {
            // Buffer: `{inner = {buffer; length}; position; initial_buffer}`.
            let is_bytes = |v: u64| peek(blocks, v).is_some_and(|(h, _)| h.tag == ocaml::STRING_TAG);
            if int(b).is_some_and(|n| n >= 0)
                && is_bytes(c)
                && peek(blocks, a).is_some_and(|(h, g)| h.tag == 0 && g.len() == 2 && is_bytes(g[0]) && int(g[1]).is_some())
            {
                return Some(Structure::Buffer);
            }
            // Queue: `{length; first; last}`, not empty (an empty one, `{0; Nil; Nil}`, is any
            // record of three zeros), the last cell's `next` is `Nil`.
            let last_ends = || peek(blocks, c).is_some_and(|(h, g)| h.tag == 0 && g.len() == 2 && g[1] == EMPTY);
            match int(a) {
                Some(n) if n > 0 && tag0(b, 2) && last_ends() => Some(Structure::Queue),
                _ => None,
            }
        }
        [size, data, seed, initial] => {
            if is_hashtbl(blocks, size, data, seed, initial) {
                Some(Structure::Hashtbl)
            } else if is_tree_node(blocks, f[0], f[2], f[3], 4) {
                Some(Structure::SetNode)
            } else {
                None
            }
        }
        [l, _, _, r, h] => is_tree_node(blocks, l, r, h, 5).then_some(Structure::MapNode),
        _ => None,
    }
}

/// `Hashtbl.t`: `size` a non-negative int; `data` an array whose length is a power of two, at
/// least `initial_size`; `seed` an int; `initial_size` an int whose absolute value is a power
/// of two of at least 16 (`power_2_above 16 n`).
fn is_hashtbl(blocks: &BlockMap<'_>, size: u64, data: u64, seed: u64, initial: u64) -> bool {
    let (Some(size), Some(_), Some(initial)) = (int(size), int(seed), int(initial)) else { return false };
    let initial = initial.unsigned_abs();
    if size < 0 || !initial.is_power_of_two() || initial < 16 {
        return false;
    }
    peek(blocks, data).is_some_and(|(h, _)| h.tag == 0 && h.wosize.is_power_of_two() && h.wosize >= initial)
}

/// A balanced-tree node of `Set` (`size` 4) or `Map` (`size` 5): its height `h` an int of 1 to
/// 64; each subtree `Empty` or a node of the same size and a smaller height; a leaf has height 1.
fn is_tree_node(blocks: &BlockMap<'_>, l: u64, r: u64, h: u64, size: u64) -> bool {
    let Some(h) = int(h).filter(|h| (1..=64).contains(h)) else { return false };
    let subtree_ok = |v: u64| {
        v == EMPTY
            || peek(blocks, v).is_some_and(|(hd, g)| {
                hd.tag == 0 && hd.wosize == size && g.last().and_then(|&x| int(x)).is_some_and(|ch| ch >= 1 && ch < h)
            })
    };
    (l != EMPTY || r != EMPTY || h == 1) && subtree_ok(l) && subtree_ok(r)
}
