//! Command-line parsing and dispatch. Each group of subcommands lives in its own module.

mod analyze;
mod annotate;
mod diff;
mod dump;
pub mod errors;
mod export;
mod indexed;
mod info;
mod run;
mod serve;
mod sites;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "heapsnap", version, about = "Heap snapshots for OCaml native programs (4.14, 5.x): who keeps this alive?")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Totals of a snapshot: objects, bytes, garbage, free, per region kind and domain, top groups.
    Summary(analyze::SummaryArgs),
    /// Count, shallow and retained bytes per group (kind, closure, root, reserved bits, or allocation site).
    Top(analyze::TopArgs),
    /// The dominator tree with retained sizes.
    Dominators(analyze::DominatorsArgs),
    /// Shortest paths from the roots to objects (ignoring weak references), merged by chain.
    Path(analyze::PathArgs),
    /// One object: header, fields, retained size, immediate dominator.
    Inspect(analyze::InspectArgs),
    /// Check a snapshot's consistency (non-zero exit when it fails).
    Verify(analyze::VerifyArgs),
    /// Compare snapshots of one program: what grew, where it sits, leak suspects (3+ snapshots).
    Diff(diff::DiffArgs),
    /// Add the program's OCaml names and types (from its .cmt files) to a snapshot.
    Annotate(annotate::AnnotateArgs),
    /// Validate a snapshot and print its metadata and sections.
    Info(info::InfoArgs),
    /// Attach to a running OCaml program, take one snapshot, detach.
    Dump(dump::DumpArgs),
    /// Write a snapshot for other tools: Chrome DevTools / memlab (.heapsnapshot), or a flame graph of retained sizes.
    Export(export::ExportArgs),
    /// A local web UI: summary, groups, dominator tree, objects and paths, and the diff of 2+ snapshots.
    Serve(serve::ServeArgs),
    /// Launch a program and take numbered snapshots when triggers fire (also honours OCAML_HEAPSNAP).
    Run(run::RunArgs),
    /// Watch a program for the preload library (started by libheapsnap_preload.so, not by hand).
    #[command(hide = true)]
    Watch(run::WatchArgs),
}

/// A result limit (`--limit`, `--max-children`, `--sample`, ...): a count, where 0 means no
/// limit (analyze/REPORTS.md, "Result limits").
pub fn parse_limit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Ok(usize::MAX),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e} (a count; 0 for no limit)")),
    }
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Summary(args) => analyze::summary_cmd(args),
        Command::Top(args) => analyze::top_cmd(args),
        Command::Dominators(args) => analyze::dominators_cmd(args),
        Command::Path(args) => analyze::path_cmd(args),
        Command::Inspect(args) => analyze::inspect_cmd(args),
        Command::Verify(args) => analyze::verify_cmd(args),
        Command::Diff(args) => diff::run(args),
        Command::Annotate(args) => annotate::run(args),
        Command::Info(args) => info::run(args),
        Command::Dump(args) => dump::run(args),
        Command::Export(args) => export::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Run(args) => run::run(args),
        Command::Watch(args) => run::watch(args),
    }
}
