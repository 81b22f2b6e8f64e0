//! The flame-graph view: inferno's SVG of a snapshot's retained sizes (`heapsnap export
//! --format svg`), made on the first request for a snapshot and stacking, then kept. By path
//! signature (`root`, the default) its stacks are the diff's dominator trie, which the index
//! holds; by group they walk the dominator tree with every block's group, which it does not:
//! the snapshot is then analysed (through the provider, `heapsnap_reports::loader::analyse`)
//! once, for every grouping at once.

use heapsnap_analyze::{GroupBy, Progress};
use heapsnap_export::flame::{folded, folded_saved, Folded};
use heapsnap_export::svg::write_svg;
use heapsnap_index::{Indexed, Needs};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An SVG, by snapshot and stacking.
type Made = HashMap<(usize, String), Arc<Vec<u8>>>;

/// The groupings a flame graph by group stacks (as `folded` makes them, whatever the snapshot).
const BY_GROUP: [GroupBy; 4] = [GroupBy::Kind, GroupBy::Closure, GroupBy::Reserved, GroupBy::Type];

#[derive(Default)]
pub struct Flames {
    made: Mutex<Made>,
    /// The stacks by group of each analysed snapshot, every grouping it allows.
    by_group: Mutex<HashMap<usize, Vec<Folded>>>,
}

impl Flames {
    /// The SVG of snapshot `index` (named `name`, opened with its index), stacked `by`.
    pub fn svg(&self, index: usize, name: &str, indexed: &Indexed, by: GroupBy) -> Result<Arc<Vec<u8>>, String> {
        let key = (index, format!("{by:?}"));
        if let Some(svg) = self.made.lock().expect("no panic while holding the flames").get(&key) {
            return Ok(svg.clone());
        }
        let stacks = self.stacks(index, indexed, by)?;
        let mut svg = Vec::new();
        let title = format!("retained bytes of {name} (by {})", by.name());
        write_svg(&stacks, &title, false, &mut svg).map_err(|e| e.to_string())?;
        let svg = Arc::new(svg);
        self.made.lock().expect("no panic while holding the flames").insert(key, svg.clone());
        Ok(svg)
    }

    /// How many snapshots were analysed for flame graphs (by group; at most once each).
    pub fn analysed(&self) -> usize {
        self.by_group.lock().expect("no panic while holding the flames").len()
    }

    fn stacks(&self, index: usize, indexed: &Indexed, by: GroupBy) -> Result<Folded, String> {
        let saved = || indexed.view(Needs::Diff).ok()?.diff_profile(heapsnap_analyze::GroupBy::Kind).and_then(folded_saved);
        if by == GroupBy::Root {
            if let Some(stacks) = saved() {
                return Ok(stacks);
            }
        }
        let mut made = self.by_group.lock().expect("no panic while holding the flames");
        if let std::collections::hash_map::Entry::Vacant(slot) = made.entry(index) {
            let snap = &indexed.snap;
            let analysis = heapsnap_reports::loader::analyse(snap, &Progress::stderr()).map_err(|e| e.to_string())?;
            let mut all: Vec<Folded> = BY_GROUP.iter().map(|&b| folded(&analysis, b)).collect();
            if saved().is_none() {
                // An index whose diff sections failed their checks: by signature too, from the analysis.
                all.push(folded(&analysis, GroupBy::Root));
            }
            slot.insert(all);
        }
        let found = made[&index].iter().find(|f| f.by == by).cloned();
        found.ok_or_else(|| format!("no flame graph by {} for this snapshot", by.name()))
    }
}
