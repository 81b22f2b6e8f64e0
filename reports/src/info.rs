//! `heapsnap info`: the format-level view of a snapshot (its metadata and sections).

use crate::loader::Loader;
use crate::report::Report;
use heapsnap_analyze::AnalysedHeap;
use heapsnap_format::{Metadata, RegionKind, RootKind};
use heapsnap_index::Needs;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

pub struct Info;

#[derive(clap::Args)]
pub struct InfoArgs {
    /// The snapshot file.
    snapshot: PathBuf,
}

#[derive(Serialize)]
pub struct InfoReport {
    pub format_version: String,
    pub metadata: Metadata,
    pub sections: usize,
    /// Per region kind: how many regions, and their bytes.
    pub regions: BTreeMap<&'static str, RegionCount>,
    /// Per root kind: how many roots.
    pub roots: BTreeMap<&'static str, u64>,
    pub symbols: usize,
    pub dwarf_sections: Vec<String>,
    pub plugin_dwarf: Vec<PluginDwarf>,
    pub custom_ops: usize,
    pub ephemerons: usize,
    /// `None`: no memprof tables recorded.
    pub memprof_entries: Option<usize>,
    pub memprof_frames: usize,
    pub ocaml_names: Option<NamesCounts>,
    /// Why there are no names, and how to add them.
    pub ocaml_names_missing: Option<String>,
    /// How much of the reachable heap got an OCaml type; `None` without names.
    pub typed: Option<TypedShare>,
    /// For the human text only.
    #[serde(skip)]
    human: HumanOnly,
}

#[derive(Serialize)]
pub struct RegionCount {
    pub count: u64,
    pub bytes: u64,
}

#[derive(Serialize)]
pub struct PluginDwarf {
    pub load_bias: u64,
    pub sections: Vec<String>,
}

#[derive(Serialize)]
pub struct NamesCounts {
    pub units: usize,
    pub fields: usize,
    pub refused: usize,
}

/// The typing walk's reach (`heapsnap_analyze::Typing`): what a user sees typed in every report.
#[derive(Serialize)]
pub struct TypedShare {
    /// Typed blocks, static data included (as `reachable_objects`).
    pub objects: u64,
    /// Typed heap bytes: static data left out, as `reachable_bytes` leaves it out.
    pub bytes: u64,
    /// Typed blocks' bytes in static data (module blocks, constant data, static closures),
    /// in neither `bytes` nor `reachable_bytes`.
    pub static_bytes: u64,
    pub reachable_objects: u64,
    pub reachable_bytes: u64,
    /// `bytes` in percent of `reachable_bytes` (0 when nothing is reachable).
    pub percent_of_reachable_bytes: f64,
    /// Blocks reached with two types.
    pub conflicts: u64,
    /// Blocks whose shape did not fit the type they were reached with (`Obj.magic`).
    pub mismatches: u64,
}

/// What the human text says that the JSON does not.
#[derive(Default)]
struct HumanOnly {
    free_blocks: usize,
    memprof_samples: u64,
    names_ocaml_version: String,
    /// `(file, why)` of the `.cmt` files left out.
    refused: Vec<(String, String)>,
}

impl Report for Info {
    const NAME: &'static str = "info";
    const ABOUT: &'static str = "Validate a snapshot and print its metadata and sections";
    type Args = InfoArgs;
    type Output = InfoReport;

