//! Where in the dominator tree the growth sits. The dominator tries of the snapshots, matched by
//! signature, give each place (signature) its retained bytes in every snapshot. From each root
//! down, a place whose retained bytes grew by at least the threshold is followed into its
//! children until the growth reaches a place whose own object count grew: the collection that
//! gains members (a list's cells, a table's bucket chains). A place whose growth no single child
//! explains (its own objects grew, or the growth is spread thin) is reported as well.

use super::merge::MergedTrie;
use crate::signatures::classify::EDGE_ROOT;
use crate::signatures::trie::{signature_text, StepText};
use serde::Serialize;

/// One step of a place's signature, with its figures.
#[derive(Clone, Debug, Serialize)]
pub struct PlaceStep {
    #[serde(flatten)]
    pub step: StepText,
    /// Objects with exactly this signature, per snapshot.
    pub count: Vec<u64>,
    /// Bytes they retain (with everything below them), per snapshot.
    pub retained: Vec<u64>,
}

/// A place of the dominator tree that grew.
#[derive(Clone, Debug, Serialize)]
pub struct Place {
    /// The signature: `ROOT -> SHAPE -> .FIELD SHAPE ...` (see REPORTS.md).
    pub signature: String,
    /// The same with friendlier names (`Hashtbl data`, `Hashtbl bucket chains`).
    pub description: String,
    pub steps: Vec<PlaceStep>,
    pub count: Vec<u64>,
    pub retained: Vec<u64>,
    pub delta_count: i64,
    pub delta_retained: i64,
    /// The growth this place accounts for (what places are ranked by): `delta_retained`, or
    /// for reason `own`, the growth of its own objects only.
    pub growth: i64,
    /// Retained bytes went up at every step.
    pub grew_every_step: bool,
    /// Why the place is reported: `members` (its object count grew: a collection gaining
    /// members), `spread` (no single child grew by the threshold: the growth is its own or
    /// spread thin below it) or `own` (its children that grew are reported apart; this is
    /// what its own objects grew by, e.g. an array resized).
    pub reason: &'static str,
    /// The children that grew most (at most 5).
    pub children: Vec<PlaceChild>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PlaceChild {
    #[serde(flatten)]
    pub step: StepText,
    pub count: Vec<u64>,
    pub retained: Vec<u64>,
    pub delta_retained: i64,
}

fn delta(v: &[u64]) -> i64 {
    (*v.last().unwrap_or(&0) as i128 - *v.first().unwrap_or(&0) as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// The places where retained bytes grew by at least `min_growth` (at least 1 byte), largest
/// growth first, at most `max`.
pub fn growth_places(m: &MergedTrie, min_growth: u64, max: usize) -> Vec<Place> {
    let min = (min_growth.max(1)).min(i64::MAX as u64) as i64;
    let children = m.children();
    let grows = |id: u32| delta(m.retained_of(id)) >= min;
    let mut found: Vec<(u32, &'static str, i64)> = Vec::new();
    let mut stack: Vec<u32> = children[0].iter().copied().filter(|&c| grows(c)).collect();
    while let Some(id) = stack.pop() {
        let node = &m.nodes[id as usize];
        let counts = m.counts(id);
        if node.edge != EDGE_ROOT && counts.last() > counts.first() {
            found.push((id, "members", delta(m.retained_of(id))));
            continue;
        }
        let growing: Vec<u32> = children[id as usize].iter().copied().filter(|&c| grows(c)).collect();
        // Growth of the place's own objects: what its children's changes do not account for.
        let own = delta(m.retained_of(id)) - children[id as usize].iter().map(|&c| delta(m.retained_of(c))).sum::<i64>();
        if node.edge != EDGE_ROOT && growing.is_empty() {
            found.push((id, "spread", delta(m.retained_of(id))));
        } else if node.edge != EDGE_ROOT && own >= min {
            found.push((id, "own", own));
        }
        stack.extend(growing);
    }
    let mut places: Vec<Place> = found.into_iter().map(|(id, reason, growth)| place(m, &children, id, reason, growth)).collect();
    places.sort_by(|x, y| y.growth.cmp(&x.growth).then(x.signature.cmp(&y.signature)));
    places.truncate(max);
    places
}

fn place(m: &MergedTrie, children: &[Vec<u32>], id: u32, reason: &'static str, growth: i64) -> Place {
    let texts = m.steps(id);
    let chain = m.chain(id);
    let steps: Vec<PlaceStep> = texts
        .iter()
        .zip(&chain)
        .map(|(t, &c)| PlaceStep { step: t.clone(), count: m.counts(c).to_vec(), retained: m.retained_of(c).to_vec() })
        .collect();
    let retained = m.retained_of(id).to_vec();
    let count = m.counts(id).to_vec();
    let mut kids: Vec<PlaceChild> = children[id as usize]
        .iter()
        .map(|&c| PlaceChild {
            step: m.steps(c).pop().expect("a child has a step"),
            count: m.counts(c).to_vec(),
            retained: m.retained_of(c).to_vec(),
            delta_retained: delta(m.retained_of(c)),
        })
        .filter(|k| k.delta_retained != 0)
        .collect();
    kids.sort_by(|x, y| y.delta_retained.cmp(&x.delta_retained).then(x.step.label.cmp(&y.step.label)));
    kids.truncate(5);
    Place {
        signature: signature_text(&texts, false),
        description: signature_text(&texts, true),
        steps,
        delta_count: delta(&count),
        delta_retained: delta(&retained),
        growth,
        grew_every_step: retained.windows(2).all(|w| w[1] > w[0]),
        count,
        retained,
        reason,
        children: kids,
    }
}
