//! When to take snapshots of a watched program, and the `OCAML_HEAPSNAP` grammar that says so.
//!
//! ```text
//! OCAML_HEAPSNAP = item ("," item)*
//! item  = "on-compaction"          dump after each Gc.compact (caml_compactions_count moved)
//!       | "on-signal=" SIGNAL      dump when SIGNAL (USR1, SIGUSR2, 12, ...) is received
//!       | "every=" DURATION        dump periodically
//!       | "at-exit"                dump when the program exits, before the runtime tears down
//!       | "on-memory=" THRESHOLD ("," THRESHOLD)*
//!                                  dump when the program's memory first reaches each threshold
//!       | "dir=" PATH              where snapshots go (default: the current directory)
//!       | "redact"                 zero string and bytes contents before writing
//!       | "capture=" MODE          fork, copy or auto (default): how the stopped program is copied
//!       | "poll=" DURATION         how often the compaction counter and the memory are read (default 20ms)
//!       | "export=parquet" ["=" PATH]
//!                                  write each snapshot's Parquet tables (default: `parquet/` in dir)
//!       | "keep-snapshots=" N      with export: keep only the last N snapshot files (tables are kept)
//! DURATION = integer ("ms" | "s" | "m" | "h")
//! THRESHOLD = number ("B" | "KiB" | "MiB" | "GiB" | "TiB" | "KB" | "MB" | "GB" | "TB" | "%")
//! ```
//! At least one of on-compaction, on-signal, every, at-exit, on-memory is required; an item may
//! not repeat. The thresholds after `on-memory=` go on for as long as the items start with a
//! digit (no other item does), so `on-memory=60%,80%,95%` reads as the command line's
//! `--on-memory 60%,80%,95%`.
//! A `dir` (or an export's PATH) holding a comma cannot be written in this grammar: use
//! `heapsnap run --dir DIR` (`--export parquet=DIR`) then.

use crate::capture::CaptureMode;
use crate::memory_trigger::{self, Threshold};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub const ENV_VAR: &str = "OCAML_HEAPSNAP";
pub const DEFAULT_POLL: Duration = Duration::from_millis(20);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerSpec {
    pub on_compaction: bool,
    /// Signal number.
    pub on_signal: Option<i32>,
    pub every: Option<Duration>,
    pub at_exit: bool,
    /// `on-memory` thresholds, as given.
    pub on_memory: Vec<Threshold>,
    pub dir: Option<PathBuf>,
    pub redact: bool,
    pub poll: Duration,
    /// How each dump captures the program.
    pub capture: CaptureMode,
    /// Where each snapshot's Parquet tables go, when they are written.
    pub export: Option<ExportTo>,
    /// With `export`: how many of the last snapshot files are kept.
    pub keep_snapshots: Option<u64>,
}

/// `export=parquet[=DIR]` (`--export` on the command line): the tables' directory, `None` for
/// `parquet/` in the snapshots' directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportTo(pub Option<PathBuf>);

impl ExportTo {
    /// Where the tables go when the snapshots go to `snapshots_dir`.
    pub fn dir(&self, snapshots_dir: &std::path::Path) -> PathBuf {
        self.0.clone().unwrap_or_else(|| snapshots_dir.join("parquet"))
    }
}

impl std::str::FromStr for ExportTo {
    type Err = String;
    fn from_str(s: &str) -> Result<ExportTo, String> {
        match s.split_once('=') {
            None if s == "parquet" => Ok(ExportTo(None)),
            Some(("parquet", dir)) if !dir.is_empty() => Ok(ExportTo(Some(PathBuf::from(dir)))),
            _ => Err(format!("'{s}' is not parquet or parquet=DIR (the only format a watch exports)")),
        }
    }
}

impl fmt::Display for ExportTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("parquet"),
            Some(dir) => write!(f, "parquet={}", dir.display()),
        }
    }
}

impl Default for TriggerSpec {
    fn default() -> Self {
        TriggerSpec {
            on_compaction: false,
            on_signal: None,
            every: None,
            at_exit: false,
            on_memory: Vec::new(),
            dir: None,
            redact: false,
            poll: DEFAULT_POLL,
            capture: CaptureMode::Auto,
            export: None,
            keep_snapshots: None,
        }
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?}: {problem}\n  expected comma-separated items among on-compaction, on-signal=SIG, every=DURATION, at-exit, on-memory=THRESHOLD[,THRESHOLD...], dir=PATH, redact, poll=DURATION, capture=fork|copy|auto, export=parquet[=DIR], keep-snapshots=N (durations like 500ms, 30s, 5m, 1h; thresholds like 400MiB, 2GiB, 80%)")]
pub struct TriggerSpecError {
    pub var: &'static str,
    pub value: String,
    pub problem: String,
}

impl TriggerSpec {
    pub fn has_trigger(&self) -> bool {
        self.on_compaction || self.on_signal.is_some() || self.every.is_some() || self.at_exit || !self.on_memory.is_empty()
    }

