//! Groups across snapshots: the same group (by name) in each snapshot, its figures and their
//! growth, and the leak suspects among them.

use crate::model::Group;
use serde::Serialize;
use std::collections::HashMap;

/// One group across the snapshots (oldest first).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct GroupDiff {
    pub name: String,
    /// One value per snapshot (0 where the group is absent).
    pub count: Vec<u64>,
    pub shallow: Vec<u64>,
    pub retained: Vec<u64>,
    /// Last minus first.
    pub delta_count: i64,
    pub delta_shallow: i64,
    pub delta_retained: i64,
    /// The count went up at every step (needs at least two snapshots).
    pub grew_every_step: bool,
}

fn delta(v: &[u64]) -> i64 {
    (*v.last().unwrap_or(&0) as i128 - *v.first().unwrap_or(&0) as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// Lines up the groups of each snapshot by name; sorted by growth: retained bytes, then
/// shallow bytes, then count, then name.
pub fn diff_groups(per_snapshot: &[&[Group]]) -> Vec<GroupDiff> {
    let k = per_snapshot.len();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<GroupDiff> = Vec::new();
    for (i, groups) in per_snapshot.iter().enumerate() {
        for g in groups.iter() {
            let at = *index.entry(g.name.as_str()).or_insert_with(|| {
                out.push(GroupDiff {
                    name: g.name.clone(),
                    count: vec![0; k],
                    shallow: vec![0; k],
                    retained: vec![0; k],
                    delta_count: 0,
                    delta_shallow: 0,
                    delta_retained: 0,
                    grew_every_step: false,
                });
                out.len() - 1
            });
            let d = &mut out[at];
            d.count[i] += g.count;
            d.shallow[i] += g.shallow;
            d.retained[i] += g.retained;
        }
    }
    for d in out.iter_mut() {
        d.delta_count = delta(&d.count);
        d.delta_shallow = delta(&d.shallow);
        d.delta_retained = delta(&d.retained);
        d.grew_every_step = k >= 2 && d.count.windows(2).all(|w| w[1] > w[0]);
    }
    out.sort_by(|x, y| {
        y.delta_retained
            .cmp(&x.delta_retained)
            .then(y.delta_shallow.cmp(&x.delta_shallow))
            .then(y.delta_count.cmp(&x.delta_count))
            .then(x.name.cmp(&y.name))
    });
    out
}

/// Leak suspects (three snapshots or more): groups whose count grew at every step and whose
/// bytes (retained or shallow) grew by at least `min_growth` from the first snapshot to the
/// last; ranked by retained growth, then shallow growth.
pub fn suspects(diffs: &[GroupDiff], min_growth: u64) -> Vec<GroupDiff> {
    let k = diffs.first().map_or(0, |d| d.count.len());
    if k < 3 {
        return Vec::new();
    }
    let min = min_growth.min(i64::MAX as u64) as i64;
    let mut out: Vec<GroupDiff> =
        diffs.iter().filter(|d| d.grew_every_step && d.delta_retained.max(d.delta_shallow) >= min.max(1)).cloned().collect();
    out.sort_by(|x, y| y.delta_retained.cmp(&x.delta_retained).then(y.delta_shallow.cmp(&x.delta_shallow)).then(x.name.cmp(&y.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(name: &str, count: u64, bytes: u64) -> Group {
        Group { name: name.into(), count, shallow: bytes, retained: bytes, ..Default::default() }
    }

    #[test]
    fn growth_every_step_and_ranking() {
        let snaps = [
            vec![g("a", 10, 100), g("b", 5, 500), g("c", 1, 10)],
            vec![g("a", 20, 200), g("b", 4, 400), g("c", 2, 20), g("d", 1, 5000)],
            vec![g("a", 30, 300), g("b", 6, 900), g("c", 3, 30_000), g("d", 1, 5000)],
        ];
        let lists: Vec<&[Group]> = snaps.iter().map(Vec::as_slice).collect();
        let d = diff_groups(&lists);
        let names: Vec<&str> = d.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["c", "d", "b", "a"]);
        let dd = &d[1];
        assert_eq!((dd.count.clone(), dd.delta_retained, dd.grew_every_step), (vec![0, 1, 1], 5000, false));
        let s = suspects(&d, 150);
        let names: Vec<&str> = s.iter().map(|x| x.name.as_str()).collect();
        // b dipped at step 2, d stopped growing; a grew by 200 >= 150.
        assert_eq!(names, ["c", "a"]);
        assert!(suspects(&d, 1_000_000).is_empty());
        assert!(suspects(&diff_groups(&lists[..2]), 0).is_empty(), "two snapshots make no suspects");
    }
}
