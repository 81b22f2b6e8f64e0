//! Progress on stderr for the long steps (hidden when stderr is not a terminal, or when asked).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Instant;

/// The time of each phase of a long computation on stderr, as `name: phase at 1.234s [+2.345s]`
/// (the second figure counts from the process's first timer: phases nest and follow each other,
/// and what no timer covers shows between them), when the `HEAPSNAP_TRACE` environment variable
/// is set (to find where the time goes), followed on
/// Linux by the process's resident memory then and its peak so far (to find where the memory
/// goes: the peak of a first look is the sum of what the phases hold at once).
pub struct PhaseTimer {
    name: &'static str,
    start: Option<Instant>,
}

impl PhaseTimer {
    pub fn start(name: &'static str) -> Self {
        let start = std::env::var_os("HEAPSNAP_TRACE").is_some().then(Instant::now);
        if let Some(now) = start {
            FIRST_TIMER.get_or_init(|| now);
        }
        PhaseTimer { name, start }
    }

    /// Prints that `phase` is over.
    pub fn lap(&self, phase: &str) {
        if let Some(t0) = self.start {
            let since_first = FIRST_TIMER.get().map_or(0.0, |first| first.elapsed().as_secs_f64());
            eprintln!("{}: {phase} at {:.3}s [+{since_first:.3}s]{}", self.name, t0.elapsed().as_secs_f64(), resident());
        }
    }
}

/// When the process's first [`PhaseTimer`] started.
static FIRST_TIMER: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// `  (rss 123 MiB, peak 456 MiB)` from `/proc/self/status`, or nothing where there is none.
fn resident() -> String {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return String::new() };
    let mib = |key: &str| {
        let line = status.lines().find(|l| l.starts_with(key))?;
        let kib: u64 = line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib / 1024)
    };
    match (mib("VmRSS:"), mib("VmHWM:")) {
        (Some(rss), Some(peak)) => format!("  (rss {rss} MiB, peak {peak} MiB{})", allocator()),
        _ => String::new(),
    }
}

/// `, heap 12 MiB in use + 3 free`: what glibc's allocator holds, of the resident memory (the
/// free part is resident too: freed memory is kept for reuse, `crate::mem::tune_allocator`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn allocator() -> String {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let info = unsafe { libc::mallinfo2() };
    format!(", heap {} MiB in use + {} free", info.uordblks >> 20, info.fordblks >> 20)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn allocator() -> String {
    String::new()
}

/// Makes one progress bar per step; all of them are hidden when progress is off.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    visible: bool,
}

impl Progress {
    /// Progress bars on stderr when it is a terminal.
    pub fn stderr() -> Self {
        Progress { visible: std::io::stderr().is_terminal() }
    }

    pub fn hidden() -> Self {
        Progress { visible: false }
    }

    /// A bar for a step of `total` units (a spinner when `total` is 0).
    pub fn step(&self, label: &str, total: u64) -> ProgressBar {
        if !self.visible {
            return ProgressBar::hidden();
        }
        let bar = if total == 0 {
            let b = ProgressBar::new_spinner();
            b.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"));
            b.enable_steady_tick(std::time::Duration::from_millis(120));
            b
        } else {
            let b = ProgressBar::new(total);
            b.set_style(ProgressStyle::with_template("{msg:24} {bar:40} {pos}/{len} {elapsed}").expect("valid template"));
            b
        };
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.set_message(label.to_string());
        bar
    }
}
