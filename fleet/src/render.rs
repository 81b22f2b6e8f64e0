//! An answer for people: a title that says what was asked of how many hosts, then one line per row.

use crate::Answer;
use serde_json::{Map, Value};
use std::io::Write;

/// A size in bytes the way heapsnap's reports print them (`15.9 MiB`), signed.
fn bytes(value: Option<f64>) -> String {
    let Some(value) = value else { return "-".to_string() };
    let sign = if value < 0.0 { "-" } else { "" };
    let mut size = value.abs();
    let mut unit = "B";
    for next in ["KiB", "MiB", "GiB", "TiB"] {
        if size < 1024.0 {
            break;
        }
        size /= 1024.0;
        unit = next;
    }
    if unit == "B" {
        format!("{sign}{size:.0} B")
    } else {
        format!("{sign}{size:.1} {unit}")
    }
}

fn number(row: &Map<String, Value>, column: &str) -> Option<f64> {
    row.get(column).and_then(Value::as_f64)
}

fn text<'a>(row: &'a Map<String, Value>, column: &str) -> &'a str {
    row.get(column).and_then(Value::as_str).unwrap_or("")
}

fn count(row: &Map<String, Value>, column: &str) -> String {
    row.get(column).and_then(Value::as_i64).map_or("-".to_string(), |n| n.to_string())
}

/// Prints the answer; with `with_sql`, the query that ran first.
pub fn print(answer: &Answer, with_sql: bool, out: &mut dyn Write) -> std::io::Result<()> {
    if with_sql {
        writeln!(out, "{}", answer.sql)?;
    }
    let fleet = format!("{} hosts, {} snapshots", answer.hosts, answer.snapshots);
    match answer.question {
        "growth" => {
            let by = answer.by.unwrap_or("type");
            writeln!(out, "What grows, by {by} ({fleet}): from each host's first snapshot to its last, the largest growth first")?;
            writeln!(out, "{:>12} {:>12} {:>12} {:>12} {:>9}  {by}", "growth", "median/host", "median/hour", "retained now", "growing")?;
            for row in &answer.rows {
                writeln!(
                    out,
                    "{:>12} {:>12} {:>12} {:>12} {:>9}  {}",
                    bytes(number(row, "growth_bytes")),
                    bytes(number(row, "median_growth_bytes")),
                    bytes(number(row, "median_bytes_per_hour")),
                    bytes(number(row, "retained_bytes")),
                    format!("{}/{}", count(row, "hosts_growing"), count(row, "fleet_hosts")),
                    text(row, "name")
                )?;
            }
        }
        "diverge" => {
            let median = answer.rows.first().and_then(|row| number(row, "fleet_median_bytes_per_hour"));
            writeln!(
                out,
                "Which hosts diverge ({fleet}): reachable bytes per hour, first to last snapshot, against the fleet's median ({}/hour); fastest first",
                bytes(median)
            )?;
            writeln!(out, "{:>8} {:>12} {:>12} {:>12} {:>9}  host", "score", "per hour", "first", "last", "snapshots")?;
            for row in &answer.rows {
                let flag = if row.get("diverges").and_then(Value::as_bool) == Some(true) { "  <- diverges" } else { "" };
                let score = number(row, "score").map_or("-".to_string(), |s| format!("{s:.2}"));
                writeln!(
                    out,
                    "{score:>8} {:>12} {:>12} {:>12} {:>9}  {}{flag}",
                    bytes(number(row, "bytes_per_hour")),
                    bytes(number(row, "first_reachable_bytes")),
                    bytes(number(row, "last_reachable_bytes")),
                    count(row, "snapshot_count"),
                    text(row, "host")
                )?;
            }
        }
        _ => {
            writeln!(out, "Leak suspects in the latest snapshot of more than half of the hosts ({fleet}): on most hosts first")?;
            writeln!(out, "{:>9} {:>12} {:>12}  suspect", "hosts", "retained", "median")?;
            for row in &answer.rows {
                let hosts = count(row, "hosts");
                let every = if row.get("hosts") == row.get("fleet_hosts") { " (every host)" } else { "" };
                let what = match text(row, "type") {
                    "" => text(row, "kind").to_string(),
                    ty => ty.to_string(),
                };
                writeln!(
                    out,
                    "{:>9} {:>12} {:>12}  {what}{every}",
                    format!("{hosts}/{}", count(row, "fleet_hosts")),
                    bytes(number(row, "retained_bytes")),
                    bytes(number(row, "median_retained_bytes")),
                )?;
                writeln!(out, "{:>36}path: {}", "", text(row, "signature"))?;
            }
        }
    }
    if let Some(note) = &answer.note {
        writeln!(out, "(none: {note})")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_like_the_reports() {
        assert_eq!(super::bytes(Some(512.0)), "512 B");
        assert_eq!(super::bytes(Some(-1536.0)), "-1.5 KiB");
        assert_eq!(super::bytes(Some(16.0 * 1024.0 * 1024.0)), "16.0 MiB");
        assert_eq!(super::bytes(None), "-");
    }
}
