//! A block's kind, one key per block: the structure it has the layout of, else its tag (and
//! size), closure function or custom operations; and the kind's name in reports. Groupings,
//! retainer labels and signatures all name blocks so.

use crate::blocks::{BlockMap, BlockRef};
use crate::model::{GroupBy, GroupKey};
use crate::names::Names;
use crate::structures;
use heapsnap_values as ocaml;

/// The kind of a block: the structure it has the layout of, else its tag (and size, for
/// ordinary blocks), closure function or custom operations.
pub fn kind_key(blocks: &BlockMap<'_>, b: &BlockRef<'_>) -> GroupKey {
    if let Some(s) = structures::recognise(blocks, b) {
        return GroupKey::Structure(s);
    }
    shape_key(b)
}

/// A block's kind from its own header and first field only, without recognising the
/// structure it is part of (which needs the blocks it points to).
pub fn shape_key(b: &BlockRef<'_>) -> GroupKey {
    match b.header.tag {
        ocaml::CLOSURE_TAG => GroupKey::Closure(b.fields.first().copied().unwrap_or(0)),
        ocaml::CUSTOM_TAG => GroupKey::Custom(b.fields.first().copied().unwrap_or(0)),
        t @ (ocaml::STRING_TAG | ocaml::DOUBLE_TAG | ocaml::DOUBLE_ARRAY_TAG | ocaml::ABSTRACT_TAG | ocaml::CONT_TAG) => {
            GroupKey::Tagged(t)
        }
        tag => GroupKey::Block { tag, size: b.header.wosize },
    }
}

/// The group key of a block (`root` groups are not per block).
pub fn key_for(by: GroupBy, blocks: &BlockMap<'_>, b: &BlockRef<'_>) -> Option<GroupKey> {
    match by {
        GroupBy::Reserved => Some(GroupKey::Reserved(b.header.reserved)),
        GroupBy::Kind => Some(kind_key(blocks, b)),
        GroupBy::Closure => (b.header.tag == ocaml::CLOSURE_TAG).then(|| kind_key(blocks, b)),
        GroupBy::Root | GroupBy::Type => None,
    }
}

pub fn key_name(names: &Names<'_>, key: &GroupKey) -> String {
    match *key {
        GroupKey::Reserved(v) => format!("reserved {v}"),
        GroupKey::Structure(s) => s.name().to_string(),
        GroupKey::Block { tag, size } => format!("{} tag {tag} size {size}", ocaml::tag_name(tag)),
        GroupKey::Tagged(t) => ocaml::tag_name(t).to_string(),
        GroupKey::Closure(code) => format!("closure {}", names.closure_function(code)),
        GroupKey::Custom(ops) => ocaml::custom_block_name(names.custom_identifier(ops)),
        GroupKey::Type(t) => format!("type {t}"),
    }
}
