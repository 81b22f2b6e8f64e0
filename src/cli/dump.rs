//! `heapsnap dump --pid PID`: one snapshot of a running OCaml 5 program.

use clap::Args;
use heapsnap_dump::{dump_process, install_interrupt_guard, DumpError, DumpOptions};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct DumpArgs {
    /// The process to dump.
    #[arg(long)]
    pid: i32,
    /// Where to write the snapshot (default: heapsnap-PID.snap in the current directory).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Zero the contents of strings and bytes before anything reaches the disk.
    #[arg(long)]
    redact: bool,
    /// Reserved header bits of the target's runtime, when they cannot be detected.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=31))]
    reserved_bits: Option<u8>,
    /// Fail rather than write a snapshot taken at an inconsistent stop.
    #[arg(long)]
    strict: bool,
    /// Do not copy the executable's DWARF sections (smaller file, no source lines).
    #[arg(long)]
    no_dwarf: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    // SIGINT/SIGTERM stop the dump cleanly (the target is released unchanged).
    install_interrupt_guard();
    let options = DumpOptions {
        output: args.output.unwrap_or_else(|| PathBuf::from(format!("heapsnap-{}.snap", args.pid))),
        redact: args.redact,
        reserved_bits: args.reserved_bits,
        require_consistent: args.strict,
        include_dwarf: !args.no_dwarf,
        ..DumpOptions::default()
    };
    let report = match dump_process(args.pid, &options) {
        Ok(report) => report,
        Err(DumpError::Interrupted) => {
            eprintln!("heapsnap: interrupted; process {} was released unchanged, no snapshot written", args.pid);
            return Ok(ExitCode::from(130));
        }
        Err(e) => return Err(e.into()),
    };
    for w in &report.warnings {
        eprintln!("heapsnap: warning: {w}");
    }
    eprintln!(
        "heapsnap: paused process {} for {:.3} ms ({} stop{}, {:.3} ms stopped in all); wrote {} ({} regions, {} bytes of heap and stacks, {} roots)",
        report.pid,
        report.pause_ns as f64 / 1e6,
        report.attempts,
        if report.attempts == 1 { "" } else { "s" },
        report.total_stopped_ns as f64 / 1e6,
        report.path.display(),
        report.regions,
        report.region_bytes,
        report.roots,
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(ExitCode::SUCCESS)
}
