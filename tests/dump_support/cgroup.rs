//! A cgroup of a test's own, under the test process's cgroup, removed when dropped: for memory
//! limits (`memory`) and task limits (`pids`), in cgroup v1 or v2.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

pub struct TestCgroup {
    pub dir: PathBuf,
    pub version: CgroupVersion,
    /// Where its processes go back to: the cgroup it was made in.
    home: PathBuf,
}

impl TestCgroup {
    /// Makes one in cgroup `version`'s hierarchy with `controller`; `Err` says why this machine
    /// cannot (not root, the controller not mounted, or not writable).
    pub fn make(controller: &str, version: CgroupVersion) -> Result<TestCgroup, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let v2_root = Path::new("/sys/fs/cgroup");
        let home = match version {
            CgroupVersion::V1 => own.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                let hierarchy = v2_root.join(controller);
                (controllers.split(',').any(|c| c == controller) && hierarchy.is_dir())
                    .then(|| hierarchy.join(path.trim_start_matches('/')))
            }),
            CgroupVersion::V2 => own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .filter(|_| v2_root.join("cgroup.controllers").exists())
                .map(|path| v2_root.join(path.trim_start_matches('/'))),
        }
        .ok_or_else(|| format!("no cgroup {version:?} hierarchy with the {controller} controller holds this process"))?;
        // One each: tests run at once.
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = home.join(format!("heapsnap-test-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let cgroup = TestCgroup { dir, version, home };
        let probe = match (controller, version) {
            ("memory", CgroupVersion::V1) => "memory.limit_in_bytes",
            ("memory", CgroupVersion::V2) => "memory.max",
            (other, _) => &format!("{other}.max"),
        };
        if !cgroup.dir.join(probe).exists() {
            return Err(format!("{} has no {probe}: the {controller} controller is not enabled there", cgroup.dir.display()));
        }
        Ok(cgroup)
    }

    /// Made in the first hierarchy that has `controller`: v1's, else v2's.
    pub fn make_any(controller: &str) -> Result<TestCgroup, String> {
        TestCgroup::make(controller, CgroupVersion::V1).or_else(|_| TestCgroup::make(controller, CgroupVersion::V2))
    }

    /// Limits its memory to `bytes`, without swap (the limit is then what kills).
    pub fn limit_memory(&self, bytes: u64) -> Result<(), String> {
        let file = match self.version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        };
        std::fs::write(self.dir.join(file), bytes.to_string()).map_err(|e| format!("cannot limit {}: {e}", self.dir.display()))?;
        let _ = std::fs::write(self.dir.join("memory.swap.max"), "0");
        let _ = std::fs::write(self.dir.join("memory.memsw.limit_in_bytes"), bytes.to_string());
        Ok(())
    }

    /// Moves process `pid` into it.
    pub fn add(&self, pid: i32) -> Result<(), String> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .map_err(|e| format!("cannot move {pid} into {}: {e}", self.dir.display()))
    }

    pub fn set(&self, file: &str, value: &str) {
        std::fs::write(self.dir.join(file), value).unwrap_or_else(|e| panic!("write {value} to {}: {e}", self.dir.join(file).display()));
    }

    /// How many processes the out-of-memory killer killed in it.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.version {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        };
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok()).unwrap_or(0)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write(self.home.join("cgroup.procs"), pid);
            }
        }
        // A process killed in it may take a moment to be gone.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
