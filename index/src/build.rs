//! Builds an index from a full analysis: everything the reports and the web UI read.

use crate::file::{IndexBuilder, SnapshotId};
use crate::sections::*;
use heapsnap_analyze::blocks::{NodeId, NO_NODE};
use heapsnap_analyze::graph::HeapGraph;
use heapsnap_analyze::groups::{groups, kind_key, top_label, GroupBy, GroupKey};
use heapsnap_analyze::paths::bfs_parents;
use heapsnap_analyze::progress::PhaseTimer;
use heapsnap_analyze::Analysis;
use rayon::prelude::*;
use std::collections::BTreeMap;

pub const ALL_GROUPINGS: [GroupBy; 5] = [GroupBy::Reserved, GroupBy::Kind, GroupBy::Closure, GroupBy::Root, GroupBy::Type];

/// The key of a grouping in the index's `groups` (INDEX.md). `--by reserved` was spelled
/// `--by tag` when the format was made: the stored key keeps that name, so that existing
/// indexes stay valid.
pub fn grouping_name(by: GroupBy) -> &'static str {
    match by {
        GroupBy::Reserved => "tag",
        GroupBy::Kind => "kind",
        GroupBy::Closure => "closure",
        GroupBy::Root => "root",
        GroupBy::Type => "type",
    }
}

/// The index file's bytes for an analysed snapshot.
pub fn build(a: &Analysis<'_>) -> Vec<u8> {
    // Addresses and referrers need only the graph: another thread makes them while this one
    // makes the groups, the summary and the tree's sections (the analysis itself, with its
    // names, stays on this thread).
    let graph = &a.graph;
    std::thread::scope(|scope| {
        let graph_part = scope.spawn(|| (addresses(graph), referrers(graph)));
        let mut b = from_tree(a);
        let ((addr, by_addr), (ref_offsets, refs)) = graph_part.join().expect("the addresses and referrers do not panic");
        let timer = PhaseTimer::start("index");
        timer.lap("addresses and referrers joined");
        b.add_u64(ADDRESS, &addr);
        b.add_u32(BY_ADDRESS, &by_addr);
        b.add_u32(REF_OFFSETS, &ref_offsets);
        b.add_u32(REFS, &refs);
        let bytes = b.finish(SnapshotId::of(a.snap));
        timer.lap("sections hashed and copied");
        bytes
    })
}

/// Every section but the addresses and the referrers.
fn from_tree(a: &Analysis<'_>) -> IndexBuilder {
    let n = a.graph.node_count();
    let tree = &a.tree;
    let preorder = a.preorder();
    let r = tree.reachable_count();

    let timer = PhaseTimer::start("index");
    // The summary lists the kind groups: all of them are the `kind` grouping (made once).
    let mut summary = heapsnap_analyze::reports::summary(a, usize::MAX);
    let kind_groups = std::mem::take(&mut summary.top_groups);
    timer.lap("summary");
    let mut kind_groups = Some(kind_groups);
    // A grouping the snapshot does not allow (`tag` without reserved header bits) is left out.
    let groups: BTreeMap<String, Vec<_>> = ALL_GROUPINGS
        .iter()
        .filter_map(|&by| {
            let list = match by {
                GroupBy::Kind => kind_groups.take().expect("one kind grouping"),
                _ => groups(a, by).ok()?,
            };
            Some((grouping_name(by).to_string(), list))
        })
        .collect();
    timer.lap("every grouping");

    // The nodes right below the super-root and the root kinds, with the labels reports give them.
    let first_block = a.graph.blocks.first_block_node;
    let mut top_nodes: Vec<NodeId> =
        (1..r).filter(|&p| preorder[tree.idom_pre[p] as usize] < first_block && preorder[p] >= first_block).map(|p| preorder[p]).collect();
    top_nodes.sort_unstable();
    let mut label_names: Vec<String> = Vec::new();
    let mut label_ids: rustc_hash::FxHashMap<String, u32> = Default::default();
    let top_label_ids: Vec<u32> = top_nodes
        .iter()
        .map(|&v| {
            let label = top_label(a, v);
            *label_ids.entry(label.clone()).or_insert_with(|| {
                label_names.push(label);
                label_names.len() as u32 - 1
            })
        })
        .collect();

    let (kinds, kind_ids) = block_kinds(a);
    timer.lap("block kinds");
    let meta = Meta {
        node_count: n as u32,
        reachable_count: r as u32,
        first_block_node: first_block,
        root_kinds: a.graph.root_kinds.iter().map(|k| k.code()).collect(),
        kinds,
        summary,
        groups,
        root_shares: a.retainers().per_root.clone(),
    };

    let retained: Vec<u64> = (0..r).map(|p| tree.retained_pre.get(p)).collect();
    // Children of every reachable node, largest retained first (as the reports list them).
    let (offsets, kids) = tree.children_pre();
    let mut sorted_kids = kids;
    {
        let mut slices: Vec<&mut [u32]> = Vec::with_capacity(r);
        let mut rest: &mut [u32] = &mut sorted_kids;
        for p in 0..r {
            let len = (offsets[p + 1] - offsets[p]) as usize;
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(len);
            slices.push(mine);
            rest = tail;
        }
        slices.par_iter_mut().for_each(|s| {
            s.sort_by(|&x, &y| retained[y as usize].cmp(&retained[x as usize]).then(preorder[x as usize].cmp(&preorder[y as usize])))
        });
    }

    timer.lap("children sorted");
    let root_edges: Vec<u32> = a.graph.roots.iter().flat_map(|e| [e.node, e.record]).collect();

    let mut b = IndexBuilder::default();
    b.add(META, serde_json::to_vec(&meta).expect("the meta data serialises"));
    b.add_u32(PRE_OF, &tree.pre_of);
    b.add_u32(PREORDER, preorder);
    b.add_u32(IDOM_PRE, &tree.idom_pre);
    b.add_u64(RETAINED, &retained);
    b.add_u32(KID_OFFSETS, &offsets);
    b.add_u32(KIDS, &sorted_kids);
    b.add_u32(KIND_IDS, &kind_ids);
    b.add_u32(BFS_PARENT, &bfs_parents(a));
    timer.lap("shortest-path parents");
    b.add_u32(ROOT_EDGES, &root_edges);
    b.add_u32(TOP_NODES, &top_nodes);
    b.add_u32(TOP_LABEL_IDS, &top_label_ids);
    b.add(TOP_LABELS, serde_json::to_vec(&label_names).expect("strings serialise"));
    b
}

