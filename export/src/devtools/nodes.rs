//! What each exported node is called and which of DevTools' node types it has. The names are
//! the analyser's: module blocks `module Foo`, closures by function and `file:line`, custom
//! blocks by their operations' identifier, other blocks by kind (`block tag 0 size 3`, as
//! `top --by kind` names them; a stdlib hash table `Hashtbl`), strings by their contents.

use super::strings::StringTable;
use heapsnap_analyze::blocks::NodeId;
use heapsnap_analyze::graph::SUPER_ROOT;
use heapsnap_analyze::groups::{key_name, kind_key, GroupKey};
use heapsnap_analyze::names::string_preview;
use heapsnap_analyze::ocaml;
use heapsnap_analyze::Analysis;
use rustc_hash::FxHashMap;

/// DevTools' node types, in V8's order (`snapshot.meta.node_types[0]`).
pub const NODE_TYPES: [&str; 15] = [
    "hidden",
    "array",
    "string",
    "object",
    "code",
    "closure",
    "regexp",
    "number",
    "native",
    "synthetic",
    "concatenated string",
    "sliced string",
    "symbol",
    "bigint",
    "object shape",
];
pub const HIDDEN: u8 = 0;
pub const ARRAY: u8 = 1;
pub const STRING: u8 = 2;
pub const OBJECT: u8 = 3;
pub const CLOSURE: u8 = 5;
pub const NUMBER: u8 = 7;
pub const NATIVE: u8 = 8;
pub const SYNTHETIC: u8 = 9;

/// The name of the synthetic root (node 0).
pub const ROOT_NAME: &str = "(OCaml roots)";

/// Type and name (string id) of every exported node, by slot.
pub struct NodeNames {
    pub kind: Vec<u8>,
    pub name: Vec<u32>,
}

/// Names every node of `order`; `preview` is the most bytes of a string shown in its name (0:
/// strings are all named `string`).
pub fn name_nodes(a: &Analysis<'_>, order: &[NodeId], preview: usize, table: &mut StringTable) -> NodeNames {
    let blocks = &a.graph.blocks;
    let mut by_kind: FxHashMap<GroupKey, (u8, u32)> = FxHashMap::default();
    let mut kind = Vec::with_capacity(order.len());
    let mut name = Vec::with_capacity(order.len());
    for &v in order {
        let (k, n) = if v == SUPER_ROOT {
            (SYNTHETIC, table.intern(ROOT_NAME))
        } else if let Some(root_kind) = a.graph.root_kind_of(v) {
            (SYNTHETIC, table.intern(&format!("({root_kind} roots)")))
        } else if let Some(b) = blocks.block(v) {
            let tag = b.header.tag;
            if let Some(m) = a.module_of(v) {
                (OBJECT, table.intern(&format!("module {m}")))
            } else if tag == ocaml::STRING_TAG && preview > 0 {
                (STRING, table.intern(&string_name(b.fields, preview)))
            } else {
                let key = kind_key(blocks, &b);
                *by_kind.entry(key).or_insert_with(|| (type_of_tag(tag), table.intern(&key_name(&a.names, &key))))
            }
        } else {
            (HIDDEN, table.intern("(unknown)"))
        };
        kind.push(k);
        name.push(n);
    }
    NodeNames { kind, name }
}

fn type_of_tag(tag: u8) -> u8 {
    match tag {
        ocaml::CLOSURE_TAG => CLOSURE,
        ocaml::STRING_TAG => STRING,
        ocaml::DOUBLE_TAG => NUMBER,
        ocaml::DOUBLE_ARRAY_TAG => ARRAY,
        ocaml::CUSTOM_TAG => NATIVE,
        ocaml::ABSTRACT_TAG => HIDDEN,
        _ => OBJECT,
    }
}

/// A string's contents as the analyser previews them, without the quotes (DevTools adds its
/// own): `req-000001`, or `aaaa...(1000 bytes)` when cut.
fn string_name(fields: &[u64], max: usize) -> String {
    let p = string_preview(fields, max);
    let inner = p.strip_prefix('"').unwrap_or(&p);
    match inner.rfind("\"...(") {
        Some(cut) if inner.ends_with(" bytes)") => format!("{}{}", &inner[..cut], &inner[cut + 1..]),
        _ => inner.strip_suffix('"').unwrap_or(inner).to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn string_names() {
        let bytes = *b"req-000001\0\0\0\0\0\x05";
        assert_eq!(super::string_name(bytemuck_cast(&bytes), 32), "req-000001");
        assert_eq!(super::string_name(bytemuck_cast(&bytes), 4), "req-...(10 bytes)");
    }

    fn bytemuck_cast(b: &[u8; 16]) -> &[u64] {
        // SAFETY-free: copy into words.
        Box::leak(Box::new([u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..].try_into().unwrap())]))
    }
}
