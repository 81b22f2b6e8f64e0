//! Grouping blocks: by kind ([`crate::kinds`]: a known structure, else block tag and size, closure function,
//! custom type), by closure function, by root, and by the value of the reserved header bits
//! (for runtimes configured with them).
//!
//! A group's retained size is the size of the union of its members' dominator subtrees (a
//! member dominated by another member is not counted twice), from
//! [`crate::dominators::DominatorTree::union_retained`].

use crate::blocks::{BlockMap, NodeId, NO_NODE};
use crate::dominators::{DominatorTree, NONE};
use crate::kinds::{key_for, key_name, kind_key};
use crate::mem::Scatter;
use crate::model::{Group, GroupBy, GroupKey, NO_LABEL, NO_TYPE};
use crate::names::Names;
use crate::progress::PhaseTimer;
use crate::retainers::Retainers;
use crate::typed::Typing;
use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

/// Every block's kind ([`kind_key`]): the distinct kinds, and for each block node (by node
/// minus the first block node) its index in them. Recognising structures reads the blocks a
/// block points to: done once per analysis (`Analysis::block_kinds`), for the `kind` and
/// `closure` groupings and the analysis index alike.
pub struct BlockKinds {
    pub kinds: Vec<GroupKey>,
    /// By node minus the first block node: in the narrowest width the number of kinds allows
    /// (a heap has tens to thousands of kinds and millions of blocks), its largest value
    /// standing for a node that is no block.
    ids: KindIds,
}

enum KindIds {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

impl BlockKinds {
    /// The kind of node `v` (`None`: not a block), `first_block` being the first block node.
    pub fn key(&self, first_block: NodeId, v: NodeId) -> Option<GroupKey> {
        let id = self.id((v as usize).checked_sub(first_block as usize)?);
        self.kinds.get(id as usize).copied()
    }

