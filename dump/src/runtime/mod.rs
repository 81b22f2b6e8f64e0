//! Knowledge of the OCaml 5.3 runtime, read through any [`MemorySource`]: what is found once
//! per target before the world stops ([`Runtime`]), what is checked when it is stopped
//! ([`safety`]), and what is copied while it is stopped ([`capture`]).

pub mod capture;
pub mod code;
pub mod frames;
pub mod heap;
pub mod layout;
pub mod plugins;
pub mod roots;
pub mod safety;
pub mod unwind;

use crate::dwarf::TypeIndex;
use crate::elf::Executable;
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};
use code::CodeMap;
use frames::FrameTable;
use heap::{HeaderFormat, STRING_TAG};
use layout::Layout;

/// The OCaml versions whose runtime layout this dumper knows (major.minor).
pub const SUPPORTED_VERSIONS: &[&str] = &["5.3"];

/// Size classes of the shared heap (runtime/caml/sizeclasses.h, read from the target).
#[derive(Clone, Debug)]
pub struct SizeClasses {
    /// Words per block, header included, of each size class.
    pub wsize: Vec<u32>,
    /// Words wasted at the start of a pool of each size class, after the pool header.
    pub wastage: Vec<u32>,
    pub pool_wsize: u64,
    pub pool_header_wsize: u64,
}

impl SizeClasses {
    /// Byte offset of the first block header in a pool of class `sz`.
    pub fn first_block(&self, sz: usize) -> u64 {
        (self.pool_header_wsize + self.wastage[sz] as u64) * 8
    }

    /// POOL_WSIZE is a C macro, absent from the binary; it is the only pool size for which
    /// `wastage[sz] == (POOL_WSIZE - POOL_HEADER_WSIZE) mod wsize[sz]` for every class.
    fn derive_pool_wsize(wsize: &[u32], wastage: &[u32], header: u64) -> Option<u64> {
        (1..=1024u64)
            .map(|k| k * 512)
            .find(|&p| wsize.iter().zip(wastage).all(|(&w, &waste)| w > 0 && (p - header) % w as u64 == waste as u64))
    }
}

/// Everything about the target's runtime that does not change while it runs: executable,
/// layouts, version, header format, size classes and frame tables. Addresses in the
/// `Layout` and the executable's symbols are link-time; add [`Runtime::bias`].
pub struct Runtime {
    pub exe: Executable,
    pub layout: Layout,
    pub code: CodeMap,
    pub bias: u64,
    pub version: String,
    /// Reserved header bits, when the runtime's code says it (see [`detect_reserved_bits`]).
    pub detected_reserved_bits: Option<u8>,
    pub sizes: SizeClasses,
    pub frames: FrameTable,
    /// Unwind tables of the executable and the shared libraries the target maps.
    pub unwinder: unwind::Unwinder,
    /// The executable's compilation units: (begin, end, source file), link-time, sorted.
    pub units: Vec<(u64, u64, String)>,
}

impl Runtime {
    /// Reads what the dump needs to know about the target before stopping it. `source` need
    /// not be stopped: only static data is read.
    pub fn discover(source: &dyn MemorySource) -> Result<Runtime> {
        let exe_path = source.executable_path();
        let exe = Executable::open(&exe_path)?;
        let mappings = source.mappings()?;
        let bias = exe.load_bias(&mappings, &exe_path)?;
        for required in ["caml_start_program", "caml_globals", "caml_data_segments"] {
            exe.require(required)?;
        }
        let types = TypeIndex::load(&exe)?;
        let layout = Layout::load(&types)?;
        let version = detect_version(&exe, bias, source)?;
        check_version(&version)?;
        let detected_reserved_bits = detect_reserved_bits(&exe);
        let sizes = read_size_classes(&exe, bias, source, &layout)?;
        let code = CodeMap::new(&exe);
        let r = &layout.roots;
        let mut frames = FrameTable::read(source, bias + r.frametables_list, r.frametable_list_table, r.frametable_list_next)?;
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
        let units = types.code_units();
        Ok(Runtime { exe, layout, code, bias, version, detected_reserved_bits, sizes, frames, unwinder, units })
    }

