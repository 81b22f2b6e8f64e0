//! One dump of a live process: discover its runtime while it runs, stop it, wait for a
//! consistent stop, copy, resume, then write the file. The target is stopped only for the copy.

use crate::capture::{self, CaptureMode, CapturePlan};
use crate::common::copied_world::Capture;
use crate::common::copy::{SpareBuffers, TornMinorHeap};
use crate::common::custom_ops::custom_ops_in_heap;
use crate::common::family::{Copied, RuntimeFamily};
use crate::common::program::{header_format, DiscoverOptions};
use crate::common::regions::redact_strings;
use crate::error::{describe, DumpError, Result, UnsafeStop};
use crate::snapshot;
use crate::source::{interrupted, test_delay, CoreFile, ForkCost, ForkStep, LiveProcess, MemorySource, MissingRegion, ProcessMemory};
use crate::target;
use heapsnap_format::{ColourEncoding, Metadata, Trigger};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What to dump and how.
#[derive(Clone, Debug)]
pub struct DumpOptions {
    /// The snapshot file to write.
    pub output: PathBuf,
    /// What made us dump (recorded in the metadata).
    pub trigger: Trigger,
    /// Zero string and bytes contents before anything reaches the disk.
    pub redact: bool,
    /// Reserved header bits, for targets where they cannot be detected (or to override).
    pub reserved_bits: Option<u8>,
    /// How many times to stop the world before giving up on a consistent stop (then the dump
    /// goes on, with a warning in the snapshot). Domains busy in the runtime on a loaded
    /// machine can need hundreds: each collection is a stop-the-world section that waits for
    /// the domain the scheduler left out, and a stop lands in one often.
    pub max_attempts: u32,
    /// Fail instead of writing an inconsistent snapshot when no consistent stop was found.
    pub require_consistent: bool,
    /// Copy the executable's DWARF line and debug-info sections into the snapshot.
    pub include_dwarf: bool,
    /// Which executable and debug file to read, and whether to force an unknown version.
    pub discover: DiscoverOptions,
    /// Copy the stopped target, or fork it and read the frozen child (live dumps only).
    pub capture: CaptureMode,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions {
            output: PathBuf::from("heapsnap.heapsnap"),
            trigger: Trigger::Manual,
            redact: false,
            reserved_bits: None,
            max_attempts: 1000,
            require_consistent: false,
            include_dwarf: true,
            discover: DiscoverOptions::default(),
            capture: CaptureMode::Auto,
        }
    }
}

/// What a dump did.
#[derive(Clone, Debug, Serialize)]
pub struct DumpReport {
    pub path: PathBuf,
    pub pid: u32,
    pub ocaml_version: String,
    pub reserved_header_bits: u8,
    /// How long the target was stopped for the copy (the last, consistent stop).
    pub pause_ns: u64,
    /// How long it was stopped in all, counting the stops that were not consistent.
    pub total_stopped_ns: u64,
    /// How many times the world was stopped.
    pub attempts: u32,
    /// How many of those stops came after only the threads in the way had run on, the others
    /// held stopped.
    pub nudged_stops: u32,
    /// Whether the stop the snapshot was taken at was one of those.
    pub taken_at_nudged_stop: bool,
    /// Whether the copy was taken at a consistent stop.
    pub consistent: bool,
    pub domains: usize,
    pub regions: usize,
    pub region_bytes: u64,
    pub roots: usize,
    pub file_bytes: u64,
    /// Whole dump, from the first look at the target to the file on disk.
    pub elapsed_ns: u64,
    /// Where the pause went: the steps of the copy, in ns (for a fork: the check and the clone).
    pub pause_phases: Vec<(String, u64)>,
    /// For a fork: the steps of the copy, read from the child while the target ran, in ns.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_phases: Vec<(String, u64)>,
    pub warnings: Vec<String>,
    /// What the snapshot lacks because of how the executable was built or shipped (said once:
    /// no source lines without DWARF, no static names without `.symtab`).
    pub notes: Vec<String>,
    /// The OCaml version is not one heapsnap knows; it was read as `read_as` (`--force`).
    pub forced_version: bool,
    /// The program runs bytecode.
    pub bytecode: bool,
    /// The release whose knowledge was used ("5.3"); for a probed runtime, the newest known.
    pub read_as: String,
    /// The runtime is of a release heapsnap does not know, and was read by probing it: the
    /// facts found, and those guessed (`--force`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probed: Option<heapsnap_format::ProbedRuntime>,
    /// How long probing the runtime took, before the stop (also for a known release, whose
    /// file the probe checks).
    pub probe_ns: u64,
    /// Where the structure layouts came from: `dwarf`, `debug_file` or `tables`.
    pub layouts_from: String,
    /// Memory a core file does not hold (always empty for a live process).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<MissingRegion>,
    /// How a live process was captured (absent for a core).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureReport>,
    /// A live process in other namespaces or another root than the dumper's (a container).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<heapsnap_format::Namespaces>,
}

