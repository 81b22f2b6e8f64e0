//! Why the kernel refused to let us trace or read a process, and what to grant. In a container
//! the usual causes are a missing CAP_SYS_PTRACE, Yama's `ptrace_scope`, and a seccomp profile
//! that forbids `ptrace` or `process_vm_readv`; each is read from `/proc` where it shows.

use std::path::Path;

/// `CAP_SYS_PTRACE`'s bit in a capability set.
const CAP_SYS_PTRACE: u32 = 19;

/// What we know of the refusal to trace or read `pid`: the causes that apply, each with what
/// would lift it, or, when none shows, all three to check.
pub fn what_to_grant(pid: u32) -> String {
    let ours = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let theirs = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let ptrace_scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok().and_then(|s| s.trim().parse::<u32>().ok());
    causes(&ours, &theirs, ptrace_scope, other_user_namespace(pid))
}

fn causes(ours: &str, theirs: &str, ptrace_scope: Option<u32>, other_user_namespace: bool) -> String {
    let field = |status: &str, name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string());
    let has_ptrace_cap = field(ours, "CapEff:").and_then(|c| u64::from_str_radix(&c, 16).ok()).map(|c| c & (1 << CAP_SYS_PTRACE) != 0);
    let uid = |status: &str| field(status, "Uid:").and_then(|u| u.split_whitespace().next().map(str::to_string));
    let mut found = Vec::new();
    if has_ptrace_cap == Some(false) {
        match (uid(ours), uid(theirs)) {
            (Some(a), Some(b)) if a != b => found.push(format!(
                "it runs as uid {b}, heapsnap as uid {a} without CAP_SYS_PTRACE: run heapsnap as uid {b}, or grant it CAP_SYS_PTRACE"
            )),
            _ => {}
        }
    }
    match ptrace_scope {
        Some(1) if has_ptrace_cap != Some(true) => found.push(
            "Yama's ptrace_scope is 1 (/proc/sys/kernel/yama/ptrace_scope): only a process's ancestors may trace it: grant heapsnap CAP_SYS_PTRACE, start the program under `heapsnap run`, or set ptrace_scope to 0"
                .to_string(),
        ),
        Some(2) if has_ptrace_cap != Some(true) => found.push(
            "Yama's ptrace_scope is 2 (/proc/sys/kernel/yama/ptrace_scope): only a process with CAP_SYS_PTRACE may trace another: grant heapsnap CAP_SYS_PTRACE".to_string(),
        ),
        Some(3) => found.push(
            "Yama's ptrace_scope is 3 (/proc/sys/kernel/yama/ptrace_scope): no process may trace another until the machine restarts with a lower value".to_string(),
        ),
        _ => {}
    }
    if other_user_namespace && has_ptrace_cap == Some(true) {
        found.push(
            "heapsnap runs in another user namespace than the process, where its CAP_SYS_PTRACE does not reach: run it in the process's user namespace or above".to_string(),
        );
    }
    if field(ours, "Seccomp:").is_some_and(|s| s != "0") {
        found.push(
            "heapsnap runs under a seccomp filter (Seccomp in /proc/self/status), which may forbid ptrace or process_vm_readv: use a seccomp profile that allows both (Docker's default allows them only with CAP_SYS_PTRACE)".to_string(),
        );
    }
    if found.is_empty() {
        return "what a container forbids: grant heapsnap CAP_SYS_PTRACE (Docker: --cap-add SYS_PTRACE; Kubernetes: securityContext.capabilities.add [SYS_PTRACE]), check Yama's ptrace_scope (/proc/sys/kernel/yama/ptrace_scope), and a seccomp profile or security module (AppArmor, SELinux) that forbids ptrace or process_vm_readv".to_string();
    }
    found.join("; ")
}

/// Whether `pid` runs in another user namespace than ours (false when it cannot be told).
fn other_user_namespace(pid: u32) -> bool {
    let link = |p: &Path| std::fs::read_link(p).ok();
    match (link(Path::new(&format!("/proc/{pid}/ns/user"))), link(Path::new("/proc/self/ns/user"))) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(uid: u32, cap_eff: u64, seccomp: u32) -> String {
        format!("Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapEff:\t{cap_eff:016x}\nSeccomp:\t{seccomp}\n")
    }

    #[test]
    fn each_cause_names_what_to_grant() {
        let no_cap = status(1000, 0, 0);
        let got = causes(&no_cap, &status(0, 0, 0), None, false);
        assert!(got.contains("uid 0, heapsnap as uid 1000 without CAP_SYS_PTRACE"), "{got}");
        let got = causes(&no_cap, &status(1000, 0, 0), Some(1), false);
        assert!(got.contains("ptrace_scope is 1") && got.contains("grant heapsnap CAP_SYS_PTRACE"), "{got}");
        // With CAP_SYS_PTRACE, ptrace_scope 1 and 2 do not stop us; 3 does.
        let cap = status(0, 1 << CAP_SYS_PTRACE, 0);
        assert!(!causes(&cap, &status(0, 0, 0), Some(2), false).contains("ptrace_scope is"));
        assert!(causes(&cap, &status(0, 0, 0), Some(3), false).contains("ptrace_scope is 3"));
        assert!(causes(&cap, &status(0, 0, 0), None, true).contains("another user namespace"));
        let got = causes(&status(0, 1 << CAP_SYS_PTRACE, 2), &status(0, 0, 0), Some(0), false);
        assert!(got.contains("seccomp") && !got.contains("ptrace_scope"), "{got}");
        // Nothing shows: all three to check.
        let got = causes(&cap, &status(0, 0, 0), Some(0), false);
        assert!(got.contains("CAP_SYS_PTRACE") && got.contains("ptrace_scope") && got.contains("seccomp"), "{got}");
    }
}
