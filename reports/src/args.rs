//! Argument parsers the reports share.

/// A result limit (`--limit`, `--max-children`, `--sample`, ...): a count, where 0 means no
/// limit (analyze/REPORTS.md, "Result limits").
pub fn parse_limit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Ok(usize::MAX),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e} (a count; 0 for no limit)")),
    }
}

/// An address: `0x7f...` or decimal.
pub fn parse_address(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("bad address {s:?}: {e}"))
}
