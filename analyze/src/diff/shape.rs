//! Shapes: what a block is, for path signatures. A shape is the block's kind as `top --by kind`
//! names it, with two changes that keep the same structure recognisable from one snapshot to
//! the next:
//!
//! * scanned blocks of more than [`FOLD_ABOVE_FIELDS`] fields are one shape whatever their size
//!   (`block tag 0 size >16`): arrays and hash-table bucket arrays grow between snapshots;
//! * a record that has the layout of the standard library's `Hashtbl.t` is the shape `Hashtbl`.

use crate::analysis::Analysis;
use crate::blocks::{BlockMap, BlockRef, Target};
use crate::groups::{key_name, kind_key, GroupKey};
use crate::ocaml;

/// Blocks with more fields than this are arrays for signatures: their field indices are folded
/// to `[*]` and their size is left out of their shape.
pub const FOLD_ABOVE_FIELDS: u64 = 16;

/// The shape of a block. Cheap to hash and compare; named once per snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShapeKey {
    /// As the `kind` grouping sees it.
    Kind(GroupKey),
    /// A scanned block of more than [`FOLD_ABOVE_FIELDS`] fields (closures excepted: they
    /// keep their function).
    Large { tag: u8 },
    /// The record of a standard-library hash table: `{size; data; seed; initial_size}`.
    Hashtbl,
}

/// The shape of a block.
pub fn shape_key(blocks: &BlockMap<'_>, b: &BlockRef<'_>) -> ShapeKey {
    let tag = b.header.tag;
    if tag < ocaml::NO_SCAN_TAG && tag != ocaml::CLOSURE_TAG && tag != ocaml::CONT_TAG && b.header.wosize > FOLD_ABOVE_FIELDS {
        return ShapeKey::Large { tag };
    }
    if tag == 0 && b.header.wosize == 4 && is_hashtbl(blocks, b.fields) {
        return ShapeKey::Hashtbl;
    }
    ShapeKey::Kind(kind_key(b))
}

/// The name of a shape (closures by function and source line, as `top --by kind` names them).
pub fn shape_name(a: &Analysis<'_>, key: &ShapeKey) -> String {
    match key {
        ShapeKey::Kind(k) => key_name(a, k),
        ShapeKey::Large { tag } => format!("{} tag {tag} size >{FOLD_ABOVE_FIELDS}", ocaml::tag_name(*tag)),
        ShapeKey::Hashtbl => HASHTBL.to_string(),
    }
}

pub const HASHTBL: &str = "Hashtbl";

/// Does a 4-field block have the layout of stdlib's `Hashtbl.t` (OCaml 5.3 hashtbl.ml)?
/// `size` is a non-negative int; `data` an array whose length is a power of two, at least
/// `initial_size`; `seed` an int; `initial_size` an int whose absolute value is a power of two
/// of at least 16 (`power_2_above 16 n`). A record of four fields of these types and values is
/// possible elsewhere, but rare: the name is a hint, the shape stays a 4-field block.
pub(super) fn is_hashtbl(blocks: &BlockMap<'_>, fields: &[u64]) -> bool {
    let [size, data, seed, initial] = match fields {
        &[a, b, c, d] => [a, b, c, d],
        _ => return false,
    };
    let int = |w: u64| (w & 1 == 1).then_some((w as i64) >> 1);
    let (Some(size), Some(_), Some(initial)) = (int(size), int(seed), int(initial)) else { return false };
    let initial = initial.unsigned_abs();
    if size < 0 || !initial.is_power_of_two() || initial < 16 || !ocaml::is_pointer(data) {
        return false;
    }
    let Target::Node(_) = blocks.resolve(data) else { return false };
    let Some(r) = blocks.region_index_of(data) else { return false };
    let rb = &blocks.regions[r];
    let Some(hd) = ((data - rb.base) / 8).checked_sub(1).and_then(|w| rb.words.get(w as usize)) else { return false };
    let h = blocks.layout.decode(*hd);
    h.tag == 0 && h.wosize.is_power_of_two() && h.wosize >= initial
}
