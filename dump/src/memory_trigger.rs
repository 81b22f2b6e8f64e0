//! The `on-memory` trigger: a snapshot when the program's memory first reaches each of a few
//! thresholds, so that a leak leaves something to look at before the out-of-memory killer ends
//! it.
//!
//! A threshold is a size (`2GiB`) or a percentage of the tightest limit on the program: the
//! smallest limit among the memory cgroups holding it (its own and every ancestor, cgroup v2 or
//! v1), else the machine's `MemTotal`. The program's memory is what its own cgroup charges, less
//! the inactive page cache the kernel reclaims before it kills (the working set), when the
//! program is alone in that cgroup (its watcher aside); otherwise, since the cgroup's figure
//! would count other processes, it is the program's resident memory (`VmRSS`). Both are read
//! again at every sample, so a program that moves into a cgroup after it starts (a wrapper
//! that writes its own pid to `cgroup.procs`, then execs) is measured there from then on.

use crate::cgroup::{self, MemoryCgroup};
use serde::Serialize;
use std::fmt;
use std::time::{Duration, Instant};

/// One `on-memory` threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    Bytes(u64),
    /// Hundredths of a percent of the tightest limit.
    Percent(u32),
}

impl Threshold {
    /// The threshold in bytes under `limit`.
    pub fn bytes(self, limit: Option<&Limit>) -> Option<u64> {
        match self {
            Threshold::Bytes(bytes) => Some(bytes),
            Threshold::Percent(hundredths) => Some((limit?.bytes as u128 * hundredths as u128 / 10_000) as u64),
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Threshold::Percent(h) if h % 100 == 0 => write!(f, "{}%", h / 100),
            Threshold::Percent(h) => write!(f, "{}%", format!("{}.{:02}", h / 100, h % 100).trim_end_matches('0')),
            Threshold::Bytes(bytes) => {
                let unit = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)].into_iter().find(|(_, shift)| bytes % (1 << shift) == 0);
                match unit {
                    Some((name, shift)) => write!(f, "{}{name}", bytes >> shift),
                    None => write!(f, "{bytes}B"),
                }
            }
        }
    }
}

/// One threshold: a size with its unit (`400MiB`, `2GiB`, `1.5G`; `K`, `M`, `G`, `T` are binary
/// as in cgroup files, `KB`, `MB`, `GB`, `TB` decimal) or a percentage (`80%`, `62.5%`) below 100.
pub fn parse_threshold(text: &str) -> Result<Threshold, String> {
    let text = text.trim();
    let bad = || format!("'{text}' is not a memory threshold like 400MiB, 2GiB or 80%");
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() || number.starts_with('.') || number.matches('.').count() > 1 {
        return Err(bad());
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if unit == "%" {
        if fraction.len() > 2 {
            return Err(format!("'{text}': a percentage has at most two decimals"));
        }
        let whole: u32 = whole.parse().map_err(|_| bad())?;
        let fraction: u32 = format!("{fraction:0<2}").parse().map_err(|_| bad())?;
        let hundredths = whole.checked_mul(100).and_then(|w| w.checked_add(fraction)).ok_or_else(bad)?;
        if hundredths == 0 || hundredths >= 10_000 {
            return Err(format!("'{text}': a percentage of the limit must be above 0% and below 100% (at 100% the program is killed)"));
        }
        return Ok(Threshold::Percent(hundredths));
    }
    let scale: u64 = match unit.to_ascii_uppercase().as_str() {
        "B" => 1,
        "K" | "KIB" => 1 << 10,
        "M" | "MIB" => 1 << 20,
        "G" | "GIB" => 1 << 30,
        "T" | "TIB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "" => return Err(format!("'{text}' has no unit (a size like 400MiB or 2GiB, or a percentage like 80%)")),
        _ => return Err(format!("'{text}' has an unknown unit '{unit}' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB or %)")),
    };
    let whole: u64 = whole.parse().map_err(|_| bad())?;
    let fraction_value = if fraction.is_empty() {
        0
    } else {
        let digits: u64 = fraction.parse().map_err(|_| bad())?;
        let denominator = 10u64.checked_pow(fraction.len() as u32).ok_or_else(bad)?;
        (digits as u128 * scale as u128 / denominator as u128) as u64
    };
    let bytes = whole.checked_mul(scale).and_then(|b| b.checked_add(fraction_value)).ok_or_else(bad)?;
    if bytes == 0 {
        return Err(format!("'{text}' is zero"));
    }
    Ok(Threshold::Bytes(bytes))
}

/// Comma-separated thresholds (`60%,80%,95%`), each given once.
pub fn parse_thresholds(text: &str) -> Result<Vec<Threshold>, String> {
    let mut thresholds = Vec::new();
    for item in text.split(',') {
        let threshold = parse_threshold(item)?;
        if thresholds.contains(&threshold) {
            return Err(format!("memory threshold {threshold} is given twice"));
        }
        thresholds.push(threshold);
    }
    Ok(thresholds)
}

/// The limit percentages are of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Limit {
    pub bytes: u64,
    /// The cgroup directory that sets it, or `MemTotal`.
    pub of: String,
}

