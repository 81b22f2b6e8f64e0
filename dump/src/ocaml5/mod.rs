//! The OCaml 5 family of runtimes, read through any [`MemorySource`]: what is found once per
//! target before the world stops ([`Runtime`]), what is checked when it is stopped
//! ([`safety`]), and what is copied while it is stopped ([`capture`], [`roots`]); [`family`]
//! makes it a [`crate::common::family::RuntimeFamily`]. What differs between OCaml 5 releases
//! is in [`versions`], one file each; what every family shares is in [`crate::common`].

pub mod bytecode;
pub mod capture;
pub mod discover;
pub mod facts;
pub mod family;
pub mod free_runs;
pub mod layout;
pub mod locate;
pub mod probe;
pub mod roots;
pub mod safety;
pub mod static_variables;
pub mod statics;
pub mod tables;
pub mod versions;

use crate::common::bytecode::BytecodeProgram;
use crate::common::code::CodeMap;
use crate::common::frames::FrameTable;
use crate::common::program::{debug_file_wanted, detect_reserved_bits, DiscoverOptions, LayoutsFrom, Program, ProgramKind};
use crate::common::regions::ContinuationShape;
use crate::common::unwind;
use crate::dwarf::TypeIndex;
use crate::elf::{Executable, SymbolTable};
use crate::error::{DumpError, Result};
use crate::source::{MemorySource, ReadExt};
use bytecode::{BytecodeLayout, Interpreter, SysthreadsLibrary};
use facts::Facts;
use heapsnap_format::ProbedFact;
use layout::Layout;
use probe::Probe;
use statics::Statics;
use tables::Tables;
use versions::Release;

/// Everything about the target's runtime that does not change while it runs: executable,
/// version, layouts, variables, header format, pools and frame tables. Addresses in
/// [`Statics`] and the executable's symbols are link-time; add [`Runtime::bias`].
pub struct Runtime {
    pub exe: Executable,
    /// The release whose tables serve an executable without DWARF: the target's own when
    /// heapsnap knows it, else the newest (a forced dump reads by them; a probed one does not
    /// use them).
    pub release: &'static Release,
    /// What the dumper must know of the runtime: the release's, or probed.
    pub facts: Facts,
    /// How the runtime was probed, when heapsnap does not know its release.
    pub probe: Option<Probe>,
    /// Facts the probe could not establish, guessed as the newest release's (`--force`).
    pub guessed: Vec<&'static str>,
    /// How long probing the runtime took (before any stop).
    pub probe_ns: u64,
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
    pub frames: FrameTable,
    /// The interpreter's structures, when the program runs bytecode (see [`bytecode`]).
    pub bytecode: Option<Interpreter>,
    /// systhreads loaded as a shared library by a bytecode program (see [`bytecode`]).
    pub systhreads_library: Option<SysthreadsLibrary>,
    /// Unwind tables of the executable and the shared libraries the target maps.
    pub unwinder: unwind::Unwinder,
    /// Code ranges of source files: (begin, end, source file), link-time, sorted. From DWARF
    /// they are exact; from the tables they cover the runtime's files only, and approximately.
    pub units: Vec<(u64, u64, String)>,
    pub units_exact: bool,
    /// What the report should say once about what is missing (e.g. source lines).
    pub notes: Vec<String>,
}

/// What the probe of a runtime still has to read in its heap ([`discover::from_program`]).
pub struct PendingProbe {
    pub found: Probe,
    /// How long the executable's part took.
    pub took: std::time::Duration,
    /// The release is one heapsnap knows: the probe checks its facts.
    pub known: bool,
}