/// How a live dump captured the target, and what a fork cost.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureReport {
    /// What was asked: `auto`, `fork` or `copy`.
    pub requested: CaptureMode,
    /// What was done: `fork` or `copy`.
    pub method: CaptureMode,
    /// Why the target was copied when `auto` (or a fork that failed) was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_copy: Option<String>,
    /// How long the `clone` took, within the pause.
    pub fork_ns: u64,
    /// How long the fork's child lived (the copy was read from it meanwhile).
    pub child_lived_ns: u64,
    /// The memory the fork cost: the pages the target wrote while the child lived, which the
    /// child kept, and the child's page tables.
    pub fork_extra_bytes: u64,
    /// The target's ranges a fork does not freeze (none of them was read).
    pub not_frozen: Vec<String>,
}

impl DumpReport {
    pub fn pause(&self) -> Duration {
        Duration::from_nanos(self.pause_ns)
    }
}

/// Where a running process counts its compactions, found without stopping it (for a watcher
/// that polls it); see [`target::compactions_counter`].
pub fn compactions_counter(pid: i32) -> Result<crate::watch::CompactionsCounter> {
    target::compactions_counter(checked_pid(pid)?)
}

fn checked_pid(pid: i32) -> Result<u32> {
    u32::try_from(pid).ok().filter(|&p| p > 0).ok_or(DumpError::NoSuchProcess { pid: pid as u32 })
}

/// How many times in a row the threads in the way may run on alone, while the others stay
/// stopped, before every thread runs again: a thread alone may wait on one kept stopped (a
/// stop-the-world section it leads, a lock), and the kept ones should not wait long.
const NUDGES_BEFORE_RESUMING_ALL: u32 = 16;

