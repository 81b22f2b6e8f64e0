//! The analysis subcommands: `summary`, `top`, `dominators`, `path`, `inspect`, `verify`.
//! Human tables by default, `--json` everywhere (schemas in analyze/REPORTS.md). The reports
//! answer from the snapshot's analysis index (`SNAP.hsidx`, built by the first of them).

use super::indexed;
use super::sites::{self, By, SiteArgs};
use clap::Args;
use heapsnap_analyze::{dominator_report, human_bytes, GroupBy, PathQuery, Progress, TreeNode};
use heapsnap_format::Snapshot;
use heapsnap_index::Needs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn open(path: &Path) -> anyhow::Result<Snapshot> {
    // The analysis allocates and frees many big arrays: let glibc reuse them (see mem.rs).
    heapsnap_analyze::tune_allocator();
    super::errors::open_snapshot(path)
}

/// Prints any serialisable report as pretty JSON (a macro: the binary does not name serde).
macro_rules! print_json {
    ($value:expr) => {{
        println!("{}", serde_json::to_string_pretty(&$value)?);
        Ok(ExitCode::SUCCESS)
    }};
}

/// An address: `0x7f...` or decimal.
fn parse_address(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("bad address {s:?}: {e}"))
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

#[derive(Args)]
pub struct SummaryArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    /// How many of the largest groups (by kind) to list (0: all).
    #[arg(long, alias = "top", default_value_t = 10, value_name = "N", value_parser = super::parse_limit)]
    limit: usize,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

pub fn summary_cmd(args: SummaryArgs) -> anyhow::Result<ExitCode> {
    let ix = indexed::load(&args.snapshot, Needs::Meta)?;
    let s = ix.view(Needs::Meta)?.summary(args.limit);
    if args.json {
        return print_json!(s);
    }
    println!("snapshot     {} (OCaml {}, {} reserved header bits)", args.snapshot.display(), s.ocaml_version, s.reserved_header_bits);
    println!("objects      {:>12}  {:>12}", s.objects, human_bytes(s.bytes));
    println!("  reachable  {:>12}  {:>12}", s.reachable_objects, human_bytes(s.reachable_bytes));
    println!("  unreachable{:>12}  {:>12}", s.unreachable_objects, human_bytes(s.unreachable_bytes));
    println!("garbage      {:>12}  {:>12}", s.garbage_objects, human_bytes(s.garbage_bytes));
    println!("free slots   {:>12}  {:>12}", s.free_slots, human_bytes(s.free_bytes));
    println!("edges        {:>12}  (external pointers {}, bad pointers {})", s.edges, s.pointers.external, s.pointers.bad);
    if s.malformed_headers > 0 {
        println!("MALFORMED    {:>12} headers (run `heapsnap verify`)", s.malformed_headers);
    }
    println!();
    println!("{:<14} {:>8} {:>12} {:>12} {:>12} {:>12}", "region kind", "regions", "size", "live", "garbage", "free");
    for (k, t) in &s.by_region_kind {
        println!(
            "{k:<14} {:>8} {:>12} {:>12} {:>12} {:>12}",
            t.regions,
            human_bytes(t.bytes),
            human_bytes(t.counts.live_bytes),
            human_bytes(t.counts.garbage_bytes),
            human_bytes(t.counts.free_bytes)
        );
    }
    println!();
    // Pools and minor heaps belong to a domain; an object may have been allocated by another
    // one (promotion, sharing), so the table says who owns the memory, not who allocated it.
    println!("{:<14} {:>8} {:>12} {:>12}", "pool owner", "regions", "live objects", "live bytes");
    for (d, t) in &s.by_domain {
        println!("{d:<14} {:>8} {:>12} {:>12}", t.regions, t.counts.live_blocks, human_bytes(t.counts.live_bytes));
    }
    println!();
    println!("{:<20} {:>8} {:>12} {:>7}", "root kind", "roots", "retained", "%");
    for r in &s.roots {
        println!("{:<20} {:>8} {:>12} {:>6.1}%", r.kind, r.roots, human_bytes(r.retained), pct(r.retained, s.reachable_bytes));
    }
    println!();
    print_groups(&s.top_groups, s.reachable_bytes);
    Ok(ExitCode::SUCCESS)
}

fn print_groups(list: &[heapsnap_analyze::Group], total: u64) {
    println!("{:>10} {:>12} {:>12} {:>7}  group", "count", "shallow", "retained", "%");
    for g in list {
        println!(
            "{:>10} {:>12} {:>12} {:>6.1}%  {}",
            g.count,
            human_bytes(g.shallow),
            human_bytes(g.retained),
            pct(g.retained, total),
            g.name
        );
    }
}