impl Runtime {
    /// What the executable, its DWARF and its static data say of an OCaml 5 runtime; the probe's
    /// part in the heap is [`discover`]'s.
    pub fn from_executable(
        source: &dyn MemorySource,
        program: Program,
        options: &DiscoverOptions,
    ) -> Result<(Runtime, Option<PendingProbe>)> {
        let Program { exe, bias, version, kind } = program;
        let mappings = source.mappings()?;
        if kind == ProgramKind::Bytecode && !exe.has_dwarf() {
            return Err(DumpError::BytecodeNeedsDwarf { path: exe.path.clone(), debug_file: debug_file_wanted(&exe) });
        }
        // OCaml 4 is too different to be read as OCaml 5, forced or probed.
        if versions::find(&version).is_none() && version.starts_with("4.") {
            let supported = heapsnap_values::releases::supported();
            return Err(DumpError::UnsupportedVersion { version, supported });
        }
        if options.read_by_probing && !exe.has_dwarf() {
            return Err(DumpError::ProbingNeedsDwarf { path: exe.path.clone(), debug_file: debug_file_wanted(&exe) });
        }
        let known = versions::find(&version).filter(|_| !(options.read_by_probing && exe.has_dwarf()));
        let mut notes = Vec::new();
        let mut probe = None;
        let mut forced = false;
        let mut bytecode_layout = None;
        let (release, mut facts, mut layout, statics, layouts_from, units, units_exact) = if exe.has_dwarf() {
            let types = TypeIndex::load(&exe)?;
            if kind == ProgramKind::Bytecode {
                bytecode_layout = Some(BytecodeLayout::load(&types)?);
            }
            let probing = std::time::Instant::now();
            let found = Probe::statics(&exe, &types, &layout::heap(&types)?, source, bias);
            let facts = match known {
                Some(release) => {
                    let facts = Facts::of_release(release);
                    if let Some((fact, probed, says)) = found.disagreement(&facts) {
                        return Err(DumpError::ProbeDisagrees { version, fact, probed, release: release.series, says });
                    }
                    facts
                }
                // The heap is sampled below; until then, what else was probed.
                None => found.facts(true).map_err(|u| probe_refusal(&version, u))?.0,
            };
            probe = Some((found, probing.elapsed()));
            let release = known.unwrap_or(versions::newest());
            let layout = Layout::load(&types, &facts)?;
            let statics = Statics::find(&exe, Some(&types), None, facts.memprof)?;
            let from = if exe.debug_file.is_some() { LayoutsFrom::DebugFile } else { LayoutsFrom::Dwarf };
            (release, facts, layout, statics, from, types.code_units(), true)
        } else {
            let release = match (known, options.force) {
                (Some(release), _) => release,
                (None, true) => {
                    forced = true;
                    versions::newest()
                }
                (None, false) => {
                    let (path, debug_file, newest) = (exe.path.clone(), debug_file_wanted(&exe), versions::newest().series);
                    return Err(DumpError::UnknownWithoutDwarf { path, version, debug_file, newest });
                }
            };
            if release.tables_version != version && !forced {
                return Err(DumpError::NoLayoutTables { path: exe.path.clone(), version, tables: release.tables_version });
            }
            let facts = Facts::of_release(release);
            let tables = Tables::parse(release)?;
            let statics = Statics::find(&exe, None, Some(&tables), facts.memprof)?;
            notes.push(format!(
                "{} has no DWARF debug info: structure layouts come from heapsnap's tables for OCaml {}, and snapshots have no source lines",
                exe.path.display(),
                release.tables_version
            ));
            (release, facts, tables.layout.clone(), statics, LayoutsFrom::Tables, tables.file_ranges(&exe), false)
        };
        if exe.symbols_from == SymbolTable::Dynsym {
            notes.push(format!("{} has no .symtab: only exported symbols name functions and data", exe.path.display()));
        }
        let detected_reserved_bits = detect_reserved_bits(&exe);
        if probe.is_none() {
            check_size_classes(&exe, bias, source, &layout, release)?;
        }
        let systhreads_library = match kind {
            ProgramKind::Bytecode if layout.threads.is_none() => SysthreadsLibrary::find(source, &mut layout, &mut facts)?,
            _ => None,
        };
        let code = CodeMap::new(&exe);
        let (frames, bytecode) = match kind {
            ProgramKind::Native => {
                let missing = |name: &str| DumpError::MissingStatic { name: name.into(), how: "native code's frame tables".into() };
                let r = layout.roots.frames.as_ref().ok_or_else(|| missing("current_frame_descrs.frametables"))?;
                let descrs = statics.current_frame_descrs.ok_or_else(|| missing("current_frame_descrs (frame_descriptors.c)"))?;
                let mut frames = FrameTable::read(source, bias + descrs + r.frametables, r.frametable_list_table, r.frametable_list_next)?;
                if frames.is_empty() {
                    frames.read_linked(source, &exe, bias)?;
                }
                (frames, None)
            }
            ProgramKind::Bytecode => {
                let interpreter = bytecode_layout.map(|layout| {
                    let program = BytecodeProgram::find(&exe, bias, source, bias + layout.exe_name);
                    Interpreter { layout, program }
                });
                notes.extend(interpreter.iter().flat_map(|i| i.program.notes.iter().cloned()));
                (FrameTable::default(), interpreter)
            }
        };
        let unwinder = unwind::Unwinder::new(source, &mappings);
        let rt = Runtime {
            exe,
            release,
            facts,
            probe: None,
            guessed: Vec::new(),
            probe_ns: 0,
            layout,
            statics,
            layouts_from,
            code,
            bias,
            version,
            forced,
            detected_reserved_bits,
            frames,
            bytecode,
            systhreads_library,
            unwinder,
            units,
            units_exact,
            notes,
        };
        let pending = probe.map(|(found, took)| PendingProbe { found, took, known: known.is_some() });
        Ok((rt, pending))
    }

