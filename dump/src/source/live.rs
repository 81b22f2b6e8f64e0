//! A live process, stopped with ptrace and read with `process_vm_readv`.
//!
//! Every task is seized (`PTRACE_SEIZE`, which by itself neither stops nor signals the
//! target), then stopped with `PTRACE_INTERRUPT`. Nothing is ever written to the target:
//! no memory, no registers, no debug registers. So whatever happens to the dumper, even a
//! SIGKILL, the kernel detaches and resumes the tasks and the target goes on unchanged. (A
//! copy-on-write capture is the one exception: one thread's registers are set for the length of
//! one system call and restored, see [`super::fork`].)
//! A signal that arrives for the target while we hold it is remembered and handed back when
//! the task is resumed, so the target sees it as if we had not been there.
//!
//! While the world is stopped, a batch of ranges is copied by one thread per CPU, each with its
//! own batched `process_vm_readv` over its share of the bytes ([`read_parallel`]): the pause is
//! the copy, and one core cannot saturate what the kernel can copy.

use super::maps::{parse_maps, Mapping};
use super::memory::{MemorySource, ReadRequest, Registers, ThreadState};
use crate::error::{DumpError, Result};
use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::{BTreeSet, HashMap};
use std::io::IoSliceMut;
use std::marker::PhantomData;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// `process_vm_readv` takes at most this many iovecs per call (IOV_MAX).
const MAX_IOVECS: usize = 1024;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM interrupt a dump cleanly: the dump stops at its next step with
/// [`DumpError::Interrupted`], after detaching from the target. Without SA_RESTART, so that a
/// dumper blocked in `waitpid` wakes up at once. (Were the dumper killed instead, the kernel
/// would still resume the target: nothing in it is changed.)
pub fn install_interrupt_guard() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
    let action = SigAction::new(SigHandler::Handler(note_interrupt), SaFlags::empty(), SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        let _ = unsafe { sigaction(sig, &action) };
    }
}

/// Whether SIGINT or SIGTERM arrived since [`install_interrupt_guard`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

#[derive(Debug)]
struct Task {
    /// Its id in its own PID namespace (read once, when it is seized).
    own_tid: u32,
    stopped: bool,
    /// A signal that arrived while we held the task, to hand back on resume.
    pending_signal: Option<Signal>,
}

/// A process whose tasks are seized. Dropping it detaches from (and so resumes) every task.
/// Not `Send`: ptrace requests must come from the thread that seized.
pub struct LiveProcess {
    pid: u32,
    tasks: HashMap<u32, Task>,
    threads: Vec<ThreadState>,
    _not_send: PhantomData<*const ()>,
}

impl LiveProcess {
    /// Seizes every task of `pid` and stops them all.
    pub fn attach(pid: u32) -> Result<LiveProcess> {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(DumpError::NoSuchProcess { pid });
        }
        let mut process = LiveProcess { pid, tasks: HashMap::new(), threads: Vec::new(), _not_send: PhantomData };
        process.stop()?;
        Ok(process)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Stops every task (seizing tasks created since the last stop), then reads their registers.
    pub fn stop(&mut self) -> Result<()> {
        check_interrupted()?;
        // Seize and interrupt until no new task appears: a running task may create threads
        // until it is itself stopped.
        loop {
            let listed = self.list_tasks()?;
            let new: Vec<u32> = listed.iter().copied().filter(|t| !self.tasks.contains_key(t)).collect();
            for &tid in &new {
                match ptrace::seize(Pid::from_raw(tid as i32), ptrace::Options::empty()) {
                    Ok(()) => {
                        self.tasks.insert(tid, Task { own_tid: own_tid(tid), stopped: false, pending_signal: None });
                    }
                    Err(Errno::ESRCH) => continue, // exited meanwhile
                    Err(errno @ (Errno::EPERM | Errno::EACCES)) => return Err(denied(self.pid, "attach to", errno)),
                    Err(errno) => return Err(DumpError::Ptrace { op: "SEIZE", tid, errno }),
                }
            }
            let running: Vec<u32> = self.tasks.iter().filter(|(_, t)| !t.stopped).map(|(&tid, _)| tid).collect();
            for &tid in &running {
                match ptrace::interrupt(Pid::from_raw(tid as i32)) {
                    Ok(()) | Err(Errno::ESRCH) => {}
                    Err(errno) => return Err(DumpError::Ptrace { op: "INTERRUPT", tid, errno }),
                }
            }
            for tid in running {
                self.wait_stopped(tid)?;
            }
            if self.tasks.is_empty() {
                return Err(DumpError::TargetExited { pid: self.pid });
            }
            if new.is_empty() {
                break;
            }
        }
        self.read_registers()
    }

