//! What a report is: its name, its arguments, how it runs, its JSON result and its human text.
//! A report is one type implementing [`Report`]; [`Registered`] erases the type so that one
//! list ([`crate::registry::REPORTS`]) can hold them all.

use crate::loader::Loader;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use serde::Serialize;
use std::io::Write;

/// One report. The arguments are a `clap::Args` struct: the command line parses them, and the
/// JSON callers (MCP, the web UI) give the same arguments by name ([`crate::json_args`]).
pub trait Report: 'static {
    /// The subcommand, the MCP tool and the web route: `top`.
    const NAME: &'static str;
    /// One line of help.
    const ABOUT: &'static str;
    type Args: Args + FromArgMatches;
    type Output: Serialize;

    /// Computes the report (reading snapshots and their indexes through `loader`).
    fn run(args: &Self::Args, loader: &dyn Loader) -> anyhow::Result<Self::Output>;
    /// The human text of the result, word for word what the command line prints.
    fn print(args: &Self::Args, output: &Self::Output, out: &mut dyn Write) -> std::io::Result<()>;
    /// Whether the result passes (`verify` fails a snapshot: exit status 1, not an error).
    fn passed(_output: &Self::Output) -> bool {
        true
    }
}

/// A report's answer, whatever its type.
pub struct Answer {
    pub json: serde_json::Value,
    pub passed: bool,
}

/// How the command line prints a report.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    Human,
    Json,
}

/// A report of any type, as the registry lists it.
pub trait Entry: Sync {
    fn name(&self) -> &'static str;
    fn about(&self) -> &'static str;
    /// Its arguments as a clap command named after it (without `--json`, which
    /// [`crate::registry::subcommand`] adds).
    fn arguments(&self) -> Command;
    /// Runs it and prints it; returns whether it passed.
    fn print(&self, matches: &ArgMatches, loader: &dyn Loader, format: Format, out: &mut dyn Write) -> anyhow::Result<bool>;
    /// Runs it and gives its JSON.
    fn answer(&self, matches: &ArgMatches, loader: &dyn Loader) -> anyhow::Result<Answer>;
}

/// [`Entry`] for a [`Report`] type.
/// (`fn() -> R`: the entry holds no `R`, so it is `Sync` whatever `R` is.)
pub struct Registered<R>(std::marker::PhantomData<fn() -> R>);

/// The registry's entry for report `R`.
pub const fn entry<R: Report>() -> Registered<R> {
    Registered(std::marker::PhantomData)
}

impl<R: Report> Registered<R> {
    fn parse(matches: &ArgMatches) -> anyhow::Result<R::Args> {
        Ok(R::Args::from_arg_matches(matches)?)
    }
}

impl<R: Report> Entry for Registered<R> {
    fn name(&self) -> &'static str {
        R::NAME
    }

    fn about(&self) -> &'static str {
        R::ABOUT
    }

    fn arguments(&self) -> Command {
        // After the arguments: a flattened struct's doc comment would replace the about line.
        R::Args::augment_args(Command::new(R::NAME)).about(R::ABOUT).long_about(None)
    }

    fn print(&self, matches: &ArgMatches, loader: &dyn Loader, format: Format, out: &mut dyn Write) -> anyhow::Result<bool> {
        let args = Self::parse(matches)?;
        let output = R::run(&args, loader)?;
        match format {
            Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&output)?)?,
            Format::Human => R::print(&args, &output, out)?,
        }
        Ok(R::passed(&output))
    }

    fn answer(&self, matches: &ArgMatches, loader: &dyn Loader) -> anyhow::Result<Answer> {
        let args = Self::parse(matches)?;
        let output = R::run(&args, loader)?;
        Ok(Answer { json: serde_json::to_value(&output)?, passed: R::passed(&output) })
    }
}
