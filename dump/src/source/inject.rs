//! One system call made by a stopped thread of the target, on our behalf: the target's `clone`
//! for a fork capture, and its `wait4` that reaps the fork's child.
//!
//! Nothing is written to the target's memory or code. The thread is pointed, through its
//! registers only, at a `syscall` instruction its own code already holds ([`find_syscall_site`]),
//! run with `PTRACE_SYSCALL` to the exit of that one call, and given back its registers exactly
//! as they were. Our call is made with `orig_rax = -1`, which tells the kernel it interrupts
//! nothing to restart.
//!
//! Two choices make a dumper that dies mid-call as harmless as it can be:
//! - No single step: the kernel does not clear the trap flag of a dead tracer's tracee, which
//!   would then die of the SIGTRAP. The system-call stops that `PTRACE_SYSCALL` asks for are
//!   cleared with the tracer.
//! - The thread ends where it began, in a ptrace stop on its way back to user mode: an
//!   interrupt is queued before its registers are restored, so that a thread let go at any
//!   moment after the restore goes through the kernel's signal path, which restarts the
//!   blocking system call (a futex wait, a `read`) it was stopped in, exactly as after any
//!   ptrace stop.
//!
//! The registers are the thread's own again before this module returns, whatever happened: the
//! only span in which they are not is from one `PTRACE_SETREGS` to the other, while the kernel
//! runs our call (for a `clone`, the copy of the page tables). A SIGKILL of the dumper then, and
//! only then, would let the thread run on with our registers.
//!
//! [`remote_syscall`] is plain system calls, with no allocation, so that a process forked from
//! a multi-threaded dumper may use it too. A signal that arrives for the thread meanwhile is
//! sent to it again (`tgkill`): it was taken from the thread by its stop, and a thread left in
//! an interrupt stop cannot be handed one back through ptrace.

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// x86-64 system call numbers used here.
pub const SYS_CLONE: u64 = 56;
pub const SYS_WAIT4: u64 = 61;

/// The two bytes of x86-64's `syscall` instruction.
const SYSCALL_INSTRUCTION: [u8; 2] = [0x0f, 0x05];

/// What went wrong while a thread made our system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectError {
    /// A ptrace request failed (the thread is not stopped, or not ours).
    Ptrace { op: &'static str, errno: Errno },
    /// The thread died (killed from outside) while it made the call.
    ThreadGone,
    /// The thread stopped somewhere else than right after the `syscall` instruction.
    Strayed { rip: u64 },
}

impl std::fmt::Display for InjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InjectError::Ptrace { op, errno } => write!(f, "ptrace {op} failed: {errno}"),
            InjectError::ThreadGone => write!(f, "the thread exited while it made the call"),
            InjectError::Strayed { rip } => write!(f, "the thread stopped at {rip:#x}, not after the syscall instruction"),
        }
    }
}

/// The result of a system call made by a target's thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct SyscallOutcome {
    /// The call's return value: negative errno on failure.
    pub result: i64,
    /// The pid a `clone` reported through `PTRACE_EVENT_CLONE`/`FORK` (the child is then
    /// stopped and traced by us), whatever `result` says.
    pub new_task: Option<u32>,
}