    /// Reads `OCAML_HEAPSNAP`; `Ok(None)` when it is not set.
    pub fn from_env() -> Result<Option<TriggerSpec>, TriggerSpecError> {
        match std::env::var(ENV_VAR) {
            Ok(value) => Self::parse(&value).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(raw)) => {
                Err(TriggerSpecError { var: ENV_VAR, value: raw.to_string_lossy().into_owned(), problem: "not valid UTF-8".into() })
            }
        }
    }

    pub fn parse(value: &str) -> Result<TriggerSpec, TriggerSpecError> {
        let fail = |problem: String| TriggerSpecError { var: ENV_VAR, value: value.to_owned(), problem };
        let mut spec = TriggerSpec::default();
        let mut seen: Vec<&str> = Vec::new();
        let mut after_memory = false;
        for item in value.split(',').map(str::trim) {
            // A further threshold of the `on-memory=` item just before.
            if item.starts_with(|c: char| c.is_ascii_digit()) {
                if !after_memory {
                    return Err(fail(format!("'{item}' follows no on-memory=")));
                }
                let threshold = memory_trigger::parse_threshold(item).map_err(fail)?;
                if spec.on_memory.contains(&threshold) {
                    return Err(fail(format!("memory threshold {threshold} is given twice")));
                }
                spec.on_memory.push(threshold);
                continue;
            }
            let (key, arg) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item, None),
            };
            if key.is_empty() {
                return Err(fail("empty item".into()));
            }
            if seen.contains(&key) {
                return Err(fail(format!("'{key}' is given twice")));
            }
            seen.push(key);
            after_memory = key == "on-memory";
            let need_arg = || arg.filter(|a| !a.is_empty()).ok_or_else(|| fail(format!("'{key}' needs a value ({key}=...)")));
            let no_arg = || match arg {
                None => Ok(()),
                Some(_) => Err(fail(format!("'{key}' takes no value"))),
            };
            match key {
                "on-compaction" => {
                    no_arg()?;
                    spec.on_compaction = true;
                }
                "at-exit" => {
                    no_arg()?;
                    spec.at_exit = true;
                }
                "redact" => {
                    no_arg()?;
                    spec.redact = true;
                }
                "on-signal" => spec.on_signal = Some(parse_signal(need_arg()?).map_err(fail)?),
                "every" => spec.every = Some(parse_duration(need_arg()?).map_err(fail)?),
                "on-memory" => spec.on_memory = vec![memory_trigger::parse_threshold(need_arg()?).map_err(fail)?],
                "poll" => spec.poll = parse_duration(need_arg()?).map_err(fail)?,
                "dir" => spec.dir = Some(PathBuf::from(need_arg()?)),
                "capture" => spec.capture = need_arg()?.parse().map_err(fail)?,
                "export" => spec.export = Some(need_arg()?.parse().map_err(fail)?),
                "keep-snapshots" => {
                    let n = need_arg()?;
                    spec.keep_snapshots = Some(
                        n.parse()
                            .ok()
                            .filter(|&n: &u64| n > 0)
                            .ok_or_else(|| fail(format!("keep-snapshots={n}: not a count of at least 1")))?,
                    );
                }
                other => return Err(fail(format!("unknown item '{other}'"))),
            }
        }
        if spec.keep_snapshots.is_some() && spec.export.is_none() {
            return Err(fail("keep-snapshots needs export=parquet (snapshots are removed only once their tables are written)".into()));
        }
        if !spec.has_trigger() {
            return Err(fail(
                "no trigger: give at least one of on-compaction, on-signal=SIG, every=DURATION, at-exit, on-memory=THRESHOLD".into(),
            ));
        }
        Ok(spec)
    }

    /// The canonical `OCAML_HEAPSNAP` text of this spec (what `parse` reads back to the same spec).
    pub fn to_env_value(&self) -> String {
        let mut items = Vec::new();
        if self.on_compaction {
            items.push("on-compaction".to_owned());
        }
        if let Some(sig) = self.on_signal {
            items.push(format!("on-signal={sig}"));
        }
        if let Some(every) = self.every {
            items.push(format!("every={}ms", every.as_millis()));
        }
        if self.at_exit {
            items.push("at-exit".to_owned());
        }
        if !self.on_memory.is_empty() {
            let thresholds: Vec<String> = self.on_memory.iter().map(Threshold::to_string).collect();
            items.push(format!("on-memory={}", thresholds.join(",")));
        }
        if self.redact {
            items.push("redact".to_owned());
        }
        if self.capture != CaptureMode::Auto {
            items.push(format!("capture={}", self.capture));
        }
        if self.poll != DEFAULT_POLL {
            items.push(format!("poll={}ms", self.poll.as_millis()));
        }
        if let Some(dir) = &self.dir {
            items.push(format!("dir={}", dir.display()));
        }
        if let Some(export) = &self.export {
            items.push(format!("export={export}"));
        }
        if let Some(keep) = self.keep_snapshots {
            items.push(format!("keep-snapshots={keep}"));
        }
        items.join(",")
    }
}

