//! The trigger signal shared with the program: heapsnap's handler runs first, then the
//! program's own, as if heapsnap were not there.
//!
//! A program may set its handler for the trigger signal before the library installs its own
//! (a C library's constructor runs before a preloaded library's) or after (OCaml's
//! `Sys.set_signal` runs in the program's main). Both are kept:
//! - before: [`take`] keeps the action it replaces;
//! - after: this library defines `sigaction` and `signal`, which a preloaded library
//!   interposes on the C library's: for the trigger signal they record the program's action
//!   and leave heapsnap's handler in place; for any other signal they are the C library's.
//!
//! The program sees its own action: `sigaction` answers with it, and heapsnap's handler is
//! installed with the program's mask and flags (`SA_RESTART`, `SA_ONSTACK`, `SA_NODEFER`...), so
//! its system calls are interrupted or restarted as they would be. What it cannot see:
//! - a default (`SIG_DFL`) or ignored (`SIG_IGN`) action does nothing after heapsnap's handler:
//!   the signal is heapsnap's trigger, which the user chose, and its default action (often
//!   to end the program) would defeat it; ignoring it is doing nothing;
//! - handlers set with the raw system call, or `sigset`/`sysv_signal`/`bsd_signal`, are not
//!   seen and replace heapsnap's (its trigger then stops working; the program's handler runs).

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// The signal heapsnap's handler is installed for (0: none, every call passes through).
static TRIGGER: AtomicI32 = AtomicI32::new(0);
/// The program's action for the trigger signal, in one word so that a signal never sees half
/// of an update: the handler's address (or `SIG_DFL`, `SIG_IGN`) with two flags in bits no
/// user-space address uses on x86-64.
static PROGRAM_ACTION: AtomicU64 = AtomicU64::new(0);
const PACKED_SIGINFO: u64 = 1 << 63;
const PACKED_RESETHAND: u64 = 1 << 62;
const PACKED_FLAGS: u64 = PACKED_SIGINFO | PACKED_RESETHAND;
/// The program's flags as it gave them (returned by `sigaction`); read outside signal handlers.
static PROGRAM_FLAGS: AtomicI32 = AtomicI32::new(0);
/// Set by the C library in the actions it returns; not the program's to copy.
const SA_RESTORER: libc::c_int = 0x0400_0000;

type SigactionFn = unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;
type SignalFn = unsafe extern "C" fn(libc::c_int, libc::sighandler_t) -> libc::sighandler_t;
type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// heapsnap's handler, once installed.
static HEAPSNAP_HANDLER: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGNAL: AtomicUsize = AtomicUsize::new(0);

/// The next definition of `name` after this library's (the C library's), or 0.
fn next_definition(cache: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let mut address = cache.load(Ordering::Relaxed);
    if address == 0 {
        // SAFETY: `name` is a NUL-terminated string; RTLD_NEXT looks past this library only.
        address = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cache.store(address, Ordering::Relaxed);
    }
    address
}

/// The C library's `sigaction`.
fn real_sigaction(signal: libc::c_int, action: *const libc::sigaction, old: *mut libc::sigaction) -> libc::c_int {
    match next_definition(&REAL_SIGACTION, c"sigaction") {
        0 => {
            // SAFETY: writing the thread's errno is always allowed.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            -1
        }
        // SAFETY: the address is the C library's `sigaction`, whose type is SigactionFn; the
        // pointers are the caller's, valid or null as sigaction(2) allows.
        address => unsafe { std::mem::transmute::<usize, SigactionFn>(address)(signal, action, old) },
    }
}

/// Installs `handler` for `signal`, keeping the action it replaces as the program's.
/// Returns false (nothing changed) when the C library refuses.
pub fn take(signal: libc::c_int, handler: Handler) -> bool {
    // SAFETY: sigaction is plain data; all-zero is a valid value (SIG_DFL, empty mask).
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    if real_sigaction(signal, std::ptr::null(), &mut old) != 0 {
        return false;
    }
    record_program_action(&old);
    HEAPSNAP_HANDLER.store(handler as *const () as usize, Ordering::SeqCst);
    if !install(signal, &old) {
        return false;
    }
    TRIGGER.store(signal, Ordering::SeqCst);
    true
}

