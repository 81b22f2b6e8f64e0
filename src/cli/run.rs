//! `heapsnap run` (launch and watch a program) and `heapsnap watch` (watch a program the preload
//! library reported; started by `libheapsnap_preload.so`, not by hand).

use anyhow::{bail, Context};
use clap::Args;
use heapsnap_dump::memory_trigger;
use heapsnap_dump::triggers::{self, ExportTo, TriggerSpec};
use heapsnap_dump::watch::{self, Inputs, Watch, WatchSummary};
use heapsnap_format::Trigger;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[derive(Args)]
pub struct RunArgs {
    /// Dump after each compaction (Gc.compact).
    #[arg(long)]
    on_compaction: bool,
    /// Dump when heapsnap itself receives this signal (e.g. USR2); it is not passed to the program.
    #[arg(long, value_name = "SIGNAL", value_parser = triggers::parse_signal)]
    on_signal: Option<i32>,
    /// Dump periodically (e.g. 500ms, 30s, 5m).
    #[arg(long, value_name = "DURATION", value_parser = triggers::parse_duration)]
    every: Option<std::time::Duration>,
    /// Dump when the program exits, before the runtime tears down.
    #[arg(long)]
    at_exit: bool,
    /// Dump when the program's memory first reaches LIMIT: a size (400MiB, 2GiB) or a
    /// percentage of the tightest memory limit on it (its cgroups', else MemTotal); several
    /// (60%,80%,95%) give one snapshot each.
    #[arg(long, value_name = "LIMIT", value_parser = memory_trigger::parse_thresholds)]
    on_memory: Vec<Vec<memory_trigger::Threshold>>,
    /// Zero string and bytes contents before writing.
    #[arg(long)]
    redact: bool,
    /// How each dump captures the program: fork it and read the frozen child while the program
    /// runs on, copy it while it is stopped, or auto (fork when it is safe and the heap is large).
    #[arg(long, value_name = "MODE", value_parser = super::dump::parse_capture)]
    capture: Option<heapsnap_dump::CaptureMode>,
    /// Directory for the numbered snapshots (created if missing; default: the current
    /// directory, or OCAML_HEAPSNAP's dir=).
    #[arg(short = 'd', long, alias = "out-dir", value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print a JSON summary of the snapshots taken on stdout when the program ends.
    #[arg(long)]
    json: bool,
    /// Write each snapshot's Parquet tables (`export --format parquet`) while the program runs:
    /// `parquet` (into DIR/parquet, DIR the snapshots' directory) or `parquet=TABLES_DIR`
    /// (OCAML_HEAPSNAP's export=).
    #[arg(long, value_name = "parquet[=DIR]", value_parser = |s: &str| s.parse::<ExportTo>())]
    export: Option<ExportTo>,
    /// With --export: keep only the last N snapshot files of the run (their tables are kept;
    /// an older snapshot is removed once its tables are written; OCAML_HEAPSNAP's keep-snapshots=).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    keep_snapshots: Option<u64>,
    #[command(flatten)]
    runtime: super::dump::RuntimeArgs,
    #[command(flatten)]
    names: super::annotate::NamesArgs,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM")]
    command: Vec<std::ffi::OsString>,
}