    /// How many ids there are (one per node from the first block node on).
    pub fn len(&self) -> usize {
        match &self.ids {
            KindIds::U8(ids) => ids.len(),
            KindIds::U16(ids) => ids.len(),
            KindIds::U32(ids) => ids.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The kind id (an index in `kinds`) of node `first_block + i`; `u32::MAX` for a node that
    /// is no block, or past the end.
    #[inline]
    pub fn id(&self, i: usize) -> u32 {
        match &self.ids {
            KindIds::U8(ids) => ids.get(i).map_or(u32::MAX, |&k| if k == u8::MAX { u32::MAX } else { u32::from(k) }),
            KindIds::U16(ids) => ids.get(i).map_or(u32::MAX, |&k| if k == u16::MAX { u32::MAX } else { u32::from(k) }),
            KindIds::U32(ids) => ids.get(i).copied().unwrap_or(u32::MAX),
        }
    }

    /// Wide ids (`u32::MAX`: no block) in the narrowest width that holds `count` kinds and the
    /// mark of no block.
    fn narrowed(ids: Vec<u32>, count: usize) -> KindIds {
        if count < u8::MAX as usize {
            KindIds::U8(ids.par_iter().map(|&k| k.min(u32::from(u8::MAX)) as u8).collect())
        } else if count < u16::MAX as usize {
            KindIds::U16(ids.par_iter().map(|&k| k.min(u32::from(u16::MAX)) as u16).collect())
        } else {
            KindIds::U32(ids)
        }
    }

    /// Every region on every core, each with its own table of kinds, merged after.
    pub fn of(blocks: &BlockMap<'_>, node_count: usize) -> BlockKinds {
        let first = blocks.first_block_node;
        let mut ids = vec![u32::MAX; node_count.saturating_sub(first as usize)];
        // Each region's blocks are a range of nodes: the regions' slices of `ids`, in node order.
        let mut regions: Vec<usize> = blocks.block_regions().collect();
        regions.sort_unstable_by_key(|&r| blocks.regions[r].nodes.start);
        let mut parts: Vec<(usize, &mut [u32])> = Vec::with_capacity(regions.len());
        let mut rest: &mut [u32] = &mut ids;
        let mut at = first;
        for r in regions {
            let nodes = &blocks.regions[r].nodes;
            let tail = std::mem::take(&mut rest).split_at_mut((nodes.start - at) as usize).1;
            let (mine, tail) = tail.split_at_mut(nodes.len());
            parts.push((r, mine));
            rest = tail;
            at = nodes.end;
        }
        let tables: Vec<Vec<GroupKey>> = parts
            .par_iter_mut()
            .map(|(r, out)| {
                let start = blocks.regions[*r].nodes.start;
                let mut table: Vec<GroupKey> = Vec::new();
                let mut known: HashMap<GroupKey, u32> = HashMap::default();
                let mut last: Option<(GroupKey, u32)> = None;
                for b in blocks.region_blocks(*r) {
                    let key = kind_key(blocks, &b);
                    // Neighbouring blocks are often of one kind: skip the hash then.
                    let id = match last {
                        Some((k, id)) if k == key => id,
                        _ => *known.entry(key).or_insert_with(|| {
                            table.push(key);
                            table.len() as u32 - 1
                        }),
                    };
                    last = Some((key, id));
                    out[(b.node - start) as usize] = id;
                }
                table
            })
            .collect();
        let mut kinds: Vec<GroupKey> = Vec::new();
        let mut known: HashMap<GroupKey, u32> = HashMap::default();
        let remaps: Vec<Vec<u32>> = tables
            .iter()
            .map(|local| {
                local
                    .iter()
                    .map(|&key| {
                        *known.entry(key).or_insert_with(|| {
                            kinds.push(key);
                            kinds.len() as u32 - 1
                        })
                    })
                    .collect()
            })
            .collect();
        parts.into_par_iter().zip(remaps).for_each(|((_, out), remap)| {
            for id in out.iter_mut().filter(|id| **id != u32::MAX) {
                *id = remap[*id as usize];
            }
        });
        let ids = BlockKinds::narrowed(ids, kinds.len());
        BlockKinds { kinds, ids }
    }
}

/// The `kind` and `closure` groupings, from every block's kind.
///
/// With the groups, the unreachable blocks and their bytes, counted in the same sweep of the
/// regions (what [`crate::Analysis::unreachable`] would sweep them again for).
pub fn kind_groups(
    blocks: &BlockMap<'_>,
    tree: &DominatorTree,
    names: &Names<'_>,
    bk: &BlockKinds,
    by: GroupBy,
) -> (Vec<Group>, (u64, u64)) {
    let timer = PhaseTimer::start("groups");
    let keep: Vec<bool> = bk.kinds.iter().map(|k| by == GroupBy::Kind || matches!(k, GroupKey::Closure(_))).collect();
    let first = blocks.first_block_node;
    // Counts and bytes of the reachable blocks of each kind, region by region; the
    // unreachable ones' in the last slot.
    let unreachable = bk.kinds.len();
    let regions: Vec<usize> = blocks.block_regions().collect();
    let mut sums: Vec<(u64, u64)> = regions
        .par_iter()
        .fold(
            || vec![(0u64, 0u64); unreachable + 1],
            |mut acc, &r| {
                for b in blocks.region_blocks(r) {
                    let id = if tree.is_reachable(b.node) { bk.id((b.node - first) as usize) as usize } else { unreachable };
                    acc[id].0 += 1;
                    acc[id].1 += b.header.bytes();
                }
                acc
            },
        )
        .reduce(
            || vec![(0u64, 0u64); unreachable + 1],
            |mut x, y| {
                for (a, b) in x.iter_mut().zip(y) {
                    a.0 += b.0;
                    a.1 += b.1;
                }
                x
            },
        );
    let unreachable = sums.pop().unwrap_or_default();
    timer.lap("groups");
    let preorder = tree.preorder();
    let retained = tree.union_retained(bk.kinds.len(), |p| {
        let v = preorder[p];
        match bk.id(v.wrapping_sub(first) as usize) {
            id if v >= first && id != u32::MAX && keep[id as usize] => id,
            _ => NONE,
        }
    });
    timer.lap("retained sizes");
    // Kinds of unreachable blocks only are no group.
    let mut out: Vec<Group> = bk
        .kinds
        .iter()
        .zip(sums)
        .zip(retained)
        .zip(&keep)
        .filter(|(((_, (count, _)), _), &kept)| kept && *count > 0)
        .map(|(((k, (count, shallow)), retained), _)| Group { name: key_name(names, k), count, shallow, retained, ..Default::default() })
        .collect();
    out.sort_by(|x, y| y.retained.cmp(&x.retained).then(y.shallow.cmp(&x.shallow)).then(x.name.cmp(&y.name)));
    (out, unreachable)
}

/// The `reserved` grouping: by the value of the reserved header bits.
pub fn reserved_groups(blocks: &BlockMap<'_>, tree: &DominatorTree, names: &Names<'_>) -> Vec<Group> {
    let by = GroupBy::Reserved;
    let timer = PhaseTimer::start("groups");
    let regions: Vec<usize> = blocks.block_regions().collect();
    // Pass 1: the groups of each region, with counts and shallow bytes of reachable blocks.
    let local: Vec<Vec<(GroupKey, u64, u64)>> = regions
        .par_iter()
        .map(|&r| {
            let mut ids: HashMap<GroupKey, u32> = HashMap::default();
            let mut keys: Vec<(GroupKey, u64, u64)> = Vec::new();
            let mut last: Option<(GroupKey, u32)> = None;
            for b in blocks.region_blocks(r) {
                // Unreachable blocks (not swept yet, mid-cycle) are no part of any group.
                if !tree.is_reachable(b.node) {
                    continue;
                }
                if let Some(key) = key_for(by, blocks, &b) {
                    // Neighbouring blocks are often of one kind: skip the hash then.
                    let id = match last {
                        Some((k, id)) if k == key => id,
                        _ => *ids.entry(key).or_insert_with(|| {
                            keys.push((key, 0, 0));
                            keys.len() as u32 - 1
                        }),
                    };
                    last = Some((key, id));
                    keys[id as usize].1 += 1;
                    keys[id as usize].2 += b.header.bytes();
                }
            }
            keys
        })
        .collect();
    let mut global: HashMap<GroupKey, u32> = HashMap::default();
    let mut totals: Vec<(GroupKey, u64, u64)> = Vec::new();
    for keys in &local {
        for &(k, c, s) in keys {
            let id = *global.entry(k).or_insert_with(|| {
                totals.push((k, 0, 0));
                totals.len() as u32 - 1
            });
            totals[id as usize].1 += c;
            totals[id as usize].2 += s;
        }
    }
    timer.lap("groups");
    // Pass 2: the group of every reachable node, by preorder number.
    let pre_of = &tree.pre_of;
    let mut gid = vec![NONE; tree.reachable_count()];
    {
        let out = Scatter(gid.as_mut_ptr());
        let global = &global;
        regions.par_iter().for_each(|&r| {
            let mut last: Option<(GroupKey, u32)> = None;
            for b in blocks.region_blocks(r) {
                let p = pre_of[b.node as usize];
                if p == NO_NODE {
                    continue;
                }
                if let Some(key) = key_for(by, blocks, &b) {
                    let id = match last {
                        Some((k, id)) if k == key => id,
                        _ => global[&key],
                    };
                    last = Some((key, id));
                    // SAFETY: preorder numbers are distinct and in bounds.
                    unsafe { out.write(p as usize, id) };
                }
            }
        });
    }
    timer.lap("group of every node");
    let retained = tree.union_retained(totals.len(), |p| gid[p]);
    timer.lap("retained sizes");
    let mut out: Vec<Group> = totals
        .iter()
        .zip(retained)
        .map(|(&(k, count, shallow), retained)| Group { name: key_name(names, &k), count, shallow, retained, ..Default::default() })
        .collect();
    out.sort_by(|x, y| y.retained.cmp(&x.retained).then(y.shallow.cmp(&x.shallow)).then(x.name.cmp(&y.name)));
    out
}

/// Every top object (one whose immediate dominator is the super-root or a root kind) with its
/// label (its roots' label, else `describe`'s), by preorder number: `(preorder number, label
/// id)` pairs, ascending, and the distinct labels.
pub fn labelled_tops(
    ret: &Retainers,
    tree: &DominatorTree,
    first_block: NodeId,
    describe: impl Fn(NodeId) -> String,
) -> (Vec<(u32, u32)>, Vec<String>) {
    let preorder = tree.preorder();
    let mut labels = ret.labels.clone();
    // Top objects no root names are named by their description, interned with the labels
    // (the map is made only when one is met).
    let mut by_name: Option<HashMap<String, u32>> = None;
    let tops = ret
        .tops()
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, p)| preorder[p as usize] >= first_block)
        .map(|(s, p)| {
            let id = ret.slot_label(s as u32).unwrap_or_else(|| {
                let names = by_name.get_or_insert_with(|| labels.iter().enumerate().map(|(i, l)| (l.clone(), i as u32)).collect());
                let label = describe(preorder[p as usize]);
                *names.entry(label.clone()).or_insert_with(|| {
                    labels.push(label);
                    labels.len() as u32 - 1
                })
            });
            (p, id)
        })
        .collect();
    (tops, labels)
}

/// Groups by OCaml type ([`crate::typed`]): count, shallow and retained bytes of the reachable
/// blocks of each type (none without a typing).
pub fn type_groups(blocks: &BlockMap<'_>, tree: &DominatorTree, typing: Option<&Typing>) -> Vec<Group> {
    let Some(typing) = typing else { return Vec::new() };
    let n_types = typing.type_count();
    let pre_of = &tree.pre_of;
    let regions: Vec<usize> = blocks.block_regions().collect();
    let totals = regions
        .par_iter()
        .fold(
            || vec![(0u64, 0u64); n_types],
            |mut totals, &r| {
                for b in blocks.region_blocks(r) {
                    let t = typing.type_id(b.node);
                    if t != NO_TYPE && pre_of[b.node as usize] != NO_NODE {
                        totals[t as usize].0 += 1;
                        totals[t as usize].1 += b.header.bytes();
                    }
                }
                totals
            },
        )
        .reduce(
            || vec![(0u64, 0u64); n_types],
            |mut x, y| {
                x.iter_mut().zip(y).for_each(|(x, y)| (x.0, x.1) = (x.0 + y.0, x.1 + y.1));
                x
            },
        );
    let preorder = tree.preorder();
    let retained = tree.union_retained(n_types, |p| typing.type_id(preorder[p]));
    let mut out: Vec<Group> = totals
        .iter()
        .zip(retained)
        .enumerate()
        .filter(|(_, (&(count, _), _))| count > 0)
        .map(|(t, (&(count, shallow), retained))| Group {
            name: typing.type_name(t as u32).unwrap_or("?").to_string(),
            count,
            shallow,
            retained,
            ..Default::default()
        })
        .collect();
    out.sort_by(|x, y| y.retained.cmp(&x.retained).then(y.shallow.cmp(&x.shallow)).then(x.name.cmp(&y.name)));
    out
}

/// Where a reachable node's retention is attributed: the root at the top of its chain of
/// dominators (the node right below the super-root or a root kind). Groups partition the
/// reachable blocks.
/// `labelled` is [`labelled_tops`]'s answer.
pub fn root_groups(blocks: &BlockMap<'_>, tree: &DominatorTree, ret: &Retainers, labelled: (Vec<(u32, u32)>, Vec<String>)) -> Vec<Group> {
    // One group per distinct label, by slot of the top objects.
    let (tops, names) = labelled;
    let (top_slot, top_pre) = crate::retainers::top_slots(tree, blocks.first_block_node);
    let mut group_of = vec![NO_LABEL; top_pre.len()];
    for &(p, g) in &tops {
        if let Some(&s) = top_slot.get(p as usize).filter(|&&s| s != NO_LABEL) {
            group_of[s as usize] = g;
        }
    }
    // Sizes, region by region.
    let regions: Vec<usize> = blocks.block_regions().collect();
    let groups = names.len();
    let sums: Vec<Vec<(u64, u64, u64)>> = regions
        .par_iter()
        .fold(
            || vec![(0u64, 0u64, 0u64); groups],
            |mut acc, &reg| {
                let is_static = blocks.regions[reg].kind == heapsnap_format::RegionKind::Static;
                for b in blocks.region_blocks(reg) {
                    let p = tree.pre_of[b.node as usize];
                    if p == NO_NODE {
                        continue;
                    }
                    let s = top_slot[p as usize];
                    if s == NO_LABEL {
                        continue;
                    }
                    let g = group_of[s as usize];
                    if g == NO_LABEL {
                        continue;
                    }
                    let t = top_pre[s as usize];
                    let e = &mut acc[g as usize];
                    let bytes = b.header.bytes();
                    e.0 += 1;
                    if t == p {
                        e.1 += bytes;
                    }
                    if !is_static {
                        e.2 += bytes;
                    }
                }
                acc
            },
        )
        .collect();
    // Labels past the retainers' own are descriptions of top objects no root names.
    let mut out: Vec<Group> = names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let (roots, complete) = ret.label_roots.get(i).filter(|(roots, _)| roots.len() > 1).cloned().unwrap_or_default();
            Group { name, roots_incomplete: !roots.is_empty() && !complete, roots, ..Default::default() }
        })
        .collect();
    for acc in sums {
        for (g, (c, s, r)) in out.iter_mut().zip(acc) {
            g.count += c;
            g.shallow += s;
            g.retained += r;
        }
    }
    out.sort_by(|x, y| y.retained.cmp(&x.retained).then(x.name.cmp(&y.name)));
    out
}
