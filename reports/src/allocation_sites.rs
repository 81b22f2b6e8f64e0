//! `heapsnap sites`: where statmemprof's sampled blocks were allocated, for snapshots that
//! have samples (OCaml 4.14 and 5.3+ with `Gc.Memprof` running). The same report as
//! `top --by site`, under its own name so that an agent finds it among the MCP tools; a
//! snapshot without samples is an error here, not an empty table.

use crate::loader::Loader;
use crate::report::Report;
use crate::sites::SiteArgs;
use crate::top::{print_site_top, site_top_report, SiteTop};
use std::io::Write;
use std::path::PathBuf;

pub struct AllocationSites;

#[derive(clap::Args)]
pub struct SitesArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    /// Group by this many frames, from the innermost outside the standard library.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    site_depth: u32,
    /// How many sites to list (0: all).
    #[arg(long, default_value_t = 30, value_name = "N", value_parser = crate::args::parse_limit)]
    limit: usize,
    #[command(flatten)]
    sites: SiteArgs,
}

impl Report for AllocationSites {
    const NAME: &'static str = "sites";
    const ABOUT: &'static str = "Where the sampled blocks were allocated (snapshots with statmemprof samples): the same as top --by site";
    type Args = SitesArgs;
    type Output = SiteTop;

    fn run(args: &SitesArgs, loader: &dyn Loader) -> anyhow::Result<SiteTop> {
        let top = site_top_report(&args.snapshot, loader, &args.sites, args.site_depth as usize, args.limit)?;
        // An empty table would read as "nothing allocated": say why there is nothing to list.
        if top.join.tracked == 0 {
            return Err(heapsnap_analyze::AnalyzeError::BadQuery(
                "this snapshot has no sampled blocks: the program ran without statmemprof (start Gc.Memprof, or memtrace, in it)".into(),
            )
            .into());
        }
        Ok(top)
    }

    fn print(_args: &SitesArgs, top: &SiteTop, out: &mut dyn Write) -> std::io::Result<()> {
        print_site_top(top, out)
    }
}
