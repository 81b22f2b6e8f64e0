//! Knowledge of the OCaml 5 runtime, read through any [`MemorySource`]: what is found once
//! per target before the world stops ([`Runtime`]), what is checked when it is stopped
//! ([`safety`]), and what is copied while it is stopped ([`capture`]). What differs between
//! OCaml releases is in [`versions`], one file each; everything else here is shared.

pub mod capture;
pub mod captured;
pub mod code;
pub mod frames;
pub mod heap;
pub mod layout;
pub mod locate;
pub mod plugins;
pub mod root_chains;
pub mod roots;
pub mod safety;
pub mod statics;
pub mod tables;
pub mod unwind;
pub mod versions;

use crate::dwarf::TypeIndex;
use crate::elf::{Executable, SymbolTable};
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};
use code::CodeMap;
use frames::FrameTable;
use heapsnap_values::{HeaderFormat, PoolGeometry, STRING_TAG};
use layout::Layout;
use statics::Statics;
use std::path::PathBuf;
use tables::Tables;
use versions::Release;

/// How to read the target's runtime: which files to trust, and whether to go on with a
/// version heapsnap does not know.
#[derive(Clone, Debug, Default)]
pub struct DiscoverOptions {
    /// The executable to read symbols and debug info from, instead of the target's own file
    /// (an unstripped copy of the same build; its build id must match).
    pub exe: Option<PathBuf>,
    /// A separate debug-info file of the executable.
    pub debug_file: Option<PathBuf>,
    /// Where separate debug files are looked for by build id and debuglink (default
    /// `/usr/lib/debug`, gdb's `debug-file-directory`).
    pub debug_dir: Option<PathBuf>,
    /// Read an OCaml version heapsnap does not know as the newest one it knows.
    pub force: bool,
}

/// Where the structure layouts came from (recorded in the snapshot's metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutsFrom {
    Dwarf,
    DebugFile,
    Tables,
}

impl std::fmt::Display for LayoutsFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LayoutsFrom::Dwarf => "dwarf",
            LayoutsFrom::DebugFile => "debug_file",
            LayoutsFrom::Tables => "tables",
        })
    }
}

/// Everything about the target's runtime that does not change while it runs: executable,
/// version, layouts, variables, header format, pools and frame tables. Addresses in
/// [`Statics`] and the executable's symbols are link-time; add [`Runtime::bias`].
pub struct Runtime {
    pub exe: Executable,
    pub release: &'static Release,
    pub layout: Layout,
    pub statics: Statics,
    pub layouts_from: LayoutsFrom,
    pub code: CodeMap,
    pub bias: u64,
    pub version: String,
    /// The version is not one heapsnap knows; it is read as [`Runtime::release`] (`--force`).
    pub forced: bool,
    /// Reserved header bits, when the runtime's code says it (see [`detect_reserved_bits`]).
    pub detected_reserved_bits: Option<u8>,
    pub pools: PoolGeometry,
    pub frames: FrameTable,
    /// Unwind tables of the executable and the shared libraries the target maps.
    pub unwinder: unwind::Unwinder,
    /// Code ranges of source files: (begin, end, source file), link-time, sorted. From DWARF
    /// they are exact; from the tables they cover the runtime's files only, and approximately.
    pub units: Vec<(u64, u64, String)>,
    pub units_exact: bool,
    /// What the report should say once about what is missing (e.g. source lines).
    pub notes: Vec<String>,
}

/// The target's executable as found (with its debug file attached), where it is loaded, and
/// the OCaml version it runs: what every release's knowledge starts from.
pub struct Program {
    pub exe: Executable,
    pub bias: u64,
    pub version: String,
}

