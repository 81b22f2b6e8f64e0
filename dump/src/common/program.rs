//! The target's program as every runtime family first sees it: its executable (with debug
//! info attached), where it is loaded, and the OCaml version it runs; plus what is read from
//! the executable the same way in every family (the reserved header bits).

use crate::debuginfo::DebugSearch;
use crate::elf::Executable;
use crate::error::{DumpError, Result};
use crate::source::{FileIdentity, FileView, MemorySource, ReadExt};
use heapsnap_values::{HeaderFormat, STRING_TAG};
use std::path::PathBuf;

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
    /// Dump an OCaml version heapsnap does not know even where its probe cannot establish
    /// every fact (guessed as the newest known release's), or, without DWARF, as that release.
    pub force: bool,
    /// Read the runtime by probing it even when heapsnap knows its release.
    pub read_by_probing: bool,
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

/// How the target runs OCaml: its own machine code, or bytecode run by the interpreter
/// (`ocamlrun`, or a `-custom` or `-output-complete-exe` executable with the interpreter
/// linked in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramKind {
    Native,
    Bytecode,
}

/// The target's executable as found (with its debug file attached), where it is loaded, and
/// the OCaml version it runs: what every release's knowledge starts from.
pub struct Program {
    pub exe: Executable,
    pub bias: u64,
    pub version: String,
    pub kind: ProgramKind,
}

/// Opens the target's executable (or the copy given instead), attaches its debug file, and
/// reads its load bias and OCaml version. `source` need not be stopped. A process's own files
/// are read as it sees them (its executable through `/proc/PID/exe`, its debug files in its
/// root first), never the files at the same paths here.
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
    let search = DebugSearch {
        target: FileView::of(source),
        exe_is_targets: options.exe.is_none(),
        debug_root: options.debug_dir.clone().unwrap_or_else(|| PathBuf::from(crate::debuginfo::DEBUG_ROOT)),
    };
    crate::debuginfo::attach(&mut exe, options.debug_file.as_deref(), &search)?;
    let kind = program_kind(&exe)?;
    let mappings = source.mappings()?;
    let bias = exe.load_bias(&mappings, &FileIdentity::of(&target_exe))?;
    exe.check_loaded(bias, source).map_err(|message| DumpError::Elf { path: exe.path.clone(), message })?;
    let version = match kind {
        ProgramKind::Native => {
            for required in ["caml_globals", "caml_data_segments"] {
                exe.require(required)?;
            }
            detect_version(&exe, bias, source)?
        }
        ProgramKind::Bytecode => bytecode_runtime_version(&exe)?,
    };
    Ok(Program { exe, bias, version, kind })
}

/// The bytecode interpreter's function: `caml_interprete` up to OCaml 5.2, renamed in 5.3.
pub const INTERPRETER_SYMBOLS: [&str; 2] = ["caml_bytecode_interpreter", "caml_interprete"];

/// The interpreter's function in `exe`, if it has one.
pub fn interpreter_symbol(exe: &Executable) -> Option<&crate::elf::Symbol> {
    INTERPRETER_SYMBOLS.iter().find_map(|name| exe.symbol(name))
}

/// Native code enters OCaml through `caml_start_program` (the assembly glue); bytecode is run
/// by the interpreter ([`INTERPRETER_SYMBOLS`]), and a program has one or the other.
pub fn program_kind(exe: &Executable) -> Result<ProgramKind> {
    match (exe.symbol("caml_start_program").is_some(), interpreter_symbol(exe).is_some()) {
        (true, _) => Ok(ProgramKind::Native),
        (false, true) => Ok(ProgramKind::Bytecode),
        // A static executable stripped of everything may well be OCaml: say what would help.
        (false, false) if !exe.has_symbols() => Err(DumpError::NoSymbols { path: exe.path.clone() }),
        (false, false) => Err(DumpError::NotOcaml { path: exe.path.clone() }),
    }
}

/// The version of a bytecode runtime: the interpreter prints it for `-version` from a string
/// its startup code holds whole (`"The OCaml runtime, version " OCAML_VERSION_STRING`, in
/// startup_byt.c of every release), so it is read from the executable, not the target.
pub fn bytecode_runtime_version(exe: &Executable) -> Result<String> {
    const PREFIX: &[u8] = b"The OCaml runtime, version ";
    let (_, rodata) =
        exe.section_data(".rodata").ok_or_else(|| DumpError::UnknownVersion(format!("{} has no .rodata section", exe.path.display())))?;
    let found = rodata.windows(PREFIX.len()).position(|w| w == PREFIX);
    let version = found.and_then(|at| {
        let rest = &rodata[at + PREFIX.len()..];
        let end = rest.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&rest[..end]).ok()
    });
    match version.map(str::trim) {
        Some(v) if v.split('.').take(2).all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) => Ok(v.to_string()),
        _ => Err(DumpError::UnknownVersion(format!(
            "{} runs bytecode, but its runtime's version string (\"The OCaml runtime, version ...\") was not found",
            exe.path.display()
        ))),
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
pub(crate) fn ocaml_string(bytes: &[u8]) -> Option<&[u8]> {
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

/// How block headers are laid out in this target.
pub fn header_format(reserved_bits: u8) -> HeaderFormat {
    HeaderFormat { reserved_bits }
}

/// Where a debug file for `exe` would be looked for, for the message of a refusal.
pub fn debug_file_wanted(exe: &Executable) -> String {
    match &exe.build_id {
        Some(id) if id.len() > 2 => format!("/usr/lib/debug/.build-id/{}/{}.debug (its build id), or --debug-file", &id[..2], &id[2..]),
        _ => "--debug-file, or an unstripped copy of the same build with --exe".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_padding() {
        assert_eq!(ocaml_string(b"5.3.0\0\0\x02"), Some(&b"5.3.0"[..]));
    }
}
