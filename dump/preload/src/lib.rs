//! `libheapsnap_preload.so`: makes `OCAML_HEAPSNAP` work for programs started by anything
//! (a shell, a service manager, a test runner), with no launcher and no rebuild:
//!
//! ```sh
//! OCAML_HEAPSNAP=on-compaction,dir=snaps LD_PRELOAD=/path/to/libheapsnap_preload.so ./my_program
//! ```
//!
//! Its constructor starts a watcher process (`heapsnap watch`, found next to this library or
//! through `HEAPSNAP_BIN`), which parses and checks `OCAML_HEAPSNAP`, checks that this process is
//! an OCaml 5 program, and answers with the hooks it wants installed here:
//! - at exit: an `atexit` handler that tells the watcher and waits for it to take its snapshot,
//!   so the heap is dumped before the process goes away;
//! - on a signal: a handler that only writes one byte to the watcher (async-signal-safe), then
//!   calls the program's own handler for that signal, whether the program set it before or after
//!   the library loaded (module `chain`). This is the one change made to the host program, and only
//!   when `on-signal=` asks for it.
//!
//! Everything else (stopping the world, reading memory, writing snapshots) happens in the
//! watcher. This library depends on libc alone and never fails the host program: any problem
//! leaves it running as if the library were not there (the watcher reports problems on stderr).
//!
//! When the program is launched by `heapsnap run`, the launcher is the watcher: it passes its
//! pipes through `HEAPSNAP_CONTROL` and this library only installs the at-exit hook.
// Every unsafe block states the invariant it relies on.
#![warn(clippy::undocumented_unsafe_blocks)]

mod chain;

use std::ffi::{CStr, CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::{AtomicI32, Ordering};

/// Written by the host to the watcher on the control pipe.
pub const MSG_READY: u8 = b'R';
pub const MSG_SIGNAL: u8 = b'S';
pub const MSG_EXITING: u8 = b'X';
/// Written by the watcher to the host when the exit snapshot is done.
pub const MSG_ACK: u8 = b'A';
/// Set in the watcher's environment so that the library does nothing in it or its children.
pub const ENV_WATCHER: &str = "HEAPSNAP_WATCHER_PROCESS";
/// `LAUNCHER_PID,CONTROL_FD,ACK_FD,AT_EXIT(0|1)`, set by `heapsnap run` for its child.
pub const ENV_CONTROL: &str = "HEAPSNAP_CONTROL";
/// How long the exiting program waits for its exit snapshot at most.
const EXIT_WAIT_MS: i32 = 600_000;
/// How long the constructor waits for the watcher's answer at most.
const HANDSHAKE_WAIT_MS: i32 = 10_000;

static CONTROL_FD: AtomicI32 = AtomicI32::new(-1);
static ACK_FD: AtomicI32 = AtomicI32::new(-1);

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    if std::env::var_os(ENV_WATCHER).is_some() {
        return;
    }
    if let Some(control) = std::env::var_os(ENV_CONTROL) {
        launched_by_heapsnap_run(&control);
        return;
    }
    if std::env::var_os("OCAML_HEAPSNAP").is_some() {
        start_watcher();
    }
}

/// The reply the watcher sends once it has read `OCAML_HEAPSNAP`: `ok PID AT_EXIT SIGNAL` or `off`.
#[derive(Debug, PartialEq, Eq)]
pub struct Hooks {
    pub watcher_pid: i32,
    pub at_exit: bool,
    /// 0 for none.
    pub signal: i32,
}

impl Hooks {
    pub fn parse_line(line: &str) -> Option<Hooks> {
        let mut words = line.split_whitespace();
        if words.next()? != "ok" {
            return None;
        }
        let watcher_pid = words.next()?.parse().ok()?;
        let at_exit = words.next()? == "1";
        let signal = words.next()?.parse().ok()?;
        Some(Hooks { watcher_pid, at_exit, signal })
    }
}

