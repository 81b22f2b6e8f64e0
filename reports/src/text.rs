//! Pieces of the human tables that several reports print.

use heapsnap_analyze::human_bytes;
use heapsnap_analyze::Group;
use std::io::{Result, Write};

/// `part` as a percentage of `whole` (0 when `whole` is).
pub fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The group table of `summary` and `top`.
pub fn print_groups(out: &mut dyn Write, list: &[Group], total: u64) -> Result<()> {
    writeln!(out, "{:>10} {:>12} {:>12} {:>7}  group", "count", "shallow", "retained", "%")?;
    for g in list {
        writeln!(
            out,
            "{:>10} {:>12} {:>12} {:>6.1}%  {}",
            g.count,
            human_bytes(g.shallow),
            human_bytes(g.retained),
            pct(g.retained, total),
            g.name
        )?;
    }
    Ok(())
}

/// `+1.5 MiB`, `-24 B`, `0 B`.
pub fn signed_bytes(d: i64) -> String {
    match d {
        0 => "0 B".into(),
        d if d > 0 => format!("+{}", human_bytes(d.unsigned_abs())),
        d => format!("-{}", human_bytes(d.unsigned_abs())),
    }
}

/// `+3`, `-2`, `0`.
pub fn signed(d: i64) -> String {
    if d > 0 {
        format!("+{d}")
    } else {
        d.to_string()
    }
}
