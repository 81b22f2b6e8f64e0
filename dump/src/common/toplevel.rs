//! The bytecode toplevel's bindings (`ocaml`, and toplevels made with `ocamlmktop`): each value
//! a session binds is kept in the toplevel's own table, `Topeval.toplevel_value_bindings : Obj.t
//! String.Map.t ref` (toplevel/byte/topeval.ml, the same from 4.14 to 5.3), keyed by the
//! binding's unique name (`tbl/283`: `Ident.unique_toplevel_name`). Read from the copied heap,
//! each becomes a root named after its identifier, so that reports say which binding of the
//! session holds what.

use super::copied_world::{CapturedRoot, RootName};
use super::regions::{CapturedRegion, RegionIndex};
use heapsnap_format::{RootKind, NO_DOMAIN, ROOT_FLAG_BINDING};
use heapsnap_values::HeaderFormat;
use std::collections::HashMap;

const CLOSURE_TAG: u8 = 247;

/// The function whose closure holds the table.
const GETVALUE: &str = "Topeval.getvalue";

/// The most bindings read: a corrupt tree is cut here.
const MAX_BINDINGS: usize = 1 << 22;

/// The roots of a toplevel's bindings, read from `Topeval`'s module block at `topeval` (or
/// `Toploop`'s, which includes it: `ocaml` is `expunge`d of Topeval's name). The table is not
/// exported (topeval.mli): it is the `ref` that the closure of `Topeval.getvalue` holds in its
/// environment, found by `function_at` (the bytecode's functions, by code pointer). A key is
/// the binding's name (`Translmod.toplevel_name`: its identifier, or `name/stamp` for an
/// alias).
pub fn bindings(
    regions: &[CapturedRegion],
    topeval: u64,
    format: HeaderFormat,
    function_at: impl Fn(u64) -> Option<String>,
) -> Vec<CapturedRoot> {
    let index = RegionIndex::new(regions);
    let word = |a: u64| index.word(a);
    let fields = |block: u64| -> Option<(u8, u64)> {
        let header = word(block.checked_sub(8)?)?;
        Some(((header & 0xff) as u8, format.wosize(header)))
    };
    let is_block = |v: u64| v & 1 == 0 && v != 0;
    let string = |v: u64| -> Option<String> {
        let (tag, size) = fields(v)?;
        if tag != heapsnap_values::STRING_TAG || size == 0 || size > 64 {
            return None;
        }
        let bytes: Vec<u8> = (0..size).flat_map(|i| word(v + 8 * i).unwrap_or(0).to_le_bytes()).collect();
        String::from_utf8(super::program::ocaml_string(&bytes)?.to_vec()).ok()
    };
    let fields_of = |block: u64| -> Vec<u64> {
        let count = fields(block).map_or(0, |(_, n)| n.min(256));
        (0..count).filter_map(|k| word(block + 8 * k)).filter(|&v| is_block(v)).collect()
    };
    let getvalue = fields_of(topeval)
        .into_iter()
        .filter(|&v| fields(v).is_some_and(|(tag, _)| tag == CLOSURE_TAG) && word(v).and_then(&function_at).as_deref() == Some(GETVALUE));
    let candidates: Vec<u64> = getvalue.flat_map(fields_of).collect();
    for field in candidates {
        // A ref: one field, holding a map node (l, key, value, r, height) or the empty map.
        if fields(field) != Some((0, 1)) {
            continue;
        }
        let Some(tree) = word(field) else { continue };
        let mut found = Vec::new();
        let mut todo = vec![tree];
        let mut is_table = true;
        while let Some(node) = todo.pop() {
            if node == 1 {
                continue; // the empty map, Val_int(0)
            }
            if !is_block(node) || fields(node) != Some((0, 5)) || found.len() >= MAX_BINDINGS {
                is_table = false;
                break;
            }
            let Some(key) = word(node + 8).and_then(string) else {
                is_table = false;
                break;
            };
            let (name, stamp) = match key.rsplit_once('/').map(|(n, s)| (n, s.parse::<u64>())) {
                Some((name, Ok(stamp))) => (name.to_string(), stamp),
                _ => (key, 0),
            };
            found.push((name, stamp, node + 16, word(node + 16).unwrap_or(1)));
            todo.extend([word(node).unwrap_or(1), word(node + 24).unwrap_or(1)]);
        }
        if !is_table || found.is_empty() {
            continue;
        }
        let mut latest: HashMap<&str, u64> = HashMap::new();
        for (name, stamp, _, _) in &found {
            let l = latest.entry(name).or_insert(*stamp);
            *l = (*l).max(*stamp);
        }
        let mut roots: Vec<CapturedRoot> = found
            .iter()
            .map(|(name, stamp, slot, value)| {
                let shadowed = latest.get(name.as_str()) != Some(stamp);
                let label = if shadowed { format!("{name} (toplevel, shadowed)") } else { format!("{name} (toplevel)") };
                CapturedRoot {
                    kind: RootKind::Global,
                    domain: NO_DOMAIN,
                    flags: ROOT_FLAG_BINDING,
                    thread: 0,
                    slot: *slot,
                    value: *value,
                    origin: *stamp,
                    name: RootName::Text(label),
                }
            })
            .collect();
        roots.sort_by_key(|r| r.origin);
        return roots;
    }
    Vec::new()
}
