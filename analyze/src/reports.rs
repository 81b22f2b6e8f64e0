//! The `summary`, `top` and `dominators` reports (JSON schemas in REPORTS.md).

use crate::analysed_heap::{AnalysedHeap, KindTally};
use crate::blocks::{NodeId, RegionCounts};
use crate::full_analysis::Analysis;
use crate::graph::{PointerCounts, SUPER_ROOT};
use crate::kinds::key_name;
use crate::model::{Group, GroupBy, GroupKey, NodeKind, Role, RootShare, Structure};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Serialize, Deserialize, Default, Clone, Debug)]
pub struct RegionTotals {
    pub regions: u64,
    pub bytes: u64,
    #[serde(flatten)]
    pub counts: RegionCounts,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct RootKindTotal {
    pub kind: String,
    pub roots: u64,
    /// Bytes retained by this kind of root (dominated by its node under the super-root).
    pub retained: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Summary {
    pub ocaml_version: String,
    pub reserved_header_bits: u8,
    /// Live blocks (allocated, not garbage) in all regions, static data included, and their
    /// bytes (headers included).
    pub objects: u64,
    pub bytes: u64,
    /// Blocks the roots reach (static ones included), and the heap bytes they hold (static
    /// data excluded: it is never freed, so it counts in no retained size).
    pub reachable_objects: u64,
    pub reachable_bytes: u64,
    /// Live-coloured blocks that no root reaches.
    pub unreachable_objects: u64,
    pub unreachable_bytes: u64,
    pub garbage_objects: u64,
    pub garbage_bytes: u64,
    pub free_slots: u64,
    pub free_bytes: u64,
    pub edges: u64,
    pub pointers: PointerCounts,
    pub malformed_headers: u64,
    pub by_region_kind: BTreeMap<String, RegionTotals>,
    /// Keyed by domain id ("none" for regions without a domain).
    pub by_domain: BTreeMap<String, RegionTotals>,
    pub roots: Vec<RootKindTotal>,
    /// The largest groups: by OCaml type when the snapshot has names (what a person asks
    /// first), else by kind.
    pub top_groups: Vec<Group>,
    /// The grouping of `top_groups`: `type` or `kind`.
    #[serde(default = "kind_grouping")]
    pub top_groups_by: String,
}

fn kind_grouping() -> String {
    GroupBy::Kind.name().to_string()
}

pub fn summary(a: &Analysis<'_>, top: usize) -> Summary {
    let blocks = &a.graph.blocks;
    let mut by_kind: BTreeMap<String, RegionTotals> = BTreeMap::new();
    let mut by_domain: BTreeMap<String, RegionTotals> = BTreeMap::new();
    let mut all = RegionCounts::default();
    for rb in &blocks.regions {
        for t in [
            by_kind.entry(rb.kind.label().to_string()).or_default(),
            by_domain.entry(rb.domain.map_or("none".into(), |d| d.to_string())).or_default(),
        ] {
            t.regions += 1;
            t.bytes += rb.words.len() as u64 * 8;
            t.counts.add(&rb.counts);
        }
        all.add(&rb.counts);
    }
    let reachable_objects = a.reachable_objects();
    let reachable_bytes = a.reachable_bytes();
    // The kind groups count the unreachable blocks as they sweep the regions: first.
    let top_groups = a.grouped(GroupBy::Kind).expect("every snapshot groups by kind").iter().take(top).cloned().collect();
    let (unreachable_objects, unreachable_bytes) = a.unreachable();
    let roots = a
        .graph
        .root_kinds
        .iter()
        .enumerate()
        .map(|(i, k)| RootKindTotal {
            kind: k.label().to_string(),
            roots: a.snap.roots().iter().filter(|r| r.root_kind() == *k).count() as u64,
            retained: a.retained(1 + i as NodeId),
        })
        .collect();
    Summary {
        ocaml_version: a.snap.metadata().ocaml_version.clone(),
        reserved_header_bits: a.snap.metadata().reserved_header_bits,
        objects: all.live_blocks,
        bytes: all.live_bytes,
        reachable_objects,
        reachable_bytes,
        unreachable_objects,
        unreachable_bytes,
        garbage_objects: all.garbage_blocks,
        garbage_bytes: all.garbage_bytes,
        free_slots: all.free_slots,
        free_bytes: all.free_bytes,
        edges: a.graph.edge_count() as u64,
        pointers: a.graph.pointers.clone(),
        malformed_headers: blocks.malformed_count,
        by_region_kind: by_kind,
        by_domain,
        roots,
        top_groups,
        top_groups_by: kind_grouping(),
    }
}

/// The summary with its leak suspects, as the analysis index saves them and `summary` prints
/// them: its `top` largest groups by OCaml type when the snapshot has names, else by kind; the
/// suspects at [`crate::SUMMARY_SUSPECTS_MIN_PERCENT`] (at most
/// [`crate::SUMMARY_SUSPECTS_SHOWN`]). A first look answers with it from the analysis.
pub fn summary_with_suspects(a: &Analysis<'_>, top: usize) -> (Summary, crate::SuspectsReport) {
    // The roots' labels before the groups: their per-node arrays are gone before the groups'
    // walk down the dominator tree makes its child lists (which the suspects read after), so
    // the two never take memory at the same time. The suspects' paths search from the roots
    // only as deep as the suspects are (`Analysis::bfs_parent_of`).
    //
    // The types need neither the kinds nor the roots' reach, and much of each is sequential
    // (a real program's types are interned one by one): the types are found on one side while
    // the rest is made on the other.
    let timer = crate::progress::PhaseTimer::start("summary");
    let named = a.snap.ocaml_names().is_some();
    let (_, mut totals) = rayon::join(
        || {
            if named {
                let _ = AnalysedHeap::typing(a);
                timer.lap("types");
            }
        },
        || {
            let _ = a.block_kinds();
            timer.lap("block kinds");
            let _ = a.retainers();
            timer.lap("roots' reach");
            let totals = summary(a, top);
            timer.lap("totals and groups by kind");
            totals
        },
    );
    // The suspects are mostly one chain of lookups (the walk down to each, the breadth-first
    // search up from the ones held by stack frames), the groups by type partly: each is made
    // while the other waits on memory.
    let (type_groups, suspects) = rayon::join(
        || {
            named.then(|| {
                let groups = a.grouped(GroupBy::Type);
                timer.lap("groups by type");
                groups
            })
        },
        || {
            let suspects = a.summary_suspects().clone();
            timer.lap("suspects");
            suspects
        },
    );
    if let Some(Ok(groups)) = type_groups {
        totals.top_groups = groups.iter().take(top).cloned().collect();
        totals.top_groups_by = GroupBy::Type.name().to_string();
    }
    (totals, suspects)
}

/// The `top` report: the groups of one grouping, the unreachable objects counted in none of
/// them, and with `--by root` what each root retains alone and shared. Fields in alphabetical
/// order, as `top --json` prints them.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Top {
    pub by: GroupBy,
    /// The largest groups (all of them with a limit of 0).
    pub groups: Vec<Group>,
    pub reachable_bytes: u64,
    /// With `--by root` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roots: Option<Vec<RootShare>>,
    pub total_groups: u64,
    pub unreachable_bytes: u64,
    pub unreachable_objects: u64,
    /// With `--by type` only: the reachable heap bytes of blocks no OCaml type names (what
    /// `info`'s typed share leaves).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untyped_bytes: Option<u64>,
}

/// The `top` report, at most `limit` groups and roots (0: all).
pub fn top<'s>(a: &impl AnalysedHeap<'s>, by: GroupBy, limit: usize) -> Result<Top, crate::error::AnalyzeError> {
    let all = a.groups(by)?;
    let keep = if limit == 0 { all.len() } else { limit.min(all.len()) };
    let roots = (by == GroupBy::Root).then(|| {
        let shares = a.root_shares();
        shares[..if limit == 0 { shares.len() } else { limit.min(shares.len()) }].to_vec()
    });
    let (unreachable_objects, unreachable_bytes) = a.unreachable();
    let reachable_bytes = a.reachable_bytes();
    // The typing's own tally of the heap's typed bytes (the groups list typed static data too,
    // which is outside the heap).
    let untyped_bytes = (by == GroupBy::Type).then(|| a.typing().map(|t| reachable_bytes.saturating_sub(t.typed_bytes))).flatten();
    Ok(Top {
        by,
        groups: all[..keep].to_vec(),
        reachable_bytes,
        roots,
        total_groups: all.len() as u64,
        unreachable_bytes,
        unreachable_objects,
        untyped_bytes,
    })
}

