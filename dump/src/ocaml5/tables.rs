//! The layout tables heapsnap carries for each release, for executables without debug info:
//! the structure offsets ([`Layout`]), how to find each file-static variable by the code that
//! uses it ([`Locator`]s), and which exported functions each runtime source file defines (the
//! stop-safety check asks which file a program counter is in).
//!
//! They are generated from an executable that has DWARF, built with the release's toolchain
//! (`scripts/gen-layout-tables.sh`, which runs `heapsnap-dump`'s `layout-tables` example), and
//! a test regenerates them from every toolchain the tests build and fails on any difference.

use super::layout::Layout;
use super::locate::{self, Locator};
use super::static_variables::STATIC_VARIABLES;
use super::versions::Release;
use crate::dwarf::TypeIndex;
use crate::elf::Executable;
use crate::error::{DumpError, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tables {
    /// The exact OCaml version these were generated from.
    pub version: String,
    pub layout: Layout,
    /// File-static variables: size, and where the code that uses them says they are.
    pub statics: BTreeMap<String, StaticEntry>,
    /// Runtime source file (base name) -> the exported functions it defines.
    pub runtime_files: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaticEntry {
    pub size: u64,
    pub locators: Vec<Locator>,
}

/// Locators kept per variable.
const LOCATORS_PER_VARIABLE: usize = 3;

impl Tables {
    pub fn parse(release: &Release) -> Result<Tables> {
        serde_json::from_str(release.tables).map_err(|e| {
            DumpError::VersionMismatch(format!("heapsnap's layout tables for OCaml {} do not parse: {e}", release.tables_version))
        })
    }

    /// The tables of `exe`, which must have DWARF and `.symtab`, built by `version`'s toolchain.
    pub fn generate(exe: &Executable, types: &TypeIndex, release: &Release, version: &str) -> Result<Tables> {
        let layout = Layout::load(types, &super::facts::Facts::of_release(release))?;
        let mut statics = BTreeMap::new();
        for &(name, file) in STATIC_VARIABLES {
            let Ok(v) = types.variable(name, file) else { continue };
            let size = types.variable_type(v).and_then(|ty| types.size_of(ty)).unwrap_or(0);
            let locators = locate::generate(exe, v.address, size, LOCATORS_PER_VARIABLE);
            statics.insert(name.to_string(), StaticEntry { size, locators });
        }
        let mut runtime_files: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let units = types.code_units();
        for s in exe.symbols.iter().filter(|s| s.is_function && s.is_global && s.size > 0) {
            let Some(unit) = units.iter().find(|(b, e, _)| (*b..*e).contains(&s.address)).map(|u| &u.2) else { continue };
            let (dir, base) = unit.rsplit_once('/').unwrap_or(("", unit));
            let runtime = dir.ends_with("runtime") || dir.ends_with("systhreads");
            if runtime && base.ends_with(".c") {
                runtime_files.entry(base.to_string()).or_default().push(s.name.clone());
            }
        }
        for functions in runtime_files.values_mut() {
            functions.sort();
            functions.dedup();
        }
        Ok(Tables { version: version.to_string(), layout, statics, runtime_files })
    }

    /// Code ranges of the runtime's source files, from their exported functions: each file
    /// spans from its first to the end of its last exported function (its static functions lie
    /// in between, or in the gaps between files, which [`super::Runtime::unit_files_at`]
    /// attributes to both neighbours).
    pub fn file_ranges(&self, exe: &Executable) -> Vec<(u64, u64, String)> {
        let mut out = Vec::new();
        for (file, functions) in &self.runtime_files {
            let spans: Vec<(u64, u64)> =
                functions.iter().filter_map(|f| exe.symbol(f)).filter(|s| s.is_function).map(|s| (s.address, s.address + s.size)).collect();
            if let (Some(b), Some(e)) = (spans.iter().map(|s| s.0).min(), spans.iter().map(|s| s.1).max()) {
                out.push((b, e, file.clone()));
            }
        }
        out.sort();
        out
    }
}
