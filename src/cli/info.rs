//! `heapsnap info`: the format-level view of a snapshot.

use clap::Args;
use heapsnap_format::{RegionKind, RootKind};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct InfoArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: InfoArgs) -> anyhow::Result<ExitCode> {
    let snap = super::errors::open_snapshot(&args.snapshot)?;
    let mut regions: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    for region in snap.regions() {
        let entry = regions.entry(region.kind().label()).or_default();
        entry.0 += 1;
        entry.1 += region.bytes.len() as u64;
    }
    let mut roots: BTreeMap<&'static str, u64> = BTreeMap::new();
    for root in snap.roots() {
        *roots.entry(RootKind::from_code(root.kind).label()).or_default() += 1;
    }
    // The plugins' DWARF section names, by load bias.
    let mut plugin_dwarf: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for d in snap.plugin_dwarf() {
        plugin_dwarf.entry(d.load_bias).or_default().push(d.name);
    }
    let version = format!("{}.{}", snap.header().version_major, snap.header().version_minor);
    let names = ocaml_names(&snap);
    if args.json {
        let value = serde_json::json!({
            "format_version": version,
            "metadata": snap.metadata(),
            "sections": snap.sections().len(),
            "regions": regions.iter().map(|(k, (n, b))| (k.to_string(), serde_json::json!({"count": n, "bytes": b}))).collect::<serde_json::Map<_, _>>(),
            "roots": roots,
            "symbols": snap.symbols().len(),
            "dwarf_sections": snap.dwarf_section_names().collect::<Vec<_>>(),
            "plugin_dwarf": plugin_dwarf.iter().map(|(bias, names)| serde_json::json!({"load_bias": bias, "sections": names})).collect::<Vec<_>>(),
            "custom_ops": snap.custom_ops().len(),
            "ephemerons": snap.ephemerons().len(),
            "memprof_entries": snap.memprof().map(|e| e.len()),
            "memprof_frames": snap.memprof_frames().len(),
            "ocaml_names": match &names {
                Ok(n) => serde_json::json!({"units": n.units.len(), "fields": n.units.iter().map(|u| u.fields.len()).sum::<usize>(), "refused": n.refused.len()}),
                Err(_) => serde_json::Value::Null,
            },
            "ocaml_names_missing": names.as_ref().err(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    let m = snap.metadata();
    println!("snapshot        {} (format {version})", args.snapshot.display());
    println!("ocaml           {} ({} reserved header bits)", m.ocaml_version, m.reserved_header_bits);
    if m.forced_version {
        println!("                not a version heapsnap knows: read as the newest one it knows (--force)");
    }
    match m.layouts_from.as_deref() {
        Some("tables") => println!("layouts         heapsnap's tables (the executable had no debug info)"),
        Some("debug_file") => println!("layouts         DWARF of a separate debug file"),
        Some(_) => println!("layouts         DWARF of the executable"),
        None => {}
    }
    match (&m.pools, &m.ocaml4_gc) {
        (_, Some(gc)) => println!(
            "major heap      OCaml 4.14's chunks; the major GC was {} (sweep pointer {:#x}), which gives the colours their meaning, and {} small free blocks were listed",
            format!("{:?}", gc.phase).to_lowercase(),
            gc.sweep_pointer,
            snap.free_blocks().len()
        ),
        (Some(p), None) => println!("pools           {} size classes in pools of {} words", p.size_classes.len(), p.pool_wsize),
        (None, None) => println!("pools           not recorded (a format 1.0 file: OCaml 5.3's geometry)"),
    }
    println!("taken by        {} on {:?}", m.dumper, m.trigger);
    if let Some(exe) = &m.executable {
        println!("executable      {exe} (pid {})", m.pid.map_or("-".into(), |p| p.to_string()));
    }
    println!("domains         {}", m.domains.len());
    for kind in RegionKind::ALL {
        if let Some((n, b)) = regions.get(kind.label()) {
            println!("region {:<12} {n:>8} regions {b:>14} bytes", kind.label());
        }
    }
    for (kind, n) in &roots {
        println!("roots  {kind:<20} {n:>8}");
    }
    println!("symbols         {}", snap.symbols().len());
    let exe_lines = if snap.dwarf_section(".debug_line").is_some() { "yes" } else { "no" };
    println!("line tables     executable: {exe_lines}; Dynlink plugins: {}", plugin_dwarf.len());
    match snap.memprof() {
        Some(entries) => {
            let samples: u64 = entries.iter().map(|e| e.samples).sum();
            let frames = snap.memprof_frames().len();
            let stacks = if frames > 0 { format!("; {frames} frames of stored call stacks") } else { String::new() };
            println!("memprof         {} tracked blocks, {samples} samples{stacks}", entries.len());
        }
        None => println!("memprof         none recorded (statmemprof exists in OCaml 4.14 and from 5.3 on)"),
    }
    match &names {
        Ok(n) => {
            let fields: usize = n.units.iter().map(|u| u.fields.len()).sum();
            println!("ocaml names     {} compilation units, {fields} module fields, with types (OCaml {})", n.units.len(), n.ocaml_version);
            for r in &n.refused {
                println!("                left out: {}: {}", r.file, r.message);
            }
        }
        Err(why) => println!("ocaml names     {why}"),
    }
    for w in &m.warnings {
        println!("warning         {w}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The snapshot's OCaml names, or why there are none and how to add them.
fn ocaml_names(snap: &heapsnap_format::Snapshot) -> Result<heapsnap_names::Program, String> {
    match snap.ocaml_names().map(heapsnap_names::Program::parse) {
        Some(Ok(p)) => Ok(p),
        Some(Err(e)) => Err(format!("the names section is damaged ({e}); {}", heapsnap_names::MISSING_HINT)),
        None => Err(heapsnap_names::MISSING_HINT.to_string()),
    }
}
