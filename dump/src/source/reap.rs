//! A dead child of the target, collected by the target itself: one of its threads calls
//! `wait4` for it, through ptrace ([`super::inject`]), so that no zombie stays. Used after a fork
//! capture by the dumper, and by the guardian when the dumper died.

use super::inject::{remote_syscall, InjectError, SYS_WAIT4};
use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Why a target could not be made to collect the fork's dead child.
#[derive(Clone, Copy, Debug)]
pub struct CollectError {
    pub what: &'static str,
    pub errno: Option<Errno>,
    /// What `wait4` returned, when it was called.
    pub result: Option<i64>,
}

impl std::fmt::Display for CollectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.what)?;
        if let Some(errno) = self.errno {
            write!(f, ": {errno}")?;
        }
        if let Some(result) = self.result {
            write!(f, " (returned {result})")?;
        }
        Ok(())
    }
}

/// Makes process `pid`, which we do not trace, collect its dead child `child`: its main thread,
/// seized and stopped alone, calls `wait4` at `site`, then is let go. Allocates nothing (the
/// guardian uses it).
pub fn collect_dead_child(pid: u32, child: u32, site: u64) -> std::result::Result<(), CollectError> {
    let thread = Pid::from_raw(pid as i32);
    let fail = |what, errno| CollectError { what, errno: Some(errno), result: None };
    ptrace::seize(thread, ptrace::Options::empty()).map_err(|e| fail("PTRACE_SEIZE", e))?;
    let mut taken = None;
    let outcome = (|| {
        ptrace::interrupt(thread).map_err(|e| fail("PTRACE_INTERRUPT", e))?;
        loop {
            match waitpid(thread, Some(WaitPidFlag::__WALL)) {
                Ok(WaitStatus::PtraceEvent(..) | WaitStatus::PtraceSyscall(_)) => break,
                Ok(WaitStatus::Stopped(_, signal)) => {
                    taken = Some(signal);
                    break;
                }
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => return Err(fail("the main thread exited", Errno::ESRCH)),
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(e) => return Err(fail("waitpid", e)),
            }
        }
        collect_with(pid, pid, child, site)
    })();
    // A signal its stop took from it: the thread ends in an interrupt stop, from which detaching
    // cannot hand it back, so it is sent again.
    if let Some(signal) = taken {
        // SAFETY: plain system call on the thread we hold.
        unsafe { libc::syscall(libc::SYS_tgkill, pid as libc::c_int, pid as libc::c_int, signal as libc::c_int) };
    }
    let _ = ptrace::detach(thread, None);
    outcome
}

/// Makes the stopped thread `tid` of process `pid`, which we trace, call `wait4(child, NULL,
/// __WALL | WNOHANG, NULL)` at `site`.
pub(super) fn collect_with(pid: u32, tid: u32, child: u32, site: u64) -> std::result::Result<(), CollectError> {
    let flags = (libc::__WALL | libc::WNOHANG) as u64;
    let call =
        remote_syscall(pid, tid, site, SYS_WAIT4, [child as u64, 0, flags, 0, 0, 0], ptrace::Options::empty()).map_err(|e| match e {
            InjectError::Ptrace { op, errno } => CollectError { what: op, errno: Some(errno), result: None },
            InjectError::ThreadGone => CollectError { what: "the thread exited", errno: None, result: None },
            InjectError::Strayed { .. } => CollectError { what: "the thread strayed from the call", errno: None, result: None },
        })?;
    match call.result {
        r if r == child as i64 => Ok(()),
        // Collected already (by the target's own wait with __WALL).
        r if r == -(libc::ECHILD as i64) => Ok(()),
        r => Err(CollectError { what: "wait4", errno: None, result: Some(r) }),
    }
}
