//! A report answered by a child process, so that the shell gets its prompt back as soon as the
//! answer is out, and the child goes on to complete the analysis index from the analysis it
//! holds in memory (rather than a new process analysing the snapshot again).
//!
//! The command forks once at its start, before any thread exists (a fork is then safe: nothing
//! is held by a thread the child lacks). The parent only waits: for the exit code the child
//! sends through a pipe once its answer is written, or for the child to end. The child runs the
//! command. Once it has answered ([`answered`]) it takes the snapshot's lock, hands the exit
//! code over, leaves the terminal's session and writes the index (the meta level first, what a
//! next command most likely reads; then, at a lower priority, the rest); the process's exit (freeing what the analysis held) is no longer on the user's time either.
//!
//! Until it has answered the child dies with its parent (`PR_SET_PDEATHSIG`): a command killed
//! by a timeout or a Ctrl-C leaves nothing running.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

/// The write end of the pipe to the waiting parent: set in the child only.
static TO_PARENT: OnceLock<std::sync::Mutex<Option<OwnedFd>>> = OnceLock::new();

thread_local! {
    /// What the child does once it has answered: the completion of the index it analysed.
    static AFTER_ANSWER: RefCell<Option<AfterAnswer>> = const { RefCell::new(None) };
}

/// The completion the child runs after its answer, with the snapshot's lock it holds meanwhile.
struct AfterAnswer {
    snapshot: std::path::PathBuf,
    complete: Box<dyn FnOnce()>,
}

/// Forks: the parent waits for the child's answer and exits with its code (it never returns);
/// the child returns and runs the command. Nothing happens where fork fails, or where this
/// process already has more than one thread (a child of a fork then could inherit a lock another
/// thread held, and hang): the command runs in this process. Call it first thing, before any
/// thread is started.
pub fn answer_in_a_child() {
    if thread_count() != Some(1) {
        return;
    }
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    // SAFETY: both descriptors were just made and are owned here only.
    let (from_child, to_parent) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the process has one thread (counted above; the caller starts none meanwhile), so
    // the child inherits no lock held by another thread.
    match unsafe { libc::fork() } {
        -1 => {}
        0 => {
            drop(from_child);
            // SAFETY: prctl and getppid act on this process only. A parent gone before the
            // death signal was set would never send it: then this child leaves at once.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
            }
            let _ = TO_PARENT.set(std::sync::Mutex::new(Some(to_parent)));
        }
        child => {
            drop(to_parent);
            wait_for_answer(child, from_child);
        }
    }
}

/// This process's threads, from `/proc/self/task`; `None` where it cannot be read.
fn thread_count() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/task").ok()?.count())
}

/// The parent's part: exits with the code the child sends, or as the child ended.
fn wait_for_answer(child: libc::pid_t, from_child: OwnedFd) -> ! {
    let mut code = [0u8; 1];
    loop {
        // SAFETY: reads at most one byte into a one-byte buffer.
        let n = unsafe { libc::read(from_child.as_raw_fd(), code.as_mut_ptr().cast(), 1) };
        if n == 1 {
            std::process::exit(i32::from(code[0]));
        }
        if n == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
    // The child ended without handing over (an error, a panic, a signal): end as it did.
    let mut status = 0;
    // SAFETY: waits for our own child, writing its status into `status`.
    while unsafe { libc::waitpid(child, &mut status, 0) } == -1 {
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            std::process::exit(1);
        }
    }
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: restores the signal's default action and sends it to this process, which
        // then ends as the child did (a SIGPIPE from `| head` stays quiet).
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
        }
        std::process::exit(128 + signal);
    }
    std::process::exit(libc::WEXITSTATUS(status));
}

/// Whether this process is the child of [`answer_in_a_child`], whose parent waits for its answer.
pub fn is_child() -> bool {
    TO_PARENT.get().is_some()
}