/// Takes one snapshot of process `pid`.
pub fn dump_process(pid: i32, options: &DumpOptions) -> Result<DumpReport> {
    let started = Instant::now();
    let pid = checked_pid(pid)?;
    let memory = ProcessMemory::new(pid)?;
    // Everything static is read while the target runs.
    let rt = target::discover(&memory, &options.discover)?;
    let mut warnings = Vec::new();
    let reserved_bits = reserved_bits_for(&*rt, options, &mut warnings)?;
    let format = header_format(reserved_bits);

    // How to capture (a fork's guardian is started now, before the stop), and buffers for
    // everything the copy writes, prepared while the target runs.
    let mut plan = capture::plan(pid, options.capture, &memory)?;
    let mut spare = rt.prepare(&memory, format)?;

    rt.wait_quiet(&memory, Duration::from_millis(100));
    let mut process = LiveProcess::attach(pid)?;
    let mut stopped_at = Instant::now();
    let mut wall_at_stop = SystemTime::now();
    let mut total_stopped = Duration::ZERO;
    let mut attempts = 1;
    // Stops since every thread last ran: see `NUDGES_BEFORE_RESUMING_ALL`.
    let mut nudges = 0;
    let mut nudged_stops = 0;
    let mut check = rt.check_world(&process)?;
    // A fork's: when the target was let go, how long the clone took, what the child cost.
    let mut forked: Option<(Instant, Duration, ForkCost)> = None;
    let mut copied = loop {
        let last = attempts >= options.max_attempts.max(1);
        if check.is_safe() || last {
            let checked = stopped_at.elapsed();
            let captured = match plan.fork_site {
                None => rt.capture(&process, &check, format, &mut spare, TornMinorHeap::Fail),
                Some(site) => match process.fork_frozen(site, plan.guardian.take()) {
                    Ok(frozen) => {
                        let clone_took = stopped_at.elapsed() - checked;
                        // The pause ends here: the target runs while its frozen child is read.
                        process.detach();
                        let resumed_at = Instant::now();
                        test_delay(ForkStep::Reading);
                        let captured = rt.capture(&frozen, &check, format, &mut spare, TornMinorHeap::Fail);
                        forked = Some((resumed_at, clone_took, frozen.finish()));
                        match captured.map(|c| {
                            (plan.unfrozen_read(c.cap.regions.iter().map(|r| (r.base, r.base + r.bytes.len() as u64))).cloned(), c)
                        }) {
                            Ok((None, copied)) => Ok(copied),
                            Ok((Some(range), _)) if plan.requested == CaptureMode::Fork => {
                                return Err(DumpError::ForkRefused {
                                    pid,
                                    why: format!("the capture read {range}, which a fork does not freeze"),
                                })
                            }
                            Ok((Some(range), _)) => {
                                plan.fall_back(format!("the capture read {range}, which a fork does not freeze: copied instead"));
                                Err(DumpError::UnsafeStop(UnsafeStop::NotFrozen(range.to_string())))
                            }
                            Err(e) => Err(e),
                        }
                    }
                    Err(e @ DumpError::ForkFailed { .. }) if plan.requested == CaptureMode::Auto => {
                        // Still the same stop: copy it.
                        plan.fall_back(format!("{e}: copied instead"));
                        rt.capture(&process, &check, format, &mut spare, TornMinorHeap::Fail)
                    }
                    Err(e) => return Err(e),
                },
            };
            match captured {
                Ok(mut copied) => {
                    copied.cap.phases.insert(0, ("consistency check", checked.as_nanos() as u64));
                    break copied;
                }
                Err(DumpError::UnsafeStop(_)) if !last => {}
                Err(DumpError::UnsafeStop(why)) => {
                    return Err(DumpError::Inconsistent(format!("no consistent stop in {attempts} attempts: {why}")))
                }
                Err(e) => return Err(e),
            }
        }
        match check.busy_threads().filter(|_| forked.is_none() && nudges < NUDGES_BEFORE_RESUMING_ALL) {
            Some(busy) => {
                // Only some threads are in the way: keep the rest at rest, and let these alone
                // run on a little, to be caught again somewhere else. Every domain's chance of
                // being at rest then counts once, not multiplied by the others' (two domains
                // interpreting bytecode rarely both sit in a primitive at once). The pause
                // goes on for the threads kept stopped, so `stopped_at` stays.
                nudges += 1;
                nudged_stops += 1;
                process.resume_only(&busy)?;
                std::thread::sleep(Duration::from_micros(50 * (1 + nudges as u64 % 8)));
                if interrupted() {
                    return Err(DumpError::Interrupted);
                }
                process.stop()?;
            }
            None => {
                nudges = 0;
                total_stopped += forked.take().map_or_else(|| stopped_at.elapsed(), |(resumed_at, ..)| resumed_at - stopped_at);
                process.resume()?;
                // Let the target leave its unsafe window: a little longer as attempts fail,
                // and then until no stop-the-world section runs.
                std::thread::sleep(Duration::from_micros(200 * (attempts as u64).min(25)));
                if interrupted() {
                    return Err(DumpError::Interrupted);
                }
                if let (Some(site), None) = (plan.fork_site, &plan.guardian) {
                    plan.guardian = crate::source::Guardian::start(pid, site);
                }
                rt.wait_quiet(&memory, Duration::from_millis(100));
                process.stop()?;
                stopped_at = Instant::now();
            }
        }
        wall_at_stop = SystemTime::now();
        attempts += 1;
        check = rt.check_world(&process)?;
        if !check.is_safe() && attempts >= options.max_attempts.max(1) && options.require_consistent {
            return Err(DumpError::Inconsistent(format!("no consistent stop in {attempts} attempts: {}", describe(&check.unsafe_reasons))));
        }
    };
    let consistent = check.is_safe();
    if !consistent {
        warnings
            .push(format!("no consistent stop in {attempts} attempts; the snapshot was taken anyway: {}", describe(&check.unsafe_reasons)));
    }
    process.detach();
    let pause = forked.as_ref().map_or_else(|| stopped_at.elapsed(), |(resumed_at, ..)| *resumed_at - stopped_at);
    total_stopped += pause;
    drop(process);
    drop(spare);
    if let Some(g) = plan.guardian.take() {
        g.dismiss();
    }
    let capture = capture_report(&plan, forked.as_ref().map(|(_, took, cost)| (*took, cost)), &mut warnings);

    // The target runs again; the rest works on our copy.
    let executable = std::fs::read_link(format!("/proc/{pid}/exe")).ok().map(|p| p.display().to_string());
    let namespaces = crate::source::namespaces_of(pid);
    let origin = Origin {
        pid,
        executable,
        time: wall_at_stop,
        trigger: options.trigger,
        capture: Some(capture_metadata(&capture)),
        namespaces: namespaces.clone(),
        host: crate::source::hostname_of(pid),
    };
    let written = finish(&*rt, &memory, &mut copied, format, reserved_bits, options, origin, &mut warnings)?;
    let mut report = DumpReport::of_capture(&*rt, &copied.cap, pid, reserved_bits, written, started, warnings);
    if capture.method == CaptureMode::Fork {
        // The copy's steps ran after the pause, on the child: the pause was the check and the clone.
        let mut phases = std::mem::take(&mut report.pause_phases).into_iter();
        report.pause_phases.extend(phases.next());
        report.pause_phases.push(("clone".into(), capture.fork_ns));
        report.read_phases = phases.collect();
    }
    Ok(DumpReport {
        pause_ns: pause.as_nanos() as u64,
        total_stopped_ns: total_stopped.as_nanos() as u64,
        attempts,
        nudged_stops,
        taken_at_nudged_stop: nudges > 0,
        consistent,
        capture: Some(capture),
        namespaces,
        ..report
    })
}

