//! The memory cgroups that hold a process, its own and every ancestor, in cgroup v2 or in v1's
//! memory controller: their limits and what they charge; and the machine's available memory. The
//! dumper's room for a fork and its `on-memory` trigger read them, and the analysis its own room
//! before it allocates for a heap.

use std::path::{Path, PathBuf};

/// Where the cgroup hierarchies are mounted: v2 at the root, v1's memory controller in `memory/`.
pub const ROOT: &str = "/sys/fs/cgroup";

/// Limits this large or larger mean "no limit" (v1 writes its unlimited as a huge number).
const NO_LIMIT: u64 = 1 << 60;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// One memory cgroup: its directory and the hierarchy it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryCgroup {
    pub dir: PathBuf,
    pub version: Version,
}

impl MemoryCgroup {
    fn read_number(&self, v2: &str, v1: &str) -> Option<u64> {
        let file = match self.version {
            Version::V2 => v2,
            Version::V1 => v1,
        };
        std::fs::read_to_string(self.dir.join(file)).ok()?.trim().parse().ok()
    }

    /// Its limit (`memory.max`, `memory.limit_in_bytes`); `None` when it has none.
    pub fn limit(&self) -> Option<u64> {
        // v2's "max" does not parse: no limit.
        self.read_number("memory.max", "memory.limit_in_bytes").filter(|&limit| limit < NO_LIMIT)
    }

    /// What it charges now (`memory.current`, `memory.usage_in_bytes`), page cache included.
    pub fn usage(&self) -> Option<u64> {
        self.read_number("memory.current", "memory.usage_in_bytes")
    }

    /// What it charges less the inactive page cache, which the kernel reclaims before it kills
    /// anything: the working set, as `docker stats` and the kubelet count it.
    pub fn working_set(&self) -> Option<u64> {
        let usage = self.usage()?;
        let key = match self.version {
            Version::V2 => "inactive_file",
            Version::V1 => "total_inactive_file",
        };
        let stat = std::fs::read_to_string(self.dir.join("memory.stat")).ok()?;
        let inactive: u64 = stat.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0);
        Some(usage.saturating_sub(inactive))
    }

    /// What it charges for anonymous memory (`anon`, v1's `total_rss`): what the kernel cannot
    /// reclaim without swap, unlike the page cache it charges too (a mapped file's pages).
    pub fn anonymous(&self) -> Option<u64> {
        let key = match self.version {
            Version::V2 => "anon",
            Version::V1 => "total_rss",
        };
        let stat = std::fs::read_to_string(self.dir.join("memory.stat")).ok()?;
        stat.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// The processes in it (not in its descendants).
    pub fn processes(&self) -> Option<Vec<i32>> {
        let text = std::fs::read_to_string(self.dir.join("cgroup.procs")).ok()?;
        Some(text.split_whitespace().filter_map(|p| p.parse().ok()).collect())
    }
}

/// The memory cgroups holding a process, as read from `/proc/PID/cgroup`'s text, with their
/// directories under `root`: for each hierarchy whose memory files are there, the process's own
/// cgroup first, then its ancestors up to `root`.
pub fn chain(cgroups: &str, root: &Path) -> Vec<MemoryCgroup> {
    let mut found = Vec::new();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let relative = path.trim_start_matches('/');
        let (dir, version, usage_file) = if controllers.is_empty() {
            (root.join(relative), Version::V2, "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory").join(relative), Version::V1, "memory.usage_in_bytes")
        } else {
            continue;
        };
        let mut at = Some(dir.as_path());
        while let Some(d) = at.filter(|d| d.starts_with(root)) {
            // A hierarchy without the memory controller (v2 in a hybrid mount) has no such file.
            if d.join(usage_file).exists() {
                found.push(MemoryCgroup { dir: d.to_path_buf(), version });
            }
            at = d.parent();
        }
    }
    found
}

/// The memory cgroups holding process `pid` (empty when it has exited or none is mounted).
pub fn of_process(pid: i32) -> Vec<MemoryCgroup> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    chain(&text, Path::new(ROOT))
}

/// A limited cgroup as read at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charged {
    pub dir: PathBuf,
    pub limit: u64,
    pub usage: u64,
}

impl Charged {
    pub fn room(&self) -> u64 {
        self.limit.saturating_sub(self.usage)
    }
}

/// The limited cgroups of `chain`, with their usage now.
fn limited(chain: &[MemoryCgroup]) -> impl Iterator<Item = Charged> + '_ {
    chain.iter().filter_map(|c| Some(Charged { dir: c.dir.clone(), limit: c.limit()?, usage: c.usage()? }))
}

/// The cgroup of `chain` with the least room under its limit.
pub fn least_room(chain: &[MemoryCgroup]) -> Option<Charged> {
    limited(chain).min_by_key(Charged::room)
}

