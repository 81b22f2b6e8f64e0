//! What the diff keeps of each snapshot: its groups and its dominator tree aggregated by
//! signature (a few kilobytes to megabytes, whatever the heap's size). The first and last
//! snapshots of a series of three or more are also kept analysed, for the suspects' paths.

use crate::analysed_heap::AnalysedHeap;
use crate::error::AnalyzeError;
use crate::full_analysis::Analysis;
use crate::model::{Group, GroupBy};
use crate::progress::Progress;
use crate::signatures::classify::EDGE_ROOT;
use crate::signatures::classify::{classify_with_types, Classified};
use crate::signatures::domtrie::{dominator_trie, DomTrie};
use crate::signatures::trie::SigTrie;
use heapsnap_format::Snapshot;
use std::time::Instant;

pub struct Profile {
    pub groups: Vec<Group>,
    /// The dominator tree by signature (retained bytes per signature).
    pub dom: SigTrie,
    /// Live blocks, static data included.
    pub objects: u64,
    pub reachable_bytes: u64,
    /// Seconds spent in each step.
    pub timings: Vec<(&'static str, f64)>,
}

/// An analysed snapshot kept for the suspects' paths.
pub struct Kept<'s> {
    pub analysis: Analysis<'s>,
    pub classified: Classified,
    /// Dominator signature of each preorder number (for `--by root` membership).
    pub dom_sig_pre: Option<Vec<u32>>,
}

/// Analyses a snapshot and extracts its profile; with `keep`, also returns the analysis. With
/// `names`, its OCaml names name the roots and its blocks' types their shapes (when it has
/// them); without, it is analysed as a snapshot without names.
pub fn profile(snap: &Snapshot, by: GroupBy, keep: bool, names: bool) -> Result<(Profile, Option<Kept<'_>>), AnalyzeError> {
    let t = Instant::now();
    let mut analysis = Analysis::new(snap, &Progress::hidden())?;
    if !names {
        analysis.names.forget_ocaml();
    }
    let mut timings = vec![("analysis", t.elapsed().as_secs_f64())];
    let t = Instant::now();
    let typing = analysis.typing();
    timings.push(("types", t.elapsed().as_secs_f64()));
    let t = Instant::now();
    let classified = classify_with_types(&analysis, by, typing);
    timings.push(("classes", t.elapsed().as_secs_f64()));
    let t = Instant::now();
    let dom = dominator_trie(&analysis, &classified);
    timings.push(("signatures", t.elapsed().as_secs_f64()));
    let groups = if by == GroupBy::Root { root_group_list(&dom) } else { group_list(&classified, &dom.group_retained) };
    let objects = analysis.graph.blocks.regions.iter().map(|r| r.counts.live_blocks).sum();
    let reachable_bytes = analysis.reachable_bytes();
    let profile = Profile { groups, dom: dom.trie, objects, reachable_bytes, timings };
    let kept = keep.then(|| Kept { analysis, classified, dom_sig_pre: (by == GroupBy::Root).then_some(dom.sig_pre) });
    Ok((profile, kept))
}

/// The root groups, as `groups::root_groups` lists them (largest retained first): each root's
/// objects are those whose dominator chain starts at it.
pub(super) fn root_group_list(dom: &DomTrie) -> Vec<Group> {
    let t = &dom.trie;
    let mut out: Vec<Group> = t
        .root_labels
        .iter()
        .zip(&dom.root_shallow)
        .map(|(name, &shallow)| Group { name: name.clone(), count: 0, shallow, retained: 0, ..Default::default() })
        .collect();
    for n in t.nodes.iter().skip(1) {
        let g = &mut out[n.root as usize];
        if n.edge == EDGE_ROOT {
            g.retained = n.retained;
        } else {
            g.count += n.count;
        }
    }
    out.sort_by(|x, y| y.retained.cmp(&x.retained).then(x.name.cmp(&y.name)));
    out
}

/// The groups, as `Analysis::group_by` lists them: largest retained first.
pub(super) fn group_list(c: &Classified, retained: &[u64]) -> Vec<Group> {
    let t = &c.groups;
    let mut out: Vec<Group> = (0..t.keys.len())
        .map(|g| Group { name: t.names[g].clone(), count: t.count[g], shallow: t.shallow[g], retained: retained[g], ..Default::default() })
        .collect();
    out.sort_by(|x, y| y.retained.cmp(&x.retained).then(y.shallow.cmp(&x.shallow)).then(x.name.cmp(&y.name)));
    out
}