/// `500ms`, `30s`, `5m`, `1h`. Zero is refused: a zero period would dump without pause.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("'{text}' is not a duration like 500ms, 30s, 5m or 1h"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        "" => return Err(format!("'{text}' has no unit (ms, s, m or h)")),
        _ => return Err(format!("'{text}' has an unknown unit '{unit}' (ms, s, m or h)")),
    };
    if duration.is_zero() {
        return Err(format!("'{text}' is zero"));
    }
    Ok(duration)
}

/// A signal by name (`USR2`, `SIGUSR2`, case-insensitive) or number.
pub fn parse_signal(text: &str) -> Result<i32, String> {
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let number = match name.parse::<i32>() {
        Ok(n) => n,
        Err(_) => SIGNALS.iter().find(|(n, _)| *n == name).map(|&(_, s)| s).ok_or_else(|| format!("unknown signal '{text}'"))?,
    };
    // Signals the kernel does not let a process catch, or that mean a crash, cannot be triggers.
    if [libc::SIGKILL, libc::SIGSTOP, libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE].contains(&number)
        || !(1..=libc::SIGRTMAX()).contains(&number)
    {
        return Err(format!("signal '{text}' cannot be used as a trigger"));
    }
    Ok(number)
}

const SIGNALS: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("SEGV", libc::SIGSEGV),
    ("STOP", libc::SIGSTOP),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

/// Name of a signal number, for messages ("SIGUSR2").
pub fn signal_name(number: i32) -> String {
    SIGNALS.iter().find(|&&(_, s)| s == number).map_or_else(|| format!("signal {number}"), |(n, _)| format!("SIG{n}"))
}

impl fmt::Display for TriggerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_env_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_item() {
        let spec = TriggerSpec::parse(
            "on-compaction, on-signal=usr2,every=30s,at-exit,on-memory=60%,2GiB, 95%,dir=snaps,redact,poll=5ms,capture=fork,export=parquet=/t/p,keep-snapshots=3",
        )
        .unwrap();
        assert_eq!(spec.export, Some(ExportTo(Some(PathBuf::from("/t/p")))));
        assert_eq!(spec.keep_snapshots, Some(3));
        let beside = TriggerSpec::parse("every=1m,export=parquet").unwrap();
        assert_eq!(beside.export.map(|e| e.dir(std::path::Path::new("snaps"))), Some(PathBuf::from("snaps/parquet")));
        assert_eq!(spec.on_memory, [Threshold::Percent(6000), Threshold::Bytes(2 << 30), Threshold::Percent(9500)]);
        assert_eq!(TriggerSpec::parse("on-memory=400MiB").unwrap().on_memory, [Threshold::Bytes(400 << 20)]);
        assert!(spec.on_compaction && spec.at_exit && spec.redact);
        assert_eq!(spec.capture, CaptureMode::Fork);
        assert_eq!(TriggerSpec::parse("at-exit").unwrap().capture, CaptureMode::Auto);
        assert_eq!(spec.on_signal, Some(libc::SIGUSR2));
        assert_eq!(spec.every, Some(Duration::from_secs(30)));
        assert_eq!(spec.dir, Some(PathBuf::from("snaps")));
        assert_eq!(spec.poll, Duration::from_millis(5));
        assert_eq!(TriggerSpec::parse(&spec.to_env_value()).unwrap(), spec);
    }

    #[test]
    fn signals_by_name_and_number() {
        assert_eq!(parse_signal("SIGUSR1"), Ok(libc::SIGUSR1));
        assert_eq!(parse_signal("12"), Ok(12));
        assert!(parse_signal("KILL").is_err());
        assert!(parse_signal("SIGNOPE").is_err());
        assert!(parse_signal("0").is_err());
        assert_eq!(signal_name(libc::SIGUSR2), "SIGUSR2");
    }

    #[test]
    fn rejects_malformed_values_with_a_reason() {
        for (value, needle) in [
            ("", "empty item"),
            ("dir=x", "no trigger"),
            ("on-compaction,,at-exit", "empty item"),
            ("on-compaction,on-compaction", "given twice"),
            ("on-compation", "unknown item 'on-compation'"),
            ("every=10", "no unit"),
            ("every=10y", "unknown unit"),
            ("every=0s", "is zero"),
            ("every=", "needs a value"),
            ("at-exit=1", "takes no value"),
            ("at-exit,capture=clone", "unknown capture 'clone'"),
            ("on-signal=SIGKILL", "cannot be used"),
            ("at-exit,80%", "follows no on-memory"),
            ("on-memory=80%,dir=x,90%", "follows no on-memory"),
            ("on-memory=80%,80%", "given twice"),
            ("on-memory=100%", "below 100%"),
            ("on-memory=400", "no unit"),
            ("on-memory=", "needs a value"),
            ("at-exit,export=csv", "not parquet"),
            ("at-exit,export=parquet=", "not parquet"),
            ("at-exit,keep-snapshots=2", "needs export=parquet"),
            ("at-exit,export=parquet,keep-snapshots=0", "at least 1"),
        ] {
            let err = TriggerSpec::parse(value).unwrap_err();
            assert!(err.to_string().contains(needle), "{value:?}: {err}");
            assert!(err.to_string().contains("OCAML_HEAPSNAP"), "{err}");
        }
    }
}
