//! The host name of a live target, as the target sees it: `uname`'s node name in its UTS
//! namespace. A process in a container usually has its own (the pod's name); the dumper reads
//! it from a short-lived thread of its own that enters the target's UTS namespace (a thread's
//! UTS namespace is its own: the dumper's other threads, and the target, are untouched). When
//! that cannot be done (no privilege to enter it), the dumper's own host name is given instead,
//! the machine's; `/proc/PID/root/etc/hostname` is not read (a file the container may never have
//! set, or set to something else than its node name).

use std::ffi::CStr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

/// The host name as `pid` sees it (see the module's documentation), or the dumper's own.
pub fn hostname_of(pid: u32) -> Option<String> {
    let theirs = format!("/proc/{pid}/ns/uts");
    let same = match (std::fs::metadata(&theirs), std::fs::metadata("/proc/self/ns/uts")) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => true,
    };
    if !same {
        let entered = std::thread::spawn(move || {
            let ns = std::fs::File::open(&theirs).ok()?;
            // SAFETY: setns on a descriptor we own; it changes this thread's UTS namespace
            // only, and the thread ends right after reading the name.
            (unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWUTS) } == 0).then(own_hostname).flatten()
        })
        .join()
        .ok()
        .flatten();
        if entered.is_some() {
            return entered;
        }
    }
    own_hostname()
}

/// This thread's host name (`uname`'s node name).
pub fn own_hostname() -> Option<String> {
    // SAFETY: `utsname` is plain data, zeroed then filled by uname.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes into the struct we own.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    // SAFETY: uname leaves `nodename` NUL-terminated within its array.
    let name = unsafe { CStr::from_ptr(uts.nodename.as_ptr()) };
    Some(name.to_string_lossy().into_owned()).filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_in_the_dumpers_namespace_has_the_dumpers_name() {
        let own = own_hostname().expect("a host name");
        assert_eq!(hostname_of(std::process::id()), Some(own));
    }

    /// A process in a UTS namespace of its own, with another name: that name (when this test
    /// may create the namespace: it needs root).
    #[test]
    fn a_process_in_another_uts_namespace_has_its_own_name() {
        let own = own_hostname().expect("a host name");
        let child = std::process::Command::new("unshare")
            .args(["--uts", "sh", "-c", "hostname heapsnap-test-host && exec sleep 30"])
            .stdin(std::process::Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("skipped: no unshare");
            return;
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = None;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break; // unshare refused (not root)
            }
            let exe = std::fs::read_link(format!("/proc/{}/exe", child.id())).unwrap_or_default();
            if exe.file_name().is_some_and(|f| f == "sleep") {
                seen = hostname_of(child.id());
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        match seen {
            Some(name) => assert_eq!(name, "heapsnap-test-host", "the dumper's own is {own}"),
            None => eprintln!("skipped: could not make a UTS namespace here"),
        }
    }
}
