//! Watching a running program and taking a snapshot whenever a trigger fires: after each
//! compaction (the runtime's `caml_compactions_count` moved), on a signal, periodically, at
//! exit, and when its memory reaches a threshold ([`crate::memory_trigger`]). Used by `heapsnap run` (which launched the program) and `heapsnap watch` (started by the
//! preload library for a program launched by anything else).
//!
//! The watcher never keeps the target stopped or patched between dumps: the compaction counter
//! is read from outside with `process_vm_readv` every `poll` interval (one 8-byte read, which
//! costs the target nothing), its memory from its cgroup's files or `/proc` at the same
//! interval, and the process's exit is seen through a pidfd.

use crate::memory_trigger::{self, MemoryWatch};
use heapsnap_format::Trigger;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One-byte messages of the control pipe between the preload library and the watcher.
pub mod message {
    pub const READY: u8 = b'R';
    pub const SIGNAL: u8 = b'S';
    pub const EXITING: u8 = b'X';
    pub const ACK: u8 = b'A';
}

/// Set by `heapsnap run` for its child: `LAUNCHER_PID,CONTROL_FD,ACK_FD,AT_EXIT(0|1)`.
pub const ENV_CONTROL: &str = "HEAPSNAP_CONTROL";

/// The watcher's answer to the preload library: which hooks to install in the target.
pub fn hooks_line(watcher_pid: u32, at_exit: bool, signal: Option<i32>) -> String {
    format!("ok {watcher_pid} {} {}\n", at_exit as u8, signal.unwrap_or(0))
}

/// The answer that installs nothing (not an OCaml program, or a malformed OCAML_HEAPSNAP).
pub const HOOKS_OFF: &str = "off\n";

/// What the watcher listens to besides its timers.
#[derive(Default)]
pub struct Inputs {
    /// Messages from the target's preload library (signal received, exiting).
    pub control: Option<OwnedFd>,
    /// Where to acknowledge an exit snapshot, so the exiting target may go on.
    pub ack: Option<OwnedFd>,
    /// Readable when the watcher itself received the trigger signal (a self-pipe).
    pub signal: Option<OwnedFd>,
}

/// What a watch ended with.
#[derive(Debug, Default)]
pub struct WatchSummary {
    pub snapshots: Vec<PathBuf>,
    /// Snapshots a trigger asked for that could not be written (the target's exit during a
    /// snapshot is not one: the watch then ends quietly).
    pub failures: usize,
    /// How many times the compaction counter was read.
    pub polls: u64,
    /// The snapshots `on-memory` took, with the memory each was taken at.
    pub memory: Vec<MemorySnapshot>,
    /// The highest memory `on-memory` saw (it is not read while a snapshot is written), and the
    /// thresholds that got no snapshot.
    pub memory_peak: Option<memory_trigger::Reading>,
    pub memory_without_snapshot: Vec<memory_trigger::Threshold>,
}

/// A snapshot `on-memory` took.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MemorySnapshot {
    pub path: PathBuf,
    /// The thresholds reached since the previous sample (one snapshot for them all).
    #[serde(serialize_with = "as_strings")]
    pub thresholds: Vec<memory_trigger::Threshold>,
    /// The program's memory when they were seen, just before the snapshot.
    pub memory: memory_trigger::Reading,
}

fn as_strings<S: serde::Serializer>(thresholds: &[memory_trigger::Threshold], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(thresholds.iter().map(|t| t.to_string()))
}

pub struct Watch<'a> {
    pub pid: i32,
    pub spec: &'a crate::triggers::TriggerSpec,
    /// Where the target counts its compactions, when compactions are watched.
    pub compactions_counter: Option<CompactionsCounter>,
    /// The compaction count already accounted for: 0 when watching from the program's start
    /// (a compaction that happens before the first read must not be missed).
    pub compactions_seen: u64,
    pub inputs: Inputs,
}

