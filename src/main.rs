//! heapsnap: heap snapshots for OCaml 5 native programs. A thin command line over the
//! `heapsnap-format`, `heapsnap-dump` and `heapsnap-analyze` crates.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("heapsnap: error: {err:#}");
            std::process::ExitCode::from(2)
        }
    }
}
