//! `heapsnap fleet`: the standard questions over many exported snapshots (the `heapsnap-fleet`
//! crate asks them of its embedded engine; this module reads the command line and prints).

use clap::{Args, Subcommand, ValueEnum};
use heapsnap_fleet::{By, Question};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    question: FleetQuestion,
}

#[derive(Subcommand)]
enum FleetQuestion {
    /// What grows, per type, site, root, kind or dominator path: from each host's first snapshot to its last, then across hosts.
    Growth {
        /// What to group by.
        #[arg(long, value_enum, default_value = "type")]
        by: ByArg,
        #[command(flatten)]
        common: Common,
    },
    /// Which hosts diverge from the others: each host's growth of reachable bytes against the fleet's median.
    Diverge(Common),
    /// The leak suspects that the latest snapshots of most hosts share.
    Suspects(Common),
}

#[derive(Args)]
struct Common {
    /// Directories of exported snapshots (`heapsnap export SNAP --format parquet -o DIR`).
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// At most this many rows (0: all).
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Print the SQL query that ran (with --json, it is always in the answer's `sql`).
    #[arg(long)]
    sql: bool,
    /// The answer as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum ByArg {
    Type,
    Site,
    Root,
    Kind,
    Path,
}

impl From<ByArg> for By {
    fn from(by: ByArg) -> By {
        match by {
            ByArg::Type => By::Type,
            ByArg::Site => By::Site,
            ByArg::Root => By::Root,
            ByArg::Kind => By::Kind,
            ByArg::Path => By::Path,
        }
    }
}

pub fn run(args: FleetArgs) -> anyhow::Result<ExitCode> {
    let (question, common) = match args.question {
        FleetQuestion::Growth { by, common } => (Question::Growth(by.into()), common),
        FleetQuestion::Diverge(common) => (Question::Diverge, common),
        FleetQuestion::Suspects(common) => (Question::Suspects, common),
    };
    let answer = heapsnap_fleet::answer(&common.dirs, question, common.limit)?;
    let mut out = std::io::stdout().lock();
    if common.json {
        serde_json::to_writer_pretty(&mut out, &answer)?;
        use std::io::Write;
        writeln!(out)?;
    } else {
        heapsnap_fleet::render::print(&answer, common.sql, &mut out)?;
    }
    Ok(ExitCode::SUCCESS)
}
