//! Grouping blocks: by tag (reserved header bits when the snapshot has them, else the kind), by
//! kind (block tag and size, closure function, custom type), by closure function, by root.
//!
//! A group's retained size is the size of the union of its members' dominator subtrees (a
//! member dominated by another member is not counted twice): one walk of the dominator tree
//! with a per-group count of the members on the current path.

use crate::analysis::Analysis;
use crate::blocks::{BlockRef, NodeId, NO_NODE};
use crate::graph::SUPER_ROOT;
use crate::ocaml;
use heapsnap_format::RootKind;
use rayon::prelude::*;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    Tag,
    Kind,
    Closure,
    Root,
}

impl std::str::FromStr for GroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tag" => Ok(GroupBy::Tag),
            "kind" => Ok(GroupBy::Kind),
            "closure" => Ok(GroupBy::Closure),
            "root" => Ok(GroupBy::Root),
            _ => Err(format!("unknown grouping {s:?} (tag, kind, closure or root)")),
        }
    }
}

/// One group of a report.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Group {
    pub name: String,
    /// Blocks in the group (for `root`: blocks the root retains).
    pub count: u64,
    /// Their own bytes, headers included (for `root`: the bytes of the objects the root points at).
    pub shallow: u64,
    /// Bytes freed if every member became unreachable.
    pub retained: u64,
}

/// What a block is, for grouping. Cheap to hash; named only once per group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupKey {
    Reserved(u32),
    Block { tag: u8, size: u64 },
    Tagged(u8),
    Closure(u64),
    Custom(u64),
}

pub fn kind_key(b: &BlockRef<'_>) -> GroupKey {
    match b.header.tag {
        ocaml::CLOSURE_TAG => GroupKey::Closure(b.fields.first().copied().unwrap_or(0)),
        ocaml::CUSTOM_TAG => GroupKey::Custom(b.fields.first().copied().unwrap_or(0)),
        t @ (ocaml::STRING_TAG | ocaml::DOUBLE_TAG | ocaml::DOUBLE_ARRAY_TAG | ocaml::ABSTRACT_TAG | ocaml::CONT_TAG) => {
            GroupKey::Tagged(t)
        }
        tag => GroupKey::Block { tag, size: b.header.wosize },
    }
}

fn key_for(by: GroupBy, reserved_bits: u32, b: &BlockRef<'_>) -> Option<GroupKey> {
    match by {
        GroupBy::Tag if reserved_bits > 0 => Some(GroupKey::Reserved(b.header.reserved)),
        GroupBy::Tag | GroupBy::Kind => Some(kind_key(b)),
        GroupBy::Closure => (b.header.tag == ocaml::CLOSURE_TAG).then(|| kind_key(b)),
        GroupBy::Root => None,
    }
}

pub fn key_name(a: &Analysis<'_>, key: &GroupKey) -> String {
    match *key {
        GroupKey::Reserved(v) => format!("reserved {v}"),
        GroupKey::Block { tag, size } => format!("{} tag {tag} size {size}", ocaml::tag_name(tag)),
        GroupKey::Tagged(t) => ocaml::tag_name(t).to_string(),
        GroupKey::Closure(code) => format!("closure {}", a.names.closure_function(code)),
        GroupKey::Custom(ops) => format!("custom {}", a.names.custom_identifier(ops).unwrap_or("?")),
    }
}

/// Groups, largest retained first.
pub fn groups(a: &Analysis<'_>, by: GroupBy) -> Vec<Group> {
    if by == GroupBy::Root {
        return root_groups(a);
    }
    let blocks = &a.graph.blocks;
    let reserved_bits = blocks.layout.reserved_bits();
    let n = a.graph.node_count();
    // Group id of every node (local ids per region first, then merged).
    let mut gid = crate::mem::filled(n, NO_NODE);
    let mut order: Vec<usize> = blocks.block_regions().collect();
    order.sort_by_key(|&r| blocks.regions[r].nodes.start);
    let mut slices: Vec<(usize, &mut [u32])> = Vec::new();
    {
        let mut rest: &mut [u32] = &mut gid;
        let mut at = 0u32;
        for &r in &order {
            let nodes = blocks.regions[r].nodes.clone();
            let (_, tail) = std::mem::take(&mut rest).split_at_mut((nodes.start - at) as usize);
            let (mine, tail) = tail.split_at_mut(nodes.len());
            rest = tail;
            at = nodes.end;
            slices.push((r, mine));
        }
    }
    let local: Vec<(Vec<(GroupKey, u64, u64)>, &mut [u32])> = slices
        .into_par_iter()
        .map(|(r, out)| {
            let mut ids: HashMap<GroupKey, u32> = HashMap::new();
            let mut keys: Vec<(GroupKey, u64, u64)> = Vec::new();
            for (b, o) in blocks.region_blocks(r).zip(out.iter_mut()) {
                if let Some(key) = key_for(by, reserved_bits, &b) {
                    let id = *ids.entry(key).or_insert_with(|| {
                        keys.push((key, 0, 0));
                        keys.len() as u32 - 1
                    });
                    keys[id as usize].1 += 1;
                    keys[id as usize].2 += b.header.bytes();
                    *o = id;
                }
            }
            (keys, out)
        })
        .collect();
    let mut global: HashMap<GroupKey, u32> = HashMap::new();
    let mut totals: Vec<(GroupKey, u64, u64)> = Vec::new();
    let mut remaps: Vec<(Vec<u32>, &mut [u32])> = Vec::new();
    for (keys, out) in local {
        let remap = keys
            .iter()
            .map(|&(k, c, s)| {
                let id = *global.entry(k).or_insert_with(|| {
                    totals.push((k, 0, 0));
                    totals.len() as u32 - 1
                });
                totals[id as usize].1 += c;
                totals[id as usize].2 += s;
                id
            })
            .collect();
        remaps.push((remap, out));
    }
    remaps.into_par_iter().for_each(|(remap, out)| {
        for o in out.iter_mut().filter(|o| **o != NO_NODE) {
            *o = remap[*o as usize];
        }
    });
    let retained = union_retained(a, &gid, totals.len());
    let mut out: Vec<Group> = totals
        .iter()
        .zip(retained)
        .map(|(&(k, count, shallow), retained)| Group { name: key_name(a, &k), count, shallow, retained })
        .collect();
    out.sort_by(|x, y| y.retained.cmp(&x.retained).then(y.shallow.cmp(&x.shallow)).then(x.name.cmp(&y.name)));
    out
}

