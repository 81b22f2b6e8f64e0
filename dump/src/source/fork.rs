//! A copy-on-write capture: the stopped target forks once, through ptrace, and its child, which
//! never runs, is read at leisure while the target runs again ([`FrozenCopy`]).
//!
//! Why the target never notices the child:
//! - The `clone` is a raw system call made by one of the target's threads at a `syscall`
//!   instruction its code already holds ([`super::inject`]): libc's `fork` is not called, so no
//!   `pthread_atfork` handler runs, and nothing is written to the target's memory.
//! - Its exit signal is 0, not SIGCHLD: the target gets no signal when the child stops or dies,
//!   and its `wait()`, `waitpid(-1, ...)` and `waitid(P_ALL, ...)` do not see the child, since
//!   the kernel offers a child whose exit signal is not SIGCHLD only to waits with `__WCLONE` or
//!   `__WALL`. (The kernel reports a clone with such an exit signal as `PTRACE_EVENT_CLONE`:
//!   `PTRACE_O_TRACECLONE` is the option that makes the child start stopped and traced by us.)
//! - The child starts in a ptrace stop and is never resumed; `PTRACE_O_EXITKILL` is set on it
//!   (never on the target's threads) so that it dies with the dumper. Its stack pointer is
//!   poisoned (`clone`'s stack argument), so that a child that did run, because the dumper died
//!   before it could set that option, would fault on its first use of the stack instead of
//!   running the program's code.
//! - It shares the target's file table and filesystem context (`CLONE_FILES`, `CLONE_FS`):
//!   it holds no second reference to any open file, so a pipe the target closes still reads
//!   EOF at its other end while the child lives, and the child's death closes nothing.
//! - A dead child whose parent does not collect it stays a zombie. We kill it, collect its exit
//!   as its tracer, then make one of the target's threads call `wait4(child, NULL, __WALL |
//!   WNOHANG)` the same way it made the `clone` ([`collect_dead_child`]): no zombie remains. If the
//!   dumper dies first, the [`super::guardian`] it left does that.

use super::guardian::Guardian;
use super::inject::{remote_syscall, InjectError, SYS_CLONE};
use super::live::{has_exited, read_many, read_many_partial, read_one, wait_for_stop, Channel, LiveProcess, Stop};
use super::maps::Mapping;
use super::memory::{MemorySource, ReadRequest, ThreadState};
use super::reap::{collect_dead_child, collect_with, CollectError};
use crate::error::{DumpError, Result};
use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `clone` flags: share the file table and filesystem context; exit signal 0 (the low byte).
const CLONE_FLAGS: u64 = (libc::CLONE_FILES | libc::CLONE_FS) as u64;

/// The child's stack pointer: in the first page, which is never mapped (`mmap_min_addr`).
const POISONED_STACK: u64 = 0x10;

/// Where a test may make the dumper wait, to kill it there (`HEAPSNAP_TEST_FORK_DELAY_MS`).
#[derive(Clone, Copy, Debug)]
pub enum ForkStep {
    /// The world is stopped; the fork is next.
    BeforeFork,
    /// The child exists, stopped and traced; the target is still stopped.
    Forked,
    /// The target runs again; the child is being read.
    Reading,
    /// The child was killed; the target has not collected it yet.
    Killed,
}

/// Says on stderr that the dump reached `step` and sleeps there for
/// `HEAPSNAP_TEST_FORK_DELAY_MS` milliseconds, when a test sets it: the window a test kills the
/// dumper in, to check that the target survives it at every step. Only in a build with the
/// `test-hooks` feature, which the tests turn on: elsewhere a variable left set could hold a
/// production target stopped.
#[cfg(feature = "test-hooks")]
pub fn test_delay(step: ForkStep) {
    static DELAY: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    let delay = DELAY.get_or_init(|| std::env::var("HEAPSNAP_TEST_FORK_DELAY_MS").ok()?.parse().ok().map(Duration::from_millis));
    if let Some(delay) = delay {
        eprintln!("heapsnap: test: at {step:?}");
        std::thread::sleep(*delay);
    }
}