fn launched_by_heapsnap_run(control: &OsStr) {
    let text = control.to_string_lossy();
    let fields: Vec<i32> = text.split(',').filter_map(|f| f.parse().ok()).collect();
    let [launcher, control_fd, ack_fd, at_exit] = fields[..] else { return };
    // Only the launcher's own child is watched by the launcher; the child's children are not.
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != launcher {
        return;
    }
    for fd in [control_fd, ack_fd] {
        // SAFETY: F_SETFD on a number that may not be open only fails (EBADF); it touches no memory.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    CONTROL_FD.store(control_fd, Ordering::Relaxed);
    ACK_FD.store(ack_fd, Ordering::Relaxed);
    if at_exit == 1 {
        register_at_exit();
    }
}

extern "C" {
    fn __cxa_atexit(f: extern "C" fn(*mut libc::c_void), arg: *mut libc::c_void, dso: *mut libc::c_void) -> libc::c_int;
}

/// Registers the exit hook as a process-wide exit handler. (`atexit` called from a shared
/// library ties the handler to the library, and glibc would run it late, from the library's
/// destructors, where the dumper cannot unwind the stack back to the OCaml code that exited.)
fn register_at_exit() {
    // SAFETY: the hook is an `extern "C"` function of this library, which is never unloaded
    // (LD_PRELOAD); it ignores its null argument; a null DSO handle ties it to no object.
    unsafe { __cxa_atexit(at_exit_hook, std::ptr::null_mut(), std::ptr::null_mut()) };
}

fn start_watcher() {
    let Some(heapsnap) = heapsnap_binary() else { return };
    let (mut control, mut ack) = ([-1; 2], [-1; 2]);
    // SAFETY: pipe2 writes two descriptors into the two-element arrays given.
    unsafe {
        if libc::pipe2(control.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return;
        }
        if libc::pipe2(ack.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            close_all(&control);
            return;
        }
    }
    let [control_read, control_write, ack_read, ack_write] = [control[0], control[1], ack[0], ack[1]].map(above_stdio);
    if [control_read, control_write, ack_read, ack_write].contains(&-1) {
        close_all(&[control_read, control_write, ack_read, ack_write]);
        return;
    }
    // SAFETY: getpid has no preconditions.
    let host = unsafe { libc::getpid() };
    let argv = [
        CString::new(heapsnap.as_bytes()).ok(),
        CString::new("watch").ok(),
        CString::new("--pid").ok(),
        CString::new(host.to_string()).ok(),
        CString::new("--control-fd").ok(),
        CString::new(control_read.to_string()).ok(),
        CString::new("--ack-fd").ok(),
        CString::new(ack_write.to_string()).ok(),
    ];
    let Some(argv) = argv.into_iter().collect::<Option<Vec<CString>>>() else { return };
    let envp = watcher_environment();
    // Built before fork: between fork and exec only async-signal-safe calls are made.
    let argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).chain([std::ptr::null()]).collect();
    let envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).chain([std::ptr::null()]).collect();

    // Fork twice so the watcher is not our child: the host program never sees it in wait().
    // SAFETY: the child makes only async-signal-safe calls (below) before it execs or exits,
    // as a fork from a possibly multi-threaded process requires.
    let middle = unsafe { libc::fork() };
    if middle == 0 {
        // SAFETY: async-signal-safe calls only (fork, setsid, fcntl, open, dup2, execve, _exit);
        // the argument and environment arrays were built before the fork and end with null.
        unsafe {
            if libc::fork() == 0 {
                libc::setsid(); // out of the terminal's process group: Ctrl-C is for the program
                libc::fcntl(control_read, libc::F_SETFD, 0);
                libc::fcntl(ack_write, libc::F_SETFD, 0);
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null >= 0 {
                    libc::dup2(null, 0);
                    libc::dup2(null, 1);
                }
                libc::execve(argv_ptrs[0], argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
                libc::_exit(127);
            }
            libc::_exit(0);
        }
    }
    // SAFETY: the watcher's ends, ours to close (the watcher has its own copies).
    unsafe {
        libc::close(control_read);
        libc::close(ack_write);
    }
    if middle < 0 {
        close_all(&[control_write, ack_read]);
        return;
    }
    // SAFETY: reaps our own short-lived child; a null status pointer is allowed.
    unsafe { libc::waitpid(middle, std::ptr::null_mut(), 0) };

    let hooks = read_line(ack_read, HANDSHAKE_WAIT_MS).as_deref().and_then(Hooks::parse_line);
    let Some(hooks) = hooks else {
        close_all(&[control_write, ack_read]);
        return;
    };
    // Where Yama restricts ptrace to descendants, allow our watcher (which is not one).
    // SAFETY: PR_SET_PTRACER takes a pid and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, hooks.watcher_pid as libc::c_ulong, 0, 0, 0) };
    CONTROL_FD.store(control_write, Ordering::Relaxed);
    ACK_FD.store(ack_read, Ordering::Relaxed);
    if hooks.at_exit {
        register_at_exit();
    }
    if hooks.signal > 0 {
        chain::take(hooks.signal, on_signal);
    }
    // Tell the watcher the hooks are in place (it may attach from now on).
    send(MSG_READY);
}

