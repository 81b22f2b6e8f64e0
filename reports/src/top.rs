//! `heapsnap top`: count, shallow and retained bytes per group. Every grouping's rows share
//! the keys `name`, `count`, `shallow` and `retained` (REPORTS.md, "Groups"); allocation sites
//! add their own.

use crate::loader::Loader;
use crate::report::Report;
use crate::sites::{self, By, SiteArgs};
use crate::text::print_groups;
use heapsnap_analyze::human_bytes;
use heapsnap_analyze::sites::report::{site_top, SiteGroup};
use heapsnap_analyze::sites::{JoinStats, SiteFrame};
use heapsnap_analyze::{GroupBy, Top as GroupTop};
use heapsnap_index::Needs;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

pub struct Top;

#[derive(clap::Args)]
pub struct TopArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    /// How to group the reachable objects.
    #[arg(long, value_enum, default_value_t = By::Kind)]
    by: By,
    /// How many groups to list (0: all).
    #[arg(long, default_value_t = 30, value_name = "N", value_parser = crate::args::parse_limit)]
    limit: usize,
    /// With --by site: group by this many frames, from the innermost outside the standard library.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    site_depth: u32,
    #[command(flatten)]
    sites: SiteArgs,
}

/// `top --by site`: the groups of statmemprof's sampled blocks by allocation site.
#[derive(Serialize)]
pub struct SiteTop {
    /// Always `site`.
    pub by: &'static str,
    pub depth: usize,
    pub reachable_bytes: u64,
    pub total_groups: u64,
    pub join: JoinStats,
    /// Largest estimated bytes first.
    pub groups: Vec<SiteRow>,
}

/// One site's group, with the keys every grouping's rows have.
#[derive(Serialize)]
pub struct SiteRow {
    /// The site: `file:line (function)` of each frame, innermost first, joined by ` <- `.
    pub name: String,
    /// Sampled blocks allocated there that are in the snapshot (reachable or not).
    pub count: u64,
    /// Their own bytes, headers included.
    pub shallow: u64,
    /// What freeing them would free.
    pub retained: u64,
    pub frames: Vec<SiteFrame>,
    pub samples: u64,
    /// Samples / sampling rate: an estimate of all the bytes allocated there in the snapshot.
    pub estimated_bytes: u64,
}

