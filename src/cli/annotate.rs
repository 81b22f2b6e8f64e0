//! `heapsnap annotate SNAP`: store the program's OCaml names and types (from its `.cmt` files)
//! in a snapshot; and the same step after `dump` and `run`.

use clap::Args;
use heapsnap_names::{annotate, AnnotateOptions, Annotated};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where the program's `.cmt` files and OCaml toolchain are: shared by `dump`, `run` and
/// `annotate`.
#[derive(Args, Clone, Debug, Default)]
pub struct NamesArgs {
    /// More places to look for the program's .cmt files (an opam switch's lib/, a build tree
    /// copied from CI), searched before those beside the sources its line tables name.
    #[arg(long = "cmt", value_name = "DIR", num_args = 1..)]
    pub cmt: Vec<PathBuf>,
    /// The program's OCaml toolchain (its prefix or bin/), to read .cmt files with (default:
    /// ocamlfind or ocamlopt on PATH); its version must be the snapshot's.
    #[arg(long, value_name = "DIR")]
    pub ocaml: Option<PathBuf>,
}

impl NamesArgs {
    fn options(&self, only_if_found: bool) -> AnnotateOptions {
        AnnotateOptions { cmt_dirs: self.cmt.clone(), ocaml: self.ocaml.clone(), only_if_found }
    }
}

#[derive(Args)]
pub struct AnnotateArgs {
    /// The snapshot to add names to (rewritten in place, atomically).
    snapshot: PathBuf,
    #[command(flatten)]
    names: NamesArgs,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

fn progress(msg: &str) {
    eprintln!("heapsnap: {msg}");
}

pub fn run(args: AnnotateArgs) -> anyhow::Result<ExitCode> {
    super::errors::open_snapshot(&args.snapshot)?;
    let done = annotate(&args.snapshot, &args.names.options(false), &progress)?;
    warn_refused(&done);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json(&done))?);
    } else {
        eprintln!("heapsnap: {}", said(&args.snapshot, &done));
    }
    Ok(ExitCode::SUCCESS)
}

/// After `dump` or `run` wrote a snapshot: names from the `.cmt` files, when there are any (a
/// failure is a warning: the snapshot is there, and `annotate` can try again).
pub fn after_dump(path: &Path, names: &NamesArgs, quiet: bool) {
    let only_if_found = names.cmt.is_empty() && names.ocaml.is_none();
    match annotate(path, &names.options(only_if_found), &|m| {
        if !quiet {
            progress(m)
        }
    }) {
        Ok(done) if done.skipped => {}
        Ok(done) => {
            warn_refused(&done);
            if !quiet {
                eprintln!("heapsnap: {}", said(path, &done));
            }
        }
        Err(e) => eprintln!(
            "heapsnap: warning: {} has no OCaml names: {e} (add them later with `heapsnap annotate {} --ocaml DIR`)",
            path.display(),
            path.display()
        ),
    }
}

fn warn_refused(done: &Annotated) {
    for r in &done.refused {
        eprintln!("heapsnap: warning: {}: {}", r.file, r.message);
    }
    for c in &done.choices {
        eprintln!("heapsnap: {}: {}: {}", c.unit, c.file, c.why);
    }
}

fn said(path: &Path, done: &Annotated) -> String {
    format!(
        "named {} of {} compilation units in {} ({} of the program, {} module fields)",
        done.units,
        done.snapshot_units,
        path.display(),
        done.program_units,
        done.fields
    )
}

fn json(done: &Annotated) -> serde_json::Value {
    serde_json::json!({
        "units": done.units,
        "snapshot_units": done.snapshot_units,
        "program_units": done.program_units,
        "fields": done.fields,
        "refused": done.refused.iter().map(|r| serde_json::json!({"file": r.file, "message": r.message})).collect::<Vec<_>>(),
        "chosen": done.choices.iter().map(|c| serde_json::json!({"unit": c.unit, "file": c.file, "why": c.why})).collect::<Vec<_>>(),
    })
}
