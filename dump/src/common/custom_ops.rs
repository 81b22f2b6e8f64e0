//! Custom blocks' operations (custom.c): the ones the runtime registered, and the ones custom
//! blocks of the captured heap point to. custom.c is the same in every family.

use crate::common::copied_world::Capture;
use crate::dwarf::TypeIndex;
use crate::error::Result;
use crate::source::{MemorySource, ReadExt};
use heapsnap_values::HeaderFormat;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// custom.c's registered custom operations (`custom_ops_table`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomLayout {
    pub list_ops: u64,
    pub list_next: u64,
    pub ops_identifier: u64,
}

pub fn custom(t: &TypeIndex) -> Result<CustomLayout> {
    Ok(CustomLayout {
        list_ops: t.offset_of("custom_operations_list", "ops")?,
        list_next: t.offset_of("custom_operations_list", "next")?,
        ops_identifier: t.offset_of("custom_operations", "identifier")?,
    })
}

/// The custom operations the runtime registered (custom.c's `custom_ops_table`, at `table`).
pub fn registered_custom_ops(source: &dyn MemorySource, table: u64, c: &CustomLayout) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut cell = source.read_u64(table).unwrap_or(0);
    let mut guard = 0;
    while cell != 0 && guard < 100_000 {
        guard += 1;
        let Ok(ops) = source.read_u64(cell + c.list_ops) else { break };
        if let Ok(id) = source.read_u64(ops + c.ops_identifier).and_then(|p| source.read_c_string(p, 256)) {
            out.push((ops, id));
        }
        cell = source.read_u64(cell + c.list_next).unwrap_or(0);
    }
    out
}

/// Custom blocks' operations not in the registered list, with their identifiers, read from
/// the target (they are static data, so this may run after the target is resumed).
pub fn custom_ops_in_heap(c: &CustomLayout, source: &dyn MemorySource, cap: &Capture, format: HeaderFormat) -> Vec<(u64, String)> {
    let known: HashSet<u64> = cap.custom_ops.iter().map(|(a, _)| *a).collect();
    let mut found = HashSet::new();
    for r in &cap.regions {
        if !r.kind.holds_heap_blocks() {
            continue;
        }
        for (at, hd) in r.blocks(format) {
            if format.tag(hd) == heapsnap_values::CUSTOM_TAG && format.wosize(hd) >= 1 && at + 16 <= r.bytes.len() {
                let ops = r.word(at + 8);
                if !known.contains(&ops) {
                    found.insert(ops);
                }
            }
        }
    }
    let mut out: Vec<(u64, String)> = found
        .into_iter()
        .filter_map(|ops| {
            let id = source.read_u64(ops + c.ops_identifier).and_then(|p| source.read_c_string(p, 256)).ok()?;
            Some((ops, id))
        })
        .collect();
    out.sort();
    out
}
