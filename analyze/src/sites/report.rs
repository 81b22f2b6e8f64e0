//! The site reports: `top --by site` (sampled blocks grouped by allocation site, with their
//! estimated bytes and retained size) and `diff --by site` (sites whose blocks grew from one
//! snapshot to the next). JSON schemas in REPORTS.md.

use super::{JoinStats, SiteFrame, Sites};
use crate::analysed_heap::AnalysedHeap;
use crate::blocks::NodeId;
use crate::graph::SUPER_ROOT;
use rustc_hash::FxHashMap;
use serde::Serialize;

/// One allocation site.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SiteGroup {
    /// `file:line (function)` of each frame, innermost first, joined by ` <- `.
    pub site: String,
    /// The frames naming the site: the innermost outside the standard library and up to
    /// `--site-depth` - 1 callers.
    pub frames: Vec<SiteFrame>,
    /// Sampled blocks allocated here that are in the snapshot (reachable or not).
    pub count: u64,
    /// Samples those blocks hold.
    pub samples: u64,
    /// Their own bytes, headers included.
    pub sampled_bytes: u64,
    /// An estimate of the bytes allocated here that are in the snapshot: each sample stands for
    /// 1/rate words.
    pub estimated_bytes: u64,
    /// What freeing every sampled block of the site would free (their dominator subtrees,
    /// counted once).
    pub retained: u64,
}

/// The `top --by site` report.
#[derive(Clone, Debug, Serialize)]
pub struct SiteTop {
    /// Always `site`.
    pub by: &'static str,
    pub depth: usize,
    /// Largest estimated bytes first.
    pub groups: Vec<SiteGroup>,
    pub total_groups: u64,
    pub join: JoinStats,
    pub reachable_bytes: u64,
}

/// Groups the sampled blocks by site (`depth` frames from the innermost outside the standard
/// library), at most `limit` groups (`usize::MAX`: all).
pub fn site_top<'s>(a: &impl AnalysedHeap<'s>, sites: &Sites, depth: usize, limit: usize) -> SiteTop {
    let mut groups = site_groups(a, sites, depth);
    let total_groups = groups.len() as u64;
    groups.truncate(limit);
    SiteTop { by: "site", depth, groups, total_groups, join: sites.stats.clone(), reachable_bytes: a.reachable_bytes() }
}

/// Every site's group, largest estimated bytes first.
pub fn site_groups<'s>(a: &impl AnalysedHeap<'s>, sites: &Sites, depth: usize) -> Vec<SiteGroup> {
    let mut ids: FxHashMap<&[u32], usize> = FxHashMap::default();
    let mut groups: Vec<(SiteGroup, f64)> = Vec::new();
    let mut members: Vec<Vec<NodeId>> = Vec::new();
    for b in &sites.blocks {
        let frames = sites.site_frames(b, depth);
        let g = *ids.entry(frames).or_insert_with(|| {
            let frames: Vec<SiteFrame> = frames.iter().map(|&f| sites.frames[f as usize].clone()).collect();
            let site = frames.iter().map(SiteFrame::describe).collect::<Vec<_>>().join(" <- ");
            let group = SiteGroup { site, frames, count: 0, samples: 0, sampled_bytes: 0, estimated_bytes: 0, retained: 0 };
            groups.push((group, 0.0));
            members.push(Vec::new());
            groups.len() - 1
        });
        let (group, estimate) = &mut groups[g];
        group.count += 1;
        group.samples += b.samples;
        group.sampled_bytes += a.shallow(b.node);
        *estimate += b.estimated_bytes();
        members[g].push(b.node);
    }
    let retained = union_retained(a, &members);
    let mut out: Vec<SiteGroup> = groups
        .into_iter()
        .zip(retained)
        .map(|((mut g, estimate), r)| {
            g.estimated_bytes = estimate.round() as u64;
            g.retained = r;
            g
        })
        .collect();
    out.sort_by(|x, y| y.estimated_bytes.cmp(&x.estimated_bytes).then(y.retained.cmp(&x.retained)).then(x.site.cmp(&y.site)));
    out
}