/// What the report says of the capture; a fork's child that could not be collected is a warning.
fn capture_report(plan: &CapturePlan, fork: Option<(Duration, &ForkCost)>, warnings: &mut Vec<String>) -> CaptureReport {
    if let Some(w) = fork.and_then(|(_, cost)| cost.warning.clone()) {
        warnings.push(w);
    }
    let (fork_ns, child_lived_ns, fork_extra_bytes) =
        fork.map_or((0, 0, 0), |(took, cost)| (took.as_nanos() as u64, cost.lived.as_nanos() as u64, cost.extra_bytes));
    CaptureReport {
        requested: plan.requested,
        method: if fork.is_some() { CaptureMode::Fork } else { CaptureMode::Copy },
        why_copy: plan.why_copy.clone(),
        fork_ns,
        child_lived_ns,
        fork_extra_bytes,
        not_frozen: if fork.is_some() { plan.not_frozen.iter().map(ToString::to_string).collect() } else { Vec::new() },
    }
}

/// What the snapshot's metadata keeps of the capture.
fn capture_metadata(report: &CaptureReport) -> heapsnap_format::CaptureInfo {
    heapsnap_format::CaptureInfo {
        requested: report.requested.to_string(),
        method: report.method.to_string(),
        why_copy: report.why_copy.clone(),
        not_frozen: report.not_frozen.clone(),
    }
}