    /// Lets every task run again (the target keeps being seized).
    pub fn resume(&mut self) -> Result<()> {
        let mut failure = None;
        for (&tid, task) in self.tasks.iter_mut() {
            if !task.stopped {
                continue;
            }
            match ptrace::cont(Pid::from_raw(tid as i32), task.pending_signal.take()) {
                Ok(()) | Err(Errno::ESRCH) => task.stopped = false,
                Err(errno) => failure = Some(DumpError::Ptrace { op: "CONT", tid, errno }),
            }
        }
        self.threads.clear();
        failure.map_or(Ok(()), Err)
    }

    /// Lets only the tasks `tids` run again; the others stay stopped. Tasks not seized, or
    /// gone, are skipped.
    pub fn resume_only(&mut self, tids: &[u32]) -> Result<()> {
        for &tid in tids {
            let Some(task) = self.tasks.get_mut(&tid).filter(|t| t.stopped) else { continue };
            match ptrace::cont(Pid::from_raw(tid as i32), task.pending_signal.take()) {
                Ok(()) | Err(Errno::ESRCH) => task.stopped = false,
                Err(errno) => return Err(DumpError::Ptrace { op: "CONT", tid, errno }),
            }
        }
        self.threads.clear();
        Ok(())
    }

    /// Detaches from every task, which resumes it. Also done on drop.
    pub fn detach(&mut self) {
        for (tid, task) in self.tasks.drain() {
            let pid = Pid::from_raw(tid as i32);
            // PTRACE_DETACH needs a stopped tracee; a running one is stopped first.
            if !task.stopped && ptrace::interrupt(pid).is_ok() {
                let _ = wait_for_stop(tid);
            }
            let _ = ptrace::detach(pid, task.pending_signal);
        }
        self.threads.clear();
    }

    /// A stopped thread to make a system call for us ([`super::inject`]): the main thread,
    /// unless it holds a signal to hand back and another does not.
    pub(super) fn thread_for_call(&self) -> Option<u32> {
        let stopped = || self.tasks.iter().filter(|(_, t)| t.stopped);
        let free = |tid: &u32| self.tasks.get(tid).is_some_and(|t| t.stopped && t.pending_signal.is_none());
        Some(self.pid).filter(free).or_else(|| stopped().map(|(&tid, _)| tid).find(free)).or_else(|| stopped().map(|(&tid, _)| tid).min())
    }

    /// Sends the signal `tid` was stopped with (which ptrace would hand back on resume) to it
    /// again, for a thread about to end in a stop from which ptrace cannot hand it back.
    pub(super) fn send_held_signal_again(&mut self, tid: u32) {
        if let Some(signal) = self.tasks.get_mut(&tid).and_then(|t| t.pending_signal.take()) {
            // SAFETY: plain syscall on our own tracee's thread.
            unsafe { libc::syscall(libc::SYS_tgkill, self.pid as libc::c_int, tid as libc::c_int, signal as libc::c_int) };
        }
    }

