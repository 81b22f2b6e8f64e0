//! How failures reach the user: one line on stderr, `heapsnap: error: ...`, each cause said
//! once, with a hint where one helps; with `--json`, also a JSON document on stdout that
//! scripts can read, `{"error": {"kind": ..., "message": ...}}`.

use heapsnap_analyze::diff::DiffError;
use heapsnap_analyze::AnalyzeError;
use heapsnap_dump::DumpError;
use heapsnap_format::FormatError;

/// A snapshot file, opened, or an error that says what was given instead.
pub use heapsnap_reports::open_snapshot;

/// The message of an error and its causes, each cause said once: a cause whose text the
/// message already holds (`path: Permission denied` then `Permission denied`) is left out.
pub fn message(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    if let Some(hint) = hint(err) {
        out.push_str(" (");
        out.push_str(hint);
        out.push(')');
    }
    out
}

fn hint(err: &anyhow::Error) -> Option<&'static str> {
    if err.chain().any(|c| c.is::<heapsnap_dump::watch::WritableDirError>()) {
        return Some("give a directory this user can write: --dir DIR, or dir=DIR in OCAML_HEAPSNAP");
    }
    let io = err.chain().find_map(|c| c.downcast_ref::<std::io::Error>())?;
    match io.kind() {
        std::io::ErrorKind::PermissionDenied => Some("run heapsnap as the user who owns the file or process, or as root"),
        std::io::ErrorKind::NotFound => Some("check the path"),
        _ => None,
    }
}

/// What kind of failure, for scripts: `bad_snapshot`, `no_block`, `bad_query`,
/// `incompatible`, `memory`, `dump`, `io`, `usage`, `bad_table` or `error`.
pub fn kind(err: &anyhow::Error) -> &'static str {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<heapsnap_fleet::FleetError>() {
            use heapsnap_fleet::FleetError;
            return match e {
                FleetError::NoDirectory | FleetError::NotADirectory(_) | FleetError::NoSnapshots(_) => "usage",
                FleetError::NotParquet(..) | FleetError::Schema { .. } => "bad_table",
                FleetError::Io(..) => "io",
                FleetError::Engine(_) | FleetError::Arrow(_) => "error",
            };
        }
        if let Some(e) = cause.downcast_ref::<AnalyzeError>() {
            return match e {
                AnalyzeError::NoBlockAt(_) => "no_block",
                AnalyzeError::BadQuery(_) => "bad_query",
                AnalyzeError::Format(_) | AnalyzeError::TooLarge(_) => "bad_snapshot",
                AnalyzeError::NotEnoughMemory { .. } => "memory",
            };
        }
        if let Some(e) = cause.downcast_ref::<DiffError>() {
            return match e {
                DiffError::Incompatible { .. } => "incompatible",
                DiffError::TooFewSnapshots(_) => "usage",
                DiffError::Analyze { .. } => "bad_snapshot",
            };
        }
        if let Some(e) = cause.downcast_ref::<FormatError>() {
            return if matches!(e, FormatError::Io { .. }) { "io" } else { "bad_snapshot" };
        }
        if cause.is::<heapsnap_names::NamesError>() {
            return "names";
        }
        if cause.is::<DumpError>() {
            return "dump";
        }
        if cause.is::<std::io::Error>() {
            return "io";
        }
    }
    "error"
}

/// Prints a failure: always on stderr; with `--json`, also as JSON on stdout.
pub fn report(err: &anyhow::Error, json: bool) {
    let message = message(err);
    eprintln!("heapsnap: error: {message}");
    if json {
        println!("{}", serde_json::json!({"error": {"kind": kind(err), "message": message}}));
    }
}
