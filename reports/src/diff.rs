//! `heapsnap diff OLD NEW [MORE...]`: what grew between snapshots, where it sits in the
//! dominator tree, and (three snapshots or more) the leak suspects.

use crate::loader::{Loaded, Loader};
use crate::report::Report;
use crate::sites::{self, By, SiteArgs};
use crate::text::{signed, signed_bytes};
use heapsnap_analyze::diff::{diff, has_names, saved_profile, DiffError, DiffOptions, DiffReport, Input, SavedProfile};
use heapsnap_analyze::human_bytes;
use heapsnap_analyze::sites::report::{site_diff, site_groups, suspect_sites, SiteDiff};
use heapsnap_analyze::{key_name, AnalysedHeap, GroupBy, HeapFacts, Progress};
use heapsnap_format::Snapshot;
use heapsnap_index::diff_profile::SAVED_GROUPINGS;
use heapsnap_index::{IndexView, Needs};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

pub struct Diff;

#[derive(clap::Args)]
pub struct DiffArgs {
    /// Snapshots of one program, oldest first (two or more; three or more for leak suspects).
    #[arg(required = true, num_args = 2.., value_name = "SNAPSHOT")]
    snapshots: Vec<PathBuf>,
    /// How to group the reachable objects [default: type when every snapshot has OCaml
    /// names, else kind].
    #[arg(long, value_enum)]
    by: Option<By>,
    /// With --by site: group by this many frames, from the innermost outside the standard library.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    site_depth: u32,
    #[command(flatten)]
    sites: SiteArgs,
    /// How many groups to list (0: all).
    #[arg(long, default_value_t = 30, value_name = "N", value_parser = crate::args::parse_limit)]
    limit: usize,
    /// Growth in bytes, first snapshot to last, below which a group is no suspect and a place
    /// of the dominator tree is not shown.
    #[arg(long, default_value_t = 4096)]
    min_growth: u64,
    /// At most this many leak suspects (0: no limit).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = crate::args::parse_limit)]
    max_suspects: usize,
    /// At most this many retainer paths per suspect (0: no limit).
    #[arg(long, default_value_t = 5, value_name = "N", value_parser = crate::args::parse_limit)]
    max_paths: usize,
    /// At most this many places of the dominator tree (0: no limit).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = crate::args::parse_limit)]
    max_places: usize,
    /// Compare snapshots of different builds of the same executable path (closures and
    /// symbols then rarely match).
    #[arg(long)]
    allow_rebuilt: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
pub enum DiffOutput {
    Groups(Box<DiffReport>),
    Sites(SiteDiff),
}

impl Report for Diff {
    const NAME: &'static str = "diff";
    const ABOUT: &'static str = "Compare snapshots of one program: what grew, where it sits, leak suspects (3+ snapshots)";
    type Args = DiffArgs;
    type Output = DiffOutput;

