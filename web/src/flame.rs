//! The flame-graph view: inferno's SVG of a snapshot's retained sizes (`heapsnap export
//! --format svg`), made on the first request for a snapshot and stacking, then kept. It is
//! the one view the index cannot answer (it needs the graph's fields): the first look at a big
//! snapshot takes an analysis.

use heapsnap_analyze::{Analysis, GroupBy, Progress};
use heapsnap_export::flame::folded;
use heapsnap_export::svg::write_svg;
use heapsnap_format::Snapshot;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An SVG, by snapshot and stacking.
type Made = HashMap<(usize, String), Arc<Vec<u8>>>;

#[derive(Default)]
pub struct Flames {
    made: Mutex<Made>,
}

impl Flames {
    /// The SVG of snapshot `index`, stacked `by`.
    pub fn svg(&self, index: usize, name: &str, snap: &Snapshot, by: GroupBy) -> Result<Arc<Vec<u8>>, String> {
        let key = (index, format!("{by:?}"));
        if let Some(svg) = self.made.lock().expect("no panic while holding the flames").get(&key) {
            return Ok(svg.clone());
        }
        let analysis = Analysis::new(snap, &Progress::stderr()).map_err(|e| e.to_string())?;
        let stacks = folded(&analysis, by);
        let mut svg = Vec::new();
        let title = format!("retained bytes of {name} (by {})", by.name());
        write_svg(&stacks, &title, false, &mut svg).map_err(|e| e.to_string())?;
        let svg = Arc::new(svg);
        self.made.lock().expect("no panic while holding the flames").insert(key, svg.clone());
        Ok(svg)
    }
}