/// The cgroup of `chain` with the smallest limit.
pub fn smallest_limit(chain: &[MemoryCgroup]) -> Option<Charged> {
    limited(chain).min_by_key(|c| c.limit)
}

/// A number of kB from `/proc/meminfo` or `/proc/PID/status`'s text (`name` with its colon), in bytes.
pub fn kib_field(text: &str, name: &str) -> Option<u64> {
    let kib: u64 = text.lines().find_map(|l| l.strip_prefix(name))?.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// What the machine can still give without swapping (`MemAvailable`: free memory and what the
/// kernel can reclaim).
pub fn mem_available() -> Option<u64> {
    kib_field(&std::fs::read_to_string("/proc/meminfo").ok()?, "MemAvailable:")
}

/// The machine's memory (`MemTotal`).
pub fn mem_total() -> Option<u64> {
    kib_field(&std::fs::read_to_string("/proc/meminfo").ok()?, "MemTotal:")
}

/// How much more memory this process can have before the kernel reclaims what it cannot or
/// kills something: the machine's `MemAvailable`, and the room under the tightest limit of the
/// memory cgroups that hold the process. `None` when neither can be read.
/// Within a cgroup, its limit less its anonymous memory: the page cache it charges (the
/// snapshot's mapped pages among it) is reclaimed before anything is killed.
pub fn own_room() -> Option<Room> {
    let available = mem_available();
    let in_cgroup = of_process(std::process::id() as i32)
        .iter()
        .filter_map(|c| {
            let limit = c.limit()?;
            let room = limit.saturating_sub(c.anonymous()?);
            Some(Room { bytes: room, of: format!("the memory cgroup {} (limit {} bytes)", c.dir.display(), limit) })
        })
        .min_by_key(|r| r.bytes);
    let machine = available.map(|bytes| Room { bytes, of: "the machine's available memory (MemAvailable)".into() });
    [in_cgroup, machine].into_iter().flatten().min_by_key(|r| r.bytes)
}

/// Room for more memory, and what bounds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    pub bytes: u64,
    /// What sets the bound, in words: `the memory cgroup /sys/fs/cgroup/svc (limit N bytes)`.
    pub of: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_the_tightest_and_the_smallest_limit_in_v1_and_v2() {
        let root = tempfile::tempdir().unwrap();
        let write = |dir: &str, files: &[(&str, &str)]| {
            let d = root.path().join(dir);
            std::fs::create_dir_all(&d).unwrap();
            for (name, text) in files {
                std::fs::write(d.join(name), text).unwrap();
            }
        };
        // v2: the parent has less room than the leaf but a larger limit; the root has none.
        write("", &[("memory.max", "max\n"), ("memory.current", "5\n")]);
        write("a", &[("memory.max", "1000\n"), ("memory.current", "900\n")]);
        write("a/b", &[("memory.max", "800\n"), ("memory.current", "100\n"), ("memory.stat", "anon 60\ninactive_file 30\n")]);
        let chain_v2 = chain("0::/a/b\n", root.path());
        let dirs: Vec<&Path> = chain_v2.iter().map(|c| c.dir.as_path()).collect();
        assert_eq!(dirs, [root.path().join("a/b"), root.path().join("a"), root.path().to_path_buf()]);
        assert_eq!(least_room(&chain_v2), Some(Charged { dir: root.path().join("a"), limit: 1000, usage: 900 }));
        assert_eq!(smallest_limit(&chain_v2).map(|c| c.limit), Some(800));
        assert_eq!(chain_v2[0].working_set(), Some(70));
        // v1: the memory controller's line; a huge limit is no limit; other controllers are not read.
        write("memory", &[("memory.limit_in_bytes", "9223372036854771712\n"), ("memory.usage_in_bytes", "1\n")]);
        write(
            "memory/svc",
            &[
                ("memory.limit_in_bytes", "4096\n"),
                ("memory.usage_in_bytes", "1024\n"),
                ("memory.stat", "inactive_file 9\ntotal_inactive_file 24\n"),
            ],
        );
        let chain_v1 = chain("4:memory:/svc\n3:cpu:/\n", root.path());
        assert_eq!(least_room(&chain_v1), Some(Charged { dir: root.path().join("memory/svc"), limit: 4096, usage: 1024 }));
        assert_eq!(chain_v1[0].working_set(), Some(1000));
        assert_eq!(chain_v1[1].limit(), None);
        assert!(least_room(&chain("3:cpu:/\n", root.path())).is_none());
    }

    #[test]
    fn kib_fields() {
        assert_eq!(kib_field("MemTotal:       24684000 kB\nMemFree: 1 kB\n", "MemTotal:"), Some(24684000 * 1024));
        assert_eq!(kib_field("VmRSS:\t  1200 kB\n", "VmRSS:"), Some(1200 * 1024));
        assert_eq!(kib_field("", "VmRSS:"), None);
    }
}
