//! How a live dump copies the stopped target: while it is stopped (`copy`), or by forking it and
//! reading the frozen child while the target runs again (`fork`, [`crate::source::FrozenCopy`]).
//! `auto` forks when that is safe and pays. Everything here is read before the target is
//! stopped.

use crate::error::{DumpError, Result};
use crate::source::inject::find_syscall_site;
use crate::source::{Guardian, MemorySource};
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// `--capture`, `capture=` in `OCAML_HEAPSNAP`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CaptureMode {
    #[default]
    Auto,
    Fork,
    Copy,
}

impl FromStr for CaptureMode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(CaptureMode::Auto),
            "fork" => Ok(CaptureMode::Fork),
            "copy" => Ok(CaptureMode::Copy),
            other => Err(format!("unknown capture '{other}' (expected fork, copy or auto)")),
        }
    }
}

impl fmt::Display for CaptureMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CaptureMode::Auto => "auto",
            CaptureMode::Fork => "fork",
            CaptureMode::Copy => "copy",
        })
    }
}

/// Below this much private anonymous memory `auto` copies: the copy's pause is then a few
/// milliseconds, about what the fork itself would take.
pub const AUTO_FORK_MIN_BYTES: u64 = 64 << 20;

/// A range a fork's child does not hold frozen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NotFrozen {
    pub start: u64,
    pub end: u64,
    /// `MAP_SHARED` (the child sees the target's later writes), `MADV_DONTFORK` (absent from
    /// the child) or `MADV_WIPEONFORK` (zero in the child).
    pub why: &'static str,
    pub path: Option<String>,
}

impl fmt::Display for NotFrozen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}-{:#x} ({}", self.start, self.end, self.why)?;
        if let Some(path) = &self.path {
            write!(f, ", {path}")?;
        }
        write!(f, ")")
    }
}

/// What the dump will do, decided while the target runs.
pub struct CapturePlan {
    pub requested: CaptureMode,
    /// Where the target's thread makes the `clone`: `Some` when the dump forks.
    pub fork_site: Option<u64>,
    /// Why the dump copies when `auto` was asked, or why it fell back (said in the report and
    /// the snapshot's metadata).
    pub why_copy: Option<String>,
    /// The target's ranges a fork does not freeze (reported; a capture that read one is taken
    /// again by copying).
    pub not_frozen: Vec<NotFrozen>,
    /// Started before the stop, for the fork.
    pub guardian: Option<Guardian>,
}

impl CapturePlan {
    /// The capture forks no more (`why`): an `auto` fork that failed or read what it cannot freeze.
    pub fn fall_back(&mut self, why: String) {
        self.fork_site = None;
        self.why_copy = Some(why);
        if let Some(g) = self.guardian.take() {
            g.dismiss();
        }
    }

    /// The first range of `regions` (start, end) that a fork does not freeze.
    pub fn unfrozen_read(&self, mut regions: impl Iterator<Item = (u64, u64)>) -> Option<&NotFrozen> {
        regions.find_map(|(start, end)| self.not_frozen.iter().find(|n| n.start < end && start < n.end))
    }
}

/// Decides how process `pid` is captured; `memory` reads it while it runs. An explicit `fork`
/// that is not safe or may not fit is [`DumpError::ForkRefused`].
pub fn plan(pid: u32, requested: CaptureMode, memory: &dyn MemorySource) -> Result<CapturePlan> {
    let mut plan = CapturePlan { requested, fork_site: None, why_copy: None, not_frozen: Vec::new(), guardian: None };
    if requested == CaptureMode::Copy {
        return Ok(plan);
    }
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let status = read_proc(&proc_dir.join("status"))?;
    let refuse = |plan: &mut CapturePlan, why: String| -> Result<()> {
        match requested {
            CaptureMode::Fork => Err(DumpError::ForkRefused { pid, why }),
            _ => {
                plan.why_copy = Some(why);
                Ok(())
            }
        }
    };
    let seccomp = status_field(&status, "Seccomp:").unwrap_or(0);
    if seccomp != 0 {
        refuse(
            &mut plan,
            format!("it runs under seccomp (Seccomp: {seccomp} in /proc/PID/status), which may forbid a clone, or kill it for one"),
        )?;
        return Ok(plan);
    }
    let private = status_field(&status, "RssAnon:").unwrap_or(0) * 1024;
    if requested == CaptureMode::Auto && private < AUTO_FORK_MIN_BYTES {
        plan.why_copy = Some(format!(
            "its private memory ({} MiB) is below {} MiB: copying it stops it about as briefly as a fork would",
            private >> 20,
            AUTO_FORK_MIN_BYTES >> 20
        ));
        return Ok(plan);
    }
    if let Some(why) = headroom(pid).shortfall(private) {
        refuse(&mut plan, why)?;
        return Ok(plan);
    }
    let mappings = memory.mappings()?;
    let Some(site) = find_syscall_site(&mappings, |at, buf| memory.read(at, buf).is_ok()) else {
        refuse(&mut plan, "no syscall instruction was found in its code to make the clone from".into())?;
        return Ok(plan);
    };
    plan.not_frozen = std::fs::read_to_string(proc_dir.join("smaps")).map(|t| not_frozen(&t)).unwrap_or_default();
    plan.fork_site = Some(site);
    plan.guardian = Guardian::start(pid, site);
    Ok(plan)
}