/// Leaves `complete` (the completion of `snapshot`'s index) to run once the child has answered.
pub(crate) fn complete_after_answer(snapshot: &std::path::Path, complete: Box<dyn FnOnce()>) {
    AFTER_ANSWER.with(|after| *after.borrow_mut() = Some(AfterAnswer { snapshot: snapshot.to_path_buf(), complete }));
}

/// The command has answered with `code`: in the child of [`answer_in_a_child`], hands the code
/// to the waiting parent (which exits with it) and runs the completion left to it, detached,
/// then exits. Elsewhere it does nothing.
pub fn answered(code: u8) {
    let Some(to_parent) = TO_PARENT.get().and_then(|fd| fd.lock().ok()?.take()) else { return };
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let after = AFTER_ANSWER.with(|after| after.borrow_mut().take());
    // The snapshot's lock, taken before the prompt comes back: a report that needs the rest of
    // the index waits for it. Held already: another completion runs, and this one is not needed.
    let locked = after.and_then(|after| {
        let file = std::fs::File::open(&after.snapshot).ok()?;
        // SAFETY: flock on a descriptor we own; held until the process ends.
        (unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0).then_some((file, after.complete))
    });
    // SAFETY: prctl acts on this process only: from here it outlives its parent.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0) };
    // SAFETY: writes one byte from a one-byte buffer to the pipe we own.
    unsafe { libc::write(to_parent.as_raw_fd(), [code].as_ptr().cast(), 1) };
    drop(to_parent);
    let Some((_lock, complete)) = locked else { return };
    // Its own session at once; its priority lowered by the completion once the level the next
    // command most likely reads (the meta level) is saved: that command may be waiting for it.
    leave_session();
    // No terminal or pipe of the user's stays open: a reader of the output sees its end.
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: replaces a standard descriptor by /dev/null.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    complete();
    std::process::exit(i32::from(code));
}

/// What a completion does first: leaves the session of the command that started it (the
/// terminal's Ctrl-C and hang-up reach that session's processes, not this one) and lowers its
/// own priority, so that the next command the user runs is not slowed by it.
pub fn detach() {
    leave_session();
    lower_priority();
}

/// Leaves the session of the command that started this process (see [`detach`]).
fn leave_session() {
    // SAFETY: setsid touches no memory and acts on this process only.
    unsafe { libc::setsid() };
}

/// The name of the threads that answer other commands from this process's analysis
/// (`heapsnap_reports::held`; a thread's name, `comm`, is at most 15 bytes; its workers' begin
/// with it): [`lower_priority`] leaves them as they are.
pub const ANSWERING_THREAD: &str = "held analysis";

/// Lowers this process's priority (see [`detach`]).
pub fn lower_priority() {
    // Linux gives each thread its own priority: the analysis's workers, started before, keep
    // theirs unless lowered one by one. The threads answering other commands (by their name,
    // `/proc/self/task/TID/comm`) keep theirs.
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<libc::id_t>().ok()) else { continue };
        if std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.starts_with(ANSWERING_THREAD)) {
            continue;
        }
        // SAFETY: setpriority touches no memory and acts on a thread of this process only.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 10) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test binary runs its tests on threads: there, forking would be unsound, and the command
    /// answers in this process. (Were it to fork, the child ends at once with a status the
    /// waiting parent, the test binary, then exits with: the run fails.)
    #[test]
    fn a_process_with_threads_answers_in_itself() {
        let (stop, wait) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || wait.recv());
        assert!(thread_count().is_some_and(|n| n > 1));
        // SAFETY: getpid has no preconditions.
        let before = unsafe { libc::getpid() };
        answer_in_a_child();
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } != before {
            eprintln!("answer_in_a_child forked a process with threads");
            // SAFETY: _exit ends the forked child without running the parent's state it copied.
            unsafe { libc::_exit(97) };
        }
        assert!(!is_child());
        drop(stop);
        let _ = other.join();
    }
}