/// Merges the command line with `OCAML_HEAPSNAP` (which `heapsnap run` honours): the command
/// line adds triggers and its `--dir` wins over `dir=`.
fn merged_spec(args: &RunArgs) -> anyhow::Result<TriggerSpec> {
    let mut spec = TriggerSpec::from_env()?.unwrap_or_default();
    spec.on_compaction |= args.on_compaction;
    spec.at_exit |= args.at_exit;
    spec.redact |= args.redact;
    spec.capture = args.capture.unwrap_or(spec.capture);
    spec.on_signal = args.on_signal.or(spec.on_signal);
    spec.every = args.every.or(spec.every);
    spec.dir = args.dir.clone().or(spec.dir);
    spec.export = args.export.clone().or(spec.export);
    spec.keep_snapshots = args.keep_snapshots.or(spec.keep_snapshots);
    if spec.keep_snapshots.is_some() && spec.export.is_none() {
        bail!("--keep-snapshots needs --export parquet (snapshots are removed only once their tables are written)");
    }
    for threshold in args.on_memory.iter().flatten() {
        if !spec.on_memory.contains(threshold) {
            spec.on_memory.push(*threshold);
        }
    }
    if !spec.has_trigger() {
        bail!(
            "no trigger: give --on-compaction, --on-signal SIG, --every DURATION, --at-exit or --on-memory LIMIT (or set {})",
            triggers::ENV_VAR
        );
    }
    Ok(spec)
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    // An option clap does not know (`-o`, which names a file elsewhere) would be taken for the
    // program: say what it is instead of running it.
    let program_name = args.command[0].to_string_lossy();
    if program_name.starts_with('-') {
        bail!("unknown option {program_name} before the program (snapshots go to the directory given with --dir DIR)");
    }
    let spec = merged_spec(&args)?;
    if spec.on_compaction {
        if let Some(program) = find_program(&args.command[0]) {
            if watch::compaction_counter_in(&program) == watch::CompactionCounter::Absent {
                bail!("{}: {}", program.display(), watch::NO_COMPACTION_COUNTER);
            }
        }
    }
    let dir = spec.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    // Before the program starts: a directory that cannot take snapshots is an error now, not
    // at the first trigger.
    watch::check_writable_dir(&dir)?;
    let tables = super::run_tables::Tables::for_spec(&spec, &dir, &args.names);

    let (control_read, control_write) = pipe().context("pipe")?;
    let (ack_read, ack_write) = pipe().context("pipe")?;
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    let launcher = std::process::id();
    let (child_control, child_ack) = (raw(&control_write), raw(&ack_read));
    command.env(watch::ENV_CONTROL, format!("{launcher},{child_control},{child_ack},{}", spec.at_exit as u8));
    if spec.at_exit {
        let preload = preload_library()?;
        let existing = std::env::var_os("LD_PRELOAD").unwrap_or_default();
        let mut value = preload.into_os_string();
        if !existing.is_empty() {
            value.push(" ");
            value.push(existing);
        }
        command.env("LD_PRELOAD", value);
    }
    // The child keeps its two ends of the pipes (std makes them close-on-exec).
    // SAFETY: between fork and exec the closure makes only fcntl calls, async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            for fd in [child_control, child_ack] {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    // Signals meant for the program: a terminal sends SIGINT and SIGQUIT to the whole process
    // group, so we ignore those; SIGTERM, SIGHUP and the user signals are forwarded.
    let signal_pipe = match spec.on_signal {
        Some(sig) => Some(signal_self_pipe(sig)?),
        None => None,
    };
    let mut child = command.spawn().with_context(|| format!("cannot run {}", args.command[0].to_string_lossy()))?;
    drop((control_write, ack_read));
    let pid = child.id() as i32;
    let forwarded = forward_signals(pid, spec.on_signal)?;

    let program = Path::new(&args.command[0]).file_name().map_or("program".into(), |n| n.to_string_lossy().into_owned());
    let mut seq = 0;
    let counter = if spec.on_compaction { compactions_counter(pid) } else { None };
    let summary = Watch {
        pid,
        spec: &spec,
        compactions_counter: counter,
        compactions_seen: 0,
        inputs: Inputs { control: Some(control_read), ack: Some(ack_write), signal: signal_pipe },
    }
    .run(|trigger| {
        seq += 1;
        // Named after the executable the process runs now: a wrapper (`sh -c '... exec PROG'`,
        // `systemd-run --scope PROG`) has become the program by then.
        let running =
            std::fs::read_link(format!("/proc/{pid}/exe")).ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        let path = watch::snapshot_path(&dir, running.as_deref().unwrap_or(&program), pid, seq, trigger);
        let taken = take_snapshot(pid, trigger, &path, spec.redact, spec.capture, &args.runtime)?;
        if let Some(tables) = &tables {
            tables.send(&taken);
        }
        Ok(taken)
    })?;
    let status = child.wait().context("waiting for the program")?;
    drop(forwarded);
    // Where memory is watched, a kill (the out-of-memory killer's SIGKILL) is said beside the figures.
    if let Some(sig) = status.signal().filter(|_| !spec.on_memory.is_empty()) {
        eprintln!("heapsnap: the program was killed by {}", triggers::signal_name(sig));
    }
    report_memory(&spec, &summary);
    // Names once the program is done: reading .cmt files never delays it (the tables' thread
    // named the snapshots it exported).
    let tables = tables.map(super::run_tables::Tables::finish);
    for path in &summary.snapshots {
        if !tables.as_ref().is_some_and(|t| t.exported.contains(path) || t.failed.contains(path)) {
            super::annotate::after_dump(path, &args.names, true);
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "pid": pid,
                "snapshots": summary.snapshots,
                "memory_snapshots": summary.memory,
                "memory_peak": summary.memory_peak,
                "memory_without_snapshot": summary.memory_without_snapshot.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
                "failures": summary.failures,
                "exit_code": status.code(),
                "signal": status.signal(),
                "tables": tables,
            })
        );
    }
    // The program's exit status passes through unchanged, death by signal included; when the
    // program succeeded but snapshots were lost, heapsnap's own error status (2) says so.
    let lost = summary.failures > 0;
    if lost {
        eprintln!("heapsnap: error: {}", lost_snapshots(summary.failures, summary.snapshots.len()));
    }
    if let Some(sig) = status.signal() {
        // SAFETY: the default action for the program's signal, then that signal to ourselves
        // (the program died of it; so do we); no memory is involved.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return Ok(ExitCode::from(128 + sig as u8));
    }
    match status.code() {
        Some(0) if lost => Ok(ExitCode::from(2)),
        code => Ok(ExitCode::from(code.unwrap_or(1) as u8)),
    }
}

