//! Flame graphs drawn by inferno from folded stacks: an interactive SVG (click to zoom,
//! search), widths in bytes.

use crate::flame::Folded;
use crate::ExportError;
use inferno::flamegraph::{self, Direction, Options};
use std::io::Write;

/// Draws `folded` as an SVG; `icicle` puts the roots at the top.
pub fn write_svg(folded: &Folded, title: &str, icicle: bool, out: impl Write) -> Result<(), ExportError> {
    let lines = folded.lines();
    let mut opts = Options::default();
    opts.title = title.to_string();
    opts.count_name = "bytes".to_string();
    opts.name_type = String::new();
    opts.hash = true;
    opts.min_width = 0.05;
    if icicle {
        opts.direction = Direction::Inverted;
    }
    if lines.is_empty() {
        return Err(ExportError::Flame("nothing reachable to draw".into()));
    }
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out).map_err(|e| ExportError::Flame(e.to_string()))
}
