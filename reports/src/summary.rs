//! `heapsnap summary`: totals of a snapshot, after its leak suspects (`heapsnap suspects`).

use crate::loader::Loader;
use crate::report::Report;
use crate::text::{pct, print_groups};
use heapsnap_analyze::{human_bytes, Summary as SummaryReport, SuspectsReport};
use heapsnap_index::Needs;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

pub struct Summary;

#[derive(clap::Args)]
pub struct SummaryArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    /// How many of the largest groups (by OCaml type with names, else by kind) to list (0: all).
    #[arg(long, alias = "top", default_value_t = 10, value_name = "N", value_parser = crate::args::parse_limit)]
    limit: usize,
}

/// The summary's totals, and first the leak suspects (with their default threshold).
#[derive(Serialize)]
pub struct SummaryOutput {
    #[serde(flatten)]
    pub totals: SummaryReport,
    pub suspects: SuspectsReport,
}

impl Report for Summary {
    const NAME: &'static str = "summary";
    const ABOUT: &'static str =
        "Leak suspects, then totals of a snapshot: objects, bytes, garbage, free, per region kind and domain, top groups";
    type Args = SummaryArgs;
    type Output = SummaryOutput;

    fn run(args: &SummaryArgs, loader: &dyn Loader) -> anyhow::Result<SummaryOutput> {
        // A first look answers from the analysis, as the index would have (its meta data saves
        // this summary and these suspects, found when the index was built).
        crate::loader::answer(
            loader,
            &args.snapshot,
            Needs::Meta,
            |a| {
                let (totals, suspects) = heapsnap_analyze::summary_with_suspects(a, args.limit);
                Ok(SummaryOutput { totals, suspects })
            },
            |view| Ok(SummaryOutput { totals: view.summary(args.limit), suspects: view.summary_suspects() }),
        )
    }

    fn print(args: &SummaryArgs, output: &SummaryOutput, out: &mut dyn Write) -> std::io::Result<()> {
        crate::suspects::print_suspects(out, &output.suspects)?;
        writeln!(out)?;
        let s = &output.totals;
        writeln!(
            out,
            "snapshot     {} (OCaml {}, {} reserved header bits)",
            args.snapshot.display(),
            s.ocaml_version,
            s.reserved_header_bits
        )?;
        writeln!(out, "objects      {:>12}  {:>12}", s.objects, human_bytes(s.bytes))?;
        writeln!(out, "  reachable  {:>12}  {:>12}", s.reachable_objects, human_bytes(s.reachable_bytes))?;
        writeln!(out, "  unreachable{:>12}  {:>12}", s.unreachable_objects, human_bytes(s.unreachable_bytes))?;
        writeln!(out, "garbage      {:>12}  {:>12}", s.garbage_objects, human_bytes(s.garbage_bytes))?;
        writeln!(out, "free slots   {:>12}  {:>12}", s.free_slots, human_bytes(s.free_bytes))?;
        writeln!(out, "edges        {:>12}  (external pointers {}, bad pointers {})", s.edges, s.pointers.external, s.pointers.bad)?;
        if s.malformed_headers > 0 {
            writeln!(out, "MALFORMED    {:>12} headers (run `heapsnap verify`)", s.malformed_headers)?;
        }
        writeln!(out)?;
        writeln!(out, "{:<14} {:>8} {:>12} {:>12} {:>12} {:>12}", "region kind", "regions", "size", "live", "garbage", "free")?;
        for (k, t) in &s.by_region_kind {
            writeln!(
                out,
                "{k:<14} {:>8} {:>12} {:>12} {:>12} {:>12}",
                t.regions,
                human_bytes(t.bytes),
                human_bytes(t.counts.live_bytes),
                human_bytes(t.counts.garbage_bytes),
                human_bytes(t.counts.free_bytes)
            )?;
        }
        writeln!(out)?;
        // Pools and minor heaps belong to a domain; an object may have been allocated by another
        // one (promotion, sharing), so the table says who owns the memory, not who allocated it.
        writeln!(out, "{:<14} {:>8} {:>12} {:>12}", "pool owner", "regions", "live objects", "live bytes")?;
        for (d, t) in &s.by_domain {
            writeln!(out, "{d:<14} {:>8} {:>12} {:>12}", t.regions, t.counts.live_blocks, human_bytes(t.counts.live_bytes))?;
        }
        writeln!(out)?;
        writeln!(out, "{:<20} {:>8} {:>12} {:>7}", "root kind", "roots", "retained", "%")?;
        for r in &s.roots {
            writeln!(out, "{:<20} {:>8} {:>12} {:>6.1}%", r.kind, r.roots, human_bytes(r.retained), pct(r.retained, s.reachable_bytes))?;
        }
        writeln!(out)?;
        print_groups(out, &s.top_groups, s.reachable_bytes)
    }
}