/// The program's memory at one sample.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reading {
    pub bytes: u64,
    /// `cgroup` (the working set of its own cgroup, where it is alone) or `rss`.
    pub measured: &'static str,
    /// The cgroup read, when `measured` is `cgroup`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    pub limit: Option<Limit>,
}

impl fmt::Display for Reading {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", mib(self.bytes), if self.measured == "cgroup" { "its cgroup's working set" } else { "its resident memory" })?;
        if let Some(limit) = &self.limit {
            let percent = self.bytes as f64 * 100.0 / limit.bytes.max(1) as f64;
            write!(f, ", {percent:.1}% of the {} limit of {}", mib(limit.bytes), limit.of)?;
        }
        Ok(())
    }
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Thresholds the program's memory just reached (one snapshot for them all).
#[derive(Clone, Debug)]
pub struct Crossing {
    pub thresholds: Vec<Threshold>,
    pub reading: Reading,
}

/// How often the limit is read again while the cgroups holding the program stay the same.
const LIMIT_REFRESH: Duration = Duration::from_secs(1);

/// Samples a program's memory against the thresholds not reached yet.
pub struct MemoryWatch {
    pid: i32,
    pending: Vec<Threshold>,
    /// `/proc/PID/cgroup`'s text last read and the memory cgroups it names.
    cgroups: (String, Vec<MemoryCgroup>),
    limit: Option<Limit>,
    limit_read: Option<Instant>,
    /// The highest reading so far.
    pub peak: Option<Reading>,
}

impl MemoryWatch {
    pub fn new(pid: i32, thresholds: &[Threshold]) -> MemoryWatch {
        MemoryWatch { pid, pending: thresholds.to_vec(), cgroups: (String::new(), Vec::new()), limit: None, limit_read: None, peak: None }
    }

    /// The thresholds not reached yet.
    pub fn pending(&self) -> &[Threshold] {
        &self.pending
    }

    /// Reads the program's memory; returns the thresholds it has reached since the last
    /// sample, if any. `None` too when the program cannot be read (it is exiting).
    pub fn sample(&mut self) -> Option<Crossing> {
        let reading = self.read()?;
        if self.peak.as_ref().is_none_or(|p| reading.bytes > p.bytes) {
            self.peak = Some(reading.clone());
        }
        let reached = |t: &Threshold| t.bytes(reading.limit.as_ref()).is_some_and(|b| reading.bytes >= b);
        let thresholds: Vec<Threshold> = self.pending.iter().copied().filter(reached).collect();
        if thresholds.is_empty() {
            return None;
        }
        self.pending.retain(|t| !thresholds.contains(t));
        Some(Crossing { thresholds, reading })
    }

