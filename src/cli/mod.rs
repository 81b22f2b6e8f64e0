//! Command-line parsing and dispatch. The reports' subcommands come from the reports'
//! registry (`heapsnap_reports::registry`); the other commands each live in their own module.

mod annotate;
mod dump;
pub mod errors;
mod export;
mod fleet;
mod mcp;
mod mcp_roots;
mod run;
mod run_tables;
mod serve;

use clap::{ArgMatches, Command, FromArgMatches, Subcommand};
use heapsnap_reports::registry::{self, REPORTS};
use heapsnap_reports::{Files, Format};
use std::process::ExitCode;

/// The commands that are not reports: they dump, write files or serve.
#[derive(Subcommand)]
enum Commands {
    /// Add the program's OCaml names and types (from its .cmt files) to a snapshot.
    Annotate(annotate::AnnotateArgs),
    /// Attach to a running OCaml program, take one snapshot, detach.
    Dump(dump::DumpArgs),
    /// Write a snapshot for other tools: Chrome DevTools / memlab (.heapsnapshot), or a flame graph of retained sizes.
    Export(export::ExportArgs),
    /// Ask many exported snapshots (hosts, times) what grows, which hosts diverge, and the leak suspects they share.
    Fleet(fleet::FleetArgs),
    /// A local web UI: summary, groups, dominator tree, objects and paths, and the diff of 2+ snapshots.
    Serve(serve::ServeArgs),
    /// Launch a program and take numbered snapshots when triggers fire (also honours OCAML_HEAPSNAP).
    Run(run::RunArgs),
    /// Serve the reports to AI agents: a Model Context Protocol server on stdin/stdout.
    Mcp(mcp::McpArgs),
    /// Watch a program for the preload library (started by libheapsnap_preload.so, not by hand).
    #[command(hide = true)]
    Watch(run::WatchArgs),
    /// Build the rest of a snapshot's analysis index (started by a first report, not by hand).
    #[command(hide = true, name = heapsnap_reports::loader::COMPLETE_INDEX)]
    CompleteIndex { snapshot: std::path::PathBuf },
}

/// The whole command line: the reports first, then the other commands.
pub fn command() -> Command {
    let cli = Command::new("heapsnap").version(env!("CARGO_PKG_VERSION")).subcommand_required(true).arg_required_else_help(true);
    let cli = REPORTS.iter().fold(cli, |cli, r| cli.subcommand(registry::subcommand(*r)));
    // The about line after the subcommands: `Commands`' doc comment would replace it.
    Commands::augment_subcommands(cli).about("Heap snapshots for OCaml native programs (4.14, 5.x): who keeps this alive?").long_about(None)
}

/// The exit code of a report answered by the holder of its snapshot's analysis
/// ([`heapsnap_reports::held`]), its answer printed; None when no holder answers it.
fn ask_holder(sub: &ArgMatches) -> Option<u8> {
    let snapshot = sub.try_get_one::<std::path::PathBuf>("snapshot").ok().flatten()?;
    // The holder parses the same command line (after the program's name); one that is not
    // Unicode is not asked.
    let args: Vec<String> = std::env::args_os().skip(1).map(|a| a.into_string().ok()).collect::<Option<_>>()?;
    heapsnap_reports::held::ask(snapshot, &args, &mut std::io::stdout().lock())
}

pub fn run(matches: &ArgMatches) -> anyhow::Result<ExitCode> {
    if let Ok(me) = std::env::current_exe() {
        heapsnap_reports::loader::complete_indexes_with(me);
    }
    heapsnap_reports::loader::answer_others_with(heapsnap_reports::held::serve);
    if let Some((name, sub)) = matches.subcommand() {
        if let Some(report) = registry::find(name) {
            if heapsnap_reports::loader::completes_in_background() {
                // Right after a first look: the process completing its index answers from the
                // analysis it holds.
                if let Some(code) = ask_holder(sub) {
                    return Ok(ExitCode::from(code));
                }
                // The answer from a child, which then completes the index (no thread runs yet).
                heapsnap_reports::handover::answer_in_a_child();
            }
            // One report, then the process ends.
            heapsnap_reports::loader::exit_after_answer();
            let format = if sub.get_flag("json") { Format::Json } else { Format::Human };
            let passed = report.print(sub, &Files, format, &mut std::io::stdout().lock())?;
            let code = if passed { 0 } else { 1 };
            heapsnap_reports::handover::answered(code);
            return Ok(ExitCode::from(code));
        }
    }
    match Commands::from_arg_matches(matches)? {
        Commands::Annotate(args) => annotate::run(args),
        Commands::Dump(args) => dump::run(args),
        Commands::Export(args) => export::run(args),
        Commands::Fleet(args) => fleet::run(args),
        Commands::Serve(args) => serve::run(args),
        Commands::Run(args) => run::run(args),
        Commands::Mcp(args) => mcp::run(args),
        Commands::Watch(args) => run::watch(args),
        Commands::CompleteIndex { snapshot } => {
            heapsnap_reports::handover::detach();
            heapsnap_reports::loader::complete_index(&snapshot)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