/// Makes the stopped thread `tid` of process `tgid` execute system call `number` with `args`
/// (rdi, rsi, rdx, r10, r8, r9) at `site`, an address of a `syscall` instruction in its process,
/// then restores its registers. `options` are the ptrace options it needs meanwhile
/// (`PTRACE_O_TRACECLONE` for a clone); the thread is left without options, in an interrupt stop.
pub fn remote_syscall(
    tgid: u32,
    tid: u32,
    site: u64,
    number: u64,
    args: [u64; 6],
    options: ptrace::Options,
) -> Result<SyscallOutcome, InjectError> {
    let pid = Pid::from_raw(tid as i32);
    let fail = |op| move |errno| InjectError::Ptrace { op, errno };
    let saved = ptrace::getregs(pid).map_err(fail("GETREGS"))?;
    ptrace::setoptions(pid, options | ptrace::Options::PTRACE_O_TRACESYSGOOD).map_err(fail("SETOPTIONS"))?;
    let mut call = saved;
    call.rip = site;
    call.rax = number;
    call.orig_rax = u64::MAX;
    [call.rdi, call.rsi, call.rdx, call.r10, call.r8, call.r9] = args;
    if let Err(errno) = ptrace::setregs(pid, call) {
        let _ = ptrace::setoptions(pid, ptrace::Options::empty());
        return Err(InjectError::Ptrace { op: "SETREGS", errno });
    }
    let mut held = HeldSignals::default();
    let outcome = run_to_syscall_exit(pid, site, &mut held);
    // Back to where it began: an interrupt stop queued first, then its own registers.
    let interrupted = ptrace::interrupt(pid);
    let restored = ptrace::setregs(pid, saved);
    let _ = ptrace::setoptions(pid, ptrace::Options::empty());
    let ended = (|| {
        let outcome = outcome?;
        restored
            .map_err(|errno| if errno == Errno::ESRCH { InjectError::ThreadGone } else { InjectError::Ptrace { op: "SETREGS", errno } })?;
        interrupted.map_err(fail("INTERRUPT"))?;
        ptrace::cont(pid, None).map_err(fail("CONT"))?;
        wait_stop(pid, &mut held, ptrace::cont, |status| matches!(status, WaitStatus::PtraceEvent(_, _, libc::PTRACE_EVENT_STOP)))?;
        Ok(outcome)
    })();
    held.send_again(tgid, tid);
    ended
}

/// Runs `pid` from our call's registers to the exit of the system call at `site`.
fn run_to_syscall_exit(pid: Pid, site: u64, held: &mut HeldSignals) -> Result<SyscallOutcome, InjectError> {
    let mut outcome = SyscallOutcome::default();
    let mut entered = false;
    let resume = || ptrace::syscall(pid, None).map_err(|errno| InjectError::Ptrace { op: "SYSCALL", errno });
    resume()?;
    loop {
        let status =
            wait_stop(pid, held, ptrace::syscall, |status| matches!(status, WaitStatus::PtraceSyscall(_) | WaitStatus::PtraceEvent(..)))?;
        match status {
            WaitStatus::PtraceSyscall(_) if !entered => entered = true,
            WaitStatus::PtraceSyscall(_) => {
                let regs = ptrace::getregs(pid).map_err(|errno| InjectError::Ptrace { op: "GETREGS", errno })?;
                if regs.rip != site + SYSCALL_INSTRUCTION.len() as u64 {
                    return Err(InjectError::Strayed { rip: regs.rip });
                }
                outcome.result = regs.rax as i64;
                return Ok(outcome);
            }
            WaitStatus::PtraceEvent(_, _, event)
                if event == libc::PTRACE_EVENT_CLONE || event == libc::PTRACE_EVENT_FORK || event == libc::PTRACE_EVENT_VFORK =>
            {
                let child = ptrace::getevent(pid).map_err(|errno| InjectError::Ptrace { op: "GETEVENTMSG", errno })?;
                outcome.new_task = u32::try_from(child).ok();
            }
            // Another stop (an interrupt): go on.
            _ => {}
        }
        resume()?;
    }
}

/// Waits for the next stop of `pid` that `wanted` accepts. A signal-delivery stop on the way
/// takes its signal from the thread: it is held (and sent again at the end), and the thread
/// resumed with `resume`, as it was running.
fn wait_stop(
    pid: Pid,
    held: &mut HeldSignals,
    resume: fn(Pid, Option<Signal>) -> nix::Result<()>,
    wanted: impl Fn(&WaitStatus) -> bool,
) -> Result<WaitStatus, InjectError> {
    loop {
        match waitpid(pid, Some(WaitPidFlag::__WALL)) {
            Ok(status) if wanted(&status) => return Ok(status),
            Ok(WaitStatus::Stopped(_, signal)) => {
                held.hold(signal);
                resume(pid, None).map_err(|errno| InjectError::Ptrace { op: "resume", errno })?;
            }
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(Errno::ECHILD) => return Err(InjectError::ThreadGone),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(errno) => return Err(InjectError::Ptrace { op: "WAIT", errno }),
        }
    }
}