    fn list_tasks(&self) -> Result<BTreeSet<u32>> {
        let dir = PathBuf::from(format!("/proc/{}/task", self.pid));
        let entries = std::fs::read_dir(&dir).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                DumpError::TargetExited { pid: self.pid }
            } else {
                DumpError::Io { path: dir.clone(), source }
            }
        })?;
        Ok(entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
    }

    /// Waits until `tid` reports a stop; forgets it if it exited.
    fn wait_stopped(&mut self, tid: u32) -> Result<()> {
        match wait_for_stop(tid)? {
            Stop::Stopped(signal) => {
                let task = self.tasks.get_mut(&tid).expect("waited for a known task");
                task.stopped = true;
                if signal.is_some() {
                    task.pending_signal = signal;
                }
            }
            Stop::Gone => {
                self.tasks.remove(&tid);
                if tid == self.pid {
                    return Err(DumpError::TargetExited { pid: self.pid });
                }
            }
        }
        Ok(())
    }

    fn read_registers(&mut self) -> Result<()> {
        let mut threads = Vec::with_capacity(self.tasks.len());
        let mut gone = Vec::new();
        for (&tid, task) in &self.tasks {
            match ptrace::getregs(Pid::from_raw(tid as i32)) {
                Ok(r) => threads.push(ThreadState {
                    tid,
                    own_tid: task.own_tid,
                    regs: Registers {
                        rax: r.rax,
                        rbx: r.rbx,
                        rcx: r.rcx,
                        rdx: r.rdx,
                        rsi: r.rsi,
                        rdi: r.rdi,
                        rbp: r.rbp,
                        rsp: r.rsp,
                        r8: r.r8,
                        r9: r.r9,
                        r10: r.r10,
                        r11: r.r11,
                        r12: r.r12,
                        r13: r.r13,
                        r14: r.r14,
                        r15: r.r15,
                        rip: r.rip,
                        fs_base: r.fs_base,
                        orig_rax: r.orig_rax,
                    },
                }),
                Err(Errno::ESRCH) => gone.push(tid),
                Err(errno) => return Err(DumpError::Ptrace { op: "GETREGS", tid, errno }),
            }
        }
        for tid in gone {
            self.tasks.remove(&tid);
        }
        if threads.is_empty() {
            return Err(DumpError::TargetExited { pid: self.pid });
        }
        threads.sort_by_key(|t| t.tid);
        self.threads = threads;
        Ok(())
    }
}

impl Drop for LiveProcess {
    fn drop(&mut self) {
        self.detach();
    }
}

pub(super) fn check_interrupted() -> Result<()> {
    if interrupted() {
        Err(DumpError::Interrupted)
    } else {
        Ok(())
    }
}

pub(super) enum Stop {
    /// Stopped; with the signal whose delivery the stop intercepted, if it was one.
    Stopped(Option<Signal>),
    Gone,
}

pub(super) fn wait_for_stop(tid: u32) -> Result<Stop> {
    let pid = Pid::from_raw(tid as i32);
    loop {
        // A program heapsnap launched (`heapsnap run`) is our child as well as our tracee: when
        // it exits now, its exit is left for `run` to collect, with its status.
        match peek_exit(tid) {
            Ok(true) if is_our_child(tid) => return Ok(Stop::Gone),
            Ok(_) => {}
            Err(Errno::EINTR) => {
                check_interrupted()?;
                continue;
            }
            Err(Errno::ECHILD) => return Ok(Stop::Gone),
            Err(errno) => return Err(DumpError::Ptrace { op: "WAIT", tid, errno }),
        }
        match waitpid(pid, Some(WaitPidFlag::__WALL)) {
            // PTRACE_EVENT_STOP: our interrupt, or a group-stop; nothing to hand back.
            Ok(WaitStatus::PtraceEvent(_, _, _)) => return Ok(Stop::Stopped(None)),
            // A signal-delivery-stop: the signal is handed back on resume.
            Ok(WaitStatus::Stopped(_, signal)) => return Ok(Stop::Stopped(Some(signal))),
            Ok(WaitStatus::PtraceSyscall(_)) => return Ok(Stop::Stopped(None)),
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => return Ok(Stop::Gone),
            Ok(WaitStatus::Continued(_) | WaitStatus::StillAlive) => continue,
            Err(Errno::EINTR) => check_interrupted()?,
            Err(Errno::ECHILD) => return Ok(Stop::Gone),
            Err(errno) => return Err(DumpError::Ptrace { op: "WAIT", tid, errno }),
        }
    }
}

impl MemorySource for LiveProcess {
    fn pid(&self) -> Option<u32> {
        Some(self.pid)
    }

    fn executable_path(&self) -> PathBuf {
        executable_path(self.pid)
    }

