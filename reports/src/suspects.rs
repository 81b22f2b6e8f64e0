//! `heapsnap suspects`: where retained memory accumulates in one snapshot (Eclipse MAT's leak
//! suspects), and what only stack frames hold. `summary` prints the same as its first section.

use crate::loader::Loader;
use crate::report::Report;
use heapsnap_analyze::{human_bytes, StackOnly, SuspectsReport};
use heapsnap_index::Needs;
use std::io::{Result, Write};
use std::path::PathBuf;

pub struct Suspects;

#[derive(clap::Args)]
pub struct SuspectsArgs {
    /// The snapshot file.
    snapshot: PathBuf,
    /// A suspect retains at least this percentage of the reachable bytes.
    #[arg(long, default_value_t = 10.0, value_parser = parse_percent)]
    min_percent: f64,
    /// How many suspects to list (0: all).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = crate::args::parse_limit)]
    limit: usize,
}

/// A percentage above 0 and at most 100 (0 would make every object a suspect).
pub fn parse_percent(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
        Ok(p) => Err(format!("{p}: a percentage above 0 and at most 100")),
        Err(e) => Err(format!("{e} (a percentage)")),
    }
}

impl Report for Suspects {
    const NAME: &'static str = "suspects";
    const ABOUT: &'static str =
        "Where retained memory accumulates (leak suspects), with types, element counts and paths; what only stack frames hold";
    type Args = SuspectsArgs;
    type Output = SuspectsReport;

    fn run(args: &SuspectsArgs, loader: &dyn Loader) -> anyhow::Result<SuspectsReport> {
        crate::loader::answer(
            loader,
            &args.snapshot,
            Needs::Paths,
            |a| Ok(heapsnap_analyze::suspects(a, args.min_percent, args.limit)),
            |view| Ok(heapsnap_analyze::suspects(view, args.min_percent, args.limit)),
        )
    }

    fn print(_args: &SuspectsArgs, report: &SuspectsReport, out: &mut dyn Write) -> Result<()> {
        print_suspects(out, report)
    }
}

/// The suspects and the stack-only line, as `suspects` and `summary` print them.
pub fn print_suspects(out: &mut dyn Write, report: &SuspectsReport) -> Result<()> {
    writeln!(
        out,
        "Leak suspects: where at least {}% of the {} reachable accumulate{}",
        report.min_percent,
        human_bytes(report.reachable_bytes),
        if report.suspects.is_empty() { ": none" } else { "" }
    )?;
    for (i, s) in report.suspects.iter().enumerate() {
        writeln!(out, "{:>3}. {:>10} {:>5.1}%  {} [{}]", i + 1, human_bytes(s.retained), s.percent, s.description, s.address)?;
        if let Some(e) = &s.elements {
            writeln!(out, "       {}{} {}", if e.exact { "" } else { "at least " }, e.count, e.of)?;
        }
        if s.top_address != s.address {
            writeln!(
                out,
                "       inside {} [{}] ({}), held by {}",
                s.top_description,
                s.top_address,
                human_bytes(s.top_retained),
                s.held_by
            )?;
        } else {
            writeln!(out, "       held by {}", s.held_by)?;
        }
        if let Some(p) = &s.path {
            let steps: Vec<String> = p
                .steps
                .iter()
                .map(|st| match &st.field {
                    Some(f) => format!(".{f} {}", st.label),
                    None => st.label.clone(),
                })
                .collect();
            writeln!(out, "       path: {} -> {}", p.root, steps.join(" -> "))?;
        }
    }
    if let Some(stack) = &report.stack_only {
        print_stack_only(out, stack)?;
    }
    Ok(())
}

/// `held only by stack frames: 1.2 MiB (8.0%): Foo.f foo.ml:12 (1.1 MiB), ...`
fn print_stack_only(out: &mut dyn Write, s: &StackOnly) -> Result<()> {
    write!(out, "held only by stack frames: {} ({:.1}%)", human_bytes(s.bytes), s.percent)?;
    const SHOWN: usize = 5;
    let frames: Vec<String> = s
        .frames
        .iter()
        .take(SHOWN)
        .map(|f| {
            let at = f.location.as_deref().map(|l| format!(" {l}")).unwrap_or_default();
            format!("{}{at} ({})", f.function, human_bytes(f.bytes))
        })
        .collect();
    if !frames.is_empty() {
        write!(out, ": {}", frames.join(", "))?;
    }
    if s.frames.len() > SHOWN {
        write!(out, ", ... ({} more frames)", s.frames.len() - SHOWN)?;
    }
    if s.not_attributed > 0 {
        write!(out, "; {} not attributed to a frame", human_bytes(s.not_attributed))?;
    }
    writeln!(out)?;
    // Said where it matters: a few bytes of the main loop's frames are in every snapshot.
    if s.percent >= 1.0 {
        match s.typed_bytes.filter(|&t| t > 0) {
            Some(typed) => writeln!(
                out,
                "  (stack frames name no variables: {} of these bytes ({:.1}%) have an OCaml type from what else holds them, a closure's environment; the rest have none)",
                human_bytes(typed),
                100.0 * typed as f64 / s.bytes.max(1) as f64
            )?,
            None => writeln!(out, "  (stack frames name no variables: no OCaml type reaches these bytes through them)")?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(typed_bytes: Option<u64>) -> String {
        let stack = StackOnly { bytes: 4 << 20, percent: 40.0, frames: Vec::new(), not_attributed: 0, typed_bytes };
        let mut out = Vec::new();
        print_stack_only(&mut out, &stack).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The typed part of what only frames hold is said; without types, or none typed, that
    /// no type reaches them through the frames.
    #[test]
    fn the_typed_part_of_what_frames_hold_is_said() {
        assert!(said(Some(3 << 20)).contains("3.0 MiB of these bytes (75.0%) have an OCaml type"), "{}", said(Some(3 << 20)));
        for none in [None, Some(0)] {
            assert!(said(none).contains("no OCaml type reaches these bytes through them"), "{}", said(none));
        }
    }
}
