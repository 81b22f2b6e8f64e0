//! The target's executable: symbols, load bias, build id, unwind tables and DWARF sections.

use crate::error::{DumpError, Result};
use crate::source::{FileIdentity, Mapping, MemorySource};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// DWARF sections the analyser may need to name code locations, copied into snapshots.
pub const DWARF_SECTIONS: &[&str] = &[
    ".debug_info",
    ".debug_abbrev",
    ".debug_line",
    ".debug_str",
    ".debug_line_str",
    ".debug_ranges",
    ".debug_rnglists",
    ".debug_aranges",
    ".debug_addr",
    ".debug_str_offsets",
];

/// One symbol of the executable (or of a loaded plugin), at its link-time address (or, for a
/// plugin's in a capture, at its target address).
#[derive(Clone, Debug)]
pub struct Symbol {
    pub name: String,
    pub address: u64,
    pub size: u64,
    pub is_function: bool,
    pub is_global: bool,
    /// For a file-local symbol of `.symtab`, the source file its `STT_FILE` entry names.
    pub file: Option<String>,
}

/// The executable file, parsed once.
pub struct Executable {
    pub path: PathBuf,
    data: Vec<u8>,
    pub is_pie: bool,
    /// Link-time address of the first loadable segment (page-aligned).
    first_segment_vaddr: u64,
    pub symbols: Vec<Symbol>,
    by_name: HashMap<String, Vec<usize>>,
    /// Function and data symbols with a size, sorted by address (indices into `symbols`).
    by_address: Vec<usize>,
    pub build_id: Option<String>,
    /// Where `symbols` came from.
    pub symbols_from: SymbolTable,
    /// The separate debug-info file in use, if any (see the `debuginfo` module).
    pub debug_file: Option<DebugFile>,
}

/// Which symbol table the executable's symbols were read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolTable {
    /// `.symtab`: every symbol, file-local ones included.
    Symtab,
    /// `.dynsym` only (a stripped executable; OCaml links with `-Wl,-E`, so the runtime's and
    /// the program's global symbols are there, but not the runtime's file-static ones).
    Dynsym,
}

/// A separate debug-info file: its path, how it was found, and its bytes.
pub struct DebugFile {
    pub path: PathBuf,
    pub found_by: &'static str,
    data: Vec<u8>,
}

impl DebugFile {
    pub fn new(path: PathBuf, found_by: &'static str, data: Vec<u8>) -> DebugFile {
        DebugFile { path, found_by, data }
    }
}

impl Executable {
    pub fn open(path: &Path) -> Result<Executable> {
        let data = std::fs::read(path).map_err(|source| DumpError::Io { path: path.to_path_buf(), source })?;
        // Messages name the file, not the process's `/proc/PID/exe` link to it.
        let shown = if path.starts_with("/proc") { std::fs::read_link(path).ok() } else { None };
        Executable::from_bytes(data, shown.as_deref().unwrap_or(path))
    }

    /// A file of the target opened through its own view ([`crate::source::FileView`]), named
    /// by its path there.
    pub fn open_target_file(file: crate::source::TargetFile) -> Result<Executable> {
        let shown = file.shown.clone();
        let data = file.read_all().map_err(|source| DumpError::Io { path: shown.clone(), source })?;
        Executable::from_bytes(data, &shown)
    }

    /// The executable whose bytes are `data`, named `path` in messages.
    pub fn from_bytes(data: Vec<u8>, path: &Path) -> Result<Executable> {
        let elf_error = |message: String| DumpError::Elf { path: path.to_path_buf(), message };
        if let Some(what) = other_ocaml_build(&data) {
            return Err(elf_error(what.to_string()));
        }
        let file = object::File::parse(&*data).map_err(|e| elf_error(e.to_string()))?;
        let (is_pie, first_segment_vaddr) = check_and_place(&file, path)?;
        if is_debug_only(&file) {
            return Err(DumpError::DebugFileOnly { path: path.to_path_buf() });
        }
        let (symbols, symbols_from) = match file.symbol_table() {
            Some(_) => (read_symbols(file.symbols()), SymbolTable::Symtab),
            None => (read_symbols(file.dynamic_symbols()), SymbolTable::Dynsym),
        };
        let build_id = build_id_of(&file);
        drop(file);
        let mut exe = Executable {
            path: path.to_path_buf(),
            data,
            is_pie,
            first_segment_vaddr,
            symbols: Vec::new(),
            by_name: HashMap::new(),
            by_address: Vec::new(),
            build_id,
            symbols_from,
            debug_file: None,
        };
        exe.set_symbols(symbols);
        Ok(exe)
    }