impl From<SiteGroup> for SiteRow {
    fn from(g: SiteGroup) -> SiteRow {
        SiteRow {
            name: g.site,
            count: g.count,
            shallow: g.sampled_bytes,
            retained: g.retained,
            frames: g.frames,
            samples: g.samples,
            estimated_bytes: g.estimated_bytes,
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
pub enum TopOutput {
    Groups(GroupTop),
    Sites(SiteTop),
}

impl Report for Top {
    const NAME: &'static str = "top";
    const ABOUT: &'static str = "Count, shallow and retained bytes per group (kind, closure, root, reserved bits, or allocation site)";
    type Args = TopArgs;
    type Output = TopOutput;

    fn run(args: &TopArgs, loader: &dyn Loader) -> anyhow::Result<TopOutput> {
        let Some(by) = args.by.grouping() else {
            return Ok(TopOutput::Sites(site_top_report(&args.snapshot, loader, &args.sites, args.site_depth as usize, args.limit)?));
        };
        if args.sites.memtrace.is_some() {
            anyhow::bail!("--memtrace gives allocation sites: use it with --by site");
        }
        // A first look answers from the analysis, as the index would have.
        let top = crate::loader::answer(
            loader,
            &args.snapshot,
            Needs::Meta,
            |a| Ok(heapsnap_analyze::top(a, by, args.limit)?),
            |view| Ok(heapsnap_analyze::top(view, by, args.limit)?),
        )?;
        Ok(TopOutput::Groups(top))
    }

    fn print(_args: &TopArgs, output: &TopOutput, out: &mut dyn Write) -> std::io::Result<()> {
        match output {
            TopOutput::Groups(top) => print_group_top(top, out),
            TopOutput::Sites(top) => print_site_top(top, out),
        }
    }
}

fn print_group_top(top: &GroupTop, out: &mut dyn Write) -> std::io::Result<()> {
    let (list, total_groups) = (&top.groups, top.total_groups as usize);
    let (unreachable_objects, unreachable_bytes) = (top.unreachable_objects, top.unreachable_bytes);
    let shares = top.roots.as_deref().unwrap_or_default();
    print_groups(out, list, top.reachable_bytes)?;
    if total_groups > list.len() {
        writeln!(out, "({} more groups)", total_groups - list.len())?;
    }
    if let Some(untyped) = top.untyped_bytes {
        let share = if top.reachable_bytes > 0 { 100.0 * untyped as f64 / top.reachable_bytes as f64 } else { 0.0 };
        writeln!(out, "untyped: {} of the reachable bytes ({share:.1}%) are in blocks no OCaml type names", human_bytes(untyped))?;
    }
    if !shares.is_empty() {
        writeln!(out)?;
        writeln!(out, "Per root: what it retains alone, and what it shares with other roots (freed only when all let go)")?;
        writeln!(out, "{:>12} {:>12}  root", "alone", "shared")?;
        for r in shares {
            let with = if r.shared_with.is_empty() { String::new() } else { format!("  (shared with {})", r.shared_with.join(", ")) };
            writeln!(out, "{:>12} {:>12}  {}{with}", human_bytes(r.alone), human_bytes(r.shared), r.root)?;
        }
    }
    writeln!(out)?;
    if top.by == GroupBy::Root {
        writeln!(out, "Each reachable object is in exactly one group: the retained column adds up to the reachable bytes.")?;
    } else {
        writeln!(out, "Retained: what freeing every member of the group would free. Groups nest (a Hashtbl retains its")?;
        writeln!(out, "bucket chains, which retain their strings), so this column adds up to more than 100%; `--by root`")?;
        writeln!(out, "partitions the heap.")?;
    }
    if unreachable_objects > 0 {
        writeln!(
            out,
            "Not counted above: {unreachable_objects} unreachable objects ({}), garbage the GC has not swept yet.",
            human_bytes(unreachable_bytes)
        )?;
    }
    Ok(())
}

/// `top --by site` and `sites`: the sampled blocks' sites, `depth` frames each, at most
/// `limit` of them.
pub fn site_top_report(snapshot: &Path, loader: &dyn Loader, args: &SiteArgs, depth: usize, limit: usize) -> anyhow::Result<SiteTop> {
    let ix = loader.indexed(snapshot, Needs::All)?;
    let view = ix.view(Needs::All)?;
    let joined = sites::join(&view, args.trace()?.as_ref())?;
    let top = site_top(&view, &joined, depth, limit);
    Ok(SiteTop {
        by: top.by,
        depth: top.depth,
        reachable_bytes: top.reachable_bytes,
        total_groups: top.total_groups,
        join: top.join,
        groups: top.groups.into_iter().map(SiteRow::from).collect(),
    })
}

pub fn print_site_top(top: &SiteTop, out: &mut dyn Write) -> std::io::Result<()> {
    sites::print_join(out, &top.join)?;
    writeln!(out)?;
    writeln!(out, "{:>8} {:>8} {:>12} {:>12} {:>12}  site", "blocks", "samples", "sampled", "estimated", "retained")?;
    for g in &top.groups {
        writeln!(
            out,
            "{:>8} {:>8} {:>12} {:>12} {:>12}  {}",
            g.count,
            g.samples,
            human_bytes(g.shallow),
            human_bytes(g.estimated_bytes),
            human_bytes(g.retained),
            g.name
        )?;
    }
    if top.total_groups > top.groups.len() as u64 {
        writeln!(out, "({} more sites)", top.total_groups - top.groups.len() as u64)?;
    }
    writeln!(out)?;
    writeln!(out, "Blocks: the sampled blocks allocated at the site that are in the snapshot; sampled: their bytes.")?;
    writeln!(out, "Estimated: an estimate of all the bytes allocated there that are in the snapshot (samples / sampling rate).")?;
    writeln!(out, "Retained: what freeing the sampled blocks would free.")
}