fn record_program_action(action: &libc::sigaction) {
    let mut packed = action.sa_sigaction as u64 & !PACKED_FLAGS;
    if action.sa_flags & libc::SA_SIGINFO != 0 {
        packed |= PACKED_SIGINFO;
    }
    if action.sa_flags & libc::SA_RESETHAND != 0 {
        packed |= PACKED_RESETHAND;
    }
    PROGRAM_FLAGS.store(action.sa_flags & !SA_RESTORER, Ordering::Relaxed);
    PROGRAM_ACTION.store(packed, Ordering::SeqCst);
}

/// heapsnap's handler with the program's mask, and the program's flags when it has a handler
/// (one-shot excepted: heapsnap's handler stays). A default or ignored action gets
/// `SA_RESTART`, so that heapsnap's signal never makes a system call fail with EINTR.
fn install(signal: libc::c_int, program: &libc::sigaction) -> bool {
    let program_has_handler = !matches!(program.sa_sigaction, libc::SIG_DFL | libc::SIG_IGN);
    // SAFETY: sigaction is plain data; all-zero is a valid value.
    let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
    ours.sa_sigaction = HEAPSNAP_HANDLER.load(Ordering::SeqCst);
    ours.sa_mask = program.sa_mask;
    ours.sa_flags = if program_has_handler {
        (program.sa_flags & !(libc::SA_RESETHAND | SA_RESTORER)) | libc::SA_SIGINFO
    } else {
        libc::SA_RESTART | libc::SA_SIGINFO
    };
    real_sigaction(signal, &ours, std::ptr::null_mut()) == 0
}

/// Runs the program's action for `signal` after heapsnap's: its handler, called the way it
/// asked (with or without `siginfo`); nothing for a default or ignored action.
pub fn call_program_handler(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let packed = PROGRAM_ACTION.load(Ordering::SeqCst);
    let address = (packed & !PACKED_FLAGS) as usize;
    if address == libc::SIG_DFL || address == libc::SIG_IGN {
        return;
    }
    if packed & PACKED_RESETHAND != 0 {
        // One shot, as the program asked: later signals find the default action.
        let _ = PROGRAM_ACTION.compare_exchange(packed, libc::SIG_DFL as u64, Ordering::SeqCst, Ordering::SeqCst);
    }
    if packed & PACKED_SIGINFO != 0 {
        // SAFETY: the program installed this address as an SA_SIGINFO handler, whose type is
        // Handler; info and context are the kernel's, as it would have received them.
        unsafe { std::mem::transmute::<usize, Handler>(address)(signal, info, context) };
    } else {
        // SAFETY: the program installed this address as a plain handler, `void (*)(int)`.
        unsafe { std::mem::transmute::<usize, extern "C" fn(libc::c_int)>(address)(signal) };
    }
}

/// The program's action as it set it (for `sigaction`'s answer): its handler and flags, and the
/// mask heapsnap's handler carries for it.
fn program_view(signal: libc::c_int, old: &mut libc::sigaction) -> libc::c_int {
    if real_sigaction(signal, std::ptr::null(), old) != 0 {
        return -1;
    }
    let packed = PROGRAM_ACTION.load(Ordering::SeqCst);
    old.sa_sigaction = (packed & !PACKED_FLAGS) as usize;
    old.sa_flags = PROGRAM_FLAGS.load(Ordering::Relaxed);
    0
}

/// The program sets or reads its action for heapsnap's trigger signal.
fn program_sigaction(signal: libc::c_int, action: Option<&libc::sigaction>, old: Option<&mut libc::sigaction>) -> libc::c_int {
    if let Some(old) = old {
        if program_view(signal, old) != 0 {
            return -1;
        }
    }
    if let Some(action) = action {
        // heapsnap's handler stays, with the program's mask and flags; it calls the program's.
        if !install(signal, action) {
            return -1;
        }
        record_program_action(action);
    }
    0
}

/// `sigaction(2)` as the program calls it: the C library's, except for the trigger signal.
///
/// # Safety
/// As the C library's: `action` and `old` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn sigaction(signal: libc::c_int, action: *const libc::sigaction, old: *mut libc::sigaction) -> libc::c_int {
    if signal == 0 || signal != TRIGGER.load(Ordering::SeqCst) {
        return real_sigaction(signal, action, old);
    }
    // SAFETY: the caller passes null or valid pointers, as sigaction(2) requires.
    let (action, old) = unsafe { (action.as_ref(), old.as_mut()) };
    program_sigaction(signal, action, old)
}