#[derive(Args)]
pub struct TopArgs {
    snapshot: PathBuf,
    /// How to group the reachable objects.
    #[arg(long, value_enum, default_value_t = By::Kind)]
    by: By,
    /// How many groups to list (0: all).
    #[arg(long, default_value_t = 30, value_name = "N", value_parser = super::parse_limit)]
    limit: usize,
    /// With --by site: group by this many frames, from the innermost outside the standard library.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    site_depth: u32,
    #[command(flatten)]
    sites: SiteArgs,
    #[arg(long)]
    json: bool,
}

pub fn top_cmd(args: TopArgs) -> anyhow::Result<ExitCode> {
    let Some(by) = args.by.grouping() else { return site_top_cmd(args) };
    if args.sites.memtrace.is_some() {
        anyhow::bail!("--memtrace gives allocation sites: use it with --by site");
    }
    let ix = indexed::load(&args.snapshot, Needs::Meta)?;
    let top = heapsnap_analyze::top(&ix.view(Needs::Meta)?, by, args.limit)?;
    if args.json {
        return print_json!(top);
    }
    let (list, total_groups) = (&top.groups, top.total_groups as usize);
    let (unreachable_objects, unreachable_bytes) = (top.unreachable_objects, top.unreachable_bytes);
    let shares = top.roots.as_deref().unwrap_or_default();
    print_groups(list, top.reachable_bytes);
    if total_groups > list.len() {
        println!("({} more groups)", total_groups - list.len());
    }
    if !shares.is_empty() {
        println!();
        println!("Per root: what it retains alone, and what it shares with other roots (freed only when all let go)");
        println!("{:>12} {:>12}  root", "alone", "shared");
        for r in shares {
            let with = if r.shared_with.is_empty() { String::new() } else { format!("  (shared with {})", r.shared_with.join(", ")) };
            println!("{:>12} {:>12}  {}{with}", human_bytes(r.alone), human_bytes(r.shared), r.root);
        }
    }
    println!();
    if by == GroupBy::Root {
        println!("Each reachable object is in exactly one group: the retained column adds up to the reachable bytes.");
    } else {
        println!("Retained: what freeing every member of the group would free. Groups nest (a Hashtbl retains its");
        println!("bucket chains, which retain their strings), so this column adds up to more than 100%; `--by root`");
        println!("partitions the heap.");
    }
    if unreachable_objects > 0 {
        println!(
            "Not counted above: {unreachable_objects} unreachable objects ({}), garbage the GC has not swept yet.",
            human_bytes(unreachable_bytes)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn site_top_cmd(args: TopArgs) -> anyhow::Result<ExitCode> {
    let ix = indexed::load(&args.snapshot, Needs::All)?;
    let top = sites::top(&ix.view(Needs::All)?, &args.sites, args.site_depth as usize, args.limit)?;
    if args.json {
        return print_json!(top);
    }
    sites::print_join(&top.join);
    println!();
    println!("{:>8} {:>8} {:>12} {:>12} {:>12}  site", "blocks", "samples", "sampled", "estimated", "retained");
    for g in &top.groups {
        println!(
            "{:>8} {:>8} {:>12} {:>12} {:>12}  {}",
            g.count,
            g.samples,
            human_bytes(g.sampled_bytes),
            human_bytes(g.estimated_bytes),
            human_bytes(g.retained),
            g.site
        );
    }
    if top.total_groups > top.groups.len() as u64 {
        println!("({} more sites)", top.total_groups - top.groups.len() as u64);
    }
    println!();
    println!("Blocks: the sampled blocks allocated at the site that are in the snapshot; sampled: their bytes.");
    println!("Estimated: an estimate of all the bytes allocated there that are in the snapshot (samples / sampling rate).");
    println!("Retained: what freeing the sampled blocks would free.");
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct DominatorsArgs {
    snapshot: PathBuf,
    /// Levels of the tree to show below the super-root.
    #[arg(long, default_value_t = 4)]
    depth: usize,
    /// Hide subtrees retaining less than this percentage of the reachable bytes.
    #[arg(long, default_value_t = 1.0)]
    min_percent: f64,
    /// At most this many children per node (0: no limit).
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = super::parse_limit)]
    max_children: usize,
    #[arg(long)]
    json: bool,
}

pub fn dominators_cmd(args: DominatorsArgs) -> anyhow::Result<ExitCode> {
    let ix = indexed::load(&args.snapshot, Needs::Tree)?;
    let tree = dominator_report(&ix.view(Needs::Tree)?, args.depth, args.min_percent, args.max_children);
    if args.json {
        return print_json!(tree);
    }
    println!("{:>12} {:>7} {:>10}  object", "retained", "%", "shallow");
    let mut stack: Vec<(&TreeNode, usize)> = vec![(&tree, 0)];
    while let Some((n, level)) = stack.pop() {
        let mut indent = "  ".repeat(level);
        if let Some(s) = &n.similar {
            println!(
                "{:>12} {:>6.1}% {:>10}  {indent}{} {}, largest {}; the largest:",
                human_bytes(s.retained),
                s.percent,
                "",
                s.count,
                s.kind,
                human_bytes(s.largest)
            );
            indent.push_str("  ");
        }
        let addr = n.address.as_deref().map(|x| format!("{x} ")).unwrap_or_default();
        let root = n.root.as_deref().map(|r| format!(" <- {r}")).unwrap_or_default();
        println!(
            "{:>12} {:>6.1}% {:>10}  {indent}{addr}{}{root}",
            human_bytes(n.retained),
            n.percent,
            human_bytes(n.shallow),
            n.description
        );
        if n.omitted_children > 0 {
            println!("{:>12} {:>7} {:>10}  {indent}  ({} smaller children)", human_bytes(n.omitted_retained), "", "", n.omitted_children);
        }
        for c in n.children.iter().rev() {
            stack.push((c, level + 1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct PathArgs {
    snapshot: PathBuf,
    /// The object's address (its first field, or its header).
    #[arg(value_parser = parse_address, required_unless_present_any = ["tag", "reserved", "kind", "site"])]
    address: Option<u64>,
    /// Paths to every block with this block tag (0: records and tuples, 252: strings, ...).
    #[arg(long, conflicts_with_all = ["address", "reserved", "kind"])]
    tag: Option<u8>,
    /// Paths to every block whose reserved header bits hold this value (runtimes configured
    /// with reserved bits only).
    #[arg(long, value_name = "VALUE", conflicts_with_all = ["address", "tag", "kind"])]
    reserved: Option<u32>,
    /// Paths to every block of this kind, named exactly as `top --by kind` names it.
    #[arg(long, conflicts_with_all = ["address", "tag", "reserved", "site"])]
    kind: Option<String>,
    /// Paths to every sampled block allocated at this site (FILE:LINE, as `top --by site` names
    /// it: the innermost frame outside the standard library).
    #[arg(long, value_name = "FILE:LINE", value_parser = heapsnap_analyze::sites::parse_site, conflicts_with_all = ["address", "tag", "reserved", "kind"])]
    site: Option<(String, u32)>,
    #[command(flatten)]
    sites: SiteArgs,
    /// Follow at most this many of the matched objects, evenly sampled (0: all).
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = super::parse_limit)]
    sample: usize,
    /// How many distinct paths to list (0: all).
    #[arg(long, alias = "max-paths", default_value_t = 10, value_name = "N", value_parser = super::parse_limit)]
    limit: usize,
    #[arg(long)]
    json: bool,
}

pub fn path_cmd(args: PathArgs) -> anyhow::Result<ExitCode> {
    if args.sites.memtrace.is_some() && args.site.is_none() {
        anyhow::bail!("--memtrace gives allocation sites: use it with --site FILE:LINE");
    }
    let ix = indexed::load(&args.snapshot, Needs::All)?;
    let view = ix.view(Needs::All)?;
    let query = match (args.address, args.tag, args.reserved, args.kind, args.site) {
        (Some(x), ..) => PathQuery::Address(x),
        (_, Some(t), ..) => PathQuery::Tag(t),
        (_, _, Some(v), ..) => PathQuery::Reserved(v),
        (_, _, _, Some(k), _) => PathQuery::Kind(k),
        (.., Some((file, line))) => {
            let trace = args.sites.memtrace.as_deref().map(sites::open_trace).transpose()?;
            let joined = sites::join(&view, trace.as_ref())?;
            let nodes = joined.blocks_at(&file, line);
            if nodes.is_empty() {
                let known: Vec<String> =
                    heapsnap_analyze::sites::report::site_groups(&view, &joined, 1).into_iter().take(5).map(|g| g.site).collect();
                return Err(heapsnap_analyze::AnalyzeError::BadQuery(format!(
                    "no sampled block was allocated at {file}:{line} ({} have a stack; the largest sites: {})",
                    joined.blocks.len(),
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ))
                .into());
            }
            PathQuery::Nodes(nodes)
        }
        _ => anyhow::bail!("give an address, --tag, --reserved, --kind or --site"),
    };
    let report = heapsnap_analyze::paths(&view, &query, args.sample, args.limit)?;
    if args.json {
        return print_json!(report);
    }
    println!(
        "{} objects matched, {} followed, {} unreachable through strong references",
        report.targets, report.sampled, report.unreachable
    );
    for p in &report.paths {
        println!();
        println!("{} x  from {} root {}", p.count, p.root_kind, p.root);
        for s in &p.steps {
            let field = s.field.as_deref().map(|f| format!(".{f} -> ")).unwrap_or_default();
            let repeat = match (s.repeat_min, s.repeat_max) {
                (1, 1) => String::new(),
                (a, b) if a == b => format!("  (x{a})"),
                (a, b) => format!("  (x{a}..{b})"),
            };
            println!("    {field}{} [{}]{repeat}", s.label, s.example);
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct InspectArgs {
    snapshot: PathBuf,
    #[arg(value_parser = parse_address)]
    address: u64,
    /// List at most this many fields (0: all).
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = super::parse_limit)]
    max_fields: usize,
    #[command(flatten)]
    sites: SiteArgs,
    #[arg(long)]
    json: bool,
}

pub fn inspect_cmd(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let ix = indexed::load(&args.snapshot, Needs::All)?;
    let view = ix.view(Needs::All)?;
    let mut i = heapsnap_analyze::inspect(&view, args.address, args.max_fields)?;
    // A sampled block's allocation stack, when the snapshot has statmemprof's tables.
    if heapsnap_analyze::HeapFacts::snap(&view).memprof().is_some_and(|m| !m.is_empty()) {
        let trace = args.sites.memtrace.as_deref().map(sites::open_trace).transpose()?;
        let joined = sites::join(&view, trace.as_ref())?;
        i.allocation = heapsnap_analyze::Allocation::of(&joined, i.node);
    } else if args.sites.memtrace.is_some() {
        anyhow::bail!("--memtrace: this snapshot has no statmemprof tables (nothing was sampled, or the runtime is before OCaml 5.3)");
    }
    if args.json {
        return print_json!(i);
    }
    println!("{} {}", i.address, i.description);
    println!("  region     {}{}", i.region_kind, i.domain.map(|d| format!(" (domain {d})")).unwrap_or_default());
    println!("  header     {} (tag {}, wosize {}, {:?}, reserved {})", i.header, i.tag, i.wosize, i.colour, i.reserved);
    println!("  shallow    {}", human_bytes(i.shallow));
    println!("  retained   {}{}", human_bytes(i.retained), if i.reachable { "" } else { " (unreachable)" });
    if let Some(d) = &i.immediate_dominator {
        println!("  dominator  {d}");
    }
    for r in &i.roots {
        println!("  root       {r}");
    }
    for f in &i.fields {
        let index = match &f.name {
            Some(n) => format!("{:>3} {n}", f.index),
            None => format!("{:>3}", f.index),
        };
        println!("  [{index}] {:>18} {:<12} {}", f.raw, f.kind, f.value.as_deref().unwrap_or(""));
    }
    if i.more_fields > 0 {
        println!("  ... {} more fields", i.more_fields);
    }
    for r in &i.referrers {
        println!("  referrer   {r}");
    }
    if let Some(al) = &i.allocation {
        println!("  allocated  {} ({} samples at rate {}, stack from {})", al.site, al.samples, al.sampling_rate, al.source.name());
        for f in &al.stack {
            println!("    {}", f.describe());
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct VerifyArgs {
    snapshot: PathBuf,
    /// Also fail on allocated major-heap blocks that no root reaches (for snapshots taken
    /// right after Gc.compact, at a quiet point).
    #[arg(long)]
    strict: bool,
    #[arg(long)]
    json: bool,
}

pub fn verify_cmd(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let snap = open(&args.snapshot)?;
    let report = heapsnap_analyze::verify_with(&snap, args.strict, &Progress::stderr())?;
    let code = if report.ok { ExitCode::SUCCESS } else { ExitCode::from(1) };
    if args.json {
        let _: anyhow::Result<ExitCode> = print_json!(report);
        return Ok(code);
    }
    println!(
        "{}: {} objects, {} reachable, {} weakly reachable only, {} unreachable (major), {} unreachable (minor), {} external pointers",
        if report.ok { "OK" } else { "FAILED" },
        report.objects,
        report.reachable_objects,
        report.weakly_reachable_objects,
        report.unreachable_major_objects,
        report.unreachable_minor_objects,
        report.external_pointers
    );
    for (k, n) in &report.error_counts {
        println!("  {n:>10} {k}");
    }
    for e in &report.errors {
        let field = e.field.map(|f| format!(" field {f}")).unwrap_or_default();
        let value = e.value.as_deref().map(|v| format!(" = {v}")).unwrap_or_default();
        println!("  {} at {}{field}{value}: {}", e.kind, e.address, e.detail);
    }
    for w in &report.warnings {
        eprintln!("heapsnap: warning: {w}");
    }
    Ok(code)
}