    /// How the runtime was probed, for the metadata, when it is of a release heapsnap does
    /// not know; `measured` adds what the stop measured.
    pub fn probed(&self, measured: &[ProbedFact]) -> Option<heapsnap_format::ProbedRuntime> {
        let probe = self.probe.as_ref()?;
        Some(heapsnap_format::ProbedRuntime {
            reason: match versions::find(&self.version) {
                Some(_) => format!(
                    "OCaml {}'s runtime was read by probing it, not as the release heapsnap knows (--read-by-probing)",
                    self.version
                ),
                None => format!("OCaml {} is not a release heapsnap was tested on: its runtime was read by probing it", self.version),
            },
            facts: probe.report().into_iter().chain(measured.iter().cloned()).collect(),
            guessed: self.guessed.iter().map(|g| g.to_string()).collect(),
        })
    }

    /// The shape of this runtime's continuation blocks, with `fields` of them.
    pub fn continuation_shape(&self, fields: u64) -> ContinuationShape {
        let pools = &self.facts.pools;
        let class = pools.sizeclass_of_whsize(fields as usize + 1);
        ContinuationShape { fields, slot_wsize: class.map_or(0, |sz| pools.size_classes[sz].wsize) }
    }

    /// Target address of a link-time address.
    pub fn addr(&self, link: u64) -> u64 {
        link.wrapping_add(self.bias)
    }

    /// Target address of symbol `name`.
    pub fn symbol(&self, name: &str) -> Result<u64> {
        Ok(self.addr(self.exe.require(name)?))
    }

    /// Target address of systhreads' `thread_table`, when systhreads is linked in or loaded.
    pub fn thread_table(&self) -> Option<u64> {
        match &self.systhreads_library {
            Some(library) => Some(library.thread_table),
            None => self.statics.thread_table.map(|t| self.addr(t)),
        }
    }

    /// Target address of globroots.c's `caml_dyn_globals`, when it was found.
    pub fn dyn_globals(&self) -> Option<u64> {
        self.statics.dyn_globals.map(|h| self.addr(h))
    }

    /// The source files whose code may hold target code address `address`: the compilation
    /// unit holding it, or, where units are only known approximately (from the tables), the
    /// runtime files on either side of a gap between them.
    pub fn unit_files_at(&self, address: u64) -> Vec<&str> {
        if let Some(file) = self.systhreads_library.as_ref().and_then(|l| l.code.file_at(address)) {
            return vec![file];
        }
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
        if let Some(name) = self.systhreads_library.as_ref().and_then(|l| l.code.symbol_name_at(address)) {
            return Some(name);
        }
        self.exe.symbol_at(address.wrapping_sub(self.bias)).map(|s| s.name.as_str())
    }
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
    Ok(Some(probe::unsigned_entries(&bytes, N)))
}

/// Where a running OCaml 5 process counts its compactions (`caml_compactions_count`, which 5.1
/// lacks), found without stopping it.
pub fn compactions_counter(pid: u32) -> Result<crate::watch::CompactionsCounter> {
    crate::watch::symbol_address(pid, "caml_compactions_count").map(crate::watch::CompactionsCounter::At)
}

/// For an executable without DWARF (which the probe cannot read): the release's size classes
/// checked against the target's own table where the executable names it. A difference means
/// the version was misread.
fn check_size_classes(exe: &Executable, bias: u64, source: &dyn MemorySource, layout: &Layout, release: &Release) -> Result<()> {
    let geometry = release.pools();
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
    Ok(())
}

/// The refusal of a release heapsnap does not know, for a fact its probe could not establish.
pub(crate) fn probe_refusal(version: &str, u: probe::Unestablished) -> DumpError {
    DumpError::ProbeFailed { version: version.to_string(), fact: u.fact, why: u.why }
}
