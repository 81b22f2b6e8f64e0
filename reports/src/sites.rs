//! Allocation sites in the reports: `--memtrace FILE` (a memtrace trace of the snapshot's
//! run) and `--by site` (REPORTS.md, "Allocation sites"). The join is made on each report from
//! the snapshot's memprof tables and the trace; the analysis index saves none of it.

use heapsnap_analyze::sites::Sites;
use heapsnap_analyze::AnalysedHeap;
use heapsnap_memtrace::Trace;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `--by` of `top` and `diff`: a grouping of the analysis, or allocation sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// The value of the reserved header bits (only for runtimes configured with them).
    Reserved,
    /// What a block is: a known structure (Hashtbl, list cell, ...), else its block tag and size, closure function or custom type.
    Kind,
    /// Closures only, by function.
    Closure,
    /// The roots that retain the objects.
    Root,
    /// The OCaml type (from the program's .cmt files: dump --cmt, or heapsnap annotate).
    Type,
    /// Where statmemprof's sampled blocks were allocated (Gc.Memprof call stacks, or memtrace with --memtrace).
    Site,
}

impl By {
    pub fn grouping(self) -> Option<heapsnap_analyze::GroupBy> {
        use heapsnap_analyze::GroupBy;
        match self {
            By::Reserved => Some(GroupBy::Reserved),
            By::Kind => Some(GroupBy::Kind),
            By::Closure => Some(GroupBy::Closure),
            By::Root => Some(GroupBy::Root),
            By::Type => Some(GroupBy::Type),
            By::Site => None,
        }
    }
}

/// The flags every site-aware report takes.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SiteArgs {
    /// A memtrace trace (MEMTRACE=FILE) of the run the snapshot was taken of: sampled blocks
    /// whose tracker value is a memtrace allocation id get their call stack from it.
    #[arg(long, value_name = "FILE")]
    pub memtrace: Option<PathBuf>,
}

impl SiteArgs {
    /// The trace, opened, when one was given.
    pub fn trace(&self) -> anyhow::Result<Option<Trace<'static>>> {
        self.memtrace.as_deref().map(open_trace).transpose()
    }
}

/// Opens the trace, with an error naming the file.
pub fn open_trace(path: &Path) -> anyhow::Result<Trace<'static>> {
    Trace::open(path).map_err(|e| anyhow::anyhow!("the memtrace trace {}: {e}", path.display()))
}

/// The sampled blocks of an analysed snapshot joined with their stacks.
pub fn join<'s>(a: &impl AnalysedHeap<'s>, trace: Option<&Trace<'_>>) -> anyhow::Result<Sites> {
    let step = heapsnap_analyze::Progress::stderr().step("allocation sites", 0);
    let sites = Sites::new(a, trace)?;
    step.finish_and_clear();
    Ok(sites)
}

/// One line on how the join went, and a warning when blocks found no stack.
pub fn print_join(out: &mut dyn Write, j: &heapsnap_analyze::sites::JoinStats) -> std::io::Result<()> {
    let rates: Vec<String> = j.sampling_rates.iter().map(|r| format!("{r}")).collect();
    writeln!(
        out,
        "{} tracked blocks: {} with a memtrace stack, {} with a stored call stack, {} gone from the heap; sampling rate {}",
        j.tracked,
        j.from_memtrace,
        j.from_callstack,
        j.not_in_heap,
        if rates.is_empty() { "-".to_string() } else { rates.join(", ") }
    )?;
    warn_missing(j);
    Ok(())
}

/// Warnings (stderr) about the sampled blocks that found no stack.
pub fn warn_missing(j: &heapsnap_analyze::sites::JoinStats) {
    if j.trace_truncated {
        eprintln!("heapsnap: warning: the memtrace trace ends inside a packet (it was still being written): read up to there");
    }
    if j.no_event > 0 {
        eprintln!(
            "heapsnap: warning: {} sampled blocks have a memtrace id the trace has no event for (the trace lags the snapshot: the program still held them); they are left out",
            j.no_event
        );
    }
    if j.no_trace > 0 {
        eprintln!(
            "heapsnap: warning: {} sampled blocks hold memtrace allocation ids: give the run's trace with --memtrace FILE",
            j.no_trace
        );
    }
    if j.other_user_data > 0 {
        eprintln!(
            "heapsnap: warning: {} sampled blocks hold tracker values that are neither a memtrace id nor a call stack; they are left out",
            j.other_user_data
        );
    }
}