    fn set_symbols(&mut self, symbols: Vec<Symbol>) {
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, s) in symbols.iter().enumerate() {
            by_name.entry(s.name.clone()).or_default().push(i);
        }
        let mut by_address: Vec<usize> = (0..symbols.len()).collect();
        by_address.sort_by_key(|&i| (symbols[i].address, std::cmp::Reverse(symbols[i].size)));
        (self.symbols, self.by_name, self.by_address) = (symbols, by_name, by_address);
    }

    /// Whether any symbol is known (from `.symtab`, `.dynsym` or an attached debug file).
    pub fn has_symbols(&self) -> bool {
        !self.symbols.is_empty()
    }

    /// Uses `debug` (a separate debug-info file of this very build) for DWARF and, when this
    /// executable has no `.symtab`, for symbols.
    pub fn attach_debug_file(&mut self, debug: DebugFile) -> Result<()> {
        let file = object::File::parse(&*debug.data).map_err(|e| DumpError::Elf { path: debug.path.clone(), message: e.to_string() })?;
        if self.symbols_from == SymbolTable::Dynsym && file.symbol_table().is_some() {
            let symbols = read_symbols(file.symbols());
            self.set_symbols(symbols);
            self.symbols_from = SymbolTable::Symtab;
        }
        drop(file);
        self.debug_file = Some(debug);
        Ok(())
    }

    /// Whether DWARF debug info is at hand (in the executable or its debug file).
    pub fn has_dwarf(&self) -> bool {
        self.debug_section_data(".debug_info").is_some()
    }

    /// A DWARF section's bytes, from the debug file when one is attached, else the executable.
    pub fn debug_section_data(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        if let Some(d) = &self.debug_file {
            if let Some(bytes) = section_bytes(&d.data, name) {
                return Some(bytes);
            }
        }
        self.section_data(name).map(|(_, b)| b)
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn object(&self) -> object::File<'_> {
        object::File::parse(&*self.data).expect("parsed once already")
    }

    /// How far the executable was moved at load time, from the target's mappings of `file`.
    pub fn load_bias(&self, mappings: &[Mapping], file: &FileIdentity) -> Result<u64> {
        load_bias(&self.path, self.is_pie, self.first_segment_vaddr, mappings, file)
    }

    /// Whether the target, with this file loaded `bias` bytes from its link-time addresses,
    /// holds this file's build-id note there: a file read again after the target loaded it
    /// may be another one at the same path. `Ok` for a file without a build id (nothing to
    /// check) or a note the target does not have in memory (a core that lacks the page).
    pub fn check_loaded(&self, bias: u64, source: &dyn MemorySource) -> std::result::Result<(), String> {
        build_id_loaded(&self.object(), bias, source)
    }

    /// Link-time addresses of every symbol called `name`.
    pub fn addresses_of(&self, name: &str) -> Vec<u64> {
        self.by_name.get(name).map(|v| v.iter().map(|&i| self.symbols[i].address).collect()).unwrap_or_default()
    }

    pub fn symbol(&self, name: &str) -> Option<&Symbol> {
        let indices = self.by_name.get(name)?;
        // Prefer a global definition over file-local ones of the same name.
        indices.iter().map(|&i| &self.symbols[i]).max_by_key(|s| s.is_global)
    }

    /// Link-time address of `name`, or a clear error.
    pub fn require(&self, name: &str) -> Result<u64> {
        self.symbol(name).map(|s| s.address).ok_or_else(|| DumpError::MissingSymbol { name: name.to_string() })
    }

    /// The symbol whose extent holds the link-time address `address`.
    pub fn symbol_at(&self, address: u64) -> Option<&Symbol> {
        symbol_holding(&self.by_address, |&i| &self.symbols[i], address)
    }

    /// The bytes of a section (decompressed if need be), and its link-time address.
    pub fn section_data(&self, name: &str) -> Option<(u64, Cow<'_, [u8]>)> {
        let file = object::File::parse(&*self.data).ok()?;
        let section = file.section_by_name(name)?;
        let bytes = section.uncompressed_data().ok()?;
        Some((section.address(), bytes))
    }

    /// Every DWARF section present among [`DWARF_SECTIONS`], with its bytes.
    pub fn dwarf_sections(&self) -> Vec<(&'static str, Cow<'_, [u8]>)> {
        DWARF_SECTIONS.iter().filter_map(|&name| self.debug_section_data(name).map(|b| (name, b))).collect()
    }
}