impl Watch<'_> {
    /// Runs until the target exits. `take` writes one snapshot for a trigger and returns its path.
    pub fn run(mut self, mut take: impl FnMut(Trigger) -> crate::Result<PathBuf>) -> std::io::Result<WatchSummary> {
        let pidfd = pidfd_open(self.pid)?;
        let mut summary = WatchSummary::default();
        // Returns whether the target is still there to watch. A snapshot that fails because the
        // target exited, or is exiting (a process tearing down cannot be dumped), is no
        // failure: the watch ends quietly. The exit snapshot is taken while the program waits
        // for it: its failures are always failures.
        let mut record = |trigger: Trigger, summary: &mut WatchSummary| match take(trigger) {
            Ok(path) => {
                eprintln!("heapsnap: {} snapshot written to {}", trigger_label(trigger), path.display());
                summary.snapshots.push(path);
                true
            }
            Err(crate::DumpError::TargetExited { .. } | crate::DumpError::NoSuchProcess { .. }) => false,
            Err(_) if trigger != Trigger::Exit && exits_soon(&pidfd) => false,
            Err(err) => {
                eprintln!("heapsnap: warning: {} snapshot failed: {err}", trigger_label(trigger));
                summary.failures += 1;
                true
            }
        };

        let mut last_count = self.compactions_counter.map(|_| self.compactions_seen);
        let mut next_interval = self.spec.every.map(|every| Instant::now() + every);
        let mut memory = (!self.spec.on_memory.is_empty()).then(|| MemoryWatch::new(self.pid, &self.spec.on_memory));
        loop {
            let now = Instant::now();
            let mut timeout = Duration::from_secs(3600);
            if last_count.is_some() || memory.as_ref().is_some_and(|m| !m.pending().is_empty()) {
                timeout = timeout.min(self.spec.poll);
            }
            if let Some(at) = next_interval {
                timeout = timeout.min(at.saturating_duration_since(now));
            }
            let ready = poll_fds(
                &[
                    Some(pidfd.as_raw_fd()),
                    self.inputs.control.as_ref().map(|f| f.as_raw_fd()),
                    self.inputs.signal.as_ref().map(|f| f.as_raw_fd()),
                ],
                timeout,
            )?;
            if ready[0] {
                break; // the target is gone
            }
            // Memory first: it is the trigger that cannot wait.
            if let Some(crossing) = memory.as_mut().filter(|m| !m.pending().is_empty()).and_then(MemoryWatch::sample) {
                let thresholds: Vec<String> = crossing.thresholds.iter().map(|t| t.to_string()).collect();
                eprintln!("heapsnap: memory reached {}: {}", thresholds.join(", "), crossing.reading);
                if let Some(why) = memory.as_ref().and_then(MemoryWatch::dump_would_not_fit) {
                    eprintln!("heapsnap: warning: memory snapshot not taken: {why}");
                    summary.failures += 1;
                } else {
                    let before = summary.snapshots.len();
                    if !record(Trigger::Memory, &mut summary) {
                        break;
                    }
                    if let Some(path) = summary.snapshots.get(before) {
                        let path = path.clone();
                        summary.memory.push(MemorySnapshot { path, thresholds: crossing.thresholds, memory: crossing.reading });
                    }
                }
            }
            // A compaction seen before an exit message happened before it: take it first.
            if let (Some(counter), Some(last)) = (self.compactions_counter, last_count) {
                summary.polls += 1;
                match counter.read(self.pid) {
                    Some(count) if count != last => {
                        last_count = Some(count);
                        if !record(Trigger::Compaction, &mut summary) {
                            break;
                        }
                    }
                    Some(_) => {}
                    None => last_count = None, // unreadable: the target is exiting
                }
            }
            if ready[1] {
                match read_byte(self.inputs.control.as_ref().expect("polled")) {
                    Some(message::SIGNAL) => {
                        if !record(Trigger::Signal, &mut summary) {
                            break;
                        }
                    }
                    Some(message::EXITING) => {
                        let alive = record(Trigger::Exit, &mut summary);
                        if let Some(ack) = &self.inputs.ack {
                            write_byte(ack, message::ACK);
                        }
                        if !alive {
                            break;
                        }
                    }
                    Some(_) => {}
                    // The target closed its end: it is exiting; the pidfd says when it is gone.
                    None => self.inputs.control = None,
                }
            }
            if ready[2] {
                drain(self.inputs.signal.as_ref().expect("polled"));
                if !record(Trigger::Signal, &mut summary) {
                    break;
                }
            }
            if let Some(at) = next_interval {
                if Instant::now() >= at {
                    if !record(Trigger::Interval, &mut summary) {
                        break;
                    }
                    next_interval = self.spec.every.map(|every| Instant::now() + every);
                }
            }
        }
        if let Some(memory) = memory {
            let taken: Vec<_> = summary.memory.iter().flat_map(|m| m.thresholds.iter().copied()).collect();
            summary.memory_without_snapshot = self.spec.on_memory.iter().copied().filter(|t| !taken.contains(t)).collect();
            summary.memory_peak = memory.peak;
        }
        Ok(summary)
    }
}