    fn read(&self, address: u64, buf: &mut [u8]) -> Result<()> {
        read_one(Channel::VmReadv(self.pid), address, buf)
    }

    fn read_many(&self, requests: &mut [ReadRequest<'_>]) -> Result<()> {
        read_many(Channel::VmReadv(self.pid), requests)
    }

    fn read_many_partial(&self, requests: &mut [ReadRequest<'_>]) -> Vec<bool> {
        read_many_partial(Channel::VmReadv(self.pid), requests)
    }

    fn threads(&self) -> &[ThreadState] {
        &self.threads
    }

    fn mappings(&self) -> Result<Vec<Mapping>> {
        mappings(self.pid)
    }
}

// What a stopped `LiveProcess` and a running `ProcessMemory` share: they read the same way.

fn executable_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/exe"))
}

pub(super) fn mappings(pid: u32) -> Result<Vec<Mapping>> {
    let path = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = std::fs::read_to_string(&path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            DumpError::TargetExited { pid }
        } else {
            DumpError::Io { path, source }
        }
    })?;
    Ok(parse_maps(&text))
}

/// Why ptrace was refused: another tracer holds the process (`TracerPid` in its status), or
/// the permission itself.
/// Waits for `tid`'s next stop or exit without collecting it; true for an exit.
fn peek_exit(tid: u32) -> std::result::Result<bool, Errno> {
    // SAFETY: waitid writes a siginfo_t, which we own.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WSTOPPED | libc::WNOWAIT | libc::__WALL;
    // SAFETY: waitid writes into `info`, owned here; WNOWAIT leaves the event to collect.
    if unsafe { libc::waitid(libc::P_PID, tid as libc::id_t, &mut info, flags) } != 0 {
        return Err(Errno::last());
    }
    Ok(matches!(info.si_code, libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED))
}

/// Thread `tid`'s id in its own PID namespace: the last of `NSpid` in its status (`tid` itself
/// where the kernel does not say).
fn own_tid(tid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
    let ns_tids = status.lines().find_map(|l| l.strip_prefix("NSpid:"));
    ns_tids.and_then(|v| v.split_whitespace().last()?.parse().ok()).unwrap_or(tid)
}

/// Whether `tid` is the main thread of a process this one started (its parent is us).
fn is_our_child(tid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else { return false };
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<u32>().ok());
    field("Tgid:") == Some(tid) && field("PPid:") == Some(std::process::id())
}

/// Whether `pid` is exiting or has exited (a zombie cannot be attached: EPERM).
pub(super) fn has_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
            matches!(state, Some("Z" | "X" | "x"))
        }
        Err(_) => true,
    }
}

/// `op` is what was refused: "attach to" (ptrace) or "read the memory of" (`process_vm_readv`).
fn denied(pid: u32, op: &'static str, errno: Errno) -> DumpError {
    if has_exited(pid) {
        return DumpError::TargetExited { pid };
    }
    let tracer = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| status.lines().find_map(|l| l.strip_prefix("TracerPid:")).and_then(|v| v.trim().parse::<u32>().ok()));
    match tracer {
        Some(tracer) if tracer != 0 && tracer != std::process::id() => DumpError::AlreadyTraced { pid, tracer },
        _ => DumpError::AttachDenied { pid, op, errno, why: super::permission::what_to_grant(pid) },
    }
}

fn read_error(pid: u32, address: u64, len: usize, errno: Errno) -> DumpError {
    if errno == Errno::ESRCH || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        DumpError::TargetExited { pid }
    } else if errno == Errno::EPERM {
        denied(pid, "read the memory of", errno)
    } else {
        DumpError::Read { address, len, reason: errno.desc().to_string() }
    }
}

/// How a process's memory is read.
#[derive(Clone, Copy, Debug)]
pub(super) enum Channel {
    /// `process_vm_readv`, in batches: the fastest.
    VmReadv(u32),
    /// `pread` on the process's `/proc/PID/mem`, open as `fd`: for a fork's frozen child.
    /// `process_vm_readv` pins the pages it reads, and the kernel gives a process its own copy
    /// of a copy-on-write page before it lets one be pinned: reading the child that way would
    /// copy the whole heap into it. `/proc/PID/mem` takes a plain reference instead.
    ProcMem { pid: u32, fd: RawFd },
}