    /// Target address of a link-time address.
    pub fn addr(&self, link: u64) -> u64 {
        link.wrapping_add(self.bias)
    }

    /// Target address of symbol `name`.
    pub fn symbol(&self, name: &str) -> Result<u64> {
        Ok(self.addr(self.exe.require(name)?))
    }

    /// The source file of the compilation unit holding target code address `address`.
    pub fn unit_at(&self, address: u64) -> Option<&str> {
        let link = address.wrapping_sub(self.bias);
        let after = self.units.partition_point(|u| u.0 <= link);
        self.units[..after].iter().rev().take(8).find(|u| link < u.1).map(|u| u.2.as_str())
    }

    /// The executable's symbol holding target address `address`, if any.
    pub fn symbol_name_at(&self, address: u64) -> Option<&str> {
        self.exe.symbol_at(address.wrapping_sub(self.bias)).map(|s| s.name.as_str())
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

pub fn check_version(version: &str) -> Result<()> {
    let major_minor: String = version.split('.').take(2).collect::<Vec<_>>().join(".");
    let major_minor = major_minor.split(['+', '~']).next().unwrap_or("");
    if SUPPORTED_VERSIONS.contains(&major_minor) {
        Ok(())
    } else {
        Err(DumpError::UnsupportedVersion { version: version.to_string(), supported: "5.3" })
    }
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

fn read_table<const N: usize>(exe: &Executable, bias: u64, source: &dyn MemorySource, name: &str, count: usize) -> Result<Vec<u32>> {
    // The tables are `static const` in a header: every C file that uses them has a copy.
    let address = exe.addresses_of(name).into_iter().next().ok_or_else(|| DumpError::MissingSymbol { name: name.into() })?;
    let bytes = source.read_bytes(bias + address, N * count)?;
    Ok(bytes.chunks(N).map(|c| c.iter().rev().fold(0u32, |acc, &b| (acc << 8) | b as u32)).collect())
}

fn read_size_classes(exe: &Executable, bias: u64, source: &dyn MemorySource, layout: &Layout) -> Result<SizeClasses> {
    let n = layout.heap.num_sizeclasses as usize;
    let wsize = read_table::<4>(exe, bias, source, "wsize_sizeclass", n)?;
    let wastage = read_table::<1>(exe, bias, source, "wastage_sizeclass", n)?;
    let pool_header_wsize = layout.heap.pool_header_bytes / 8;
    let pool_wsize = SizeClasses::derive_pool_wsize(&wsize, &wastage, pool_header_wsize)
        .ok_or_else(|| DumpError::Inconsistent(format!("size class tables {wsize:?} / {wastage:?} fit no pool size")))?;
    Ok(SizeClasses { wsize, wastage, pool_wsize, pool_header_wsize })
}

/// How block headers are laid out in this target.
pub fn header_format(reserved_bits: u8) -> HeaderFormat {
    HeaderFormat { reserved_bits }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_size_from_the_5_3_tables() {
        let wsize =
            [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 17, 19, 22, 25, 28, 32, 33, 37, 42, 47, 53, 59, 65, 73, 81, 89, 99, 108, 118, 128];
        let wastage = [0, 0, 0, 0, 2, 0, 4, 4, 2, 0, 4, 12, 12, 7, 0, 17, 4, 28, 0, 22, 18, 3, 11, 21, 62, 4, 42, 87, 33, 96, 80, 124];
        assert_eq!(SizeClasses::derive_pool_wsize(&wsize, &wastage, 4), Some(4096));
    }

    #[test]
    fn versions() {
        assert!(check_version("5.3.0").is_ok());
        assert!(check_version("5.3.1+dev").is_ok());
        assert!(matches!(check_version("5.2.1"), Err(DumpError::UnsupportedVersion { .. })));
        assert!(matches!(check_version("4.14.2"), Err(DumpError::UnsupportedVersion { .. })));
    }

    #[test]
    fn string_padding() {
        assert_eq!(ocaml_string(b"5.3.0\0\0\x02"), Some(&b"5.3.0"[..]));
    }
}
