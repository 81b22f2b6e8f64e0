//! Static data of natdynlinked plugins (`.cmxs` files loaded with `Dynlink`).
//!
//! OCaml registers a plugin's frametables, global roots and code with the runtime
//! (dynlink_nat.c), but not its data segments: `caml_data_segments` lists the executable's
//! units only. So a plugin's module blocks and structured constants are found here, from the
//! files the target maps: every mapped ELF shared object whose symbol table pairs
//! `caml<Unit>.data_begin` with `caml<Unit>.data_end` (`__data_begin`/`__data_end` in 4.14)
//! gives those spans, moved by where the file is loaded. Mappings come from
//! [`MemorySource::mappings`]: `/proc/PID/maps` for a process, the `NT_FILE` note for a core.
//!
//! Nothing is read unless the runtime's `caml_dyn_globals` list is non-empty: a program that
//! loaded no plugin pays one word read. The answer found while preparing a dump (the target
//! running) is handed to its stop, which keeps it as long as no plugin was registered in
//! between: the stop reads no file.
//!
//! A live process's files are read as it sees them (in a container, not the files at the same
//! paths here: [`crate::source::FileView`]). A file is trusted only if it is the one mapped:
//! its build id must be the bytes the target has at the note's address, and each span must fall in a mapping of that file at the
//! matching file offset. A file that is gone, unreadable or different gets a warning, and its
//! data is left out (pointers into it stay external), never a failure.
//!
//! The symbols and DWARF sections of a trusted file come along, with where it is loaded: they
//! name the plugin's module blocks (its `dynlink_global` roots) and the functions and source
//! lines of its closures in the snapshot, as the executable's do for its own units.

