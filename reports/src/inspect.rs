//! `heapsnap inspect`: one object.

use crate::args::parse_address;
use crate::loader::Loader;
use crate::report::Report;
use crate::sites::{self, SiteArgs};
use heapsnap_analyze::human_bytes;
use heapsnap_analyze::HeapFacts;
use heapsnap_analyze::{Allocation, Inspection};
use heapsnap_index::Needs;
use std::io::Write;
use std::path::PathBuf;

pub struct Inspect;

#[derive(clap::Args)]
pub struct InspectArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    /// The object's address (its first field, or its header).
    #[arg(value_name = "ADDRESS", value_parser = parse_address)]
    address: u64,
    /// List at most this many fields (0: all).
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = crate::args::parse_limit)]
    max_fields: usize,
    #[command(flatten)]
    sites: SiteArgs,
}

impl Report for Inspect {
    const NAME: &'static str = "inspect";
    const ABOUT: &'static str = "One object: header, fields, retained size, immediate dominator";
    type Args = InspectArgs;
    type Output = Inspection;

    fn run(args: &InspectArgs, loader: &dyn Loader) -> anyhow::Result<Inspection> {
        crate::loader::answer(loader, &args.snapshot, Needs::Paths, |a| inspect(a, args), |view| inspect(view, args))
    }

    fn print(_args: &InspectArgs, i: &Inspection, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(out, "{} {}", i.address, i.description)?;
        writeln!(out, "  region     {}{}", i.region_kind, i.domain.map(|d| format!(" (domain {d})")).unwrap_or_default())?;
        writeln!(out, "  header     {} (tag {}, wosize {}, {:?}, reserved {})", i.header, i.tag, i.wosize, i.colour, i.reserved)?;
        writeln!(out, "  shallow    {}", human_bytes(i.shallow))?;
        writeln!(out, "  retained   {}{}", human_bytes(i.retained), if i.reachable { "" } else { " (unreachable)" })?;
        if let Some(d) = &i.immediate_dominator {
            writeln!(out, "  dominator  {d}")?;
        }
        for r in &i.roots {
            writeln!(out, "  root       {r}")?;
        }
        for f in &i.fields {
            let index = match &f.name {
                Some(n) => format!("{:>3} {n}", f.index),
                None => format!("{:>3}", f.index),
            };
            writeln!(out, "  [{index}] {:>18} {:<12} {}", f.raw, f.kind, f.value.as_deref().unwrap_or(""))?;
        }
        if i.more_fields > 0 {
            writeln!(out, "  ... {} more fields", i.more_fields)?;
        }
        for r in &i.referrers {
            writeln!(out, "  referrer   {r}")?;
        }
        if let Some(al) = &i.allocation {
            writeln!(
                out,
                "  allocated  {} ({} samples at rate {}, stack from {})",
                al.site,
                al.samples,
                al.sampling_rate,
                al.source.name()
            )?;
            for f in &al.stack {
                writeln!(out, "    {}", f.describe())?;
            }
        }
        Ok(())
    }
}

/// The object at the address, from the analysis or its index.
fn inspect<'s>(a: &(impl heapsnap_analyze::AnalysedHeap<'s> + HeapFacts<'s>), args: &InspectArgs) -> anyhow::Result<Inspection> {
    let mut i = heapsnap_analyze::inspect(a, args.address, args.max_fields)?;
    // A sampled block's allocation stack, when the snapshot has statmemprof's tables.
    if a.snap().memprof().is_some_and(|m| !m.is_empty()) {
        let joined = sites::join(a, args.sites.trace()?.as_ref())?;
        i.allocation = Allocation::of(&joined, i.node);
    } else if args.sites.memtrace.is_some() {
        anyhow::bail!("--memtrace: this snapshot has no statmemprof tables (nothing was sampled, or the runtime is before OCaml 5.3)");
    }
    Ok(i)
}