/// Takes the snapshot a live dump would have taken, from the ELF core file `core` of an OCaml
/// process. The executable is `exe`, or the one the core says was running; its build id must
/// be the one the core holds. A core taken at an inconsistent moment still gives a snapshot
/// (with a warning, and conservative roots for the threads caught inside the runtime), unless
/// `options.require_consistent`.
pub fn dump_core(core: &Path, exe: Option<&Path>, options: &DumpOptions) -> Result<DumpReport> {
    let started = Instant::now();
    let source = CoreFile::open(core, exe)?;
    let mut warnings = Vec::new();
    warnings.extend(check_build_id(&source)?);
    let rt = target::discover(&source, &options.discover)?;
    let reserved_bits = reserved_bits_for(&*rt, options, &mut warnings)?;
    let format = header_format(reserved_bits);

    if let Some((declared, actual)) = source.truncation() {
        warnings.push(format!("the core file is truncated: {actual} bytes of the {declared} its headers describe"));
    }
    let lost: Vec<_> = source.missing().iter().filter(|m| !m.read_from_file).cloned().collect();
    if !lost.is_empty() {
        let bytes: u64 = lost.iter().map(|m| m.bytes()).sum();
        warnings.push(format!(
            "the core lacks {bytes} bytes of the process's memory in {} region(s): {}",
            lost.len(),
            lost.iter().map(|m| m.to_string()).collect::<Vec<_>>().join("; ")
        ));
    }
    let checked_at = Instant::now();
    let check = rt.check_world(&source)?;
    let consistent = check.is_safe();
    if !consistent {
        let why = describe(&check.unsafe_reasons);
        if options.require_consistent {
            return Err(DumpError::Inconsistent(format!("the core was taken at an inconsistent moment: {why}")));
        }
        warnings.push(format!("the core was taken at an inconsistent moment; the snapshot may be wrong there: {why}"));
    }
    let checked = checked_at.elapsed();
    // A core cannot be taken again at a better moment: skip a block caught mid-allocation.
    let mut copied = match rt.capture(&source, &check, format, &mut SpareBuffers::none(), TornMinorHeap::SkipTornBlock) {
        Ok(copied) => copied,
        Err(DumpError::UnsafeStop(why)) => {
            return Err(DumpError::Inconsistent(format!("the core was taken while the runtime was changing its heap: {why}")))
        }
        Err(e) => return Err(e),
    };
    copied.cap.phases.insert(0, ("consistency check", checked.as_nanos() as u64));
    if !consistent {
        rt.add_interrupted_thread_roots(&source, &check, &mut copied.cap, format, &mut warnings)?;
    }
    // The core's own modification time is the best guess of when it was taken.
    let time = std::fs::metadata(core).and_then(|m| m.modified()).unwrap_or_else(|_| SystemTime::now());
    let pid = source.core_pid();
    let origin = Origin {
        pid,
        executable: Some(source.executable_path().display().to_string()),
        time,
        trigger: Trigger::Core,
        capture: None,
        namespaces: None,
        host: None,
    };
    let written = finish(&*rt, &source, &mut copied, format, reserved_bits, options, origin, &mut warnings)?;
    // Nothing was stopped: no pause, one "attempt".
    let report = DumpReport::of_capture(&*rt, &copied.cap, pid, reserved_bits, written, started, warnings);
    Ok(DumpReport { consistent, missing: source.missing().to_vec(), ..report })
}

