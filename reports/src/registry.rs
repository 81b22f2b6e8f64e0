//! The one list of reports. It drives the command line's report subcommands, the web UI's
//! `/api/report/NAME` routes, the MCP server's tools and the table of reports in
//! `analyze/REPORTS.md` (a test checks that the table is this list). Adding a report is one
//! module and one line here.

use crate::report::{entry, Entry};
use clap::{Arg, ArgAction, Command};

pub static REPORTS: &[&dyn Entry] = &[
    &entry::<crate::summary::Summary>(),
    &entry::<crate::top::Top>(),
    &entry::<crate::suspects::Suspects>(),
    &entry::<crate::dominators::Dominators>(),
    &entry::<crate::path::RetainerPaths>(),
    &entry::<crate::inspect::Inspect>(),
    &entry::<crate::verify::Verify>(),
    &entry::<crate::diff::Diff>(),
    &entry::<crate::info::Info>(),
    &entry::<crate::allocation_sites::AllocationSites>(),
];

/// The report named `name`.
pub fn find(name: &str) -> Option<&'static dyn Entry> {
    REPORTS.iter().copied().find(|r| r.name() == name)
}

/// A report's subcommand: its arguments and `--json`.
pub fn subcommand(report: &dyn Entry) -> Command {
    report.arguments().arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print JSON instead of tables."))
}
