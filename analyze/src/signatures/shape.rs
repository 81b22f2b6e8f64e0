//! Shapes: what a block is, for path signatures. A shape is the block's kind as `top --by kind`
//! names it, with two changes that keep the same structure recognisable from one snapshot to
//! the next:
//!
//! * scanned blocks of more than [`FOLD_ABOVE_FIELDS`] fields are one shape whatever their size
//!   (`block tag 0 size >16`): arrays and hash-table bucket arrays grow between snapshots;
//! * when the diff uses OCaml names, a typed block is its type, with its constructor
//!   (`Cache_leak.entry`, `Cons : (string, Cache_leak.entry) Hashtbl.bucketlist`), as
//!   `dominators` and `path` name it; strings, floats and custom blocks keep their kind.
//!
//! Known structures (`Hashtbl`, `list cell`, ...) are named as everywhere, by [`crate::structures`].

use crate::blocks::{BlockMap, BlockRef};
use crate::full_analysis::Analysis;
use crate::kinds::{key_name, kind_key};
use crate::model::{GroupKey, NO_TYPE};
use crate::typed::Typing;
use heapsnap_values as ocaml;

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
    /// An OCaml type ([`crate::typed`]) and the block's constructor (the address of its name
    /// in the [`Typing`], 0 for none: it tells the constructors of one type apart without
    /// comparing strings). Named from a block of the shape ([`typed_shape_name`]).
    Typed { ty: u32, constructor: usize },
}

/// The typed shape of a block, when it has a type that says more than its kind: as
/// [`crate::analysed_heap::AnalysedHeap::type_label`], strings, floats and custom blocks are left to their kind.
#[inline]
pub fn typed_shape(typing: &Typing, b: &BlockRef<'_>) -> Option<ShapeKey> {
    let ty = typing.type_id(b.node);
    if ty == NO_TYPE || matches!(b.header.tag, ocaml::STRING_TAG | ocaml::DOUBLE_TAG | ocaml::CUSTOM_TAG) {
        return None;
    }
    let t = typing.of(b.node, b.header.tag, b.fields.first().copied())?;
    Some(ShapeKey::Typed { ty, constructor: t.constructor.map_or(0, |c| c.as_ptr() as usize) })
}

/// The name of a typed shape, from one block of it: `Server.session`, `Cons : int list`.
pub fn typed_shape_name(typing: &Typing, b: &BlockRef<'_>) -> String {
    typing.describe(b.node, b.header.tag, b.fields.first().copied()).unwrap_or_else(|| "?".into())
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
        // Named by `typed_shape_name` (the name needs a block of the shape).
        ShapeKey::Typed { .. } => "?".into(),
    }
}
