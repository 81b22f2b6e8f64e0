//! DWARF sections of loaded Dynlink plugins (section kind 10, FORMAT.md §3.10), so that the
//! source lines of a plugin's code can be found without the plugin's file: like `dwarf`
//! (kind 6) for the executable, with the load bias of the plugin they come from, since each
//! plugin is moved by its own amount.
//!
//! Kind 10 is not a [`SectionKind`](crate::SectionKind) variant: readers that predate it skip
//! it like any unknown, non-required section (they only lose the plugins' source lines).

use crate::error::FormatError;
use crate::layout::{SectionKind, DWARF_NAME_LEN};
use crate::reader::Snapshot;
use crate::writer::SnapshotWriter;

/// Section kind code: a little-endian `u64` load bias, a 32-byte section name, the bytes.
pub const SECTION_KIND_PLUGIN_DWARF: u32 = 10;

/// Bytes before a plugin DWARF section's own bytes: the bias and the name.
const HEAD: usize = 8 + DWARF_NAME_LEN;

/// One DWARF section of one loaded plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PluginDwarf<'s> {
    /// How far the plugin was moved at load time: its code address `a` is looked up in its
    /// DWARF as `a - load_bias`.
    pub load_bias: u64,
    /// The ELF section's name, e.g. `.debug_line`.
    pub name: &'s str,
    pub bytes: &'s [u8],
}

impl SnapshotWriter {
    /// Copies one DWARF section of a plugin loaded with `load_bias` (once per bias and name).
    pub fn write_plugin_dwarf(&mut self, load_bias: u64, name: &str, bytes: &[u8]) -> Result<(), FormatError> {
        if name.is_empty() || name.len() > DWARF_NAME_LEN || name.contains('\0') {
            return Err(FormatError::Writer(format!("bad DWARF section name {name:?}")));
        }
        if self.plugin_dwarf.contains(&(load_bias, name.to_owned())) {
            return Err(FormatError::Writer(format!(
                "the DWARF section {name} of the plugin at bias {load_bias:#x} can only be written once"
            )));
        }
        let mut head = [0u8; HEAD];
        head[..8].copy_from_slice(&load_bias.to_le_bytes());
        head[8..8 + name.len()].copy_from_slice(name.as_bytes());
        self.write_section(SectionKind::from_code(SECTION_KIND_PLUGIN_DWARF), 0, &[&head, bytes])?;
        self.plugin_dwarf.push((load_bias, name.to_owned()));
        Ok(())
    }
}

impl Snapshot {
    /// The plugins' DWARF sections, in file order. A section too short for its head, or whose
    /// name is empty or not UTF-8, is left out (a reader may always skip this kind).
    pub fn plugin_dwarf(&self) -> Vec<PluginDwarf<'_>> {
        self.sections()
            .iter()
            .filter(|s| s.kind == SECTION_KIND_PLUGIN_DWARF && s.length >= HEAD as u64)
            .filter_map(|s| {
                // In bounds: the reader checked every section's body against the file.
                let body = self.bytes().get(s.offset as usize..(s.offset + s.length) as usize)?;
                let load_bias = u64::from_le_bytes(body[..8].try_into().ok()?);
                let name_bytes = &body[8..HEAD];
                let name_len = name_bytes.iter().position(|&b| b == 0).unwrap_or(DWARF_NAME_LEN);
                let name = std::str::from_utf8(&name_bytes[..name_len]).ok().filter(|n| !n.is_empty())?;
                Some(PluginDwarf { load_bias, name, bytes: &body[HEAD..] })
            })
            .collect()
    }
}