/// A node of the dominator tree report.
#[derive(Serialize, Clone, Debug)]
pub struct TreeNode {
    pub node: NodeId,
    /// Address of the block's first field (absent for the super-root and root kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub description: String,
    /// Where retention is attributed (the root or module field), for nodes right below roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    pub shallow: u64,
    pub retained: u64,
    /// Retained bytes as a percentage of all reachable bytes.
    pub percent: f64,
    /// Present when this node stands for many small siblings of one kind: it is the largest of
    /// them, shown as their example.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similar: Option<Similar>,
    pub children: Vec<TreeNode>,
    /// Children left out (below `min_percent` or past `depth`), and what they retain together.
    pub omitted_children: u64,
    pub omitted_retained: u64,
}

/// Siblings of one kind summarised as one line (each too small to be shown alone).
#[derive(Serialize, Clone, Debug)]
pub struct Similar {
    /// Their kind (`Hashtbl bucket chain`, `string`, ...).
    pub kind: String,
    pub count: u64,
    /// What they retain together (each retains its own subtree: they do not nest).
    pub retained: u64,
    pub percent: f64,
    /// The largest one's retained bytes (the node that carries this summary).
    pub largest: u64,
}

/// The dominator tree from the super-root, `depth` levels deep, keeping children that retain
/// at least `min_percent` of the reachable bytes (at most `max_children` per node). Smaller
/// children of one kind that together reach `min_percent` are summarised as one node (their
/// largest, with [`Similar`] figures for all of them).
pub fn dominator_report<'s>(a: &impl AnalysedHeap<'s>, depth: usize, min_percent: f64, max_children: usize) -> TreeNode {
    let total = a.reachable_bytes().max(1);
    let big_enough = |bytes: u64| bytes as f64 * 100.0 / total as f64 >= min_percent;
    // What a block is, and what it is to its dominator (`Hashtbl data`, ...).
    // What a block is, and what it is to its dominator (`Hashtbl data`, ...): the holder's
    // structure is found once per parent, not once per child (a bucket array has many).
    let structure_of = |v: NodeId| match a.kind_of_node(v) {
        Some(GroupKey::Structure(s)) => Some(s),
        _ => None,
    };
    let role_of = |parent: NodeId, holder: Option<Structure>, parent_role: Option<Role>, v: NodeId| {
        let field = if holder == Some(Structure::Hashtbl) { crate::paths::field_pointing(a, parent, v) } else { None };
        Role::of_child(holder, parent_role, field)
    };
    type SiblingKey = (Option<Role>, Option<GroupKey>);
    // Iterative: (node, depth) pairs are expanded top-down, then assembled bottom-up.
    struct Frame {
        node: NodeId,
        role: Option<Role>,
        similar: Option<Similar>,
        /// Children to expand, with their role and summary.
        kids: Vec<(NodeId, Option<Role>, Option<Similar>)>,
        built: Vec<TreeNode>,
        omitted: u64,
        omitted_retained: u64,
    }
    let make = |v: NodeId, role: Option<Role>, similar: Option<Similar>, level: usize| -> Frame {
        let mut kids = a.children_retained(v).peekable();
        let mut frame = Frame { node: v, role, similar, kids: Vec::new(), built: Vec::new(), omitted: 0, omitted_retained: 0 };
        if level >= depth {
            for (_, retained) in kids {
                frame.omitted += 1;
                frame.omitted_retained += retained;
            }
            return frame;
        }
        // Below a summary's example, its own children are shown whatever their size: it stands
        // for its siblings, each of them small.
        let example = frame.similar.is_some();
        let holder = structure_of(v);
        let mut shown: Vec<(NodeId, Option<Role>, Option<Similar>)> = Vec::new();
        while let Some(&(c, _)) = kids.peek().filter(|&&(_, r)| shown.len() < max_children && (example || big_enough(r))) {
            shown.push((c, role_of(v, holder, role, c), None));
            kids.next();
        }
        // The small ones (the rest), by role and kind: a kind whose members together are big
        // enough is one line. A role is the same for every child but a Hashtbl's (few): those
        // are counted one by one, the others by kind alone (millions of siblings, a few kinds).
        let mut keys: BTreeMap<SiblingKey, KindTally> = BTreeMap::new();
        let add = |keys: &mut BTreeMap<SiblingKey, KindTally>, r: Option<Role>, t: KindTally| {
            keys.entry((r, t.kind))
                .and_modify(|all| {
                    all.count += t.count;
                    all.retained += t.retained;
                })
                .or_insert(t);
        };
        if holder == Some(Structure::Hashtbl) {
            for (c, retained) in kids {
                let t = KindTally { kind: a.kind_of_node(c), count: 1, retained, first: (c, retained) };
                add(&mut keys, role_of(v, holder, role, c), t);
            }
        } else {
            drop(kids);
            let r = Role::of_child(holder, role, None);
            a.tally_children(v, shown.len()).into_iter().for_each(|t| add(&mut keys, r, t));
        }
        let mut summaries: Vec<(NodeId, Option<Role>, Option<Similar>)> = Vec::new();
        for ((r, key), KindTally { count, retained: sum, first: (largest, largest_retained), .. }) in keys {
            if count < 2 || !big_enough(sum) {
                frame.omitted += count;
                frame.omitted_retained += sum;
                continue;
            }
            let kind = match (r, key) {
                (Some(r), _) => r.plural().to_string(),
                (None, Some(k)) => key_name(a.names(), &k),
                (None, None) => "objects".to_string(),
            };
            let similar = Similar { kind, count, retained: sum, percent: sum as f64 * 100.0 / total as f64, largest: largest_retained };
            summaries.push((largest, r, Some(similar)));
        }
        summaries.sort_by_key(|(_, _, s)| std::cmp::Reverse(s.as_ref().map_or(0, |s| s.retained)));
        let room = max_children.saturating_sub(shown.len());
        for extra in summaries.split_off(room.min(summaries.len())) {
            let s = extra.2.expect("a summary");
            frame.omitted += s.count;
            frame.omitted_retained += s.retained;
        }
        shown.extend(summaries);
        frame.kids = shown;
        frame
    };
    let finish = |f: Frame| -> TreeNode {
        let v = f.node;
        let root = match a.idom(v) {
            Some(d) if matches!(a.node_kind(d), Some(NodeKind::SuperRoot | NodeKind::Roots(_))) => {
                matches!(a.node_kind(v), Some(NodeKind::Block(_))).then(|| a.top_label(v))
            }
            _ => None,
        };
        let description = match f.role {
            Some(r) => format!("{}: {}", r.name(), a.describe(v)),
            None => a.describe(v),
        };
        TreeNode {
            node: v,
            address: a.address(v).map(|x| format!("{x:#x}")),
            description,
            root,
            shallow: a.shallow(v),
            retained: a.retained(v),
            percent: a.retained(v) as f64 * 100.0 / total as f64,
            similar: f.similar,
            children: f.built,
            omitted_children: f.omitted,
            omitted_retained: f.omitted_retained,
        }
    };
    let mut stack: Vec<Frame> = vec![make(SUPER_ROOT, None, None, 0)];
    loop {
        let level = stack.len();
        let top = stack.last_mut().expect("the root frame stays until the end");
        if top.built.len() < top.kids.len() {
            let (next, role, similar) = top.kids[top.built.len()].clone();
            stack.push(make(next, role, similar, level));
            continue;
        }
        let done = stack.pop().expect("not empty");
        let node = finish(done);
        match stack.last_mut() {
            Some(parent) => parent.built.push(node),
            None => return node,
        }
    }
}

/// Human-readable bytes.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u < UNITS.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}