/// What `on-memory` did: each snapshot with the memory it was taken at, and the thresholds that
/// got none, with the highest memory seen (memory is not read while a snapshot is written, so a
/// threshold passed then and followed by the program's death got none either).
fn report_memory(spec: &TriggerSpec, summary: &WatchSummary) {
    if spec.on_memory.is_empty() {
        return;
    }
    for taken in &summary.memory {
        let thresholds: Vec<String> = taken.thresholds.iter().map(|t| t.to_string()).collect();
        eprintln!("heapsnap: on-memory {}: {} at {}", thresholds.join(", "), taken.path.display(), taken.memory);
    }
    if !summary.memory_without_snapshot.is_empty() {
        let thresholds: Vec<String> = summary.memory_without_snapshot.iter().map(|t| t.to_string()).collect();
        let peak = summary.memory_peak.as_ref().map_or_else(|| "never read".to_owned(), |p| p.to_string());
        eprintln!("heapsnap: on-memory {}: no snapshot; the highest memory seen between snapshots: {peak}", thresholds.join(", "));
    }
}

/// The last line of a watch that lost snapshots.
fn lost_snapshots(lost: usize, written: usize) -> String {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    format!("{lost} snapshot{} lost ({written} written); the reasons are above", plural(lost))
}

#[derive(Args)]
pub struct WatchArgs {
    /// The process to watch.
    #[arg(long)]
    pid: i32,
    /// Pipe the preload library writes its messages to.
    #[arg(long, value_name = "FD")]
    control_fd: i32,
    /// Pipe on which the watcher answers.
    #[arg(long, value_name = "FD")]
    ack_fd: i32,
}