impl Channel {
    fn pid(self) -> u32 {
        match self {
            Channel::VmReadv(pid) | Channel::ProcMem { pid, .. } => pid,
        }
    }
}

pub(super) fn read_one(channel: Channel, address: u64, buf: &mut [u8]) -> Result<()> {
    read_remote_by(channel, address, buf).map_err(|errno| read_error(channel.pid(), address, buf.len(), errno))
}

/// All requests or an error naming the first that could not be read.
pub(super) fn read_many(channel: Channel, requests: &mut [ReadRequest<'_>]) -> Result<()> {
    // A failed request is read again on its own: that names it precisely, and fills it if
    // only its batch failed.
    for index in read_parallel(channel, requests) {
        let r = &mut requests[index];
        read_one(channel, r.address, r.buf)?;
    }
    check_interrupted()
}

/// Which requests were read (some ranges may be unmapped).
pub(super) fn read_many_partial(channel: Channel, requests: &mut [ReadRequest<'_>]) -> Vec<bool> {
    let failed = read_parallel(channel, requests);
    let mut ok = vec![true; requests.len()];
    for index in failed {
        let r = &mut requests[index];
        ok[index] = read_remote_by(channel, r.address, r.buf).is_ok();
    }
    ok
}

/// Below this many bytes a thread's share, fewer threads copy: starting one costs more than
/// it saves.
const MIN_BYTES_PER_THREAD: usize = 4 << 20;

/// How many threads copy a large batch: one per CPU we may run on.
pub(crate) fn copy_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Part (or all) of request `index`.
struct Piece<'a> {
    index: usize,
    address: u64,
    buf: &'a mut [u8],
}

/// Reads `requests` with batched `process_vm_readv`, split across [`copy_threads`] threads by
/// bytes (a request that straddles two shares is split), so that a stopped target's memory is
/// copied by every core. Returns the indices (sorted, unique) of the requests not wholly read.
fn read_parallel(channel: Channel, requests: &mut [ReadRequest<'_>]) -> Vec<usize> {
    let total: usize = requests.iter().map(|r| r.buf.len()).sum();
    let threads = copy_threads().min(total / MIN_BYTES_PER_THREAD).max(1);
    let mut shares = split_balanced(requests, threads, total).into_iter();
    let mut first = shares.next().unwrap_or_default();
    let mut failed = Vec::new();
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for mut share in shares {
            let spawned = std::thread::Builder::new().name("heapsnap-copy".into()).spawn_scoped(scope, move || {
                let mut failed = Vec::new();
                read_pieces(channel, &mut share, &mut failed);
                failed
            });
            match spawned {
                Ok(handle) => handles.push(handle),
                // No thread to be had: the spawn took back nothing, so report that share as
                // unread; its requests are read one by one.
                Err(_) => failed.push(usize::MAX),
            }
        }
        read_pieces(channel, &mut first, &mut failed);
        for handle in handles {
            match handle.join() {
                Ok(more) => failed.extend(more),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    if failed.contains(&usize::MAX) {
        return (0..requests.len()).collect();
    }
    failed.sort_unstable();
    failed.dedup();
    failed
}

/// `parts` runs of pieces of about `total / parts` bytes each, in request order.
fn split_balanced<'a>(requests: &'a mut [ReadRequest<'_>], parts: usize, total: usize) -> Vec<Vec<Piece<'a>>> {
    let share = total.div_ceil(parts).max(1);
    let mut out: Vec<Vec<Piece<'a>>> = (0..parts).map(|_| Vec::new()).collect();
    let (mut part, mut room) = (0, share);
    for (index, r) in requests.iter_mut().enumerate() {
        let mut address = r.address;
        let mut rest: &'a mut [u8] = &mut *r.buf;
        loop {
            if room == 0 && part + 1 < parts {
                part += 1;
                room = share;
            }
            let take = if part + 1 == parts { rest.len() } else { rest.len().min(room) };
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(take);
            out[part].push(Piece { index, address, buf: head });
            room = room.saturating_sub(take);
            address += take as u64;
            rest = tail;
            if rest.is_empty() {
                break;
            }
        }
    }
    out
}

/// Reads `pieces` in batches of [`MAX_IOVECS`]; adds to `failed` the request of each piece
/// not wholly read, and goes on with the next.
fn read_pieces(channel: Channel, pieces: &mut [Piece<'_>], failed: &mut Vec<usize>) {
    let pid = match channel {
        Channel::VmReadv(pid) => pid,
        Channel::ProcMem { fd, .. } => {
            for p in pieces.iter_mut() {
                if pread_all(fd, p.address, p.buf).is_err() {
                    failed.push(p.index);
                }
            }
            return;
        }
    };
    let mut at = 0;
    while at < pieces.len() {
        let end = (at + MAX_IOVECS).min(pieces.len());
        let batch = &mut pieces[at..end];
        // Adjacent ranges (the runtime maps pools in batches) make one remote iovec: the kernel
        // pays per remote iovec. The local side keeps one iovec per buffer.
        let mut remote: Vec<RemoteIoVec> = Vec::with_capacity(batch.len());
        for p in batch.iter().filter(|p| !p.buf.is_empty()) {
            match remote.last_mut() {
                Some(last) if last.base.checked_add(last.len) == Some(p.address as usize) => last.len += p.buf.len(),
                _ => remote.push(RemoteIoVec { base: p.address as usize, len: p.buf.len() }),
            }
        }
        let got = {
            let mut local: Vec<IoSliceMut<'_>> = batch.iter_mut().map(|p| IoSliceMut::new(p.buf)).collect();
            process_vm_readv(Pid::from_raw(pid as i32), &mut local, &remote)
        };
        match got {
            // The kernel stops at the first range it cannot read: the pieces before it are whole.
            Ok(mut n) => {
                let whole = batch.iter().take_while(|p| {
                    let fits = n >= p.buf.len();
                    n = n.saturating_sub(p.buf.len());
                    fits
                });
                let whole = whole.count();
                if whole < batch.len() {
                    failed.push(batch[whole].index);
                    at += 1;
                }
                at += whole;
            }
            // The process is gone or out of reach: nothing more can be read.
            Err(Errno::ESRCH | Errno::EPERM) => {
                failed.extend(pieces[at..].iter().map(|p| p.index));
                return;
            }
            Err(_) => {
                failed.push(batch[0].index);
                at += 1;
            }
        }
    }
}

fn read_remote_by(channel: Channel, address: u64, buf: &mut [u8]) -> std::result::Result<(), Errno> {
    match channel {
        Channel::VmReadv(pid) => read_remote(pid, address, buf),
        Channel::ProcMem { fd, .. } => pread_all(fd, address, buf),
    }
}

/// All of `buf` from `/proc/PID/mem` (open as `fd`) at `address`.
fn pread_all(fd: RawFd, address: u64, buf: &mut [u8]) -> std::result::Result<(), Errno> {
    let mut done = 0;
    while done < buf.len() {
        let offset = i64::try_from(address + done as u64).map_err(|_| Errno::EFAULT)?;
        let rest = &mut buf[done..];
        // SAFETY: reads into the live buffer `rest`, at most its length.
        let n = unsafe { libc::pread64(fd, rest.as_mut_ptr().cast(), rest.len(), offset) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(Errno::EFAULT),
            _ => match Errno::last() {
                Errno::EINTR => continue,
                // An unmapped range reads as EIO.
                Errno::EIO => return Err(Errno::EFAULT),
                errno => return Err(errno),
            },
        }
    }
    Ok(())
}

/// Reads target memory of a process that need not be stopped (e.g. static data before a dump).
pub(crate) fn read_remote(pid: u32, address: u64, buf: &mut [u8]) -> std::result::Result<(), Errno> {
    let mut done = 0;
    while done < buf.len() {
        let remote = [RemoteIoVec { base: address as usize + done, len: buf.len() - done }];
        let n = process_vm_readv(Pid::from_raw(pid as i32), &mut [IoSliceMut::new(&mut buf[done..])], &remote)?;
        if n == 0 {
            return Err(Errno::EFAULT);
        }
        done += n;
    }
    Ok(())
}

/// A process read without stopping it: for its static data (symbols' contents, frame tables,
/// the compaction counter), never for the heap.
pub struct ProcessMemory {
    pid: u32,
}

impl ProcessMemory {
    /// The process `pid`, whose memory we may read: a refusal (in a container, a missing
    /// CAP_SYS_PTRACE, Yama's ptrace_scope or a seccomp profile) is said here, with what to
    /// grant, not by whatever read the process first.
    pub fn new(pid: u32) -> Result<ProcessMemory> {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(DumpError::NoSuchProcess { pid });
        }
        let readable = match mappings(pid) {
            Ok(maps) => maps.into_iter().find(|m| m.readable),
            Err(DumpError::Io { source, .. }) if source.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(denied(pid, "read the mappings of", Errno::from_raw(source.raw_os_error().unwrap_or(libc::EACCES))))
            }
            Err(e) => return Err(e),
        };
        if let Some(m) = readable {
            if let Err(errno @ (Errno::EPERM | Errno::EACCES)) = read_remote(pid, m.start, &mut [0u8; 1]) {
                return Err(denied(pid, "read the memory of", errno));
            }
        }
        Ok(ProcessMemory { pid })
    }
}

impl MemorySource for ProcessMemory {
    fn pid(&self) -> Option<u32> {
        Some(self.pid)
    }

    fn executable_path(&self) -> PathBuf {
        executable_path(self.pid)
    }

    fn read(&self, address: u64, buf: &mut [u8]) -> Result<()> {
        read_one(Channel::VmReadv(self.pid), address, buf)
    }

    fn read_many(&self, requests: &mut [ReadRequest<'_>]) -> Result<()> {
        read_many(Channel::VmReadv(self.pid), requests)
    }

    fn read_many_partial(&self, requests: &mut [ReadRequest<'_>]) -> Vec<bool> {
        read_many_partial(Channel::VmReadv(self.pid), requests)
    }

    fn threads(&self) -> &[ThreadState] {
        &[]
    }

    fn mappings(&self) -> Result<Vec<Mapping>> {
        mappings(self.pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reading our own memory: `process_vm_readv` on oneself needs no ptrace, nor does
    /// `/proc/self/mem`. Both ways, the file kept open while the channel is used.
    fn own_channels() -> Vec<(Channel, Option<std::fs::File>)> {
        let mem = std::fs::File::open("/proc/self/mem").unwrap();
        let pid = std::process::id();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&mem);
        vec![(Channel::VmReadv(pid), None), (Channel::ProcMem { pid, fd }, Some(mem))]
    }

    #[test]
    fn shares_cover_every_byte_once_in_order_and_are_balanced() {
        let mut bufs: Vec<Vec<u8>> = [10usize, 1, 0, 35, 7, 0, 19].iter().map(|&n| vec![0; n]).collect();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let addresses: Vec<u64> = (0..bufs.len() as u64).map(|i| 0x1000 * (i + 1)).collect();
        let mut requests: Vec<ReadRequest<'_>> =
            bufs.iter_mut().zip(&addresses).map(|(b, &address)| ReadRequest { address, buf: b }).collect();
        let shares = split_balanced(&mut requests, 3, total);
        assert_eq!(shares.len(), 3);
        let sizes: Vec<usize> = shares.iter().map(|s| s.iter().map(|p| p.buf.len()).sum()).collect();
        assert_eq!(sizes, vec![24, 24, 24]);
        // Concatenated, the pieces are the requests again, in order, each piece where its
        // request's bytes are.
        let mut covered = vec![0usize; addresses.len()];
        let mut last = 0;
        for p in shares.iter().flatten() {
            assert!(last <= p.index);
            last = p.index;
            assert_eq!(p.address, addresses[p.index] + covered[p.index] as u64);
            covered[p.index] += p.buf.len();
        }
        assert_eq!(covered, vec![10, 1, 0, 35, 7, 0, 19]);
    }

    #[test]
    fn a_large_batch_is_read_whole_by_several_threads() {
        for (channel, _mem) in own_channels() {
            // Bigger than two threads' minimum shares, with one request straddling shares.
            let source: Vec<u8> = (0..3 * MIN_BYTES_PER_THREAD + 12_345).map(|i| (i * 7 % 251) as u8).collect();
            let cuts = [0, 100, 4096, MIN_BYTES_PER_THREAD + 3, 3 * MIN_BYTES_PER_THREAD - 1, source.len()];
            let mut bufs: Vec<Vec<u8>> = cuts.windows(2).map(|w| vec![0; w[1] - w[0]]).collect();
            let mut requests: Vec<ReadRequest<'_>> = bufs
                .iter_mut()
                .zip(cuts.iter())
                .map(|(b, &at)| ReadRequest { address: source.as_ptr() as u64 + at as u64, buf: b })
                .collect();
            read_many(channel, &mut requests).unwrap();
            assert_eq!(bufs.concat(), source);
        }
    }

    #[test]
    fn an_unreadable_range_is_named_and_the_others_are_read() {
        for (channel, _mem) in own_channels() {
            let source: Vec<u8> = (0..5 * MIN_BYTES_PER_THREAD).map(|i| (i % 253) as u8).collect();
            let base = source.as_ptr() as u64;
            let len = MIN_BYTES_PER_THREAD;
            // Address 8 is never mapped (mmap_min_addr).
            let addresses = [base, 8, base + len as u64, base + 2 * len as u64];
            let mut bufs: Vec<Vec<u8>> = addresses.iter().map(|_| vec![0; len]).collect();
            let mut requests: Vec<ReadRequest<'_>> =
                bufs.iter_mut().zip(addresses).map(|(b, address)| ReadRequest { address, buf: b }).collect();
            assert_eq!(read_many_partial(channel, &mut requests), vec![true, false, true, true]);
            drop(requests);
            assert_eq!(bufs[0][..], source[..len]);
            assert_eq!(bufs[2][..], source[len..2 * len]);
            assert_eq!(bufs[3][..], source[2 * len..3 * len]);

            let mut requests: Vec<ReadRequest<'_>> =
                bufs.iter_mut().zip(addresses).map(|(b, address)| ReadRequest { address, buf: b }).collect();
            match read_many(channel, &mut requests) {
                Err(DumpError::Read { address: 8, len: l, .. }) => assert_eq!(l, len),
                other => panic!("expected a read error at 0x8, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_hole_between_adjacent_ranges_is_found() {
        for (channel, _mem) in own_channels() {
            // Three adjacent pages, the middle one unmapped: the three requests make one remote
            // iovec, which fails in its middle. (Not PROT_NONE: /proc/PID/mem reads through it.)
            let page = 4096;
            // SAFETY: a fresh anonymous mapping that only this test uses (and unmaps below).
            let base = unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    3 * page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(p, libc::MAP_FAILED);
                std::ptr::write_bytes(p as *mut u8, 0xab, 3 * page);
                assert_eq!(libc::munmap((p as *mut u8).add(page).cast(), page), 0);
                p as u64
            };
            let mut bufs = vec![vec![0u8; page]; 3];
            let mut requests: Vec<ReadRequest<'_>> =
                bufs.iter_mut().enumerate().map(|(i, b)| ReadRequest { address: base + (i * page) as u64, buf: b }).collect();
            assert_eq!(read_many_partial(channel, &mut requests), vec![true, false, true]);
            assert!(matches!(read_many(channel, &mut requests), Err(DumpError::Read { address, .. }) if address == base + page as u64));
            drop(requests);
            assert!(bufs[0].iter().chain(&bufs[2]).all(|&b| b == 0xab));
            // SAFETY: the mapping made above, no longer borrowed.
            unsafe { libc::munmap(base as *mut libc::c_void, 3 * page) };
        }
    }

    #[test]
    fn a_process_that_is_gone_is_said_to_have_exited() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let mut buf = [0u8; 16];
        let mut requests = [ReadRequest { address: 0x1000, buf: &mut buf }];
        assert!(matches!(read_many(Channel::VmReadv(pid), &mut requests), Err(DumpError::TargetExited { .. })));
        assert_eq!(read_many_partial(Channel::VmReadv(pid), &mut requests), vec![false]);
    }
}