    /// The program's memory now.
    pub fn read(&mut self) -> Option<Reading> {
        let text = std::fs::read_to_string(format!("/proc/{}/cgroup", self.pid)).ok()?;
        let moved = text != self.cgroups.0;
        if moved {
            self.cgroups = (text.clone(), cgroup::chain(&text, std::path::Path::new(cgroup::ROOT)));
        }
        if moved || self.limit_read.is_none_or(|at| at.elapsed() >= LIMIT_REFRESH) {
            self.limit = match cgroup::smallest_limit(&self.cgroups.1) {
                Some(c) => Some(Limit { bytes: c.limit, of: c.dir.display().to_string() }),
                None => cgroup::mem_total().map(|bytes| Limit { bytes, of: "MemTotal".into() }),
            };
            self.limit_read = Some(Instant::now());
        }
        let own = self.cgroups.1.first().filter(|c| self.alone_in(c));
        if let Some(bytes) = own.and_then(MemoryCgroup::working_set) {
            let cgroup = own.map(|c| c.dir.display().to_string());
            return Some(Reading { bytes, measured: "cgroup", cgroup, limit: self.limit.clone() });
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let bytes = cgroup::kib_field(&status, "VmRSS:")?;
        Some(Reading { bytes, measured: "rss", cgroup: None, limit: self.limit.clone() })
    }

    /// Whether the program is the only process of `cgroup`, its watcher (this process) aside.
    fn alone_in(&self, cgroup: &MemoryCgroup) -> bool {
        let me = std::process::id() as i32;
        cgroup.processes().is_some_and(|procs| procs.contains(&self.pid) && procs.iter().all(|&p| p == self.pid || p == me))
    }

    /// Why a snapshot now could itself push the program over its limit, when it could: the
    /// dumper holds the copied heap in its own memory, which is charged to the program's limit
    /// when the dumper runs inside the limited cgroup, and a fork's child keeps the pages the
    /// program rewrites meanwhile, charged there too. So a dumper inside needs room for twice
    /// the program's private memory; one outside costs the limit nothing but the fork's pages,
    /// which the capture already keeps within the room.
    pub fn dump_would_not_fit(&self) -> Option<String> {
        let ours = cgroup::of_process(std::process::id() as i32);
        // The inactive page cache (the snapshots this dumper wrote, among others) is room: the
        // kernel reclaims it before it kills.
        let shared = self
            .cgroups
            .1
            .iter()
            .filter(|c| ours.contains(c))
            .filter_map(|c| Some(cgroup::Charged { dir: c.dir.clone(), limit: c.limit()?, usage: c.working_set()? }));
        let tightest = shared.min_by_key(cgroup::Charged::room)?;
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let private = cgroup::kib_field(&status, "RssAnon:")?;
        (private.saturating_mul(2) > tightest.room()).then(|| {
            format!(
                "the dumper runs inside the program's memory cgroup {} (working set {} of {}), where a snapshot may take up to twice the program's {} of private memory (the dumper's copy, and a fork's rewritten pages): it could be what kills the program; run heapsnap outside that cgroup (README: \"A snapshot before the out-of-memory killer\")",
                tightest.dir.display(),
                mib(tightest.usage),
                mib(tightest.limit),
                mib(private)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_and_print_back() {
        assert_eq!(parse_threshold("2GiB"), Ok(Threshold::Bytes(2 << 30)));
        assert_eq!(parse_threshold("400MiB"), Ok(Threshold::Bytes(400 << 20)));
        assert_eq!(parse_threshold("1.5G"), Ok(Threshold::Bytes(3 << 29)));
        assert_eq!(parse_threshold("500MB"), Ok(Threshold::Bytes(500_000_000)));
        assert_eq!(parse_threshold("80%"), Ok(Threshold::Percent(8000)));
        assert_eq!(parse_threshold("62.5%"), Ok(Threshold::Percent(6250)));
        assert_eq!(
            parse_thresholds("60%,80%, 95%"),
            Ok(vec![Threshold::Percent(6000), Threshold::Percent(8000), Threshold::Percent(9500)])
        );
        for t in ["2GiB", "400MiB", "62.5%", "62.25%", "60%", "1000B", "3KiB"] {
            assert_eq!(parse_threshold(t).unwrap().to_string(), t);
        }
        let limit = Limit { bytes: 400 << 20, of: "x".into() };
        assert_eq!(Threshold::Percent(7500).bytes(Some(&limit)), Some(300 << 20));
        assert_eq!(Threshold::Percent(7500).bytes(None), None);
    }

    #[test]
    fn bad_thresholds_say_why() {
        for (text, needle) in [
            ("400", "no unit"),
            ("4X", "unknown unit"),
            ("0MiB", "is zero"),
            ("100%", "below 100%"),
            ("0%", "above 0%"),
            ("12.345%", "two decimals"),
            ("%", "not a memory threshold"),
            ("1.2.3G", "not a memory threshold"),
            ("99999999999999T", "not a memory threshold"),
        ] {
            let err = parse_threshold(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
        assert!(parse_thresholds("60%,60%").unwrap_err().contains("twice"));
    }

    #[test]
    fn a_sample_reports_each_threshold_once() {
        // This test process, alone in no limited cgroup of its own: measured by its RSS, which
        // is above a few bytes and below a TiB.
        let mut watch = MemoryWatch::new(std::process::id() as i32, &[Threshold::Bytes(1), Threshold::Bytes(2), Threshold::Bytes(1 << 40)]);
        let crossing = watch.sample().unwrap();
        assert_eq!(crossing.thresholds, [Threshold::Bytes(1), Threshold::Bytes(2)]);
        assert!(crossing.reading.limit.is_some());
        assert!(watch.sample().is_none());
        assert_eq!(watch.pending(), [Threshold::Bytes(1 << 40)]);
        assert!(watch.peak.is_some());
    }
}