/// For each set of nodes, the bytes freed if all of them became unreachable: the retained sizes
/// of the members no other member of the same set dominates. Each member's nearest dominating
/// member is found by walking its dominator chain, remembering the answer for every node walked
/// (at most one visit per reachable node in all); a depth-first walk of that forest of members,
/// counting the open members of each set, then tells which members another of their set covers.
pub fn union_retained<'s>(a: &impl AnalysedHeap<'s>, sets: &[Vec<NodeId>]) -> Vec<u64> {
    const NONE: u32 = u32::MAX;
    // Per node: the set of a reachable member (a node in two sets is rare: the first wins).
    let mut set_of = vec![NONE; a.node_count()];
    let mut members = Vec::new();
    for (s, nodes) in sets.iter().enumerate() {
        for &v in nodes.iter().filter(|&&v| a.is_reachable(v)) {
            if set_of[v as usize] == NONE {
                set_of[v as usize] = s as u32;
                members.push(v);
            }
        }
    }
    // Per node walked: the nearest strict dominator that is a member (NONE: none; UNSEEN: not
    // walked yet).
    const UNSEEN: u32 = u32::MAX - 1;
    let mut nearest = vec![UNSEEN; a.node_count()];
    let mut children: FxHashMap<NodeId, Vec<NodeId>> = FxHashMap::default();
    let mut tops: Vec<NodeId> = Vec::new();
    let mut walked = Vec::new();
    for &v in &members {
        let mut x = v;
        let found = loop {
            let Some(d) = a.idom(x).filter(|&d| d != x && d != SUPER_ROOT) else { break NONE };
            if set_of[d as usize] != NONE {
                break d;
            }
            if nearest[d as usize] != UNSEEN {
                break nearest[d as usize];
            }
            walked.push(d);
            x = d;
        };
        for w in walked.drain(..) {
            nearest[w as usize] = found;
        }
        if found == NONE {
            tops.push(v);
        } else {
            children.entry(found).or_default().push(v);
        }
    }
    let mut out = vec![0u64; sets.len()];
    let mut open = vec![0u32; sets.len()];
    // (member, entering?)
    let mut stack: Vec<(NodeId, bool)> = tops.into_iter().map(|v| (v, true)).collect();
    while let Some((v, entering)) = stack.pop() {
        let s = set_of[v as usize] as usize;
        if !entering {
            open[s] -= 1;
            continue;
        }
        if open[s] == 0 {
            out[s] += a.retained(v);
        }
        open[s] += 1;
        stack.push((v, false));
        if let Some(kids) = children.get(&v) {
            stack.extend(kids.iter().map(|&c| (c, true)));
        }
    }
    out
}

/// One site across snapshots.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SiteGrowth {
    pub site: String,
    /// Per snapshot, oldest first.
    pub count: Vec<u64>,
    pub estimated_bytes: Vec<u64>,
    pub retained: Vec<u64>,
    /// Estimated bytes, last snapshot minus first.
    pub growth: i64,
}

/// The `diff --by site` report.
#[derive(Clone, Debug, Serialize)]
pub struct SiteDiff {
    pub by: &'static str,
    pub depth: usize,
    pub snapshots: Vec<String>,
    /// Largest growth first.
    pub sites: Vec<SiteGrowth>,
    pub total_sites: u64,
    /// Sites whose estimated bytes grew at every snapshot by at least `min_growth` in all
    /// (three snapshots or more), largest growth first: where the new objects were allocated.
    pub suspects: Vec<SiteGrowth>,
    /// Per snapshot, how its tracked blocks met their stacks.
    pub join: Vec<JoinStats>,
}

/// Compares the site groups of several snapshots, oldest first.
pub fn site_diff(
    names: Vec<String>,
    per_snapshot: &[(Vec<SiteGroup>, JoinStats)],
    depth: usize,
    min_growth: u64,
    limit: usize,
    max_suspects: usize,
) -> SiteDiff {
    let n = per_snapshot.len();
    let mut index: FxHashMap<&str, usize> = FxHashMap::default();
    let mut sites: Vec<SiteGrowth> = Vec::new();
    for (i, (groups, _)) in per_snapshot.iter().enumerate() {
        for g in groups {
            let s = *index.entry(g.site.as_str()).or_insert_with(|| {
                sites.push(SiteGrowth {
                    site: g.site.clone(),
                    count: vec![0; n],
                    estimated_bytes: vec![0; n],
                    retained: vec![0; n],
                    growth: 0,
                });
                sites.len() - 1
            });
            sites[s].count[i] = g.count;
            sites[s].estimated_bytes[i] = g.estimated_bytes;
            sites[s].retained[i] = g.retained;
        }
    }
    for s in &mut sites {
        s.growth = s.estimated_bytes[n - 1] as i64 - s.estimated_bytes[0] as i64;
    }
    sites.sort_by(|x, y| y.growth.cmp(&x.growth).then(x.site.cmp(&y.site)));
    let mut suspects: Vec<SiteGrowth> = if n >= 3 {
        sites.iter().filter(|s| s.growth >= min_growth as i64 && s.estimated_bytes.windows(2).all(|w| w[1] > w[0])).cloned().collect()
    } else {
        Vec::new()
    };
    suspects.truncate(max_suspects);
    let total_sites = sites.len() as u64;
    sites.truncate(limit);
    SiteDiff {
        by: "site",
        depth,
        snapshots: names,
        sites,
        total_sites,
        suspects,
        join: per_snapshot.iter().map(|(_, j)| j.clone()).collect(),
    }
}

/// The sites of a suspect group's sampled blocks in each snapshot (`per_snapshot[i]`: that
/// snapshot's site groups of the blocks in the suspect's group), those that grew first; at most
/// `max` of them.
pub fn suspect_sites(per_snapshot: &[Vec<SiteGroup>], max: usize) -> Vec<SiteGrowth> {
    let joined: Vec<(Vec<SiteGroup>, JoinStats)> = per_snapshot.iter().map(|g| (g.clone(), JoinStats::default())).collect();
    let diff = site_diff(Vec::new(), &joined, 1, 0, usize::MAX, 0);
    diff.sites.into_iter().filter(|s| s.growth > 0).take(max).collect()
}