/// How long a failed snapshot waits to see whether the target is exiting (a process tearing
/// down cannot be dumped, and is gone a moment later).
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// Whether the process behind `pidfd` has exited, or does within [`EXIT_GRACE`].
fn exits_soon(pidfd: &OwnedFd) -> bool {
    let deadline = Instant::now() + EXIT_GRACE;
    loop {
        match poll_fds(&[Some(pidfd.as_raw_fd())], deadline.saturating_duration_since(Instant::now())) {
            Ok(ready) if ready[0] => return true,
            Ok(_) if Instant::now() < deadline => continue, // interrupted by a signal
            _ => return false,
        }
    }
}

/// Checks, before anything is watched, that snapshots can be written in `dir`: creates it,
/// writes a probe file and removes it. The error names the directory.
pub fn check_writable_dir(dir: &std::path::Path) -> Result<(), WritableDirError> {
    let fail = |what: &'static str| move |source| WritableDirError { dir: dir.to_path_buf(), what, source };
    std::fs::create_dir_all(dir).map_err(fail("create"))?;
    let probe = dir.join(format!(".heapsnap-probe-{}", std::process::id()));
    std::fs::OpenOptions::new().write(true).create_new(true).open(&probe).map_err(fail("write in"))?;
    std::fs::remove_file(&probe).map_err(fail("remove a file from"))?;
    Ok(())
}

/// A snapshot directory that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot {what} the snapshot directory {}", dir.display())]
pub struct WritableDirError {
    pub dir: PathBuf,
    pub what: &'static str,
    #[source]
    pub source: std::io::Error,
}

pub fn trigger_label(trigger: Trigger) -> &'static str {
    match trigger {
        Trigger::Manual => "manual",
        Trigger::Compaction => "compaction",
        Trigger::Signal => "signal",
        Trigger::Interval => "interval",
        Trigger::Exit => "exit",
        Trigger::Core => "core",
        Trigger::Synthetic => "synthetic",
        Trigger::Memory => "memory",
    }
}

/// `DIR/NAME-PID-SEQ-TRIGGER.heapsnap`, numbered from 1 in the order taken.
pub fn snapshot_path(dir: &std::path::Path, program: &str, pid: i32, seq: usize, trigger: Trigger) -> PathBuf {
    dir.join(format!("{program}-{pid}-{seq:04}-{}.heapsnap", trigger_label(trigger)))
}

/// How long [`symbol_address`] waits for a process still inside execve.
const EXEC_WAIT: Duration = Duration::from_secs(1);

/// The run-time address of the symbol `name` of process `pid`'s executable, found from its
/// symbol table alone (see [`crate::elf::locate_symbol`]: a watcher pays this once per program).
/// Right after a spawn the process may still be inside execve: the parent of a vfork, or of a
/// close-on-exec pipe, resumes before the new program is mapped, even before /proc/PID/exe
/// names it. So this waits (up to `EXEC_WAIT`) for the exec to be done.
/// Where a process counts its compactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactionsCounter {
    /// A variable at this address (OCaml 5's `caml_compactions_count`).
    At(u64),
    /// A field at `offset` in the runtime state that the pointer at `state` designates (OCaml
    /// 4.14's `Caml_state->stat_compactions`).
    InRuntimeState { state: u64, offset: u64 },
}

