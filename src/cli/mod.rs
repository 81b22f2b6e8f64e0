//! Command-line parsing and dispatch. Each group of subcommands lives in its own module.

mod info;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "heapsnap", version, about = "Heap snapshots for OCaml 5 native programs: who keeps this alive?")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a snapshot and print its metadata and sections.
    Info(info::InfoArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Info(args) => info::run(args),
    }
}