impl DumpReport {
    /// The report of a dump that wrote `written` (path, bytes) from `cap`: what every dump
    /// reports. A target stopped for the copy overrides the pause, stops and consistency
    /// (here none, one, and consistent); a core, the memory it lacks.
    fn of_capture(
        rt: &dyn RuntimeFamily,
        cap: &Capture,
        pid: u32,
        reserved_bits: u8,
        written: (PathBuf, u64),
        started: Instant,
        warnings: Vec<String>,
    ) -> DumpReport {
        DumpReport {
            path: written.0,
            pid,
            ocaml_version: rt.version().to_string(),
            reserved_header_bits: reserved_bits,
            pause_ns: 0,
            total_stopped_ns: 0,
            attempts: 1,
            nudged_stops: 0,
            taken_at_nudged_stop: false,
            consistent: true,
            domains: cap.domains.len(),
            regions: cap.regions.len(),
            region_bytes: cap.regions.iter().map(|r| r.bytes.len() as u64).sum(),
            roots: cap.roots.iter().filter(|r| r.kind.is_root()).count(),
            file_bytes: written.1,
            elapsed_ns: started.elapsed().as_nanos() as u64,
            pause_phases: cap.phases.iter().map(|(n, t)| (n.to_string(), *t)).collect(),
            read_phases: Vec::new(),
            warnings,
            notes: rt.notes().to_vec(),
            forced_version: rt.forced(),
            bytecode: rt.bytecode(),
            read_as: rt.read_as().to_string(),
            probed: rt.probed(&cap.probed),
            probe_ns: rt.probe_ns(),
            layouts_from: rt.layouts_from().to_string(),
            missing: Vec::new(),
            capture: None,
            namespaces: None,
        }
    }
}

/// The executable must be the one the core was taken from: its build-id note, where the
/// process had it mapped, must hold the same bytes in the core. A core without that page
/// cannot be checked: a warning.
fn check_build_id(source: &CoreFile) -> Result<Option<String>> {
    let exe_path = source.executable_path();
    let mismatch = |message: String| crate::source::bad_core(&exe_path, message);
    let exe = crate::elf::Executable::open(&exe_path)?;
    let Some(want) = exe.build_id.clone() else {
        return Err(mismatch("the executable has no build id: cannot check that the core comes from it".into()));
    };
    let bias = exe.load_bias(&source.mappings()?, &crate::source::FileIdentity::of(&exe_path))?;
    let (note_at, note) = exe.section_data(".note.gnu.build-id").ok_or_else(|| mismatch("no .note.gnu.build-id section".into()))?;
    let mut in_core = vec![0u8; note.len()];
    match source.read_from_core(note_at.wrapping_add(bias), &mut in_core) {
        Ok(()) if in_core == *note => Ok(None),
        Ok(()) => {
            // The note's descriptor is the id: skip its 16-byte header (namesz, descsz, type, "GNU\0").
            let found: String = in_core.iter().skip(16).map(|b| format!("{b:02x}")).collect();
            Err(mismatch(format!(
                "build id {want} does not match the core's {found}: the core was not taken from this executable (pass the right one with --exe)"
            )))
        }
        // No copy of the note in the core: compare with the file the core names, if still there.
        Err(e) => {
            let recorded = source.recorded_executable().and_then(|p| crate::elf::Executable::open(p).ok());
            if let Some(recorded) = recorded {
                if let Some(found) = recorded.build_id.as_ref().filter(|found| **found != want) {
                    return Err(mismatch(format!(
                        "build id {want} does not match the build id {found} of {}, the executable the core names (pass the right one with --exe)",
                        recorded.path.display()
                    )));
                }
            }
            Ok(Some(format!(
                "cannot check that the core comes from {} (build id {want}): the core does not hold its build-id note ({e})",
                exe_path.display()
            )))
        }
    }
}