/// Opens the target's executable (or the copy given instead), attaches its debug file, and
/// reads its load bias and OCaml version. `source` need not be stopped.
pub fn open_program(source: &dyn MemorySource, options: &DiscoverOptions) -> Result<Program> {
    let target_exe = source.executable_path();
    let mut exe = match &options.exe {
        Some(given) => {
            let exe = Executable::open(given)?;
            check_same_build(&exe, &target_exe)?;
            exe
        }
        None => Executable::open(&target_exe)?,
    };
    let debug_dir = options.debug_dir.clone().unwrap_or_else(|| PathBuf::from(crate::debuginfo::DEBUG_ROOT));
    crate::debuginfo::attach(&mut exe, options.debug_file.as_deref(), &debug_dir)?;
    if exe.symbol("caml_start_program").is_none() {
        return Err(DumpError::NotOcaml { path: exe.path.clone() });
    }
    let mappings = source.mappings()?;
    let bias = exe.load_bias(&mappings, &target_exe)?;
    for required in ["caml_globals", "caml_data_segments"] {
        exe.require(required)?;
    }
    let version = detect_version(&exe, bias, source)?;
    Ok(Program { exe, bias, version })
}

impl Runtime {
    /// Reads what the dump needs to know about an OCaml 5 target before stopping it. `source`
    /// need not be stopped: only static data is read.
    pub fn discover(source: &dyn MemorySource, options: &DiscoverOptions) -> Result<Runtime> {
        Runtime::from_program(source, open_program(source, options)?, options)
    }

    /// [`Runtime::discover`], from the program already opened.
    pub fn from_program(source: &dyn MemorySource, program: Program, options: &DiscoverOptions) -> Result<Runtime> {
        let Program { exe, bias, version } = program;
        let mappings = source.mappings()?;
        let (release, forced) = match (versions::find(&version), options.force) {
            (Some(r), _) => (r, false),
            // OCaml 4 is too different to be read as OCaml 5, forced or not.
            (None, true) if !version.starts_with("4.") => (versions::newest(), true),
            (None, _) => {
                let supported = format!("{}, {}", crate::ocaml4::SERIES, versions::supported());
                return Err(DumpError::UnsupportedVersion { version, supported });
            }
        };
        let mut notes = Vec::new();
        let (layout, statics, layouts_from, units, units_exact) = if exe.has_dwarf() {
            let types = TypeIndex::load(&exe)?;
            let layout = Layout::load(&types, release)?;
            let statics = Statics::find(&exe, Some(&types), release, None)?;
            let from = if exe.debug_file.is_some() { LayoutsFrom::DebugFile } else { LayoutsFrom::Dwarf };
            (layout, statics, from, types.code_units(), true)
        } else {
            if release.tables_version != version && !forced {
                return Err(DumpError::NoLayoutTables { path: exe.path.clone(), version, tables: release.tables_version });
            }
            let tables = Tables::parse(release)?;
            let statics = Statics::find(&exe, None, release, Some(&tables))?;
            notes.push(format!(
                "{} has no DWARF debug info: structure layouts come from heapsnap's tables for OCaml {}, and snapshots have no source lines",
                exe.path.display(),
                release.tables_version
            ));
            (tables.layout.clone(), statics, LayoutsFrom::Tables, tables.file_ranges(&exe), false)
        };
        if exe.symbols_from == SymbolTable::Dynsym {
            notes.push(format!("{} has no .symtab: only exported symbols name functions and data", exe.path.display()));
        }
        let detected_reserved_bits = detect_reserved_bits(&exe);
        let pools = pool_geometry(&exe, bias, source, &layout, release)?;
        let code = CodeMap::new(&exe);
        let r = &layout.roots;
        let frametables = bias + statics.current_frame_descrs + r.frametables;
        let mut frames = FrameTable::read(source, frametables, r.frametable_list_table, r.frametable_list_next)?;
        if frames.is_empty() {
            // The runtime has not built its table yet: read the executable's own frametables.
            let array = bias + exe.require("caml_frametable")?;
            for i in 0.. {
                let table = source.read_u64(array + 8 * i)?;
                if table == 0 {
                    break;
                }
                frames.read_one(source, table)?;
            }
        }
        let unwinder = unwind::Unwinder::new(&mappings);
        Ok(Runtime {
            exe,
            release,
            layout,
            statics,
            layouts_from,
            code,
            bias,
            version,
            forced,
            detected_reserved_bits,
            pools,
            frames,
            unwinder,
            units,
            units_exact,
            notes,
        })
    }