/// What a file that is no ELF executable but some other OCaml build is, to say so: heapsnap
/// reads programs run as machine code or by the bytecode interpreter, and a build for a
/// JavaScript engine keeps its heap in the engine's.
fn other_ocaml_build(data: &[u8]) -> Option<&'static str> {
    // (An executable linked with `-custom` is ELF, its bytecode appended: not this.)
    if data.starts_with(b"\x7fELF") {
        return None;
    }
    if data.starts_with(b"\0asm") {
        return Some("a WebAssembly module (wasm_of_ocaml?), whose OCaml heap lives in its engine's: heapsnap reads native programs and bytecode run by ocamlrun");
    }
    if data.len() >= 16 && data[data.len() - 12..].starts_with(b"Caml1999X") {
        return Some("a bytecode file: the program runs as ocamlrun (its #! line), the executable heapsnap reads; give --exe the interpreter, or nothing");
    }
    let head = &data[..data.len().min(4096)];
    let text = std::str::from_utf8(head).ok()?;
    let javascript = text.starts_with("#!/usr/bin/env node")
        || text.contains("js_of_ocaml")
        || text.contains("wasm_of_ocaml")
        || text.trim_start().starts_with("//# ");
    javascript.then_some("JavaScript (js_of_ocaml or wasm_of_ocaml?), whose OCaml heap lives in its engine's: heapsnap reads native programs and bytecode run by ocamlrun")
}

/// The symbol whose extent holds `address` (a sizeless one holds its own address only), among
/// `sorted`, whose symbols (`symbol` of each) are sorted by address, then longest first.
/// The bytes of section `name` of an ELF file, if it has them (a section that occupies no
/// bytes in the file, as code in a debug-info file, has none).
fn section_bytes<'d>(data: &'d [u8], name: &str) -> Option<Cow<'d, [u8]>> {
    let file = object::File::parse(data).ok()?;
    let section = file.section_by_name(name)?;
    if section.kind() == object::SectionKind::UninitializedData {
        return None;
    }
    match section.uncompressed_data().ok()? {
        Cow::Borrowed(b) => Some(Cow::Borrowed(b)),
        Cow::Owned(b) => Some(Cow::Owned(b)),
    }
}

/// A file whose code sections occupy no bytes: what `objcopy --only-keep-debug` writes.
fn is_debug_only(file: &object::File<'_>) -> bool {
    file.section_by_name(".text").is_some_and(|s| s.kind() == object::SectionKind::UninitializedData)
}

/// See [`Executable::check_loaded`]: `Err` says why the file is not the one loaded.
pub fn build_id_loaded(file: &object::File<'_>, bias: u64, source: &dyn MemorySource) -> std::result::Result<(), String> {
    let Some(section) = file.section_by_name(".note.gnu.build-id") else { return Ok(()) };
    let Ok(note) = section.data() else { return Ok(()) };
    let mut loaded = vec![0u8; note.len()];
    match source.read(bias.wrapping_add(section.address()), &mut loaded) {
        Ok(()) if loaded == note => Ok(()),
        Ok(()) => Err(format!(
            "it is not the file the target loaded: its build id {} is not the one in the target's memory",
            build_id_of(file).unwrap_or_default()
        )),
        Err(_) => Ok(()),
    }
}

pub(crate) fn build_id_of(file: &object::File<'_>) -> Option<String> {
    file.build_id().ok().flatten().map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
}

fn read_symbols<'d>(table: impl Iterator<Item = impl ObjectSymbol<'d>>) -> Vec<Symbol> {
    let mut symbols = Vec::new();
    // `.symtab` lists each file's local symbols after an STT_FILE entry naming it.
    let mut file: Option<String> = None;
    for sym in table {
        let Ok(name) = sym.name() else { continue };
        if sym.kind() == SymbolKind::File {
            file = (!name.is_empty()).then(|| name.to_string());
            continue;
        }
        if name.is_empty() || sym.is_undefined() {
            continue;
        }
        let is_function = sym.kind() == SymbolKind::Text;
        if !matches!(sym.kind(), SymbolKind::Text | SymbolKind::Data | SymbolKind::Unknown) {
            continue;
        }
        let is_global = sym.is_global();
        let file = if is_global { None } else { file.clone() };
        symbols.push(Symbol { name: name.to_string(), address: sym.address(), size: sym.size(), is_function, is_global, file });
    }
    symbols
}

pub fn symbol_holding<'a, T>(sorted: &[T], symbol: impl Fn(&T) -> &'a Symbol, address: u64) -> Option<&'a Symbol> {
    let after = sorted.partition_point(|t| symbol(t).address <= address);
    sorted[..after].iter().rev().take(16).map(symbol).find(|s| address < s.address.saturating_add(s.size.max(1)))
}