use crate::elf::Symbol;
use crate::source::{FileView, Mapping, MemorySource, ReadExt};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, ObjectSymbolTable};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// What [`data_spans`] found: the spans (target addresses, sorted, disjoint) and what could
/// not be used.
#[derive(Clone, Debug, Default)]
pub struct PluginData {
    pub spans: Vec<(u64, u64)>,
    /// The loaded plugins' symbols, at target addresses.
    pub symbols: Vec<Symbol>,
    /// The loaded plugins' DWARF sections: (load bias, section name, bytes). Shared, not
    /// copied, when the stop reuses what the preparation found.
    pub dwarf: Vec<(u64, &'static str, Arc<[u8]>)>,
    pub warnings: Vec<String>,
    /// The head of `caml_dyn_globals` this was found for (`None`: not known).
    head: Option<u64>,
}

/// The OCaml data of one shared object file, at link-time addresses.
#[derive(Debug, Default)]
struct PluginFile {
    /// Page of the first loadable segment: what a mapping at file offset 0 starts with.
    first_segment_vaddr: u64,
    /// Each unit's data: (begin, end, file offset of begin).
    units: Vec<(u64, u64, u64)>,
    /// Link-time address and bytes of `.note.gnu.build-id`.
    build_id: Option<(u64, Vec<u8>)>,
    /// Its defined functions and data objects.
    symbols: Vec<Symbol>,
    /// Its DWARF sections (link-time addresses).
    dwarf: Vec<(&'static str, Arc<[u8]>)>,
}

/// The spans of static data of every plugin the target has loaded (not the executable's: see
/// each family's static spans). `earlier` is what a previous call found in the same
/// process (the preparation of this dump): it is kept when no plugin was registered since.
///
/// `dyn_globals` is the target address of the runtime's `caml_dyn_globals` list, when it is
/// known; `data_segments` that of `caml_data_segments`, in the executable.
pub fn data_spans(
    dyn_globals: Option<u64>,
    data_segments: Option<u64>,
    source: &dyn MemorySource,
    earlier: Option<&PluginData>,
) -> PluginData {
    // Registering a plugin's units prepends their globals to `caml_dyn_globals` (plugins are
    // never unloaded): while it is empty no plugin's data can be reached, and while its head
    // is the same the plugins are those found last time.
    let head = match dyn_globals.map(|h| source.read_u64(h)) {
        Some(Ok(0)) => return PluginData::default(),
        Some(Ok(first)) => Some(first),
        _ => None,
    };
    if let Some(found) = earlier.filter(|e| head.is_some() && e.head == head) {
        if found.spans.iter().all(|&(b, _)| source.read_u64(b).is_ok()) {
            return found.clone();
        }
    }
    PluginData { head, ..find(data_segments, source) }
}

fn find(data_segments: Option<u64>, source: &dyn MemorySource) -> PluginData {
    let mut out = PluginData::default();
    let mappings = match source.mappings() {
        Ok(m) => m,
        Err(e) => {
            out.warnings.push(format!("cannot list the target's mappings to find Dynlink plugins: {e}"));
            return out;
        }
    };
    // The executable's data is listed by `caml_data_segments`: skip the file that holds it.
    let exe_path = data_segments.and_then(|a| mappings.iter().find(|m| m.start <= a && a < m.end)).and_then(|m| m.path.clone());
    let mut paths: Vec<&std::path::PathBuf> = mappings
        .iter()
        .filter(|m| m.offset == 0 && m.readable)
        .filter_map(|m| m.path.as_ref())
        .filter(|p| Some(*p) != exe_path.as_ref())
        .collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        let loads: Vec<&Mapping> = mappings.iter().filter(|m| m.offset == 0 && m.path.as_ref() == Some(path)).collect();
        let file = match open_mapped(source, path, &mappings) {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(why) => {
                // A shared object is mapped as several segments, code among them (a core only
                // knows a segment holds code from the file): a data file that is gone is no loss.
                let of_file = || mappings.iter().filter(|m| m.path.as_ref() == Some(path));
                if of_file().any(|m| m.executable) || of_file().count() >= 2 {
                    out.warnings.push(format!(
                        "mapped file {}: {why}; if it is an OCaml plugin, its static data is not in the snapshot",
                        path.display()
                    ));
                }
                continue;
            }
        };
        for load in loads {
            let bias = load.start.wrapping_sub(file.first_segment_vaddr);
            if let Err(why) = check_build_id(source, &file, bias) {
                out.warnings.push(format!(
                    "plugin {} loaded at {:#x}: {why}; its static data is not in the snapshot",
                    path.display(),
                    load.start
                ));
                continue;
            }
            out.symbols.extend(file.symbols.iter().map(|s| Symbol { address: bias.wrapping_add(s.address), ..s.clone() }));
            out.dwarf.extend(file.dwarf.iter().map(|(name, bytes)| (bias, *name, bytes.clone())));
            for &(begin, end, offset) in &file.units {
                // Word-aligned, as `caml_data_segments` spans are (the bias is page-aligned).
                let (b, e) = (bias.wrapping_add(begin) & !7, bias.wrapping_add(end).div_ceil(8) * 8);
                if !mapped_at(&mappings, path, b, e, offset.wrapping_sub(begin & 7)) {
                    out.warnings.push(format!(
                        "plugin {}: data at {b:#x}..{e:#x} is not where the file maps it; left out of the snapshot",
                        path.display()
                    ));
                    continue;
                }
                if source.read_u64(b).is_err() || source.read_u64(e - 8).is_err() {
                    out.warnings
                        .push(format!("plugin {}: data at {b:#x}..{e:#x} cannot be read; left out of the snapshot", path.display()));
                    continue;
                }
                out.spans.push((b, e));
            }
        }
    }
    out.spans = merge(out.spans);
    out
}

/// Whether `b..e` lies in one mapping of `path` that maps file offset `offset` at `b`.
fn mapped_at(mappings: &[Mapping], path: &Path, b: u64, e: u64, offset: u64) -> bool {
    b < e
        && mappings
            .iter()
            .any(|m| m.path.as_deref() == Some(path) && m.start <= b && e <= m.end && m.offset.wrapping_add(b - m.start) == offset)
}

/// Sorted, with touching or overlapping spans merged (units' data follow each other).
pub(crate) fn merge(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (b, e) in spans {
        match merged.last_mut() {
            Some(last) if b <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((b, e)),
        }
    }
    merged
}

/// The target's copy of the build id must be the file's: else the file on disk was replaced
/// since it was loaded.
fn check_build_id(source: &dyn MemorySource, file: &PluginFile, bias: u64) -> Result<(), String> {
    let Some((address, bytes)) = &file.build_id else { return Ok(()) };
    match source.read_bytes(bias.wrapping_add(*address), bytes.len()) {
        Ok(mapped) if &mapped == bytes => Ok(()),
        Ok(_) => Err("the file on disk is not the one loaded (its build id differs)".into()),
        Err(e) => Err(format!("cannot read its build id in the target ({e})")),
    }
}

/// The OCaml data of the file mapped as `path`, if it has any: `Ok(None)` for a file that is
/// not an ELF shared object or holds no OCaml unit. A live process's file is read as it sees
/// it ([`FileView::open_mapped`]: the mapped file itself where `/proc/PID/map_files` may be
/// read, which needs CAP_SYS_ADMIN, else the path inside its root), never the file at the same
/// path here; it must be the one loaded at each of its mappings (its build id).
fn open_mapped(source: &dyn MemorySource, path: &Path, mappings: &[Mapping]) -> Result<Option<PluginFile>, String> {
    let loads = || mappings.iter().filter(|m| m.offset == 0 && m.path.as_deref() == Some(path));
    let Some(first) = loads().min_by_key(|m| m.start) else { return Ok(None) };
    let opened = FileView::of(source).open_mapped(first).map_err(|e| format!("cannot read it ({e})"))?;
    let Some(found) = parse(&opened.file)? else { return Ok(None) };
    for m in loads() {
        check_build_id(source, &found, m.start.wrapping_sub(found.first_segment_vaddr))?;
    }
    Ok(Some(found))
}

fn parse(file: &std::fs::File) -> Result<Option<PluginFile>, String> {
    // SAFETY: a read-only private mapping, dropped before we return; a file changed under us
    // gives wrong bytes, which the build id check and the bounds checks of `object` catch.
    let map = unsafe { memmap2::Mmap::map(file) }.map_err(|e| format!("cannot map it ({e})"))?;
    let Ok(elf) = object::File::parse(&*map) else { return Ok(None) };
    if elf.kind() != object::ObjectKind::Dynamic || elf.architecture() != object::Architecture::X86_64 {
        return Ok(None);
    }
    Ok(ocaml_data(&elf))
}

/// The units' data spans of a shared object, and its symbols, from `.symtab` (or `.dynsym` if
/// stripped).
fn ocaml_data(elf: &object::File<'_>) -> Option<PluginFile> {
    let mut begins: HashMap<&[u8], (u64, Option<u64>)> = HashMap::new();
    let mut ends: HashMap<&[u8], u64> = HashMap::new();
    let mut symbols = Vec::new();
    for table in [elf.symbol_table(), elf.dynamic_symbol_table()].into_iter().flatten() {
        for sym in table.symbols() {
            let Ok(name) = sym.name_bytes() else { continue };
            if sym.is_undefined() || name.is_empty() {
                continue;
            }
            if matches!(sym.kind(), object::SymbolKind::Text | object::SymbolKind::Data | object::SymbolKind::Unknown) && sym.address() != 0
            {
                symbols.push(Symbol {
                    name: String::from_utf8_lossy(name).into_owned(),
                    address: sym.address(),
                    size: sym.size(),
                    is_function: sym.kind() == object::SymbolKind::Text,
                    is_global: sym.is_global(),
                    file: None,
                });
            }
            if !name.starts_with(b"caml") {
                continue;
            }
            if let Some(unit) = name.strip_suffix(b".data_begin").or_else(|| name.strip_suffix(b"__data_begin")) {
                let offset = sym
                    .section_index()
                    .and_then(|i| elf.section_by_index(i).ok())
                    .and_then(|s| Some(s.file_range()?.0 + sym.address().checked_sub(s.address())?));
                begins.insert(unit, (sym.address(), offset));
            } else if let Some(unit) = name.strip_suffix(b".data_end").or_else(|| name.strip_suffix(b"__data_end")) {
                ends.insert(unit, sym.address());
            }
        }
        if !begins.is_empty() {
            break;
        }
        symbols.clear();
    }
    let mut units: Vec<(u64, u64, u64)> = begins
        .iter()
        .filter_map(|(unit, &(begin, offset))| {
            let end = *ends.get(unit)?;
            (begin < end).then_some((begin, end, offset?))
        })
        .collect();
    if units.is_empty() {
        return None;
    }
    units.sort_unstable();
    let first_segment_vaddr = elf.segments().map(|s| s.address()).min()? & !0xfff;
    let build_id =
        elf.section_by_name(".note.gnu.build-id").and_then(|s| Some((s.address(), s.data().ok()?.to_vec()))).filter(|(_, b)| !b.is_empty());
    let dwarf = crate::elf::DWARF_SECTIONS
        .iter()
        .filter_map(|&name| Some((name, Arc::from(elf.section_by_name(name)?.uncompressed_data().ok()?.as_ref()))))
        .collect();
    Some(PluginFile { first_segment_vaddr, units, build_id, symbols, dwarf })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, end: u64, offset: u64, path: &str, executable: bool) -> Mapping {
        Mapping { start, end, readable: true, executable, offset, path: Some(std::path::PathBuf::from(path)), inode: None }
    }

