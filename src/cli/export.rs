//! `heapsnap export`: a snapshot as Chrome DevTools' heap snapshot, or its retained sizes as a
//! flame graph (folded stacks or an SVG drawn by inferno).

use anyhow::Context;
use clap::{Args, ValueEnum};
use heapsnap_analyze::{human_bytes, GroupBy, Progress};
use heapsnap_export::devtools::{self, Limits};
use heapsnap_export::flame::{folded, folded_saved, Folded};
use heapsnap_export::output::AtomicFile;
use heapsnap_format::Snapshot;
use heapsnap_reports::{loader, Files};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// V8's heap snapshot JSON, for Chrome DevTools' Memory panel and memlab.
    Devtools,
    /// Folded stacks of retained bytes (`frame;frame bytes`), for flame-graph tools.
    Folded,
    /// A flame graph of retained bytes (SVG, drawn by inferno).
    Svg,
    /// Parquet tables of the reports' results (`-o` is a directory), for query engines.
    Parquet,
}

#[derive(Args)]
pub struct ExportArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    #[arg(long, value_enum)]
    format: Format,
    /// Where to write (owner-only, replaced atomically); with `--format parquet` a directory.
    #[arg(short, long)]
    output: PathBuf,
    /// Parquet: the host name the tables give the snapshot, instead of the one its metadata
    /// records.
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// Parquet: how many path signatures of the dominator tree to keep, largest retained first.
    #[arg(long, value_name = "N", default_value_t = heapsnap_export::parquet::DEFAULT_PATHS)]
    paths: usize,
    /// Flame graphs: frames are path signatures (`root`) or groups (`kind`, `reserved`, `closure`).
    #[arg(long, default_value = "root")]
    by: GroupBy,
    /// DevTools: an earlier snapshot of the same process; the objects heapsnap finds in it keep
    /// the node ids they have in its export (DevTools' Comparison view matches by id), even when
    /// a compaction moved them. Export every later snapshot against the same first one.
    #[arg(long, value_name = "OLD_SNAPSHOT")]
    baseline: Option<PathBuf>,
    /// Flame graphs: roots at the top (an icicle graph).
    #[arg(long)]
    icicle: bool,
    #[command(flatten)]
    sites: heapsnap_reports::sites::SiteArgs,
    /// Print what was written as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct FlameReport<'a> {
    format: &'static str,
    output: String,
    by: GroupBy,
    bytes: u64,
    stacks: usize,
    total_bytes: u64,
    /// The stacks with the most bytes, largest first.
    top_stacks: &'a [heapsnap_export::flame::Stack],
}