/// `signal(3)` as the program calls it: the C library's, except for the trigger signal, where
/// it is glibc's (BSD semantics: `SA_RESTART`, the signal blocked in its handler).
///
/// # Safety
/// As the C library's.
#[no_mangle]
pub unsafe extern "C" fn signal(signal: libc::c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if signal == 0 || signal != TRIGGER.load(Ordering::SeqCst) {
        return match next_definition(&REAL_SIGNAL, c"signal") {
            0 => libc::SIG_ERR,
            // SAFETY: the address is the C library's `signal`, whose type is SignalFn.
            address => unsafe { std::mem::transmute::<usize, SignalFn>(address)(signal, handler) },
        };
    }
    // SAFETY: sigaction is plain data; all-zero is a valid value.
    let (mut action, mut old): (libc::sigaction, libc::sigaction) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    action.sa_sigaction = handler;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset_t owned here.
    unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaddset(&mut action.sa_mask, signal);
    }
    match program_sigaction(signal, Some(&action), Some(&mut old)) {
        0 => old.sa_sigaction,
        _ => libc::SIG_ERR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    static HEAPSNAP_RAN: AtomicU32 = AtomicU32::new(0);
    static BEFORE_RAN: AtomicU32 = AtomicU32::new(0);
    static AFTER_RAN: AtomicU32 = AtomicU32::new(0);

    extern "C" fn heapsnap_handler(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
        HEAPSNAP_RAN.fetch_add(1, Ordering::SeqCst);
        call_program_handler(signal, info, context);
    }

    extern "C" fn before(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: the kernel's siginfo, valid during the handler.
        if !info.is_null() && unsafe { (*info).si_signo } == libc::SIGUSR1 {
            BEFORE_RAN.fetch_add(1, Ordering::SeqCst);
        }
    }

    extern "C" fn after(_: libc::c_int) {
        AFTER_RAN.fetch_add(1, Ordering::SeqCst);
    }

    fn set(handler: usize, flags: libc::c_int) -> libc::sigaction {
        // SAFETY: plain data, then valid pointers to sigaction (this crate's when interposed).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler;
            action.sa_flags = flags;
            let mut old: libc::sigaction = std::mem::zeroed();
            assert_eq!(libc::sigaction(libc::SIGUSR1, &action, &mut old), 0);
            old
        }
    }

    fn raise() {
        // SAFETY: SIGUSR1 has a handler in every call below.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR1) }, 0);
    }

    /// One test: the trigger signal is process-wide state.
    #[test]
    fn the_programs_handler_runs_after_heapsnaps_whether_set_before_or_after() {
        // Before: an SA_SIGINFO handler, kept by `take` and called with its siginfo.
        set(before as *const () as usize, libc::SA_SIGINFO);
        assert!(take(libc::SIGUSR1, heapsnap_handler));
        raise();
        assert_eq!((HEAPSNAP_RAN.load(Ordering::SeqCst), BEFORE_RAN.load(Ordering::SeqCst)), (1, 1));

        // After: a plain handler set through `sigaction` replaces the program's, not heapsnap's;
        // the program is answered with its previous action.
        let old = set(after as *const () as usize, 0);
        assert_eq!((old.sa_sigaction, old.sa_flags & libc::SA_SIGINFO), (before as *const () as usize, libc::SA_SIGINFO));
        raise();
        assert_eq!((HEAPSNAP_RAN.load(Ordering::SeqCst), BEFORE_RAN.load(Ordering::SeqCst), AFTER_RAN.load(Ordering::SeqCst)), (2, 1, 1));

        // The program's flags are honoured: without SA_RESTART its system calls see EINTR.
        // SAFETY: plain data, then a valid pointer to the C library's sigaction.
        let installed = unsafe {
            let mut installed: libc::sigaction = std::mem::zeroed();
            real_sigaction(libc::SIGUSR1, std::ptr::null(), &mut installed);
            installed
        };
        assert_eq!(installed.sa_sigaction, heapsnap_handler as *const () as usize);
        assert_eq!(installed.sa_flags & libc::SA_RESTART, 0);

        // `signal` too; SIG_IGN then leaves heapsnap's handler alone.
        // SAFETY: a valid handler value for SIGUSR1.
        let previous = unsafe { signal(libc::SIGUSR1, libc::SIG_IGN) };
        assert_eq!(previous, after as *const () as usize);
        raise();
        assert_eq!((HEAPSNAP_RAN.load(Ordering::SeqCst), AFTER_RAN.load(Ordering::SeqCst)), (3, 1));
    }
}
