//! A small process the dumper starts before a fork capture, so that the fork's child never
//! outlives a dumper that is killed: if the dumper dies while the child lives (or after it was
//! killed but before the target collected it), the guardian kills the child and makes the
//! target collect it ([`super::reap::collect_dead_child`]). A dumper that finishes dismisses it.
//!
//! It is a `fork` of the dumper made before the target is stopped (so it costs the pause
//! nothing), and it only makes plain system calls on its stack (the dumper may have other
//! threads, whose locks a forked child must not need): it reads the child's pid from a pipe,
//! and the pipe's end of file without a word of dismissal says that the dumper died.

use super::reap::collect_dead_child;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// The word that dismisses the guardian.
const DISMISSED: u64 = u64::MAX;

/// How long the guardian tries to make the target collect the child after the dumper died: the
/// dying dumper holds the target and the child a little longer than it holds the pipe.
const SEIZE_TRIES: u32 = 500;
const SEIZE_RETRY: Duration = Duration::from_millis(10);

pub struct Guardian {
    process: libc::pid_t,
    pipe: OwnedFd,
}

impl Guardian {
    /// Starts a guardian of a fork of process `target` made at `site`; `None` when no process
    /// could be started (the dump goes on without one).
    pub fn start(target: u32, site: u64) -> Option<Guardian> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: both descriptors were just created and are owned here.
        let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child only makes system calls on its stack, then _exits (guard below).
        match unsafe { libc::fork() } {
            -1 => None,
            0 => {
                guard(read_end.as_raw_fd(), target, site);
                // SAFETY: ends the forked child without running the dumper's destructors.
                unsafe { libc::_exit(0) }
            }
            process => {
                drop(read_end);
                Some(Guardian { process, pipe: write_end })
            }
        }
    }

    /// Tells the guardian which child to look after.
    pub fn watch(&self, child: u32) {
        self.send(child as u64);
    }

    /// The child is gone and collected: the guardian exits, and is collected (also on drop).
    pub fn dismiss(self) {}

    fn send(&self, word: u64) {
        let bytes = word.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our pipe (atomic below PIPE_BUF).
        let _ = unsafe { libc::write(self.pipe.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        self.send(DISMISSED);
        let mut status = 0;
        // SAFETY: waits for our own child process.
        while unsafe { libc::waitpid(self.process, &mut status, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
    }
}

/// The guardian's life: wait for the dumper's words; at end of file without dismissal, look
/// after the child.
fn guard(pipe: libc::c_int, target: u32, site: u64) {
    // Hold nothing of the dumper's open but the pipe (a test reading the dumper's output to its
    // end must not wait for us).
    // SAFETY: plain system calls on descriptor numbers.
    unsafe {
        if pipe > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (pipe - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (pipe + 1) as u32, u32::MAX, 0u32);
    }
    let mut child: Option<u32> = None;
    loop {
        let mut word = [0u8; 8];
        // SAFETY: reads into a live 8-byte buffer.
        let n = unsafe { libc::read(pipe, word.as_mut_ptr().cast(), word.len()) };
        match n {
            8 => match u64::from_ne_bytes(word) {
                DISMISSED => return,
                pid => child = u32::try_from(pid).ok(),
            },
            -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            _ => break,
        }
    }
    let Some(child) = child else { return };
    // SAFETY: signals the fork's child, which only we and the dumper know of.
    unsafe { libc::kill(child as libc::pid_t, libc::SIGKILL) };
    // Its death: its pidfd becomes readable when it has exited.
    // SAFETY: plain system calls; the descriptor is closed below.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, child as libc::pid_t, 0u32) as libc::c_int;
        if fd >= 0 {
            let mut poll = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            libc::poll(&mut poll, 1, 5_000);
            libc::close(fd);
        }
    }
    // Until the dying dumper has let go of both, the target cannot be seized (EPERM), or the
    // child is not yet its zombie (wait4 finds nothing yet): try again.
    for _ in 0..SEIZE_TRIES {
        match collect_dead_child(target, child, site) {
            Ok(()) => return,
            Err(e) if e.errno == Some(nix::errno::Errno::EPERM) || e.result == Some(0) => std::thread::sleep(SEIZE_RETRY),
            Err(_) => return,
        }
    }
}