impl CompactionsCounter {
    /// The count now; `None` when the target's memory cannot be read (it is exiting).
    pub fn read(self, pid: i32) -> Option<u64> {
        match self {
            CompactionsCounter::At(address) => read_word(pid, address),
            CompactionsCounter::InRuntimeState { state, offset } => match read_word(pid, state)? {
                0 => Some(0), // the runtime has not started
                s => read_word(pid, s + offset),
            },
        }
    }
}

/// What an executable offers the `on-compaction` trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactionCounter {
    /// `caml_compactions_count` (OCaml 5.2 and later), or `Caml_state->stat_compactions`
    /// (OCaml 4.14, whose major heap is `caml_heap_start`'s chunks).
    Present,
    /// An OCaml 5 program without one: OCaml 5.1, whose `Gc.compact` is a major collection.
    Absent,
    /// Not an OCaml program.
    NotOcaml,
}

/// Why `on-compaction` cannot watch an OCaml program without a compaction counter.
pub const NO_COMPACTION_COUNTER: &str = "on-compaction cannot work on this program: its OCaml (5.1) does not compact (Gc.compact is a major collection) and has no caml_compactions_count; use on-signal=SIG, every=DURATION or at-exit";

/// Whether the executable at `path` has a compaction counter.
pub fn compaction_counter_in(path: &std::path::Path) -> CompactionCounter {
    if crate::elf::locate_symbol(path, "caml_start_program").is_err()
        && crate::common::program::INTERPRETER_SYMBOLS.iter().all(|name| crate::elf::locate_symbol(path, name).is_err())
    {
        return CompactionCounter::NotOcaml;
    }
    let has = |name| crate::elf::locate_symbol(path, name).is_ok();
    match has("caml_compactions_count") || (has("caml_heap_start") && has("Caml_state")) {
        true => CompactionCounter::Present,
        false => CompactionCounter::Absent,
    }
}

pub fn symbol_address(pid: u32, name: &str) -> crate::Result<u64> {
    use crate::source::{MemorySource, ProcessMemory};
    let memory = ProcessMemory::new(pid)?;
    let exe_path = memory.executable_path();
    let deadline = Instant::now() + EXEC_WAIT;
    let pause = || std::thread::sleep(Duration::from_millis(1));
    // A vfork child shares our address space (and so names our executable) until its exec
    // switches programs.
    while Instant::now() < deadline && shares_our_memory(pid) {
        pause();
    }
    let symbol = crate::elf::locate_symbol(&exe_path, name)?;
    loop {
        match symbol.load_bias(&memory.mappings()?, &crate::source::FileIdentity::of(&exe_path)) {
            Ok(bias) => return Ok(bias.wrapping_add(symbol.address)),
            // The executable is not mapped yet: execve is still loading it.
            Err(_) if Instant::now() < deadline => pause(),
            Err(e) => return Err(e),
        }
    }
}

/// Whether `pid` runs in our address space (kcmp KCMP_VM; false where kcmp is not available).
fn shares_our_memory(pid: u32) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp only compares kernel objects of the two processes.
    let same = unsafe {
        libc::syscall(libc::SYS_kcmp, libc::getpid() as libc::c_long, pid as libc::c_long, KCMP_VM, 0 as libc::c_long, 0 as libc::c_long)
    };
    same == 0
}

/// Reads one native word of the target without stopping it.
pub fn read_word(pid: i32, address: u64) -> Option<u64> {
    let mut word = 0u64;
    let local = libc::iovec { iov_base: (&mut word as *mut u64).cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: address as *mut libc::c_void, iov_len: 8 };
    // SAFETY: the kernel writes at most 8 bytes into `word` (the local iovec); the remote
    // address is only read in the target, which the kernel checks.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    (n == 8).then_some(word)
}

fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and touches no memory.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor from pidfd_open, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Which of `fds` are readable (or hung up) after waiting at most `timeout`.
fn poll_fds(fds: &[Option<RawFd>], timeout: Duration) -> std::io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> =
        fds.iter().map(|fd| libc::pollfd { fd: fd.unwrap_or(-1), events: libc::POLLIN, revents: 0 }).collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `pfds` holds `pfds.len()` pollfd entries the kernel may update.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() == std::io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(err);
    }
    Ok(pfds.iter().map(|p| p.fd >= 0 && p.revents != 0).collect())
}

fn read_byte(fd: &OwnedFd) -> Option<u8> {
    let mut byte = 0u8;
    // SAFETY: reads at most one byte into `byte`, from a descriptor `fd` keeps open.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
    (n == 1).then_some(byte)
}

fn write_byte(fd: &OwnedFd, byte: u8) {
    // SAFETY: writes one byte from `byte` to a descriptor `fd` keeps open.
    unsafe { libc::write(fd.as_raw_fd(), (&byte as *const u8).cast(), 1) };
}

/// Empties a non-blocking self-pipe: several signals before one poll make one snapshot.
fn drain(fd: &OwnedFd) {
    let mut buf = [0u8; 64];
    // SAFETY: flags of a descriptor `fd` keeps open; reads at most `buf.len()` bytes into `buf`.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        while libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) > 0 {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speaks_the_preload_library_protocol() {
        assert_eq!(message::READY, heapsnap_preload::MSG_READY);
        assert_eq!(message::SIGNAL, heapsnap_preload::MSG_SIGNAL);
        assert_eq!(message::EXITING, heapsnap_preload::MSG_EXITING);
        assert_eq!(message::ACK, heapsnap_preload::MSG_ACK);
        assert_eq!(ENV_CONTROL, heapsnap_preload::ENV_CONTROL);
        let hooks = heapsnap_preload::Hooks::parse_line(&hooks_line(42, true, Some(12))).unwrap();
        assert_eq!(hooks, heapsnap_preload::Hooks { watcher_pid: 42, at_exit: true, signal: 12 });
        assert_eq!(heapsnap_preload::Hooks::parse_line(HOOKS_OFF), None);
    }

    /// Run by [`a_symbol_is_found_right_after_a_spawn`] as a child process: waits for its
    /// stdin to close.
    #[test]
    #[ignore = "a helper process of another test"]
    fn helper_waits_for_stdin() {
        use std::io::Read;
        std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
    }

    #[test]
    fn a_symbol_is_found_right_after_a_spawn() {
        use std::process::{Command, Stdio};
        let exe = std::env::current_exe().unwrap();
        let want = crate::elf::Executable::open(&exe).unwrap().require("main").unwrap();
        for _ in 0..50 {
            let mut child = Command::new(&exe)
                .args(["--ignored", "--exact", "watch::tests::helper_waits_for_stdin", "-q"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let pid = child.id();
            // At once, as `heapsnap run` does: the child may still be inside execve.
            let found = symbol_address(pid, "main");
            let maps = crate::source::parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap());
            let bias = crate::elf::Executable::open(&exe).unwrap().load_bias(&maps, &crate::source::FileIdentity::of(&exe)).unwrap();
            drop(child.stdin.take());
            child.wait().unwrap();
            assert_eq!(found.unwrap(), bias + want);
        }
    }

    #[test]
    fn snapshot_names_sort_in_the_order_taken() {
        let dir = std::path::Path::new("/s");
        let a = snapshot_path(dir, "prog", 7, 9, Trigger::Compaction);
        let b = snapshot_path(dir, "prog", 7, 10, Trigger::Exit);
        assert_eq!(a, std::path::Path::new("/s/prog-7-0009-compaction.heapsnap"));
        assert!(a < b);
    }
}
