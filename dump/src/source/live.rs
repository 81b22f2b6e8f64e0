//! A live process, stopped with ptrace and read with `process_vm_readv`.
//!
//! Every task is seized (`PTRACE_SEIZE`, which by itself neither stops nor signals the
//! target), then stopped with `PTRACE_INTERRUPT`. Nothing is ever written to the target:
//! no memory, no registers, no debug registers. So whatever happens to the dumper, even a
//! SIGKILL, the kernel detaches and resumes the tasks and the target goes on unchanged.
//! A signal that arrives for the target while we hold it is remembered and handed back when
//! the task is resumed, so the target sees it as if we had not been there.

use super::{maps::parse_maps, Mapping, MemorySource, ReadRequest, Registers, ThreadState};
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
                        self.tasks.insert(tid, Task { stopped: false, pending_signal: None });
                    }
                    Err(Errno::ESRCH) => continue, // exited meanwhile
                    Err(errno @ (Errno::EPERM | Errno::EACCES)) => {
                        return Err(DumpError::AttachDenied { pid: self.pid, errno })
                    }
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
        for &tid in self.tasks.keys() {
            match ptrace::getregs(Pid::from_raw(tid as i32)) {
                Ok(r) => threads.push(ThreadState {
                    tid,
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

    fn read_error(&self, address: u64, len: usize, errno: Errno) -> DumpError {
        if errno == Errno::ESRCH || !std::path::Path::new(&format!("/proc/{}", self.pid)).exists() {
            DumpError::TargetExited { pid: self.pid }
        } else {
            DumpError::Read { address, len, reason: errno.desc().to_string() }
        }
    }
}

impl Drop for LiveProcess {
    fn drop(&mut self) {
        self.detach();
    }
}

fn check_interrupted() -> Result<()> {
    if interrupted() {
        Err(DumpError::Interrupted)
    } else {
        Ok(())
    }
}

enum Stop {
    /// Stopped; with the signal whose delivery the stop intercepted, if it was one.
    Stopped(Option<Signal>),
    Gone,
}

fn wait_for_stop(tid: u32) -> Result<Stop> {
    let pid = Pid::from_raw(tid as i32);
    loop {
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
        PathBuf::from(format!("/proc/{}/exe", self.pid))
    }

    fn read(&self, address: u64, buf: &mut [u8]) -> Result<()> {
        read_remote(self.pid, address, buf).map_err(|errno| self.read_error(address, buf.len(), errno))
    }

    fn read_many(&self, requests: &mut [ReadRequest<'_>]) -> Result<()> {
        for chunk in requests.chunks_mut(MAX_IOVECS) {
            let remote: Vec<RemoteIoVec> =
                chunk.iter().map(|r| RemoteIoVec { base: r.address as usize, len: r.buf.len() }).collect();
            let wanted: usize = remote.iter().map(|r| r.len).sum();
            let got = {
                let mut local: Vec<IoSliceMut<'_>> = chunk.iter_mut().map(|r| IoSliceMut::new(r.buf)).collect();
                process_vm_readv(Pid::from_raw(self.pid as i32), &mut local, &remote)
            };
            match got {
                Ok(n) if n == wanted => {}
                // A short read stops at the first range that failed: find it and say which.
                Ok(_) => {
                    for r in chunk.iter_mut() {
                        self.read(r.address, r.buf)?;
                    }
                }
                Err(errno) => {
                    let first = &chunk[0];
                    return Err(self.read_error(first.address, first.buf.len(), errno));
                }
            }
        }
        check_interrupted()
    }

    fn read_many_partial(&self, requests: &mut [ReadRequest<'_>]) -> Vec<bool> {
        let mut ok = Vec::with_capacity(requests.len());
        for chunk in requests.chunks_mut(MAX_IOVECS) {
            let remote: Vec<RemoteIoVec> =
                chunk.iter().map(|r| RemoteIoVec { base: r.address as usize, len: r.buf.len() }).collect();
            let wanted: usize = remote.iter().map(|r| r.len).sum();
            let got = {
                let mut local: Vec<IoSliceMut<'_>> = chunk.iter_mut().map(|r| IoSliceMut::new(r.buf)).collect();
                process_vm_readv(Pid::from_raw(self.pid as i32), &mut local, &remote)
            };
            match got {
                Ok(n) if n == wanted => ok.extend(std::iter::repeat_n(true, chunk.len())),
                // Some range is unmapped: read them one by one to know which.
                _ => ok.extend(chunk.iter_mut().map(|r| self.read(r.address, r.buf).is_ok())),
            }
        }
        ok
    }

    fn threads(&self) -> &[ThreadState] {
        &self.threads
    }

    fn mappings(&self) -> Result<Vec<Mapping>> {
        let path = PathBuf::from(format!("/proc/{}/maps", self.pid));
        let text = std::fs::read_to_string(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                DumpError::TargetExited { pid: self.pid }
            } else {
                DumpError::Io { path, source }
            }
        })?;
        Ok(parse_maps(&text))
    }
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
    pub fn new(pid: u32) -> Result<ProcessMemory> {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(DumpError::NoSuchProcess { pid });
        }
        Ok(ProcessMemory { pid })
    }
}

impl MemorySource for ProcessMemory {
    fn pid(&self) -> Option<u32> {
        Some(self.pid)
    }

    fn executable_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/exe", self.pid))
    }

    fn read(&self, address: u64, buf: &mut [u8]) -> Result<()> {
        read_remote(self.pid, address, buf).map_err(|errno| {
            if errno == Errno::ESRCH {
                DumpError::TargetExited { pid: self.pid }
            } else if errno == Errno::EPERM {
                DumpError::AttachDenied { pid: self.pid, errno }
            } else {
                DumpError::Read { address, len: buf.len(), reason: errno.desc().to_string() }
            }
        })
    }

    fn threads(&self) -> &[ThreadState] {
        &[]
    }

    fn mappings(&self) -> Result<Vec<Mapping>> {
        let path = PathBuf::from(format!("/proc/{}/maps", self.pid));
        let text = std::fs::read_to_string(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                DumpError::TargetExited { pid: self.pid }
            } else {
                DumpError::Io { path, source }
            }
        })?;
        Ok(parse_maps(&text))
    }
}