/// Started by the preload library in a program run with `OCAML_HEAPSNAP` set. It reads and
/// checks the variable, tells the library which hooks to install, then watches.
pub fn watch(args: WatchArgs) -> anyhow::Result<ExitCode> {
    if args.control_fd == args.ack_fd {
        bail!("--control-fd and --ack-fd are the same descriptor ({}); {STARTED_BY_THE_LIBRARY}", args.control_fd);
    }
    let control = passed_pipe(args.control_fd, "--control-fd")?;
    let ack = passed_pipe(args.ack_fd, "--ack-fd")?;
    let answer = |line: &str| {
        let _ = write_all_fd(&ack, line.as_bytes());
    };
    let spec = match TriggerSpec::from_env() {
        Ok(Some(spec)) => spec,
        Ok(None) => {
            answer(watch::HOOKS_OFF);
            return Ok(ExitCode::SUCCESS);
        }
        Err(err) => {
            answer(watch::HOOKS_OFF);
            eprintln!("heapsnap: {err}\nheapsnap: not watching pid {}", args.pid);
            return Ok(ExitCode::from(2));
        }
    };
    // A preloaded library goes into every program a supervisor starts: stay out of the way of
    // the ones that are not OCaml programs.
    let exe = PathBuf::from(format!("/proc/{}/exe", args.pid));
    let counter = match watch::compaction_counter_in(&exe) {
        watch::CompactionCounter::NotOcaml => {
            answer(watch::HOOKS_OFF);
            return Ok(ExitCode::SUCCESS);
        }
        watch::CompactionCounter::Absent if spec.on_compaction => {
            let real = std::fs::read_link(&exe).unwrap_or(exe);
            eprintln!("heapsnap: {}: {}", real.display(), watch::NO_COMPACTION_COUNTER);
            None
        }
        _ => compactions_counter(args.pid),
    };
    let spec = TriggerSpec { on_compaction: spec.on_compaction && counter.is_some(), ..spec };
    if !spec.has_trigger() {
        answer(watch::HOOKS_OFF);
        return Ok(ExitCode::from(2));
    }
    let dir = spec.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    if let Err(err) = watch::check_writable_dir(&dir) {
        answer(watch::HOOKS_OFF);
        let err = anyhow::Error::from(err);
        eprintln!("heapsnap: error: {}", super::errors::message(&err));
        eprintln!("heapsnap: not watching pid {}", args.pid);
        return Ok(ExitCode::from(2));
    }
    answer(&watch::hooks_line(std::process::id(), spec.at_exit, spec.on_signal));
    let program = std::fs::read_link(format!("/proc/{}/exe", args.pid))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "program".into());
    let tables = super::run_tables::Tables::for_spec(&spec, &dir, &Default::default());
    let mut seq = 0;
    let pid = args.pid;
    let summary = Watch {
        pid,
        spec: &spec,
        compactions_counter: if spec.on_compaction { counter } else { None },
        compactions_seen: 0,
        inputs: Inputs { control: Some(control), ack: Some(ack), signal: None },
    }
    .run(|trigger| {
        seq += 1;
        let taken = take_snapshot(
            pid,
            trigger,
            &watch::snapshot_path(&dir, &program, pid, seq, trigger),
            spec.redact,
            spec.capture,
            &Default::default(),
        )?;
        if let Some(tables) = &tables {
            tables.send(&taken);
        }
        Ok(taken)
    })?;
    report_memory(&spec, &summary);
    // The program has exited: the tables of its last snapshots are written before the watcher
    // goes (the .cmt files are found from the snapshot, as `heapsnap dump` finds them).
    if let Some(tables) = tables {
        tables.finish();
    }
    if summary.failures == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("heapsnap: error: {}", lost_snapshots(summary.failures, summary.snapshots.len()));
    Ok(ExitCode::from(2))
}

const STARTED_BY_THE_LIBRARY: &str = "heapsnap watch is started by libheapsnap_preload.so, not by hand";