    #[test]
    fn spans_must_be_mapped_from_their_file_offset() {
        let p = Path::new("/p/plugin.cmxs");
        let maps =
            [map(0x7000_0000, 0x7000_1000, 0, "/p/plugin.cmxs", false), map(0x7000_4000, 0x7000_5000, 0x3000, "/p/plugin.cmxs", false)];
        // vaddr 0x4390 at file offset 0x3390, loaded at 0x7000_0000.
        assert!(mapped_at(&maps, p, 0x7000_4390, 0x7000_4510, 0x3390));
        assert!(!mapped_at(&maps, p, 0x7000_4390, 0x7000_4510, 0x4390), "wrong file offset");
        assert!(!mapped_at(&maps, p, 0x7000_4390, 0x7000_5010, 0x3390), "runs past the mapping");
        assert!(!mapped_at(&maps, Path::new("/other.so"), 0x7000_4390, 0x7000_4510, 0x3390), "another file");
    }

    #[test]
    fn touching_units_merge() {
        assert_eq!(merge(vec![(0x30, 0x40), (0x10, 0x20), (0x20, 0x28), (0x38, 0x50)]), vec![(0x10, 0x28), (0x30, 0x50)]);
    }

    /// This test binary is an ELF file but not a shared object with OCaml units.
    #[test]
    fn files_without_ocaml_units_are_not_plugins() {
        let open = |p: &Path| std::fs::File::open(p).unwrap();
        assert!(matches!(parse(&open(&std::env::current_exe().unwrap())), Ok(None)));
        assert!(matches!(parse(&open(Path::new("/etc/hostname"))), Ok(None) | Err(_)));
    }
}
