//! What each exported node is called and which of DevTools' node types it has. The names are
//! the analyser's: module blocks `module Foo`, closures by function and `file:line`, custom
//! blocks by their operations' identifier, other blocks by their OCaml type when the snapshot
//! has names (`Cache_leak.entry`, as `top --by type` names them), else by kind (`block tag 0
//! size 3`, as `top --by kind` names them; a stdlib hash table `Hashtbl`), strings by their
//! contents.

use super::strings::StringTable;
use super::sweep::{for_each_block, freeable};
use heapsnap_analyze::{
    key_name, kind_key, ocaml, string_preview, AnalysedHeap, Analysis, GroupKey, HeapGraph, NodeId, Structure, Typing, NO_TYPE, SUPER_ROOT,
};
use heapsnap_format::RootKind;
use rayon::prelude::*;
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

/// Type and name (string id) of every exported node, by slot, and which are a stdlib
/// `Hashtbl` (their field 1 is the `data` property).
pub struct NodeNames {
    pub kind: Vec<u8>,
    pub name: Vec<u32>,
    pub hashtbl: Vec<bool>,
    /// Self size: what freeing the block would give back (0 for static data and synthetic nodes).
    pub size: Vec<u64>,
}

/// Nodes named per chunk, each chunk on a core with its own strings.
const CHUNK: usize = 1 << 14;
/// In a chunk's names: an index in its kinds rather than in its strings.
const KIND_BIT: u32 = 1 << 31;

/// One chunk's names: indices in its own strings, or (with [`KIND_BIT`]) in its own kinds.
struct LocalNames {
    kind: Vec<u8>,
    name: Vec<u32>,
    hashtbl: Vec<bool>,
    size: Vec<u64>,
    strings: Vec<String>,
    kinds: Vec<Label>,
}

/// What names the nodes that are not named one by one: their kind, or their OCaml type.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Label {
    Kind(GroupKey),
    Type(u32),
}

/// Names every node of `order`; `preview` is the most bytes of a string shown in its name (0:
/// strings are all named `string`). Recognising structures and previewing strings is done on
/// every core; the names are then interned in `table` in node order (the analysis's symbol
/// names, which name closures, are read on this thread only).
pub fn name_nodes(a: &Analysis<'_>, order: &[NodeId], preview: usize, table: &mut StringTable) -> NodeNames {
    // Module blocks, found from the global roots (a few per compilation unit).
    let modules: FxHashMap<NodeId, &str> = a
        .snap
        .roots()
        .iter()
        .filter(|r| matches!(r.root_kind(), RootKind::Global | RootKind::DynGlobal) && r.slot != 0)
        .filter_map(|r| r.slot.checked_sub(8 * r.origin))
        .filter_map(|x| a.node_at(x).ok())
        .filter_map(|v| Some((v, a.module_of(v)?)))
        .collect();
    let graph = &a.graph;
    let typing = a.typing();
    let locals: Vec<LocalNames> = order.par_chunks(CHUNK).map(|chunk| name_chunk(graph, typing, &modules, chunk, preview)).collect();
    let mut out = NodeNames {
        kind: Vec::with_capacity(order.len()),
        name: Vec::with_capacity(order.len()),
        hashtbl: Vec::with_capacity(order.len()),
        size: Vec::with_capacity(order.len()),
    };
    let mut by_kind: FxHashMap<Label, u32> = FxHashMap::default();
    for local in locals {
        // Interned in node order (a string's id is the order it first appears in, as before
        // the naming was parallel); each of a chunk's strings names one node.
        let mut strings: Vec<Option<String>> = local.strings.into_iter().map(Some).collect();
        let mut kinds: Vec<Option<u32>> = vec![None; local.kinds.len()];
        for &l in &local.name {
            let id = if l & KIND_BIT != 0 {
                let k = (l & !KIND_BIT) as usize;
                *kinds[k].get_or_insert_with(|| {
                    *by_kind.entry(local.kinds[k]).or_insert_with(|| match local.kinds[k] {
                        Label::Kind(key) => table.intern(&key_name(&a.names, &key)),
                        Label::Type(t) => table.intern(typing.and_then(|ty| ty.type_name(t)).unwrap_or("?")),
                    })
                })
            } else {
                table.intern_owned(strings[l as usize].take().expect("one string per named node"))
            };
            out.name.push(id);
        }
        out.kind.extend_from_slice(&local.kind);
        out.hashtbl.extend_from_slice(&local.hashtbl);
        out.size.extend_from_slice(&local.size);
    }
    out
}

fn name_chunk(
    graph: &HeapGraph<'_>,
    typing: Option<&Typing>,
    modules: &FxHashMap<NodeId, &str>,
    chunk: &[NodeId],
    preview: usize,
) -> LocalNames {
    let blocks = &graph.blocks;
    let mut kind_ids: FxHashMap<Label, u32> = FxHashMap::default();
    let n = chunk.len();
    let mut local = LocalNames {
        kind: vec![HIDDEN; n],
        name: vec![u32::MAX; n],
        hashtbl: vec![false; n],
        size: vec![0; n],
        strings: Vec::new(),
        kinds: Vec::new(),
    };
    let text = |strings: &mut Vec<String>, s: String| {
        strings.push(s);
        strings.len() as u32 - 1
    };
    for (i, &v) in chunk.iter().enumerate() {
        if v == SUPER_ROOT {
            local.kind[i] = SYNTHETIC;
            local.name[i] = text(&mut local.strings, ROOT_NAME.to_string());
        } else if let Some(root_kind) = graph.root_kind_of(v) {
            local.kind[i] = SYNTHETIC;
            local.name[i] = text(&mut local.strings, format!("({root_kind} roots)"));
        }
    }
    for_each_block(blocks, chunk, |i, b| {
        let tag = b.header.tag;
        let v = chunk[i];
        local.size[i] = freeable(blocks, &b);
        let (k, name) = if let Some(m) = modules.get(&v) {
            (OBJECT, text(&mut local.strings, format!("module {m}")))
        } else if tag == ocaml::STRING_TAG && preview > 0 {
            (STRING, text(&mut local.strings, string_name(b.fields, preview)))
        } else {
            let key = kind_key(blocks, &b);
            local.hashtbl[i] = key == GroupKey::Structure(Structure::Hashtbl);
            // With OCaml names, a typed block is named by its type, as `top --by type` names it.
            let t = typing.map_or(NO_TYPE, |ty| ty.type_id(v));
            let label = if t == NO_TYPE { Label::Kind(key) } else { Label::Type(t) };
            let id = *kind_ids.entry(label).or_insert_with(|| {
                local.kinds.push(label);
                local.kinds.len() as u32 - 1
            });
            (type_of_tag(tag), KIND_BIT | id)
        };
        local.kind[i] = k;
        local.name[i] = name;
    });
    for name in local.name.iter_mut().filter(|n| **n == u32::MAX) {
        *name = text(&mut local.strings, "(unknown)".to_string());
    }
    local
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
