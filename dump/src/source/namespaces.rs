//! Where a live target runs, seen from the dumper: its own pid in its PID namespace, and
//! whether its PID namespace, mount namespace and root are the dumper's. A process in a
//! container differs in all of them; a sidecar sharing its PID namespace (`kubectl debug
//! --target`) sees it in its own PID namespace but another mount namespace and root.

use heapsnap_format::Namespaces;
use std::os::unix::fs::MetadataExt;

/// The namespaces of process `pid`, when any differs from ours (`None` when it shares them
/// all, or they cannot be read).
pub fn namespaces_of(pid: u32) -> Option<Namespaces> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ns_pids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|v| v.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default();
    let differs = |what: &str| same_file(&format!("/proc/{pid}/{what}"), &format!("/proc/self/{what}")) == Some(false);
    let found = Namespaces {
        pid_inside: ns_pids.last().copied(),
        other_pid_namespace: differs("ns/pid"),
        other_mount_namespace: differs("ns/mnt"),
        other_root: differs("root"),
    };
    (found.other_pid_namespace || found.other_mount_namespace || found.other_root).then_some(found)
}

/// Whether the two paths lead to the same file (device and inode); `None` when either cannot
/// be read (a namespace link needs the same ptrace access as the dump).
fn same_file(a: &str, b: &str) -> Option<bool> {
    let (a, b) = (std::fs::metadata(a).ok()?, std::fs::metadata(b).ok()?);
    Some((a.dev(), a.ino()) == (b.dev(), b.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_shares_its_own_namespaces() {
        assert_eq!(namespaces_of(std::process::id()), None);
        assert_eq!(same_file("/proc/self/root", "/"), Some(true));
        assert_eq!(same_file("/proc/self/root", "/no/such/file"), None);
    }
}