/// Without the `test-hooks` feature: nothing.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn test_delay(_step: ForkStep) {}

/// The fork of a stopped target, read in its place. The threads are the target's, as they were
/// at the stop (the fork changes none of their registers). Dropping it kills and collects the
/// child ([`FrozenCopy::finish`] does so and says what the child cost).
pub struct FrozenCopy {
    parent: u32,
    child: u32,
    site: u64,
    threads: Vec<ThreadState>,
    born: Instant,
    guardian: Option<Guardian>,
    /// The child's `/proc/PID/mem`.
    memory: std::fs::File,
    finished: bool,
}

/// What a fork cost, measured when its child is killed.
#[derive(Clone, Debug, Default)]
pub struct ForkCost {
    /// How long the child lived.
    pub lived: Duration,
    /// The memory only the child still held when it was killed: the pages the target wrote
    /// while it lived (each copied once), and the child's page tables.
    pub extra_bytes: u64,
    /// What went wrong collecting the child, if anything did.
    pub warning: Option<String>,
}

impl LiveProcess {
    /// Makes the stopped target fork, from one of its threads, at the `syscall` instruction at
    /// `site`. The target stays stopped; the child is stopped and traced. A `clone` the kernel
    /// refuses (ENOMEM, EAGAIN under `RLIMIT_NPROC` or `pids.max`, EPERM under seccomp) is
    /// [`DumpError::ForkFailed`], and nothing changed.
    pub fn fork_frozen(&mut self, site: u64, guardian: Option<Guardian>) -> Result<FrozenCopy> {
        test_delay(ForkStep::BeforeFork);
        let pid = self.pid();
        let tid = self.thread_for_call().ok_or(DumpError::TargetExited { pid })?;
        // The thread ends the call in an interrupt stop, from which ptrace cannot hand a signal
        // back: one it was stopped with is sent to it again.
        self.send_held_signal_again(tid);
        let outcome =
            remote_syscall(pid, tid, site, SYS_CLONE, [CLONE_FLAGS, POISONED_STACK, 0, 0, 0, 0], ptrace::Options::PTRACE_O_TRACECLONE)
                .map_err(|e| injection_failed(pid, tid, e))?;
        let Some(child) = outcome.new_task else {
            if let Some(g) = guardian {
                g.dismiss();
            }
            return Err(DumpError::ForkFailed { pid, errno: Errno::from_raw((-outcome.result) as i32) });
        };
        if let Some(g) = &guardian {
            g.watch(child);
        }
        // The child's first stop (it never runs), the option that kills it with us, and its memory.
        let ready = match wait_for_stop(child) {
            Ok(Stop::Stopped(_)) => ptrace::setoptions(Pid::from_raw(child as i32), ptrace::Options::PTRACE_O_EXITKILL)
                .map_err(|errno| DumpError::Ptrace { op: "SETOPTIONS", tid: child, errno }),
            Ok(Stop::Gone) => Err(DumpError::ForkFailed { pid, errno: Errno::ECHILD }),
            Err(e) => Err(e),
        }
        .and_then(|()| {
            let path = PathBuf::from(format!("/proc/{child}/mem"));
            std::fs::File::open(&path).map_err(|source| DumpError::Io { path, source })
        });
        let memory = match ready {
            Ok(memory) => memory,
            Err(e) => {
                // The target is still stopped, and `tid` still ours: it collects the child now.
                let _ = kill(Pid::from_raw(child as i32), Signal::SIGKILL);
                wait_exit(child);
                let _ = collect_with(pid, tid, child, site);
                if let Some(g) = guardian {
                    g.dismiss();
                }
                return Err(e);
            }
        };
        test_delay(ForkStep::Forked);
        Ok(FrozenCopy {
            parent: pid,
            child,
            site,
            threads: self.threads().to_vec(),
            born: Instant::now(),
            guardian,
            memory,
            finished: false,
        })
    }
}