/// An x86-64 file with a symbol table: whether it is position-independent, and the page of its
/// first loadable segment.
fn check_and_place(file: &object::File<'_>, path: &Path) -> Result<(bool, u64)> {
    let elf_error = |message: String| DumpError::Elf { path: path.to_path_buf(), message };
    if file.architecture() != object::Architecture::X86_64 {
        return Err(elf_error(format!("architecture {:?} (only x86-64 is supported)", file.architecture())));
    }
    let is_pie = file.kind() == object::ObjectKind::Dynamic;
    let first_segment_vaddr = file.segments().map(|s| s.address()).min().ok_or_else(|| elf_error("no loadable segment".into()))? & !0xfff;
    Ok((is_pie, first_segment_vaddr))
}

fn load_bias(path: &Path, is_pie: bool, first_segment_vaddr: u64, mappings: &[Mapping], file: &FileIdentity) -> Result<u64> {
    if !is_pie {
        return Ok(0);
    }
    let first = mappings.iter().filter(|m| m.offset == 0 && file.maps(m)).map(|m| m.start).min().ok_or_else(|| DumpError::Elf {
        path: path.to_path_buf(),
        message: "cannot find where the executable is mapped in the target".into(),
    })?;
    Ok(first.wrapping_sub(first_segment_vaddr))
}

/// One symbol of an executable, found from its symbol table alone.
pub struct SymbolLocation {
    path: PathBuf,
    is_pie: bool,
    first_segment_vaddr: u64,
    /// Link-time address.
    pub address: u64,
}

impl SymbolLocation {
    /// How far the executable was moved at load time (see [`Executable::load_bias`]).
    pub fn load_bias(&self, mappings: &[Mapping], file: &FileIdentity) -> Result<u64> {
        load_bias(&self.path, self.is_pie, self.first_segment_vaddr, mappings, file)
    }
}

/// Finds the symbol `name` (a global definition preferred, as [`Executable::symbol`] does)
/// without [`Executable::open`]'s cost: the file is mapped, not read, and only its symbol table
/// is looked at, with no index built. For a watcher, which needs one variable of a program
/// that may have tens of thousands of symbols and MBs of DWARF.
pub fn locate_symbol(path: &Path, name: &str) -> Result<SymbolLocation> {
    let io = |source| DumpError::Io { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: a read-only private mapping; the file is a running program's executable, which
    // the kernel does not let anyone write while it runs (ETXTBSY).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    let elf = object::File::parse(&*map).map_err(|e| DumpError::Elf { path: path.to_path_buf(), message: e.to_string() })?;
    let (is_pie, first_segment_vaddr) = check_and_place(&elf, path)?;
    let address = elf
        .symbols()
        .chain(elf.dynamic_symbols())
        .filter(|s| !s.is_undefined() && s.name_bytes().is_ok_and(|n| n == name.as_bytes()))
        .max_by_key(|s| s.is_global())
        .map(|s| s.address())
        .ok_or_else(|| DumpError::MissingSymbol { name: name.to_string() })?;
    Ok(SymbolLocation { path: path.to_path_buf(), is_pie, first_segment_vaddr, address })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locating_one_symbol_agrees_with_the_full_index() {
        let path = std::env::current_exe().unwrap();
        let exe = Executable::open(&path).unwrap();
        let maps = crate::source::parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let found = locate_symbol(&path, "main").unwrap();
        assert_eq!(found.address, exe.require("main").unwrap());
        let file = FileIdentity::of(&path);
        assert_eq!(found.load_bias(&maps, &file).unwrap(), exe.load_bias(&maps, &file).unwrap());
        assert!(matches!(locate_symbol(&path, "no_such_symbol_anywhere"), Err(DumpError::MissingSymbol { .. })));
    }

    /// A file is the one loaded when the target holds its build-id note where the file says;
    /// at another place (as another file's note would be), it is not.
    #[test]
    fn the_build_id_is_checked_against_the_loaded_file() {
        let path = std::env::current_exe().unwrap();
        let exe = Executable::open(&path).unwrap();
        assert!(exe.build_id.is_some(), "test binaries are linked with a build id");
        let maps = crate::source::parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let bias = exe.load_bias(&maps, &FileIdentity::of(&path)).unwrap();
        let ourselves = crate::source::ProcessMemory::new(std::process::id()).unwrap();
        assert_eq!(exe.check_loaded(bias, &ourselves), Ok(()));
        let elsewhere = exe.check_loaded(bias + 16, &ourselves).unwrap_err();
        assert!(elsewhere.contains("not the file the target loaded"), "{elsewhere}");
    }
}
