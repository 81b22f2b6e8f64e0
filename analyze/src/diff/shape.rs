//! Shapes: what a block is, for path signatures. A shape is the block's kind as `top --by kind`
//! names it, with two changes that keep the same structure recognisable from one snapshot to
//! the next:
//!
//! * scanned blocks of more than [`FOLD_ABOVE_FIELDS`] fields are one shape whatever their size
//!   (`block tag 0 size >16`): arrays and hash-table bucket arrays grow between snapshots;
//!
//! Known structures (`Hashtbl`, `list cell`, ...) are named as everywhere, by [`crate::structures`].

use crate::analysis::Analysis;
use crate::blocks::{BlockMap, BlockRef};
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
}

/// The shape of a block.
pub fn shape_key(blocks: &BlockMap<'_>, b: &BlockRef<'_>) -> ShapeKey {
    let tag = b.header.tag;
    if tag < ocaml::NO_SCAN_TAG && tag != ocaml::CLOSURE_TAG && tag != ocaml::CONT_TAG && b.header.wosize > FOLD_ABOVE_FIELDS {
        return ShapeKey::Large { tag };
    }
    ShapeKey::Kind(kind_key(blocks, b))
}

/// The name of a shape (closures by function and source line, as `top --by kind` names them).
pub fn shape_name(a: &Analysis<'_>, key: &ShapeKey) -> String {
    match key {
        ShapeKey::Kind(k) => key_name(&a.names, k),
        ShapeKey::Large { tag } => format!("{} tag {tag} size >{FOLD_ABOVE_FIELDS}", ocaml::tag_name(*tag)),
    }
}