/// `fd`, moved to a number above stdin, stdout and stderr if it is one of them (a program that
/// closed one gets its number back from pipe2), since the watcher points those at /dev/null and
/// refuses them; -1 if it cannot be moved (then it is closed).
fn above_stdio(fd: i32) -> i32 {
    if fd > 2 {
        return fd;
    }
    // SAFETY: duplicates a descriptor this library opened; touches no memory.
    let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    // SAFETY: the descriptor this library opened, now duplicated (or failed): the number goes
    // back to being closed, as the program left it.
    unsafe { libc::close(fd) };
    moved
}

/// `heapsnap` next to this library, or `$HEAPSNAP_BIN`.
fn heapsnap_binary() -> Option<OsString> {
    if let Some(bin) = std::env::var_os("HEAPSNAP_BIN") {
        return Some(bin);
    }
    // SAFETY: Dl_info is plain data; all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr fills `info` for an address in this library.
    if unsafe { libc::dladdr(init as *const libc::c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is non-null (checked) and points to the loader's NUL-terminated name,
    // which lives as long as the library stays loaded (for the process's life).
    let library = OsStr::from_bytes(unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes());
    let dir = std::path::Path::new(library).parent()?;
    Some(dir.join("heapsnap").into_os_string())
}

/// Our environment without LD_PRELOAD (the watcher must not preload itself), plus the marker.
fn watcher_environment() -> Vec<CString> {
    std::env::vars_os()
        .filter(|(k, _)| k != "LD_PRELOAD")
        .filter_map(|(k, v)| {
            let mut entry = k.into_vec();
            entry.push(b'=');
            entry.extend_from_slice(v.as_bytes());
            CString::new(entry).ok()
        })
        .chain(CString::new(format!("{ENV_WATCHER}=1")).ok())
        .collect()
}

fn read_line(fd: i32, timeout_ms: i32) -> Option<String> {
    let mut line = Vec::new();
    loop {
        let mut byte = 0u8;
        // SAFETY: reads at most one byte into `byte`.
        if !wait_readable(fd, timeout_ms) || unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) } != 1 {
            return None;
        }
        if byte == b'\n' {
            return String::from_utf8(line).ok();
        }
        line.push(byte);
        if line.len() > 256 {
            return None;
        }
    }
}

fn wait_readable(fd: i32, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut pfd, 1, timeout_ms) } {
            1 => return true,
            -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            _ => return false,
        }
    }
}

fn send(message: u8) -> bool {
    let fd = CONTROL_FD.load(Ordering::Relaxed);
    // SAFETY: writes one byte from `message`; write(2) is async-signal-safe.
    fd >= 0 && unsafe { libc::write(fd, (&message as *const u8).cast(), 1) } == 1
}

fn close_all(fds: &[i32]) {
    for &fd in fds.iter().filter(|&&fd| fd >= 0) {
        // SAFETY: descriptors this library opened and no one else uses.
        unsafe { libc::close(fd) };
    }
}

/// Async-signal-safe: one write(2), errno preserved, then the program's own handler for the
/// signal if it has one ([`chain`]).
extern "C" fn on_signal(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the thread's errno location is valid for the thread's life.
    let saved = unsafe { *libc::__errno_location() };
    send(MSG_SIGNAL);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
    chain::call_program_handler(signal, info, context);
}

/// Runs inside exit(), after OCaml's own at_exit functions: the heap is still whole.
extern "C" fn at_exit_hook(_: *mut libc::c_void) {
    if !send(MSG_EXITING) {
        return;
    }
    let ack = ACK_FD.load(Ordering::Relaxed);
    let mut byte = 0u8;
    // The watcher answers once the snapshot is taken; if it died, EOF ends the wait at once.
    if wait_readable(ack, EXIT_WAIT_MS) {
        // SAFETY: reads at most one byte into `byte`.
        unsafe { libc::read(ack, (&mut byte as *mut u8).cast(), 1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_watchers_answer() {
        assert_eq!(Hooks::parse_line("ok 4242 1 12"), Some(Hooks { watcher_pid: 4242, at_exit: true, signal: 12 }));
        assert_eq!(Hooks::parse_line("ok 4242 0 0\n"), Some(Hooks { watcher_pid: 4242, at_exit: false, signal: 0 }));
        assert_eq!(Hooks::parse_line("off"), None);
        assert_eq!(Hooks::parse_line("ok x 1 2"), None);
    }
}