/// For each group, the retained size of the union of its members: one iterative walk of the
/// dominator tree, counting each group's members on the current path.
fn union_retained(a: &Analysis<'_>, gid: &[u32], groups: usize) -> Vec<u64> {
    let (offsets, children) = a.tree.children();
    let mut active = vec![0u32; groups];
    let mut retained = vec![0u64; groups];
    // (node, next child index); entering a node happens when it is pushed.
    let mut stack: Vec<(NodeId, u32)> = vec![(SUPER_ROOT, offsets[SUPER_ROOT as usize])];
    while let Some(top) = stack.last_mut() {
        let (v, cursor) = *top;
        if cursor < offsets[v as usize + 1] {
            top.1 += 1;
            let c = children[cursor as usize];
            let g = gid[c as usize];
            if g != NO_NODE {
                if active[g as usize] == 0 {
                    retained[g as usize] += a.tree.retained[c as usize];
                }
                active[g as usize] += 1;
            }
            stack.push((c, offsets[c as usize]));
        } else {
            stack.pop();
            let g = gid[v as usize];
            if g != NO_NODE && v != SUPER_ROOT {
                active[g as usize] -= 1;
            }
        }
    }
    retained
}

/// Where a reachable node's retention is attributed: the root (for module globals, the module
/// field) at the top of its chain of dominators.
pub fn root_groups(a: &Analysis<'_>) -> Vec<Group> {
    let mut groups: HashMap<String, Group> = HashMap::new();
    let tree = &a.tree;
    let label_cache = |top: NodeId| -> String { top_label(a, top) };
    // top[v] for every reachable block, in preorder (dominators come first).
    let n = a.graph.node_count();
    let mut top = vec![NO_NODE; n];
    let mut labels: HashMap<NodeId, String> = HashMap::new();
    for &v in &tree.preorder[1..] {
        let d = tree.idom[v as usize];
        let t = if d == SUPER_ROOT || a.graph.root_kind_of(d).is_some() {
            v
        } else if a.module_of(d).is_some() && (d == SUPER_ROOT || top[d as usize] == d) {
            // Children of a module block are attributed to the module's fields.
            v
        } else {
            top[d as usize]
        };
        top[v as usize] = t;
        if a.graph.root_kind_of(v).is_some() {
            continue;
        }
        if t == v {
            labels.entry(v).or_insert_with(|| label_cache(v));
        }
        let label = &labels[&t];
        let g = groups.entry(label.clone()).or_insert_with(|| Group { name: label.clone(), count: 0, shallow: 0, retained: 0 });
        let size = a.shallow(v);
        g.count += 1;
        g.retained += size;
        if t == v {
            g.shallow += size;
        }
    }
    let mut out: Vec<Group> = groups.into_values().collect();
    out.sort_by(|x, y| y.retained.cmp(&x.retained).then(x.name.cmp(&y.name)));
    out
}

/// The label of a top node: its root, or `Module.i` for the field of a module block.
pub fn top_label(a: &Analysis<'_>, v: NodeId) -> String {
    let d = a.tree.idom[v as usize];
    if d == SUPER_ROOT {
        return "(several root kinds)".into();
    }
    if let Some(kind) = a.graph.root_kind_of(d) {
        if let Some(m) = a.module_of(v) {
            return format!("{m} (module block)");
        }
        let roots = a.graph.roots_of(v);
        return match roots.iter().find(|r| a.snap.roots()[r.record as usize].root_kind() == kind) {
            Some(r) => crate::names::root_label(a.snap, &a.snap.roots()[r.record as usize]),
            None => format!("{kind} (shared)"),
        };
    }
    if let Some(m) = a.module_of(d) {
        if let Some(parent) = a.graph.blocks.block(d) {
            let field = parent.fields.iter().position(|&f| {
                ocaml::is_pointer(f) && matches!(a.graph.blocks.resolve(f), crate::blocks::Target::Node(n) if n == v)
            });
            return match field {
                Some(i) => format!("{m}.{i}"),
                None => format!("{m}.(shared)"),
            };
        }
    }
    let _ = RootKind::Other;
    a.describe(v)
}