    fn run(args: &InfoArgs, loader: &dyn Loader) -> anyhow::Result<InfoReport> {
        let snap = loader.snapshot(&args.snapshot)?;
        let mut regions: BTreeMap<&'static str, RegionCount> = BTreeMap::new();
        for region in snap.regions() {
            let entry = regions.entry(region.kind().label()).or_insert(RegionCount { count: 0, bytes: 0 });
            entry.count += 1;
            entry.bytes += region.bytes.len() as u64;
        }
        let mut roots: BTreeMap<&'static str, u64> = BTreeMap::new();
        for root in snap.roots() {
            *roots.entry(RootKind::from_code(root.kind).label()).or_default() += 1;
        }
        // The plugins' DWARF section names, by load bias.
        let mut plugin_dwarf: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for d in snap.plugin_dwarf() {
            plugin_dwarf.entry(d.load_bias).or_default().push(d.name.to_string());
        }
        // With names, the typed share needs the analysis: on a first look from the analysis
        // (the names digested beside its types), else from the index, which digested them.
        let (names, typed) = match snap.ocaml_names() {
            Some(_) => crate::loader::answer(
                loader,
                &args.snapshot,
                Needs::Tree,
                |a| {
                    let (digest, typed) = std::thread::scope(|scope| {
                        let digest = scope.spawn(|| heapsnap_index::sections::NamesDigest::of(a.snap));
                        let typed = typed_share(a, a.reachable_objects(), None);
                        (digest.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), typed)
                    });
                    let names = ocaml_names(&digest);
                    let typed = typed.filter(|_| names.is_ok());
                    Ok((names, typed))
                },
                |view| {
                    let names = ocaml_names(&view.meta.ocaml_names);
                    let typed =
                        if names.is_ok() { typed_share(view, view.meta.summary.reachable_objects, view.meta.typed_bytes) } else { None };
                    Ok((names, typed))
                },
            )?,
            None => (Err(heapsnap_names::MISSING_HINT.to_string()), None),
        };
        let mut human = HumanOnly {
            free_blocks: snap.free_blocks().len(),
            memprof_samples: snap.memprof().map_or(0, |entries| entries.iter().map(|e| e.samples).sum()),
            ..HumanOnly::default()
        };
        let (ocaml_names, ocaml_names_missing) = match names {
            Ok((ocaml_version, units, fields, refused)) => {
                human.names_ocaml_version = ocaml_version;
                let counts = NamesCounts { units, fields, refused: refused.len() };
                human.refused = refused;
                (Some(counts), None)
            }
            Err(why) => (None, Some(why)),
        };
        Ok(InfoReport {
            format_version: format!("{}.{}", snap.header().version_major, snap.header().version_minor),
            metadata: snap.metadata().clone(),
            sections: snap.sections().len(),
            regions,
            roots,
            symbols: snap.symbols().len(),
            dwarf_sections: snap.dwarf_section_names().map(str::to_string).collect(),
            plugin_dwarf: plugin_dwarf.into_iter().map(|(load_bias, sections)| PluginDwarf { load_bias, sections }).collect(),
            custom_ops: snap.custom_ops().len(),
            ephemerons: snap.ephemerons().len(),
            memprof_entries: snap.memprof().map(|e| e.len()),
            memprof_frames: snap.memprof_frames().len(),
            ocaml_names,
            ocaml_names_missing,
            typed,
            human,
        })
    }

    fn print(args: &InfoArgs, info: &InfoReport, out: &mut dyn Write) -> std::io::Result<()> {
        let (m, version) = (&info.metadata, &info.format_version);
        writeln!(out, "snapshot        {} (format {version})", args.snapshot.display())?;
        writeln!(out, "ocaml           {} ({} reserved header bits)", m.ocaml_version, m.reserved_header_bits)?;
        if m.forced_version {
            writeln!(out, "                not a version heapsnap knows: read as the newest one it knows (--force)")?;
        }
        if let Some(p) = &m.probed {
            writeln!(out, "read by probing {}", p.reason)?;
            for f in &p.facts {
                writeln!(out, "                {}: {} ({})", f.fact, f.value, f.from)?;
            }
            if !p.guessed.is_empty() {
                writeln!(out, "                guessed as the newest known release's (--force): {}", p.guessed.join(", "))?;
            }
        }
        match m.layouts_from.as_deref() {
            Some("tables") => writeln!(out, "layouts         heapsnap's tables (the executable had no debug info)")?,
            Some("debug_file") => writeln!(out, "layouts         DWARF of a separate debug file")?,
            Some(_) => writeln!(out, "layouts         DWARF of the executable")?,
            None => {}
        }
        match (&m.pools, &m.ocaml4_gc) {
            (_, Some(gc)) => writeln!(
                out,
                "major heap      OCaml 4.14's chunks; the major GC was {} (sweep pointer {:#x}), which gives the colours their meaning, and {} small free blocks were listed",
                format!("{:?}", gc.phase).to_lowercase(),
                gc.sweep_pointer,
                info.human.free_blocks
            )?,
            (Some(p), None) => writeln!(out, "pools           {} size classes in pools of {} words", p.size_classes.len(), p.pool_wsize)?,
            (None, None) => writeln!(out, "pools           not recorded (a format 1.0 file: OCaml 5.3's geometry)")?,
        }
        writeln!(out, "taken by        {} on {:?}", m.dumper, m.trigger)?;
        match &m.capture {
            Some(c) if c.method == "fork" => {
                writeln!(out, "captured        by fork: read from a copy-on-write child of the stopped process")?
            }
            Some(c) => match &c.why_copy {
                Some(why) => writeln!(out, "captured        by copy, {} was asked: {why}", c.requested)?,
                None => writeln!(out, "captured        by copy, while the process was stopped")?,
            },
            None => {}
        }
        if let Some(exe) = &m.executable {
            writeln!(out, "executable      {exe} (pid {})", m.pid.map_or("-".into(), |p| p.to_string()))?;
        }
        if let Some(ns) = &m.namespaces {
            let mut other: Vec<String> = Vec::new();
            if ns.other_pid_namespace {
                other.push(match ns.pid_inside {
                    Some(pid) => format!("PID namespace (pid {pid} inside)"),
                    None => "PID namespace".into(),
                });
            }
            if ns.other_mount_namespace {
                other.push("mount namespace".into());
            }
            if ns.other_root {
                other.push("root directory".into());
            }
            writeln!(out, "container       ran in another {} than the dumper's; its files were read as it saw them", other.join(", "))?;
        }
        writeln!(out, "domains         {}", m.domains.len())?;
        for kind in RegionKind::ALL {
            if let Some(r) = info.regions.get(kind.label()) {
                writeln!(out, "region {:<12} {:>8} regions {:>14} bytes", kind.label(), r.count, r.bytes)?;
            }
        }
        for (kind, n) in &info.roots {
            writeln!(out, "roots  {kind:<20} {n:>8}")?;
        }
        writeln!(out, "symbols         {}", info.symbols)?;
        let exe_lines = if info.dwarf_sections.iter().any(|s| s == ".debug_line") { "yes" } else { "no" };
        writeln!(out, "line tables     executable: {exe_lines}; Dynlink plugins: {}", info.plugin_dwarf.len())?;
        match info.memprof_entries {
            Some(entries) => {
                let frames = info.memprof_frames;
                let stacks = if frames > 0 { format!("; {frames} frames of stored call stacks") } else { String::new() };
                writeln!(out, "memprof         {entries} tracked blocks, {} samples{stacks}", info.human.memprof_samples)?;
            }
            None => writeln!(out, "memprof         none recorded (statmemprof exists in OCaml 4.14 and from 5.3 on)")?,
        }
        match (&info.ocaml_names, &info.ocaml_names_missing) {
            (Some(n), _) => {
                writeln!(
                    out,
                    "ocaml names     {} compilation units, {} module fields, with types (OCaml {})",
                    n.units, n.fields, info.human.names_ocaml_version
                )?;
                for (file, message) in &info.human.refused {
                    writeln!(out, "                left out: {file}: {message}")?;
                }
            }
            (None, why) => writeln!(out, "ocaml names     {}", why.as_deref().unwrap_or_default())?,
        }
        if let Some(t) = &info.typed {
            writeln!(
                out,
                "typed           {} objects, {} bytes, {:.1}% of reachable bytes ({} objects, {} bytes); conflicts {}, mismatches {}",
                t.objects, t.bytes, t.percent_of_reachable_bytes, t.reachable_objects, t.reachable_bytes, t.conflicts, t.mismatches
            )?;
            if t.static_bytes > 0 {
                writeln!(out, "                and {} bytes of typed static data, counted in neither", t.static_bytes)?;
            }
        }
        for w in &m.warnings {
            writeln!(out, "warning         {w}")?;
        }
        Ok(())
    }
}

