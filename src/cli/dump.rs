//! `heapsnap dump --pid PID`: one snapshot of a running OCaml program; `heapsnap dump --core
//! CORE [--exe EXE]`: the same snapshot from a core file of one.

use clap::Args;
use heapsnap_dump::DiscoverOptions;
use heapsnap_dump::{dump_core, dump_process, install_interrupt_guard, DumpError, DumpOptions, DumpReport};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "core"])))]
pub struct DumpArgs {
    /// The process to dump.
    #[arg(long)]
    pid: Option<i32>,
    /// An ELF core file (gcore, or a crash) of an OCaml process to dump instead of a process.
    #[arg(long, value_name = "CORE")]
    core: Option<PathBuf>,
    /// The executable to read (its build id must match): for --core, the executable the core was
    /// taken from (default: the one the core names); for --pid, an unstripped copy of the
    /// program's executable (default: the file the process runs).
    #[arg(long, value_name = "EXE")]
    exe: Option<PathBuf>,
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    names: super::annotate::NamesArgs,
    /// Where to write the snapshot (default: heapsnap-PID.heapsnap, or CORE.heapsnap for --core, in the
    /// current directory).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Zero the contents of strings and bytes before anything reaches the disk.
    #[arg(long)]
    redact: bool,
    /// Reserved header bits of the target's runtime, when they cannot be detected.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=31))]
    reserved_bits: Option<u8>,
    /// Fail rather than write a snapshot taken at an inconsistent stop (a core caught inside a
    /// collection).
    #[arg(long)]
    require_consistent: bool,
    /// How the stopped process is captured: `fork` makes it fork once (its copy-on-write child is
    /// read while the process runs on: the pause does not grow with the heap), `copy` reads it
    /// while it is stopped, `auto` forks when that is safe and the heap is large enough to gain.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_capture)]
    capture: heapsnap_dump::CaptureMode,
    /// Do not copy the executable's DWARF sections (smaller file, no source lines).
    #[arg(long)]
    no_dwarf: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// `--capture MODE`: shared by `dump` and `run`.
pub fn parse_capture(text: &str) -> Result<heapsnap_dump::CaptureMode, String> {
    text.parse()
}

/// How to read the target's runtime: shared by `dump` and `run`.
#[derive(Args, Clone, Debug, Default)]
pub struct RuntimeArgs {
    /// The executable's separate debug-info file (default: found as gdb does, by build id under
    /// /usr/lib/debug/.build-id or by the executable's .gnu_debuglink).
    #[arg(long, value_name = "FILE")]
    pub debug_file: Option<PathBuf>,
    /// Where to look for debug files by build id (DIR/.build-id/xx/rest.debug) and by debuglink
    /// (default /usr/lib/debug, as gdb's debug-file-directory).
    #[arg(long, value_name = "DIR")]
    pub debug_dir: Option<PathBuf>,
    /// Dump an OCaml version heapsnap does not know even where probing its runtime cannot
    /// establish every fact: those are guessed as the newest known release's (without DWARF,
    /// the whole runtime is read as that release). The snapshot says so and is checked at once.
    #[arg(long)]
    pub force: bool,
    /// Read the runtime by probing it even when heapsnap knows its release, as it reads
    /// releases it does not know (for a patched runtime; needs DWARF). The snapshot says so and
    /// is checked at once.
    #[arg(long)]
    pub read_by_probing: bool,
}

impl RuntimeArgs {
    pub fn discover_options(&self, exe: Option<PathBuf>) -> DiscoverOptions {
        DiscoverOptions {
            exe,
            debug_file: self.debug_file.clone(),
            debug_dir: self.debug_dir.clone(),
            force: self.force,
            read_by_probing: self.read_by_probing,
        }
    }
}

/// A dump of a version heapsnap does not know is checked at once, so that a wrong reading is
/// never silent: forced (read as another release) or with guessed facts, what the verifier
/// finds wrong is printed; read by probing alone, a snapshot that fails verification is
/// removed and the dump fails, saying why.
pub fn check_unknown_release(report: &DumpReport) -> anyhow::Result<()> {
    let probed_alone = report.probed.as_ref().is_some_and(|p| p.guessed.is_empty());
    if !report.forced_version && report.probed.is_none() {
        return Ok(());
    }
    let how = if probed_alone { "read by probing".to_string() } else { format!("read as {}", report.read_as) };
    let problems = heapsnap_format::Snapshot::open(&report.path)
        .map_err(anyhow::Error::from)
        .and_then(|snap| Ok(heapsnap_analyze::verify(&snap, false)?));
    let wrong = match problems {
        Ok(v) if v.ok => {
            eprintln!("heapsnap: OCaml {} was {how}: the snapshot passed verification ({} objects)", report.ocaml_version, v.objects);
            return Ok(());
        }
        Ok(v) => v.error_counts.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", "),
        Err(e) => format!("it cannot be analysed: {e:#}"),
    };
    if probed_alone {
        let _ = std::fs::remove_file(&report.path);
        anyhow::bail!(
            "OCaml {} was read by probing, and the snapshot failed verification ({wrong}): it was not kept. \
             Please report it, with `heapsnap dump --json` of this program (--force keeps the snapshot)",
            report.ocaml_version
        );
    }
    eprintln!("heapsnap: warning: OCaml {} was {how}, and the snapshot looks wrong: {wrong}", report.ocaml_version);
    Ok(())
}

pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    // SIGINT/SIGTERM stop the dump cleanly (the target is released unchanged).
    install_interrupt_guard();
    let default_name = match (&args.core, args.pid) {
        (Some(core), _) => format!("{}.heapsnap", core.file_name().map_or("core".into(), |n| n.to_string_lossy())),
        (None, pid) => format!("heapsnap-{}.heapsnap", pid.unwrap_or(0)),
    };
    let options = DumpOptions {
        output: args.output.unwrap_or_else(|| PathBuf::from(default_name)),
        redact: args.redact,
        reserved_bits: args.reserved_bits,
        require_consistent: args.require_consistent,
        include_dwarf: !args.no_dwarf,
        capture: args.capture,
        discover: args.runtime.discover_options(if args.core.is_some() { None } else { args.exe.clone() }),
        ..DumpOptions::default()
    };
    if let Some(core) = &args.core {
        return run_core(core, args.exe.as_deref(), &options, args.json, &args.names);
    }
    let Some(pid) = args.pid else { anyhow::bail!("give --pid PID or --core CORE") };
    let report = match dump_process(pid, &options) {
        Ok(report) => report,
        Err(DumpError::Interrupted) => {
            eprintln!("heapsnap: interrupted; process {pid} was released unchanged, no snapshot written");
            return Ok(ExitCode::from(130));
        }
        Err(e) => return Err(name_the_owner(pid, e.into())),
    };
    for n in &report.notes {
        eprintln!("heapsnap: note: {n}");
    }
    for w in &report.warnings {
        eprintln!("heapsnap: warning: {w}");
    }
    check_unknown_release(&report)?;
    super::annotate::after_dump(&report.path, &args.names, args.json);
    if args.json {
        // The report says it all, on stdout.
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(capture) = report.capture.as_ref() {
        if capture.method == heapsnap_dump::CaptureMode::Fork {
            eprintln!(
                "heapsnap: captured by fork: the clone took {:.3} ms of the pause; its child was read for {:.0} ms while the process ran, and cost {:.1} MiB{}",
                capture.fork_ns as f64 / 1e6,
                capture.child_lived_ns as f64 / 1e6,
                capture.fork_extra_bytes as f64 / (1 << 20) as f64,
                if capture.not_frozen.is_empty() {
                    String::new()
                } else {
                    format!("; not frozen by the fork, and not read: {}", capture.not_frozen.join(", "))
                }
            );
        } else if let (heapsnap_dump::CaptureMode::Auto | heapsnap_dump::CaptureMode::Fork, Some(why)) =
            (capture.requested, &capture.why_copy)
        {
            eprintln!("heapsnap: captured by copy: {why}");
        }
    }
    eprintln!(
        "heapsnap: paused process {} for {:.3} ms ({} stop{}, {:.3} ms stopped in all); wrote {} ({} regions, {} bytes of heap and stacks, {} roots)",
        report.pid,
        report.pause_ns as f64 / 1e6,
        report.attempts,
        if report.attempts == 1 { "" } else { "s" },
        report.total_stopped_ns as f64 / 1e6,
        report.path.display(),
        report.regions,
        report.region_bytes,
        report.roots,
    );
    Ok(ExitCode::SUCCESS)
}

/// A permission error on a process of another user says whose process it is: the cause then
/// reads "process 1 belongs to uid 0, heapsnap runs as uid 1000", before the OS error and the
/// hint (errors.rs).
fn name_the_owner(pid: i32, err: anyhow::Error) -> anyhow::Error {
    let denied = err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
            || matches!(c.downcast_ref::<DumpError>(), Some(DumpError::AttachDenied { .. }))
    });
    let owner = std::os::unix::fs::MetadataExt::uid(&match std::fs::metadata(format!("/proc/{pid}")) {
        Ok(m) => m,
        Err(_) => return err,
    });
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !denied || owner == me {
        return err;
    }
    err.context(format!("process {pid} belongs to uid {owner}, heapsnap runs as uid {me}"))
}

fn run_core(
    core: &std::path::Path,
    exe: Option<&std::path::Path>,
    options: &DumpOptions,
    json: bool,
    names: &super::annotate::NamesArgs,
) -> anyhow::Result<ExitCode> {
    let report = dump_core(core, exe, options)?;
    for n in &report.notes {
        eprintln!("heapsnap: note: {n}");
    }
    for w in &report.warnings {
        eprintln!("heapsnap: warning: {w}");
    }
    check_unknown_release(&report)?;
    super::annotate::after_dump(&report.path, names, json);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "heapsnap: read core {} of process {}; wrote {} ({} regions, {} bytes of heap and stacks, {} roots)",
        core.display(),
        report.pid,
        report.path.display(),
        report.regions,
        report.region_bytes,
        report.roots,
    );
    Ok(ExitCode::SUCCESS)
}