/// The number of reserved header bits: detected, or given (a difference is a warning).
fn reserved_bits_for(rt: &dyn RuntimeFamily, options: &DumpOptions, warnings: &mut Vec<String>) -> Result<u8> {
    let reserved_bits = match (rt.detected_reserved_bits(), options.reserved_bits) {
        (Some(found), Some(given)) if found != given => {
            warnings.push(format!("--reserved-bits {given} overrides the {found} detected in the target"));
            given
        }
        (_, Some(given)) => given,
        (Some(found), None) => found,
        (None, None) => {
            return Err(DumpError::ReservedBitsUnknown(
                "the runtime function caml_sys_const_max_wosize was not found or not understood".into(),
            ))
        }
    };
    if reserved_bits > 31 {
        return Err(DumpError::ReservedBitsUnknown(format!("{reserved_bits} reserved bits is more than 31")));
    }
    Ok(reserved_bits)
}

/// Where a capture came from, for the metadata.
struct Origin {
    pid: u32,
    executable: Option<String>,
    time: SystemTime,
    trigger: Trigger,
    capture: Option<heapsnap_format::CaptureInfo>,
    namespaces: Option<heapsnap_format::Namespaces>,
    /// The target's host name (none for a core: it does not say).
    host: Option<String>,
}

/// Everything after the copy, shared by live and core dumps: custom operations found in the
/// heap, conservative roots filtered, redaction, metadata, and the file. Returns the file's
/// path and size; `warnings` gets the capture's own.
#[allow(clippy::too_many_arguments)]
fn finish(
    rt: &dyn RuntimeFamily,
    source: &dyn MemorySource,
    copied: &mut Copied,
    format: heapsnap_values::HeaderFormat,
    reserved_bits: u8,
    options: &DumpOptions,
    origin: Origin,
    warnings: &mut Vec<String>,
) -> Result<(PathBuf, u64)> {
    let cap = &mut copied.cap;
    rt.check_copy(cap, format)?;
    let more_ops = custom_ops_in_heap(rt.custom_layout(), source, cap, format);
    cap.custom_ops.extend(more_ops);
    cap.keep_plausible_conservative_roots(format, copied.gc_state.as_ref());
    if options.redact {
        for r in cap.regions.iter_mut() {
            if r.kind.holds_heap_blocks() {
                redact_strings(r, format);
            }
        }
    }
    warnings.append(&mut cap.warnings);
    if rt.forced() {
        warnings.push(format!("OCaml {} is not a version heapsnap knows: it was read as OCaml {} (--force)", rt.version(), rt.read_as()));
    }
    if let Some(probed) = rt.probed(&cap.probed) {
        warnings.push(probed.reason.clone());
        if !probed.guessed.is_empty() {
            warnings.push(format!("facts guessed as OCaml {}'s (--force): {}", rt.read_as(), probed.guessed.join(", ")));
        }
    }
    let metadata = Metadata {
        ocaml_version: rt.version().to_string(),
        word_size: 8,
        reserved_header_bits: reserved_bits,
        colours: cap.colours.unwrap_or(ColourEncoding::OCAML5_INITIAL),
        pid: Some(origin.pid),
        executable: origin.executable,
        build_id: rt.exe().build_id.clone(),
        time_unix_ns: origin.time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
        trigger: origin.trigger,
        dumper: format!("heapsnap {}", env!("CARGO_PKG_VERSION")),
        domains: cap.domains.iter().map(|d| d.info.clone()).collect(),
        compactions: cap.compactions,
        redacted: options.redact,
        warnings: warnings.iter().chain(rt.notes()).cloned().collect(),
        pools: rt.pools(),
        forced_version: rt.forced(),
        bytecode: rt.bytecode(),
        layouts_from: Some(rt.layouts_from().to_string()),
        ocaml4_gc: copied.gc_state,
        capture: origin.capture,
        probed: rt.probed(&cap.probed),
        namespaces: origin.namespaces,
        host: origin.host,
    };
    snapshot::write(rt.exe(), rt.bias(), cap, &metadata, &options.output, options.include_dwarf)
}