/// How much of the reachable heap, of `reachable_objects` blocks, the typing walk typed
/// (`None`: the names give no types). The typed bytes are split into heap and static data
/// (which reachable bytes leave out), so that the share compares like with like: `saved` in the
/// index when it was built, else looked at.
fn typed_share<'s>(a: &impl AnalysedHeap<'s>, reachable_objects: u64, saved: Option<[u64; 2]>) -> Option<TypedShare> {
    let typing = a.typing()?;
    let (heap_bytes, static_bytes) = match saved {
        Some([heap, statics]) => (heap, statics),
        None => heapsnap_index::reports::typed_bytes(a)?,
    };
    let reachable_bytes = a.reachable_bytes();
    let percent = if reachable_bytes == 0 { 0.0 } else { 100.0 * heap_bytes as f64 / reachable_bytes as f64 };
    Some(TypedShare {
        objects: typing.typed_objects,
        bytes: heap_bytes,
        static_bytes,
        reachable_objects,
        reachable_bytes,
        percent_of_reachable_bytes: percent,
        conflicts: typing.conflicts,
        mismatches: typing.mismatches,
    })
}

/// The snapshot's OCaml names (their OCaml version, units, fields, and the units refused with
/// why), or why there are none and how to add them.
type NamesFacts = (String, usize, usize, Vec<(String, String)>);

fn ocaml_names(digest: &heapsnap_index::sections::NamesDigest) -> Result<NamesFacts, String> {
    use heapsnap_index::sections::NamesDigest;
    match digest {
        NamesDigest::Parsed { ocaml_version, units, fields, refused } => Ok((ocaml_version.clone(), *units, *fields, refused.clone())),
        NamesDigest::Damaged(e) => Err(format!("the names section is damaged ({e}); {}", heapsnap_names::MISSING_HINT)),
        NamesDigest::Absent => Err(heapsnap_names::MISSING_HINT.to_string()),
    }
}
