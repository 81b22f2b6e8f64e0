//! `heapsnap path`: shortest paths from the roots to objects, merged by chain.

use crate::args::parse_address;
use crate::loader::Loader;
use crate::report::Report;
use crate::sites::{self, SiteArgs};
use heapsnap_analyze::{PathQuery, PathsReport};
use heapsnap_index::Needs;
use std::io::Write;
use std::path::PathBuf;

pub struct RetainerPaths;

#[derive(clap::Args)]
pub struct PathArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    /// The object's address (its first field, or its header).
    #[arg(value_name = "ADDRESS", value_parser = parse_address, required_unless_present_any = ["tag", "reserved", "kind", "site"])]
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
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = crate::args::parse_limit)]
    sample: usize,
    /// How many distinct paths to list (0: all).
    #[arg(long, alias = "max-paths", default_value_t = 10, value_name = "N", value_parser = crate::args::parse_limit)]
    limit: usize,
}

impl Report for RetainerPaths {
    const NAME: &'static str = "path";
    const ABOUT: &'static str = "Shortest paths from the roots to objects (ignoring weak references), merged by chain";
    type Args = PathArgs;
    type Output = PathsReport;

    fn run(args: &PathArgs, loader: &dyn Loader) -> anyhow::Result<PathsReport> {
        if args.sites.memtrace.is_some() && args.site.is_none() {
            anyhow::bail!("--memtrace gives allocation sites: use it with --site FILE:LINE");
        }
        crate::loader::answer(loader, &args.snapshot, Needs::Paths, |a| paths(a, args), |view| paths(view, args))
    }

    fn print(_args: &PathArgs, report: &PathsReport, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{} objects matched, {} followed, {} unreachable through strong references",
            report.targets, report.sampled, report.unreachable
        )?;
        for p in &report.paths {
            writeln!(out)?;
            writeln!(out, "{} x  from {} root {}", p.count, p.root_kind, p.root)?;
            for s in &p.steps {
                let field = s.field.as_deref().map(|f| format!(".{f} -> ")).unwrap_or_default();
                let repeat = match (s.repeat_min, s.repeat_max) {
                    (1, 1) => String::new(),
                    (a, b) if a == b => format!("  (x{a})"),
                    (a, b) => format!("  (x{a}..{b})"),
                };
                writeln!(out, "    {field}{} [{}]{repeat}", s.label, s.example)?;
            }
        }
        Ok(())
    }
}

/// The paths the arguments ask for, from the analysis or its index.
fn paths<'s>(a: &impl heapsnap_analyze::AnalysedHeap<'s>, args: &PathArgs) -> anyhow::Result<PathsReport> {
    let query = match (args.address, args.tag, args.reserved, &args.kind, &args.site) {
        (Some(x), ..) => PathQuery::Address(x),
        (_, Some(t), ..) => PathQuery::Tag(t),
        (_, _, Some(v), ..) => PathQuery::Reserved(v),
        (_, _, _, Some(k), _) => PathQuery::Kind(k.clone()),
        (.., Some((file, line))) => {
            let joined = sites::join(a, args.sites.trace()?.as_ref())?;
            let nodes = joined.blocks_at(file, *line);
            if nodes.is_empty() {
                let known: Vec<String> =
                    heapsnap_analyze::sites::report::site_groups(a, &joined, 1).into_iter().take(5).map(|g| g.site).collect();
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
    Ok(heapsnap_analyze::paths(a, &query, args.sample, args.limit)?)
}