/// Waits, as its tracer, for the exit of `child`, which was killed: it is then its parent's
/// zombie.
fn wait_exit(child: u32) {
    let child = Pid::from_raw(child as i32);
    loop {
        match waitpid(child, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(Errno::ECHILD) => break,
            Err(Errno::EINTR) | Ok(_) => continue,
            Err(_) => break,
        }
    }
}

fn injection_failed(pid: u32, tid: u32, error: InjectError) -> DumpError {
    match error {
        InjectError::ThreadGone => DumpError::TargetExited { pid },
        InjectError::Ptrace { op, errno } => DumpError::Ptrace { op, tid, errno },
        InjectError::Strayed { rip } => {
            DumpError::Inconsistent(format!("thread {tid} of process {pid} stopped at {rip:#x} while it forked"))
        }
    }
}

impl FrozenCopy {
    pub fn child(&self) -> u32 {
        self.child
    }

    /// Through `/proc/CHILD/mem`, never `process_vm_readv` (see [`Channel::ProcMem`]).
    fn channel(&self) -> Channel {
        Channel::ProcMem { pid: self.child, fd: self.memory.as_raw_fd() }
    }

    /// Kills the child, makes the target collect it, and says what it cost.
    pub fn finish(mut self) -> ForkCost {
        let cost = self.end();
        self.finished = true;
        cost
    }

    fn end(&mut self) -> ForkCost {
        let lived = self.born.elapsed();
        let extra_bytes = private_bytes(self.child).unwrap_or(0);
        let _ = kill(Pid::from_raw(self.child as i32), Signal::SIGKILL);
        // As its tracer, its exit comes to us first; then it is the target's zombie.
        wait_exit(self.child);
        test_delay(ForkStep::Killed);
        // Its zombie is the target's as soon as we collected its exit; a few tries in case not.
        let mut collected = collect_dead_child(self.parent, self.child, self.site);
        for _ in 0..100 {
            match collected {
                Err(CollectError { result: Some(0), .. }) => std::thread::sleep(Duration::from_millis(1)),
                _ => break,
            }
            collected = collect_dead_child(self.parent, self.child, self.site);
        }
        // A target that exited meanwhile left its children to init, which collects them.
        let warning = collected
            .err()
            .filter(|_| !has_exited(self.parent))
            .map(|e| format!("the fork's child {} remains a zombie of process {} (which ignores it): {e}", self.child, self.parent));
        if let Some(g) = self.guardian.take() {
            g.dismiss();
        }
        ForkCost { lived, extra_bytes, warning }
    }
}

impl Drop for FrozenCopy {
    fn drop(&mut self) {
        if !self.finished {
            self.finished = true;
            let _ = self.end();
        }
    }
}

/// The child's private pages (`Private_Dirty` of `smaps_rollup`) and page tables (`VmPTE`).
fn private_bytes(child: u32) -> Option<u64> {
    let kib = |text: &str, field: &str| -> Option<u64> {
        text.lines().find_map(|l| l.strip_prefix(field))?.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
    };
    let rollup = std::fs::read_to_string(format!("/proc/{child}/smaps_rollup")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{child}/status")).ok()?;
    Some((kib(&rollup, "Private_Dirty:")? + kib(&status, "VmPTE:").unwrap_or(0)) * 1024)
}

impl MemorySource for FrozenCopy {
    fn pid(&self) -> Option<u32> {
        Some(self.child)
    }

    fn executable_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/exe", self.child))
    }

    fn read(&self, address: u64, buf: &mut [u8]) -> Result<()> {
        read_one(self.channel(), address, buf)
    }

    fn read_many(&self, requests: &mut [ReadRequest<'_>]) -> Result<()> {
        read_many(self.channel(), requests)
    }

    fn read_many_partial(&self, requests: &mut [ReadRequest<'_>]) -> Vec<bool> {
        read_many_partial(self.channel(), requests)
    }

    fn threads(&self) -> &[ThreadState] {
        &self.threads
    }

    fn mappings(&self) -> Result<Vec<Mapping>> {
        super::live::mappings(self.child)
    }
}