    /// Target address of a link-time address.
    pub fn addr(&self, link: u64) -> u64 {
        link.wrapping_add(self.bias)
    }

    /// Target address of symbol `name`.
    pub fn symbol(&self, name: &str) -> Result<u64> {
        Ok(self.addr(self.exe.require(name)?))
    }

    /// Target address of globroots.c's `caml_dyn_globals`, when it was found.
    pub fn dyn_globals(&self) -> Option<u64> {
        self.statics.dyn_globals.map(|h| self.addr(h))
    }

    /// The source files whose code may hold target code address `address`: the compilation
    /// unit holding it, or, where units are only known approximately (from the tables), the
    /// runtime files on either side of a gap between them.
    pub fn unit_files_at(&self, address: u64) -> Vec<&str> {
        let link = address.wrapping_sub(self.bias);
        let after = self.units.partition_point(|u| u.0 <= link);
        if let Some(u) = self.units[..after].iter().rev().take(8).find(|u| link < u.1) {
            return vec![u.2.as_str()];
        }
        if self.units_exact {
            return Vec::new();
        }
        let before = after.checked_sub(1).map(|i| self.units[i].2.as_str());
        before.into_iter().chain(self.units.get(after).map(|u| u.2.as_str())).collect()
    }

    /// The executable's symbol holding target address `address`, if any.
    pub fn symbol_name_at(&self, address: u64) -> Option<&str> {
        self.exe.symbol_at(address.wrapping_sub(self.bias)).map(|s| s.name.as_str())
    }
}

/// An executable given in place of the target's own file must be the same build.
fn check_same_build(given: &Executable, target: &std::path::Path) -> Result<()> {
    let theirs = std::fs::read(target).ok().and_then(|data| object::File::parse(&*data).ok().and_then(|f| crate::elf::build_id_of(&f)));
    let real = std::fs::read_link(target).unwrap_or_else(|_| target.to_path_buf());
    match (&given.build_id, &theirs) {
        (Some(a), Some(b)) if a == b => Ok(()),
        (a, b) => Err(DumpError::ExecutableMismatch {
            given: given.path.clone(),
            actual: real,
            why: format!("build id {} against {}", a.as_deref().unwrap_or("(none)"), b.as_deref().unwrap_or("(none)")),
        }),
    }
}

/// An OCaml string block's contents, from its words.
fn ocaml_string(bytes: &[u8]) -> Option<&[u8]> {
    let pad = *bytes.last()? as usize;
    bytes.get(..bytes.len().checked_sub(1 + pad)?)
}

/// The module block of `Stdlib__Sys` (its fields, read from the target).
fn sys_fields(exe: &Executable, bias: u64, source: &dyn MemorySource) -> Result<Vec<u64>> {
    let block = bias + exe.require("camlStdlib__Sys")?;
    let header = source.read_u64(block - 8)?;
    // Reserved bits are not known yet: take the 22 bits above the colour, enough for a module.
    let wosize = ((header >> 10) & 0x3f_ffff) as usize;
    if wosize == 0 || wosize > 4096 {
        return Err(DumpError::UnknownVersion(format!("Stdlib__Sys module block has {wosize} fields")));
    }
    source.read_words(block, wosize)
}

/// `Sys.ocaml_version`: the one string field of the `Stdlib__Sys` module that looks like a
/// version. The native runtime embeds no version string of its own.
pub fn detect_version(exe: &Executable, bias: u64, source: &dyn MemorySource) -> Result<String> {
    let fields =
        sys_fields(exe, bias, source).map_err(|e| DumpError::UnknownVersion(format!("cannot read Stdlib.Sys ({e}); is it linked in?")))?;
    for v in fields {
        if v & 1 != 0 || v < 4096 {
            continue;
        }
        let Ok(header) = source.read_u64(v - 8) else { continue };
        if header as u8 != STRING_TAG {
            continue;
        }
        let wosize = ((header >> 10) & 0xff) as usize;
        if wosize == 0 || wosize > 8 {
            continue;
        }
        let Ok(bytes) = source.read_bytes(v, wosize * 8) else { continue };
        let Some(s) = ocaml_string(&bytes).and_then(|s| std::str::from_utf8(s).ok()) else { continue };
        let mut parts = s.split(['.', '+', '~']);
        let numeric = |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if numeric(parts.next()) && numeric(parts.next()) {
            return Ok(s.to_string());
        }
    }
    Err(DumpError::UnknownVersion("no version string among the fields of Stdlib.Sys".into()))
}