fn read_proc(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| DumpError::Io { path: path.to_path_buf(), source })
}

/// A number field of `/proc/PID/status` (`kB` dropped).
fn status_field(status: &str, name: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix(name))?.split_whitespace().next()?.parse().ok()
}

/// The ranges of `smaps` text a fork does not freeze.
pub fn not_frozen(smaps: &str) -> Vec<NotFrozen> {
    let mut out = Vec::new();
    let mut current: Option<(u64, u64, bool, Option<String>)> = None;
    for line in smaps.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            let Some((start, end, shared, path)) = current.take() else { continue };
            let flags: Vec<&str> = flags.split_whitespace().collect();
            let why = if flags.contains(&"dc") {
                Some("MADV_DONTFORK")
            } else if flags.contains(&"wf") {
                Some("MADV_WIPEONFORK")
            } else if shared {
                Some("MAP_SHARED")
            } else {
                None
            };
            if let Some(why) = why {
                out.push(NotFrozen { start, end, why, path });
            }
            continue;
        }
        let mut fields = line.split_whitespace();
        let Some((start, end)) = fields.next().and_then(|r| r.split_once('-')) else { continue };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16)) else { continue };
        let Some(perms) = fields.next().filter(|p| p.len() == 4) else { continue };
        let path = fields.nth(3).map(str::to_owned);
        current = Some((start, end, perms.ends_with('s'), path));
    }
    out
}

/// Memory the target may take while a fork's child lives.
#[derive(Debug, Default)]
struct Headroom {
    /// The memory cgroup with the least room under its limit.
    cgroup: Option<crate::cgroup::Charged>,
    /// `MemAvailable` of `/proc/meminfo`.
    available: Option<u64>,
}

impl Headroom {
    /// Why `needed` bytes may not fit, when they may not.
    fn shortfall(&self, needed: u64) -> Option<String> {
        if let Some(cgroup) = &self.cgroup {
            if needed > cgroup.room() {
                return Some(format!(
                    "its private memory ({} MiB), which the target may rewrite while the fork lives, exceeds the room under its memory cgroup's limit ({} MiB used of {} MiB in {})",
                    needed >> 20,
                    cgroup.usage >> 20,
                    cgroup.limit >> 20,
                    cgroup.dir.display()
                ));
            }
        }
        match self.available {
            Some(available) if needed > available => Some(format!(
                "its private memory ({} MiB), which the target may rewrite while the fork lives, exceeds the machine's available memory ({} MiB)",
                needed >> 20,
                available >> 20
            )),
            _ => None,
        }
    }
}

fn headroom(pid: u32) -> Headroom {
    Headroom { cgroup: crate::cgroup::least_room(&crate::cgroup::of_process(pid as i32)), available: crate::cgroup::mem_available() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_dontfork_and_wipeonfork_ranges_are_not_frozen() {
        let smaps = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
VmFlags: rd wr mr mw me ac sd
7f0000000000-7f0000100000 rw-s 00000000 00:05 1234                       /dev/shm/cache
Size:               1024 kB
VmFlags: rd wr sh mr mw me ms sd
7f0000200000-7f0000300000 rw-p 00000000 00:00 0
VmFlags: rd wr mr mw me dc ac sd
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
VmFlags: rd wr mr mw me ac sd wf
";
        let found = not_frozen(smaps);
        let whys: Vec<(&str, Option<&str>)> = found.iter().map(|n| (n.why, n.path.as_deref())).collect();
        assert_eq!(whys, vec![("MAP_SHARED", Some("/dev/shm/cache")), ("MADV_DONTFORK", None), ("MADV_WIPEONFORK", None)]);
        assert_eq!((found[1].start, found[1].end), (0x7f0000200000, 0x7f0000300000));
        let plan = CapturePlan { requested: CaptureMode::Fork, fork_site: None, why_copy: None, not_frozen: found, guardian: None };
        assert_eq!(
            plan.unfrozen_read([(0x1000, 0x2000), (0x7f00002ff000, 0x7f0000301000)].into_iter()).map(|n| n.why),
            Some("MADV_DONTFORK")
        );
        assert_eq!(plan.unfrozen_read([(0x7f0000300000, 0x7f0000400000)].into_iter()), None);
    }

    #[test]
    fn a_shortfall_names_the_limit_it_would_cross() {
        let cgroup = crate::cgroup::Charged { dir: PathBuf::from("/sys/fs/cgroup/memory/svc"), limit: 4096, usage: 1024 };
        let why = Headroom { cgroup: Some(cgroup), available: Some(1 << 40) }.shortfall(1 << 20).unwrap();
        assert!(why.contains("memory cgroup") && why.contains("memory/svc"), "{why}");
        assert_eq!(Headroom { cgroup: None, available: Some(2 << 20) }.shortfall(1 << 20), None);
        assert!(Headroom { cgroup: None, available: Some(1 << 20) }.shortfall(2 << 20).unwrap().contains("available memory"));
    }
}
