//! Writing a capture as a snapshot file (after the target has been resumed).

use crate::common::copied_world::{Capture, RootName};
use crate::elf::{symbol_holding, Executable, Symbol};
use crate::error::Result;
use heapsnap_format::{CustomOpsRecord, Metadata, RegionHeader, RootRecord, SnapshotWriter, StrId, SymbolKind, SymbolRecord};
use std::path::{Path, PathBuf};

/// Writes `cap` to `path` (atomically, mode 0600). Returns the final path and the file size.
/// `exe` is the target's executable, loaded at `bias`.
pub fn write(exe: &Executable, bias: u64, cap: &Capture, metadata: &Metadata, path: &Path, with_dwarf: bool) -> Result<(PathBuf, u64)> {
    let mut w = SnapshotWriter::create(path)?;
    w.write_metadata(metadata)?;

    let mut regions: Vec<_> = cap.regions.iter().collect();
    regions.sort_by_key(|r| r.base);
    for r in regions {
        let header = RegionHeader {
            kind: r.kind.code(),
            domain: r.domain,
            flags: 0,
            base: r.base,
            block_wsize: r.block_wsize,
            first_block: r.first_block,
            owner: r.owner,
        };
        w.write_region(&header, &r.bytes)?;
    }

    let mut plugin_symbols: Vec<&Symbol> = cap.plugin_symbols.iter().collect();
    plugin_symbols.sort_by_key(|s| (s.address, std::cmp::Reverse(s.size)));
    let roots: Vec<RootRecord> = cap
        .roots
        .iter()
        .map(|r| {
            let name = match &r.name {
                RootName::None => None,
                RootName::Text(t) => Some(t.clone()),
                RootName::CodeAt(a) | RootName::DataAt(a) => exe
                    .symbol_at(a.wrapping_sub(bias))
                    .map(|s| s.name.as_str())
                    .or_else(|| symbol_holding(&plugin_symbols, |s| *s, *a).map(|s| s.name.as_str()))
                    .map(str::to_string),
            };
            RootRecord {
                kind: r.kind.code(),
                domain: r.domain,
                flags: r.flags,
                thread: r.thread,
                slot: r.slot,
                value: r.value,
                origin: r.origin,
                name: name.map_or(StrId::NONE, |n| w.intern(&n)),
                reserved: 0,
            }
        })
        .collect();
    w.write_roots(&roots)?;

    // The executable's symbols (moved by its load bias), then the plugins' (already moved).
    let exe_symbols = exe.symbols.iter().filter(|s| s.address != 0).map(|s| (s.address.wrapping_add(bias), s.size, &s.name, s.is_function));
    let plugin_symbols = plugin_symbols.iter().map(|s| (s.address, s.size, &s.name, s.is_function));
    let mut symbols: Vec<SymbolRecord> = exe_symbols
        .chain(plugin_symbols)
        .map(|(start, size, name, is_function)| SymbolRecord {
            start,
            end: start.saturating_add(size),
            name: w.intern(name),
            kind: if is_function { SymbolKind::Function } else { SymbolKind::Data }.code(),
        })
        .collect();
    w.write_symbols(&mut symbols)?;

    if with_dwarf {
        for (name, bytes) in exe.dwarf_sections() {
            w.write_dwarf(name, &bytes)?;
        }
        // A plugin loaded twice at one address (or a hostile file) repeats a section: once is enough.
        let mut written = std::collections::HashSet::new();
        for (bias, name, bytes) in &cap.plugin_dwarf {
            if written.insert((*bias, *name)) {
                w.write_plugin_dwarf(*bias, name, bytes)?;
            }
        }
    }

    let ops: Vec<CustomOpsRecord> =
        cap.custom_ops.iter().map(|(address, id)| CustomOpsRecord { address: *address, identifier: w.intern(id), reserved: 0 }).collect();
    w.write_custom_ops(&ops)?;
    w.write_ephemerons(&cap.ephemerons)?;
    if !cap.free_blocks.is_empty() {
        w.write_free_blocks(&cap.free_blocks)?;
    }
    if let Some(memprof) = &cap.memprof {
        w.write_memprof(memprof)?;
    }
    if !cap.memprof_frames.is_empty() {
        w.write_memprof_frames(&cap.memprof_frames)?;
    }
    w.write_load_bias(bias)?;
    let final_path = w.finish()?;
    let size = std::fs::metadata(&final_path).map(|m| m.len()).unwrap_or(0);
    Ok((final_path, size))
}