/// The number of reserved header bits of the target's runtime, from the code of
/// `caml_sys_const_max_wosize` (sys.c), which returns `Val_long(Max_wosize)` with
/// `Max_wosize = 2^(54 - R) - 1`: its only immediate is `2^(55 - R) - 1`. (The `Sys` module's
/// `max_array_length` cannot be used: ocamlopt folds `%max_wosize` without the reserved bits.)
pub fn detect_reserved_bits(exe: &Executable) -> Option<u8> {
    let f = exe.symbol("caml_sys_const_max_wosize")?;
    let (text_address, text) = exe.section_data(".text")?;
    let start = f.address.checked_sub(text_address)? as usize;
    let len = if f.size > 0 { f.size as usize } else { 32 };
    let code = text.get(start..(start + len).min(text.len()))?;
    let mut decoder = iced_x86::Decoder::with_ip(64, code, f.address, iced_x86::DecoderOptions::NONE);
    for insn in &mut decoder {
        if insn.mnemonic() == iced_x86::Mnemonic::Ret {
            break;
        }
        for op in 0..insn.op_count() {
            let immediate = match insn.op_kind(op) {
                iced_x86::OpKind::Immediate64 | iced_x86::OpKind::Immediate32to64 | iced_x86::OpKind::Immediate32 => insn.immediate(op),
                _ => continue,
            };
            let value = immediate.wrapping_add(1);
            if value.is_power_of_two() {
                let r = 55i64 - value.trailing_zeros() as i64;
                if (0..=31).contains(&r) {
                    return Some(r as u8);
                }
            }
        }
    }
    None
}

fn read_table<const N: usize>(
    exe: &Executable,
    bias: u64,
    source: &dyn MemorySource,
    name: &str,
    count: usize,
) -> Result<Option<Vec<u32>>> {
    // The tables are `static const` in a header: every C file that uses them has a copy.
    let Some(address) = exe.addresses_of(name).into_iter().next() else { return Ok(None) };
    let bytes = source.read_bytes(bias + address, N * count)?;
    Ok(Some(bytes.chunks(N).map(|c| c.iter().rev().fold(0u32, |acc, &b| (acc << 8) | b as u32)).collect()))
}

/// The release's pool geometry, checked against the target's own size-class tables and pool
/// header size where the executable names them: a difference means the version was misread.
fn pool_geometry(exe: &Executable, bias: u64, source: &dyn MemorySource, layout: &Layout, release: &Release) -> Result<PoolGeometry> {
    let geometry = (release.pools)();
    let n = layout.heap.num_sizeclasses as usize;
    let wsize = read_table::<4>(exe, bias, source, "wsize_sizeclass", n)?;
    let expected: Vec<u32> = geometry.size_classes.iter().map(|c| c.wsize).collect();
    if wsize.as_ref().is_some_and(|w| *w != expected) || n != expected.len() {
        return Err(DumpError::VersionMismatch(format!(
            "its size classes {:?} are not OCaml {}'s {expected:?}",
            wsize.unwrap_or_default(),
            release.series
        )));
    }
    if layout.heap.pool_header_bytes != 8 * u64::from(geometry.header_wsize) {
        return Err(DumpError::VersionMismatch(format!(
            "its pool header is {} bytes, OCaml {}'s is {}",
            layout.heap.pool_header_bytes,
            release.series,
            8 * geometry.header_wsize
        )));
    }
    Ok(geometry)
}

/// How block headers are laid out in this target.
pub fn header_format(reserved_bits: u8) -> HeaderFormat {
    HeaderFormat { reserved_bits }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_padding() {
        assert_eq!(ocaml_string(b"5.3.0\0\0\x02"), Some(&b"5.3.0"[..]));
    }
}