/// Signals taken from the thread by its stops while it made our call: a few, without allocation
/// (a standard signal pending twice is delivered once anyway).
#[derive(Default)]
struct HeldSignals {
    signals: [Option<Signal>; 8],
}

impl HeldSignals {
    fn hold(&mut self, signal: Signal) {
        if self.signals.contains(&Some(signal)) {
            return;
        }
        if let Some(free) = self.signals.iter_mut().find(|s| s.is_none()) {
            *free = Some(signal);
        }
    }

    /// Sends the held signals to the thread again: pending, they are delivered when it resumes.
    fn send_again(&self, tgid: u32, tid: u32) {
        for signal in self.signals.iter().flatten() {
            // SAFETY: plain system call on our own tracee's thread.
            unsafe { libc::syscall(libc::SYS_tgkill, tgid as libc::c_int, tid as libc::c_int, *signal as libc::c_int) };
        }
    }
}

/// The address of a `syscall` instruction in one of the target's executable `mappings`, read
/// through `read`: libc's first, whose code surely holds one. The bytes need not start one of
/// the program's own instructions: the processor decodes from wherever `rip` points.
/// `[vsyscall]` (above the user half of the address space) is never used: its code is emulated.
pub fn find_syscall_site(mappings: &[super::Mapping], mut read: impl FnMut(u64, &mut [u8]) -> bool) -> Option<u64> {
    const USER_SPACE_END: u64 = 0x0000_8000_0000_0000;
    let is_libc = |m: &super::Mapping| {
        m.path
            .as_deref()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("libc-"))
    };
    let code = mappings.iter().filter(|m| m.executable && m.readable && m.end <= USER_SPACE_END);
    let ordered = code.clone().filter(|m| is_libc(m)).chain(code.filter(|m| !is_libc(m)));
    let mut chunk = vec![0u8; 1 << 16];
    for m in ordered {
        let mut at = m.start;
        while at + 1 < m.end {
            let len = (chunk.len() as u64).min(m.end - at) as usize;
            if !read(at, &mut chunk[..len]) {
                break;
            }
            if let Some(i) = chunk[..len].windows(2).position(|w| w == SYSCALL_INSTRUCTION) {
                return Some(at + i as u64);
            }
            // Overlap by one byte: the two bytes may straddle two chunks.
            at += len as u64 - 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Mapping;
    use std::path::PathBuf;

    fn mapping(start: u64, end: u64, path: Option<&str>) -> Mapping {
        Mapping { start, end, readable: true, executable: true, offset: 0, path: path.map(PathBuf::from), inode: None }
    }

    #[test]
    fn the_site_is_found_in_libc_first_and_across_chunk_edges() {
        let mut memory = vec![0x90u8; 3 << 16];
        // In the program: early. In libc: straddling the first chunk's end.
        memory[10] = 0x0f;
        memory[11] = 0x05;
        let libc_at = (1 << 16) + (1 << 16) - 1;
        memory[libc_at] = 0x0f;
        memory[libc_at + 1] = 0x05;
        let maps = [mapping(0, 1 << 16, Some("/usr/bin/prog")), mapping(1 << 16, 3 << 16, Some("/lib/x86_64-linux-gnu/libc.so.6"))];
        let read = |at: u64, buf: &mut [u8]| {
            buf.copy_from_slice(&memory[at as usize..at as usize + buf.len()]);
            true
        };
        assert_eq!(find_syscall_site(&maps, read), Some(libc_at as u64));
        // Without libc, the program's.
        assert_eq!(find_syscall_site(&maps[..1], read), Some(10));
        // Not executable, or vsyscall: never.
        let vsyscall = Mapping { start: 0xffff_ffff_ff60_0000, end: 0xffff_ffff_ff60_1000, ..mapping(0, 0, None) };
        let data = Mapping { executable: false, ..maps[0].clone() };
        assert_eq!(find_syscall_site(&[data, vsyscall], |_, _| panic!("read")), None);
    }
}