    fn run(args: &DiffArgs, loader: &dyn Loader) -> anyhow::Result<DiffOutput> {
        // What the metadata says is checked before any snapshot is analysed.
        let peeked: Vec<Snapshot> = args.snapshots.iter().map(|p| peek_snapshot(p)).collect::<anyhow::Result<_>>()?;
        let name = |i: usize| args.snapshots[i].display().to_string();
        for (i, other) in peeked.iter().enumerate().skip(1) {
            heapsnap_analyze::diff::check_pair(&peeked[0], other, args.allow_rebuilt).map_err(|reason| DiffError::Incompatible {
                first: name(0),
                other: name(i),
                reason,
            })?;
        }
        if args.by == Some(By::Site) {
            return Ok(DiffOutput::Sites(site_diff_report(args, loader)?));
        }
        // The index saves the classifications by kind and, with the snapshot's OCaml names, by
        // type: a diff that uses another, or names in some snapshots only (compared without),
        // analyses its snapshots (and builds no index it would not read, unless for the sites).
        // Whether names parse, from each saved index's digest of them (parsing them is most of
        // a second diff's time on a real program).
        let parse = |(path, snap): (&PathBuf, &Snapshot)| {
            heapsnap_index::store::saved_meta(path).map_or_else(|| has_names(snap), |meta| meta.ocaml_names.parsed())
        };
        let named = args.snapshots.iter().zip(&peeked).filter(|&pair| parse(pair)).count();
        let names_agree = named == 0 || named == peeked.len();
        // What grew, in OCaml's words where every snapshot has them.
        let by = match args.by.and_then(By::grouping) {
            Some(by) => by,
            None if named > 0 && named == peeked.len() => GroupBy::Type,
            None => GroupBy::Kind,
        };
        let opts = DiffOptions {
            by,
            limit: args.limit,
            min_growth: args.min_growth,
            max_suspects: args.max_suspects,
            max_paths: args.max_paths,
            max_places: args.max_places,
            allow_rebuilt: args.allow_rebuilt,
        };
        // The suspects' sites read the whole index: loaded now, so that no snapshot is
        // analysed twice (once for the diff's index, once for the sites').
        let wants_sites = peeked.len() >= 3 && by != GroupBy::Root && peeked.iter().all(tracked);
        let from_indexes = SAVED_GROUPINGS.contains(&by) && names_agree;
        drop(peeked);
        // The suspects' sites read the whole index: loaded first. When it is built, a
        // classification the index does not save is made from the same analysis.
        let mut made: Vec<Option<SavedProfile>> = args.snapshots.iter().map(|_| None).collect();
        let indexed: Vec<Loaded<'_>> = if from_indexes || wants_sites {
            let needs = if wants_sites { Needs::All } else { Needs::Diff };
            let mut loaded = Vec::new();
            for (path, slot) in args.snapshots.iter().zip(made.iter_mut()) {
                let mut profile = |a: &heapsnap_analyze::Analysis<'_>| {
                    if !from_indexes && names_agree {
                        *slot = Some(saved_profile(a, by));
                    }
                };
                loaded.push(loader.indexed_with(path, needs, &mut profile)?);
            }
            loaded
        } else {
            Vec::new()
        };
        let views: Vec<Option<IndexView<'_>>> = if from_indexes {
            indexed
                .iter()
                .zip(&args.snapshots)
                .map(|(ix, path)| match ix.view(Needs::Diff) {
                    Ok(view) => Some(view),
                    Err(e) => {
                        eprintln!("heapsnap: ignoring the diff's sections of the index of {}: {e}; analysing it", path.display());
                        None
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        // Without an index, each snapshot is read whole, its checksums checked.
        let read: Vec<Snapshot> =
            if indexed.is_empty() { args.snapshots.iter().map(|p| loader.snapshot(p)).collect::<anyhow::Result<_>>()? } else { Vec::new() };
        let snaps: Vec<&Snapshot> = if indexed.is_empty() { read.iter().collect() } else { indexed.iter().map(|ix| &ix.snap).collect() };
        let inputs: Vec<Input<'_>> = args
            .snapshots
            .iter()
            .enumerate()
            .map(|(i, p)| Input {
                name: p.display().to_string(),
                snap: snaps[i],
                saved: views.get(i).and_then(|v| v.as_ref()).and_then(|v| v.diff_profile(by)).or(made[i].as_ref()),
            })
            .collect();
        let mut report = diff(&inputs, &opts, &Progress::stderr())?;
        if wants_sites {
            add_suspect_sites(args, &mut report, &indexed, loader)?;
        } else if args.sites.memtrace.is_some() {
            anyhow::bail!("{NO_SUSPECT_SITES}");
        }
        Ok(DiffOutput::Groups(Box::new(report)))
    }

    fn print(_args: &DiffArgs, output: &DiffOutput, out: &mut dyn Write) -> std::io::Result<()> {
        match output {
            DiffOutput::Groups(r) => print_report(r, out),
            DiffOutput::Sites(r) => print_site_diff(r, out),
        }
    }
}

/// How many sites a suspect lists.
const SUSPECT_SITES: usize = 5;

/// Why `--memtrace` cannot name the sites of a diff's suspects.
const NO_SUSPECT_SITES: &str = "--memtrace names the sites of leak suspects: it needs three snapshots or more with statmemprof's tables, grouped by kind, closure or reserved bits, or --by site";

/// Whether a snapshot has statmemprof's sampled blocks.
fn tracked(s: &Snapshot) -> bool {
    s.memprof().is_some_and(|m| !m.is_empty())
}

/// A snapshot file, its sections not hashed: what its metadata says, before it is loaded
/// (and checked) for the diff.
fn peek_snapshot(path: &std::path::Path) -> anyhow::Result<Snapshot> {
    if path.is_dir() {
        crate::loader::open_snapshot(path)?;
    }
    let options = heapsnap_format::ReadOptions { verify_checksums: false };
    // The snapshot's own error, as `Snapshot::open` gives it (it names the path).
    Ok(Snapshot::open_with(path, &options)?)
}

/// Names the sites of each suspect's new objects: its sampled blocks' sites in every snapshot,
/// those that grew, when the snapshots hold statmemprof's tables. `indexed` are the snapshots
/// the diff loaded with their whole index (empty: loaded here).
fn add_suspect_sites(args: &DiffArgs, report: &mut DiffReport, indexed: &[Loaded<'_>], loader: &dyn Loader) -> anyhow::Result<()> {
    if report.suspects.is_empty() {
        if args.sites.memtrace.is_some() {
            anyhow::bail!("{NO_SUSPECT_SITES}");
        }
        return Ok(());
    }
    let trace = args.sites.memtrace.as_deref().map(sites::open_trace).transpose()?;
    // Per suspect, per snapshot: the site groups of its sampled blocks.
    let mut per_suspect: Vec<Vec<Vec<heapsnap_analyze::sites::report::SiteGroup>>> = vec![Vec::new(); report.suspects.len()];
    for (i, path) in args.snapshots.iter().enumerate() {
        let opened;
        let ix: &Loaded<'_> = match indexed.get(i) {
            Some(ix) => ix,
            None => {
                opened = loader.indexed(path, Needs::All)?;
                &opened
            }
        };
        let view = ix.view(Needs::All)?;
        let joined = sites::join(&view, trace.as_ref())?;
        let group_of = |v: u32| -> Option<String> {
            let b = view.block(v)?;
            match report.by {
                GroupBy::Reserved => Some(format!("reserved {}", b.header.reserved)),
                GroupBy::Type => view.typing().and_then(|t| t.type_name(t.type_id(v))).map(str::to_string),
                _ => Some(key_name(view.names(), &view.kind_of(&b))),
            }
        };
        let names: Vec<Option<String>> = joined.blocks.iter().map(|b| group_of(b.node)).collect();
        for (s, suspect) in report.suspects.iter().enumerate() {
            let mut of_group = joined.clone();
            let keep: std::collections::HashSet<u32> = joined
                .blocks
                .iter()
                .zip(&names)
                .filter(|(_, n)| n.as_deref() == Some(suspect.group.name.as_str()))
                .map(|(b, _)| b.node)
                .collect();
            of_group.retain(|b| keep.contains(&b.node));
            per_suspect[s].push(site_groups(&view, &of_group, args.site_depth as usize));
        }
    }
    for (suspect, groups) in report.suspects.iter_mut().zip(per_suspect) {
        suspect.sites = suspect_sites(&groups, SUSPECT_SITES);
    }
    Ok(())
}

/// `diff --by site`: the sites of the sampled blocks in each snapshot, the most grown first;
/// with three snapshots or more, the sites that grew at every step.
fn site_diff_report(args: &DiffArgs, loader: &dyn Loader) -> anyhow::Result<SiteDiff> {
    let trace = args.sites.memtrace.as_deref().map(sites::open_trace).transpose()?;
    let mut per_snapshot = Vec::new();
    for path in &args.snapshots {
        let ix = loader.indexed(path, Needs::All)?;
        let view = ix.view(Needs::All)?;
        let joined = sites::join(&view, trace.as_ref()).map_err(|e| e.context(path.display().to_string()))?;
        per_snapshot.push((site_groups(&view, &joined, args.site_depth as usize), joined.stats));
    }
    let names = args.snapshots.iter().map(|p| p.display().to_string()).collect();
    Ok(site_diff(names, &per_snapshot, args.site_depth as usize, args.min_growth, args.limit, args.max_suspects))
}

fn print_site_diff(r: &SiteDiff, out: &mut dyn Write) -> std::io::Result<()> {
    let k = r.snapshots.len();
    for (name, j) in r.snapshots.iter().zip(&r.join) {
        writeln!(out, "{name}:")?;
        write!(out, "  ")?;
        sites::print_join(out, j)?;
    }
    writeln!(out)?;
    if k < 3 {
        writeln!(out, "Leak suspects: take three snapshots or more (sites whose blocks grow at every step).")?;
    } else if r.suspects.is_empty() {
        writeln!(out, "Leak suspects: none (no site's estimated bytes grew at every step).")?;
    } else {
        writeln!(out, "Leak suspects: sites whose estimated bytes grew at every step (the new objects were allocated there)")?;
        for (i, s) in r.suspects.iter().enumerate() {
            writeln!(
                out,
                "{:>3}. {}: {} -> {} sampled blocks, estimated {} -> {} ({}), retained {} -> {}",
                i + 1,
                s.site,
                s.count[0],
                s.count[k - 1],
                human_bytes(s.estimated_bytes[0]),
                human_bytes(s.estimated_bytes[k - 1]),
                signed_bytes(s.growth),
                human_bytes(s.retained[0]),
                human_bytes(s.retained[k - 1])
            )?;
        }
    }
    writeln!(out)?;
    writeln!(out, "Sites, most grown first ({} of {}); estimated bytes are samples / sampling rate:", r.sites.len(), r.total_sites)?;
    writeln!(out, "{:>8} {:>12} {:>12} {:>12}  site", "blocks", "estimated", "change", "retained")?;
    for s in &r.sites {
        writeln!(
            out,
            "{:>8} {:>12} {:>12} {:>12}  {}",
            s.count[k - 1],
            human_bytes(s.estimated_bytes[k - 1]),
            signed_bytes(s.growth),
            human_bytes(s.retained[k - 1]),
            s.site
        )?;
    }
    Ok(())
}

fn print_report(r: &DiffReport, out: &mut dyn Write) -> std::io::Result<()> {
    let k = r.snapshots.len();
    let program = r.program.executable.as_deref().unwrap_or("an unknown program");
    writeln!(out, "{k} snapshots of {program} (OCaml {}), oldest first", r.program.ocaml_version)?;
    writeln!(out, "{:>3}  {:>10} {:>12} {:>12}  snapshot", "#", "objects", "reachable", "change")?;
    for (i, s) in r.snapshots.iter().enumerate() {
        let change =
            if i == 0 { String::new() } else { signed_bytes(s.reachable_bytes as i64 - r.snapshots[i - 1].reachable_bytes as i64) };
        writeln!(out, "{:>3}  {:>10} {:>12} {:>12}  {}", i + 1, s.objects, human_bytes(s.reachable_bytes), change, s.name)?;
    }
    for w in &r.warnings {
        eprintln!("heapsnap: warning: {w}");
    }

    writeln!(out)?;
    if k < 3 {
        writeln!(out, "Leak suspects: take three snapshots or more (groups that grow at every step).")?;
    } else if r.suspects.is_empty() {
        writeln!(out, "Leak suspects: none (no group by {} grew at every step by {} or more).", r.by.name(), human_bytes(r.min_growth))?;
    } else {
        writeln!(out, "Leak suspects: groups by {} whose count grew at every step, by retained growth", r.by.name())?;
        for (i, s) in r.suspects.iter().enumerate() {
            let g = &s.group;
            writeln!(
                out,
                "{:>3}. {}: {} -> {} objects ({}), retained {} -> {} ({})",
                i + 1,
                g.name,
                g.count[0],
                g.count[k - 1],
                signed(g.delta_count),
                human_bytes(g.retained[0]),
                human_bytes(g.retained[k - 1]),
                signed_bytes(g.delta_retained)
            )?;
            for p in &s.paths {
                writeln!(out, "       {:>8} new ({} -> {})  {}", signed(p.new), p.count[0], p.count[1], p.description)?;
            }
            if s.growing_paths > s.paths.len() as u64 {
                writeln!(out, "       ({} more paths gained members)", s.growing_paths - s.paths.len() as u64)?;
            }
            for site in &s.sites {
                writeln!(
                    out,
                    "       allocated at {} (estimated {}, {} sampled blocks)",
                    site.site,
                    signed_bytes(site.growth),
                    signed(site.count[k - 1] as i64 - site.count[0] as i64)
                )?;
            }
        }
    }

    writeln!(out)?;
    if r.growth.is_empty() {
        writeln!(out, "Growth in the dominator tree: no place grew by {} or more.", human_bytes(r.min_growth))?;
    } else {
        writeln!(out, "Growth in the dominator tree (retained bytes, first -> last snapshot):")?;
        for p in &r.growth {
            let every = if k >= 3 && p.grew_every_step { ", every step" } else { "" };
            let what = match p.reason {
                "own" => "its own objects".to_string(),
                _ => format!("{} objects", signed(p.delta_count)),
            };
            writeln!(
                out,
                "  {:>10}  retained {} -> {}, {what}{every}",
                signed_bytes(p.growth),
                human_bytes(p.retained[0]),
                human_bytes(p.retained[k - 1]),
            )?;
            writeln!(out, "      {}", p.description)?;
            for c in p.children.iter().filter(|_| p.reason != "own") {
                let edge = if c.step.edge.is_empty() { String::new() } else { format!("{} ", c.step.edge) };
                writeln!(
                    out,
                    "        {:>10}  {edge}{}{}",
                    signed_bytes(c.delta_retained),
                    c.step.label,
                    if c.step.folded { "+" } else { "" }
                )?;
            }
        }
    }

    writeln!(out)?;
    writeln!(out, "Groups by {}, most grown first ({} of {}):", r.by.name(), r.groups.len(), r.total_groups)?;
    writeln!(out, "{:>10} {:>9} {:>11} {:>11} {:>11} {:>11}  group", "count", "change", "shallow", "change", "retained", "change")?;
    for g in &r.groups {
        writeln!(
            out,
            "{:>10} {:>9} {:>11} {:>11} {:>11} {:>11}  {}",
            g.count[k - 1],
            signed(g.delta_count),
            human_bytes(g.shallow[k - 1]),
            signed_bytes(g.delta_shallow),
            human_bytes(g.retained[k - 1]),
            signed_bytes(g.delta_retained),
            g.name
        )?;
    }
    Ok(())
}
