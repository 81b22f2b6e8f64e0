//! `heapsnap verify`: a snapshot's consistency. It reads the snapshot whole (the index holds
//! the analysis's answers, not what it checked).

use crate::loader::Loader;
use crate::report::Report;
use heapsnap_analyze::human_bytes;
use heapsnap_analyze::{Progress, VerifyReport};
use std::io::Write;
use std::path::PathBuf;

pub struct Verify;

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    /// Also fail on allocated major-heap blocks that no root reaches (for snapshots taken
    /// right after Gc.compact, at a quiet point).
    #[arg(long)]
    strict: bool,
}

impl Report for Verify {
    const NAME: &'static str = "verify";
    const ABOUT: &'static str = "Check a snapshot's consistency (non-zero exit when it fails)";
    type Args = VerifyArgs;
    type Output = VerifyReport;

    fn run(args: &VerifyArgs, loader: &dyn Loader) -> anyhow::Result<VerifyReport> {
        let snap = loader.snapshot(&args.snapshot)?;
        Ok(heapsnap_analyze::verify_with(&snap, args.strict, &Progress::stderr())?)
    }

    fn passed(report: &VerifyReport) -> bool {
        report.ok
    }

    fn print(_args: &VerifyArgs, report: &VerifyReport, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{}: {} objects, {} reachable, {} weakly reachable only, {} unreachable (major), {} unreachable (minor), {} external pointers",
            if report.ok { "OK" } else { "FAILED" },
            report.objects,
            report.reachable_objects,
            report.weakly_reachable_objects,
            report.unreachable_major_objects,
            report.unreachable_minor_objects,
            report.external_pointers
        )?;
        for (k, n) in &report.error_counts {
            writeln!(out, "  {n:>10} {k}")?;
        }
        for e in &report.errors {
            let field = e.field.map(|f| format!(" field {f}")).unwrap_or_default();
            let value = e.value.as_deref().map(|v| format!(" = {v}")).unwrap_or_default();
            writeln!(out, "  {} at {}{field}{value}: {}", e.kind, e.address, e.detail)?;
        }
        if let Some(f) = &report.floating_garbage {
            let colours: Vec<String> = f.by_colour.iter().map(|(c, n)| format!("{n} {c}")).collect();
            writeln!(
                out,
                "floating garbage? {} of the unreachable major blocks ({}; {}) may be floating garbage ({})",
                f.blocks,
                human_bytes(f.bytes),
                colours.join(", "),
                f.gc_state
            )?;
            writeln!(out, "  {}", f.explanation)?;
        }
        for w in &report.warnings {
            eprintln!("heapsnap: warning: {w}");
        }
        Ok(())
    }
}