/// A pipe end the preload library passed to this watcher by number: open, a pipe, and none of
/// stdin, stdout and stderr (which the library points elsewhere). Taking ownership of anything
/// else would close a descriptor some other part of this process uses.
fn passed_pipe(fd: i32, option: &str) -> anyhow::Result<OwnedFd> {
    if (0..=2).contains(&fd) {
        bail!("{option} {fd} is stdin, stdout or stderr, not a pipe from the preload library; {STARTED_BY_THE_LIBRARY}");
    }
    // SAFETY: `stat` is plain data; all-zero is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat fills `stat` or fails (EBADF for a number that is not open).
    if fd < 0 || unsafe { libc::fstat(fd, &mut stat) } != 0 {
        bail!("{option} {fd} is not an open file descriptor; {STARTED_BY_THE_LIBRARY}");
    }
    if stat.st_mode & libc::S_IFMT != libc::S_IFIFO {
        bail!("{option} {fd} is not a pipe; {STARTED_BY_THE_LIBRARY}");
    }
    // SAFETY: the descriptor is open (checked), and this process owns it from now on: the
    // library created it for the watcher alone, and no other code here refers to it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn write_all_fd(fd: &OwnedFd, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::from(fd.try_clone()?);
    file.write_all(bytes)
}

/// `libheapsnap_preload.so` next to this executable, or `$HEAPSNAP_PRELOAD`.
pub fn preload_library() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("HEAPSNAP_PRELOAD") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().context("cannot find the heapsnap executable")?;
    let path = exe.with_file_name("libheapsnap_preload.so");
    if !path.exists() {
        bail!("{} is missing (build it with `cargo build -p heapsnap-preload`, or set HEAPSNAP_PRELOAD)", path.display());
    }
    Ok(path)
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into the two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created by pipe2 and nothing else holds them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn raw(fd: &OwnedFd) -> i32 {
    std::os::fd::AsRawFd::as_raw_fd(fd)
}

/// A pipe that becomes readable when `signal` reaches this process.
fn signal_self_pipe(signal: i32) -> anyhow::Result<OwnedFd> {
    let (read, write) = pipe()?;
    signal_hook::low_level::pipe::register(signal, write).with_context(|| format!("cannot handle {}", triggers::signal_name(signal)))?;
    Ok(read)
}

/// Forwards the signals a supervisor sends to the launcher on to the program, for as long as
/// the returned guard lives.
fn forward_signals(pid: i32, trigger: Option<i32>) -> anyhow::Result<ForwardGuard> {
    let mut ids = Vec::new();
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2, libc::SIGWINCH, libc::SIGCONT] {
        if Some(sig) == trigger {
            continue;
        }
        // SAFETY: the action runs in a signal handler and makes one async-signal-safe call.
        let id = unsafe {
            signal_hook::low_level::register(sig, move || {
                libc::kill(pid, sig);
            })
        }?;
        ids.push(id);
    }
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: an empty action is async-signal-safe.
        ids.push(unsafe { signal_hook::low_level::register(sig, || {}) }?);
    }
    Ok(ForwardGuard(ids))
}

struct ForwardGuard(Vec<signal_hook::SigId>);

impl Drop for ForwardGuard {
    fn drop(&mut self) {
        for id in self.0.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// The program `command` names, as `execvp` would find it.
fn find_program(command: &std::ffi::OsStr) -> Option<PathBuf> {
    let path = Path::new(command);
    if path.components().count() > 1 {
        return Some(path.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(path)).find(|p| p.is_file())
}

/// Where the target counts its compactions; `None` when it does not.
fn compactions_counter(pid: i32) -> Option<heapsnap_dump::watch::CompactionsCounter> {
    heapsnap_dump::compactions_counter(pid).ok()
}

fn take_snapshot(
    pid: i32,
    trigger: Trigger,
    path: &Path,
    redact: bool,
    capture: heapsnap_dump::CaptureMode,
    runtime: &super::dump::RuntimeArgs,
) -> heapsnap_dump::Result<PathBuf> {
    let options = heapsnap_dump::DumpOptions {
        output: path.to_path_buf(),
        trigger,
        redact,
        capture,
        discover: runtime.discover_options(None),
        ..Default::default()
    };
    let report = heapsnap_dump::dump_process(pid, &options)?;
    // A runtime read by probing is checked at once, as by `dump`: a snapshot that fails
    // verification is not kept.
    super::dump::check_unknown_release(&report).map_err(|e| heapsnap_dump::DumpError::Inconsistent(format!("{e:#}")))?;
    Ok(path.to_path_buf())
}