/// The address of every node's block (0: not a block), and the block nodes sorted by address.
fn addresses(g: &HeapGraph<'_>) -> (Vec<u64>, Vec<u32>) {
    let n = g.node_count();
    let first_block = g.blocks.first_block_node;
    let blocks = &g.blocks;
    let mut addr = vec![0u64; n];
    for r in blocks.block_regions() {
        for b in blocks.region_blocks(r) {
            addr[b.node as usize] = b.address;
        }
    }
    let mut by_addr: Vec<u32> = (first_block..n as NodeId).filter(|&v| addr[v as usize] != 0).collect();
    by_addr.par_sort_unstable_by_key(|&v| addr[v as usize]);

    (addr, by_addr)
}

/// The nodes with a strong edge to each node: offsets, then the referrers.
fn referrers(g: &HeapGraph<'_>) -> (Vec<u32>, Vec<u32>) {
    let n = g.node_count();
    // Who points to whom, reversed, strong edges only (ephemeron key -> data edges serve the
    // dominators only): the referrers of an object.
    let check = !g.condition_edges.is_empty();
    let mut in_degree = vec![0u32; n + 1];
    for u in 0..n as NodeId {
        let mut last = NO_NODE;
        for &t in g.successors(u) {
            if t != last && !(check && g.is_condition_edge(u, t)) {
                in_degree[t as usize + 1] += 1;
            }
            last = t;
        }
    }
    let mut total = 0u32;
    for d in in_degree.iter_mut() {
        total += *d;
        *d = total;
    }
    let ref_offsets = in_degree;
    let mut fill = ref_offsets.clone();
    let mut refs = vec![0u32; total as usize];
    for u in 0..n as NodeId {
        let mut last = NO_NODE;
        for &t in g.successors(u) {
            if t != last && !(check && g.is_condition_edge(u, t)) {
                let at = &mut fill[t as usize];
                // A node may list the same target twice (two fields): keep one.
                if *at == ref_offsets[t as usize] || refs[*at as usize - 1] != u {
                    refs[*at as usize] = u;
                    *at += 1;
                }
            }
            last = t;
        }
    }
    // Compact (duplicates removed above leave gaps).
    let mut compact_offsets = vec![0u32; n + 1];
    let mut compact = Vec::with_capacity(refs.len());
    for v in 0..n {
        compact.extend_from_slice(&refs[ref_offsets[v] as usize..fill[v] as usize]);
        compact_offsets[v + 1] = compact.len() as u32;
    }

    (compact_offsets, compact)
}

/// Every block's kind (its structure recognised, which reads the blocks it points to), as an
/// id in a table of the distinct kinds: the index's reports name blocks as the analysis does
/// without the blocks' map.
fn block_kinds(a: &Analysis<'_>) -> (Vec<GroupKey>, Vec<u32>) {
    let blocks = &a.graph.blocks;
    let first = blocks.first_block_node as usize;
    let mut ids = vec![u32::MAX; a.graph.node_count() - first];
    let mut table: Vec<GroupKey> = Vec::new();
    let mut known: rustc_hash::FxHashMap<GroupKey, u32> = Default::default();
    for r in blocks.block_regions() {
        for b in blocks.region_blocks(r) {
            let key = kind_key(blocks, &b);
            ids[b.node as usize - first] = *known.entry(key).or_insert_with(|| {
                table.push(key);
                table.len() as u32 - 1
            });
        }
    }
    (table, ids)
}