pub fn run(args: ExportArgs) -> anyhow::Result<ExitCode> {
    if args.format == Format::Parquet {
        return parquet(&args);
    }
    if args.host.is_some() {
        anyhow::bail!("--host applies to --format parquet");
    }
    if args.format == Format::Devtools && args.by != GroupBy::Root {
        anyhow::bail!("--by applies to flame graphs (--format folded or svg)");
    }
    if args.format != Format::Devtools && args.sites.memtrace.is_some() {
        anyhow::bail!("--memtrace gives allocation stacks to the DevTools export (--format devtools)");
    }
    if args.format != Format::Devtools && args.baseline.is_some() {
        anyhow::bail!("--baseline applies to --format devtools (flame graphs have no ids)");
    }
    let progress = Progress::stderr();
    let cannot_open = || format!("cannot open {}", args.snapshot.display());
    if args.format != Format::Devtools && args.by == GroupBy::Root {
        // Refused as a snapshot first (what the index's loader says of a bad file names no
        // command).
        let unverified = heapsnap_format::ReadOptions { verify_checksums: false };
        drop(Snapshot::open_with(&args.snapshot, &unverified).with_context(cannot_open)?);
        // By path signature: the stacks are the diff's dominator trie, saved in the index.
        if let Some(stacks) = loader::with_saved_profile(&Files, &args.snapshot, |_, saved| folded_saved(saved))?.flatten() {
            return write_flame(&args, &stacks);
        }
    }
    let snap = Snapshot::open(&args.snapshot).with_context(cannot_open)?;
    let analysis = loader::analyse(&snap, &progress)?;
    let write_err = || format!("cannot write {}", args.output.display());
    if args.format == Format::Devtools {
        // Sampled blocks' allocation stacks, as DevTools' allocation trace tree.
        let sites = if snap.memprof().is_some_and(|m| !m.is_empty()) {
            let trace = args.sites.memtrace.as_deref().map(heapsnap_reports::sites::open_trace).transpose()?;
            let joined = heapsnap_reports::sites::join(&analysis, trace.as_ref())?;
            heapsnap_reports::sites::warn_missing(&joined.stats);
            Some(joined)
        } else {
            None
        };
        // An earlier snapshot whose objects keep their ids.
        let old = match &args.baseline {
            Some(old_path) => {
                let old = Snapshot::open(old_path).with_context(|| format!("cannot open the baseline {}", old_path.display()))?;
                heapsnap_analyze::diff::check_pair(&old, &snap, false)
                    .with_context(|| format!("--baseline {} cannot give ids to {}", old_path.display(), args.snapshot.display()))?;
                for w in heapsnap_analyze::diff::warnings(&[&old, &snap]) {
                    eprintln!("heapsnap: warning: --baseline: {w}");
                }
                Some((old, old_path.display().to_string()))
            }
            None => None,
        };
        let old_analysis = old.as_ref().map(|(old, _)| loader::analyse(old, &progress)).transpose()?;
        let baseline =
            old_analysis.as_ref().zip(old.as_ref()).map(|(analysis, (_, name))| devtools::Baseline { analysis, name: name.clone() });
        let extras = devtools::Extras { sites: sites.as_ref(), baseline: baseline.as_ref() };
        let report = devtools::export_with(&analysis, &extras, &args.output, &Limits::default(), &progress).with_context(write_err)?;
        // Where the ids are stable, said in every mode (DevTools compares snapshots by id).
        eprintln!("heapsnap: node ids: {}", report.ids.note);
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "wrote {} ({}): {} nodes, {} edges, {} strings{}",
            report.output,
            human_bytes(report.bytes),
            report.nodes,
            report.edges,
            report.strings,
            if report.unreachable_left_out > 0 {
                format!("; {} unreachable blocks left out", report.unreachable_left_out)
            } else {
                String::new()
            }
        );
        println!("{:>12} {:>12}  id  object", "retained", "self");
        for e in report.largest.iter().take(10) {
            println!(
                "{:>12} {:>12}  @{} {} {} ({})",
                human_bytes(e.retained),
                human_bytes(e.self_size),
                e.id,
                e.address,
                e.name,
                e.node_type
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let step = progress.step("flame graph: signatures", 0);
    let stacks = folded(&analysis, args.by);
    step.finish_and_clear();
    write_flame(&args, &stacks)
}

/// `--format parquet`: the tables of one snapshot, in the directory `-o` names.
fn parquet(args: &ExportArgs) -> anyhow::Result<ExitCode> {
    if args.by != GroupBy::Root || args.baseline.is_some() || args.icicle || args.sites.memtrace.is_some() {
        anyhow::bail!("--by, --baseline, --icicle and --memtrace do not apply to --format parquet");
    }
    let report = write_parquet(&args.snapshot, &args.output, args.host.clone(), args.paths)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "wrote {} tables of snapshot {} to {} ({}, {:.2}% of the snapshot's {})",
        report.tables.len(),
        report.snapshot_id,
        report.output,
        human_bytes(report.bytes),
        report.percent_of_snapshot,
        human_bytes(report.snapshot_file_bytes)
    );
    for t in &report.tables {
        println!("{:>8} rows {:>12}  {}", t.rows, human_bytes(t.bytes), t.file);
    }
    Ok(ExitCode::SUCCESS)
}

/// The Parquet tables of the snapshot at `snapshot`, written into `dir` (`host` replaces the
/// one its metadata records); `heapsnap run --export parquet` writes them after each snapshot.
pub fn write_parquet(
    snapshot: &std::path::Path,
    dir: &std::path::Path,
    host: Option<String>,
    paths: usize,
) -> anyhow::Result<heapsnap_export::parquet::ParquetReport> {
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!("{} is not a directory: --format parquet writes a directory of tables", dir.display());
    }
    let snap = loader::open_snapshot(snapshot).with_context(|| format!("cannot open {}", snapshot.display()))?;
    let snapshot_file_bytes = std::fs::metadata(snapshot).map(|m| m.len()).unwrap_or(0);
    let host = host.or_else(|| snap.metadata().host.clone());
    let options = heapsnap_export::parquet::Options {
        snapshot_id: heapsnap_export::parquet::identity::snapshot_id(snap.metadata(), host.as_deref()),
        host,
        snapshot_file_bytes,
        paths,
    };
    let progress = Progress::stderr();
    let analysis = loader::analyse(&snap, &progress)?;
    heapsnap_export::parquet::export(&analysis, &options, dir, &progress).with_context(|| format!("cannot write {}", dir.display()))
}

/// Writes the flame graph of `stacks` as `args` asks (folded text or SVG), and says what it wrote.
fn write_flame(args: &ExportArgs, stacks: &Folded) -> anyhow::Result<ExitCode> {
    let write_err = || format!("cannot write {}", args.output.display());
    let mut out = AtomicFile::create(&args.output).with_context(write_err)?;
    if args.format == Format::Folded {
        for line in stacks.lines() {
            writeln!(out, "{line}").with_context(write_err)?;
        }
    } else {
        let title = format!("retained bytes of {} (by {})", args.snapshot.display(), args.by.name());
        heapsnap_export::svg::write_svg(stacks, &title, args.icicle, &mut out).with_context(write_err)?;
    }
    let bytes = out.commit().with_context(write_err)?;
    let report = FlameReport {
        format: if args.format == Format::Folded { "folded" } else { "svg" },
        output: args.output.display().to_string(),
        by: args.by,
        bytes,
        stacks: stacks.stacks.len(),
        total_bytes: stacks.total_bytes,
        top_stacks: &stacks.stacks[..stacks.stacks.len().min(10)],
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("wrote {} ({}): {} stacks, {} in all", report.output, human_bytes(bytes), report.stacks, human_bytes(report.total_bytes));
    for s in report.top_stacks.iter().take(5) {
        println!("{:>12}  {}", human_bytes(s.bytes), s.frames.join(" / "));
    }
    Ok(ExitCode::SUCCESS)
}
