//! Builds an index from a full analysis: the sections a report needs ([`Needs`]), each level
//! holding the one below it. `Meta` is what `summary` and `top` read (totals, groups, the
//! summary's suspects: a few kilobytes); `Tree` adds the dominator tree and every block's kind
//! and place; `Paths` adds what paths walk (shortest-path parents, referrers, root edges); `All`
//! adds the diff's classification.

use crate::file::IndexBuilder;
use crate::sections::*;
use crate::view::Needs;
use heapsnap_analyze::{Analysis, GroupBy, HeapGraph, NodeId, PhaseTimer, NO_NODE};
use rayon::prelude::*;

pub const ALL_GROUPINGS: [GroupBy; 5] = [GroupBy::Reserved, GroupBy::Kind, GroupBy::Closure, GroupBy::Root, GroupBy::Type];

/// The index of an analysed snapshot with the sections `needs` reads, ready to write (its
/// sections borrow from the analysis).
pub fn build<'a>(a: &'a Analysis<'_>, needs: Needs) -> IndexBuilder<'a> {
    build_in_stages(a, needs, &mut |_, _| {})
}

/// [`build`], `stage` given the builder as soon as it holds a lower level than `needs` (the
/// meta level's sections once they are made; for the whole index, the paths' level's before
/// the diff's classification, the longest part): whoever completes an index in the background
/// saves each stage, so that a report that reads no more than it need not wait for the rest.
pub fn build_in_stages<'a>(a: &'a Analysis<'_>, needs: Needs, stage: &mut dyn FnMut(&IndexBuilder<'a>, Needs)) -> IndexBuilder<'a> {
    if needs <= Needs::Diff {
        let mut b = IndexBuilder::default();
        add_meta(&mut b, &meta(a));
        if needs == Needs::Diff {
            add_diff_profile(&mut b, a);
        }
        return b;
    }
    // Addresses and referrers need only the graph: another thread makes them while this one
    // makes the groups, the summary and the tree's sections (the analysis itself, with its
    // names, stays on this thread).
    let graph = &a.graph;
    std::thread::scope(|scope| {
        let graph_part = scope.spawn(|| (block_places(graph), (needs >= Needs::Paths).then(|| referrers(graph))));
        let mut b = from_tree(a, needs, stage);
        let ((steps, far, checkpoints, regions), refs) = graph_part.join().expect("the addresses and referrers do not panic");
        let timer = PhaseTimer::start("index");
        timer.lap("addresses and referrers joined");
        if let Some((ref_offsets, refs)) = refs {
            add_referrers(&mut b, a, &ref_offsets, &refs);
            timer.lap("referrers encoded");
        }
        b.add(BLOCK_STEPS, steps);
        b.add_u32_vec(BLOCK_FAR, far);
        b.add_u32_vec(BLOCK_CHECKPOINTS, checkpoints);
        b.add_u32_vec(BLOCK_REGIONS, regions);
        if needs == Needs::All {
            stage(&b, Needs::Paths);
            add_diff_profile(&mut b, a);
        }
        b
    })
}

/// The diff's classifications ([`crate::diff_profile`]): by kind, and by type when the
/// snapshot has OCaml names.
fn add_diff_profile(b: &mut IndexBuilder<'_>, a: &Analysis<'_>) {
    let timer = PhaseTimer::start("index");
    for by in crate::diff_profile::SAVED_GROUPINGS {
        if by == GroupBy::Type && heapsnap_analyze::AnalysedHeap::typing(a).is_none() {
            continue;
        }
        let profile = heapsnap_analyze::diff::saved_profile(a, by);
        timer.lap(&format!("the diff's classification by {}", by.name()));
        crate::diff_profile::add(b, &profile);
    }
}

/// The meta data and the sections beside it: every grouping's groups, the roots' shares.
struct MetaParts {
    meta: Meta,
    groups: Vec<(GroupBy, Vec<heapsnap_analyze::Group>)>,
    root_shares: Vec<heapsnap_analyze::RootShare>,
    field_paths: Option<heapsnap_analyze::FieldPaths>,
    source_lines: Vec<(u64, Option<String>)>,
}

fn json(value: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(value).expect("the index's JSON serialises")
}

/// The meta data and its sections, each JSON, compressed.
fn add_meta(b: &mut IndexBuilder<'_>, parts: &MetaParts) {
    b.add_compressed(META, &json(&parts.meta));
    for (by, groups) in &parts.groups {
        b.add_compressed(groups_section(*by), &json(groups));
    }
    b.add_compressed(ROOT_SHARES, &json(&parts.root_shares));
    if let Some(paths) = &parts.field_paths {
        b.add_compressed(FIELD_PATHS, &json(paths));
    }
    if !parts.source_lines.is_empty() {
        b.add_compressed(SOURCE_LINES, &json(&parts.source_lines));
    }
}

/// The meta data: totals, every grouping, the roots' shares and the summary's suspects.
fn meta(a: &Analysis<'_>) -> MetaParts {
    // The suspects' paths walk the shortest-path parents: one breadth-first search, on one
    // core, made from the graph alone by another thread while this one groups.
    let graph = &a.graph;
    let snap = a.graph.blocks.snap;
    let (meta, parents, ocaml_names) = std::thread::scope(|scope| {
        let bfs = scope.spawn(|| heapsnap_analyze::bfs_parents(graph));
        let names = scope.spawn(|| NamesDigest::of(snap));
        let meta = groups(a);
        (meta, bfs.join().expect("the breadth-first search does not panic"), names.join().expect("digesting the names does not panic"))
    });
    a.keep_bfs_parents(parents);
    let (summary, groups) = meta;
    let timer = PhaseTimer::start("index");
    let summary_suspects = a.summary_suspects().clone();
    timer.lap("the summary's suspects");
    MetaParts {
        meta: Meta {
            node_count: a.graph.node_count() as u32,
            reachable_count: a.tree.reachable_count() as u32,
            first_block_node: a.graph.blocks.first_block_node,
            root_kinds: a.graph.root_kinds.iter().map(|k| k.code()).collect(),
            kinds: a.block_kinds().kinds.clone(),
            kind_id_bytes: kind_id_bytes(a.block_kinds().kinds.len()),
            summary,
            summary_suspects,
            ocaml_names,
            typed_bytes: crate::reports::typed_bytes(a).map(|(heap, statics)| [heap, statics]),
        },
        groups,
        root_shares: a.retainers().per_root.clone(),
        field_paths: a.names.ocaml().map(|names| names.field_paths()),
        source_lines: closures_source_lines(a),
    }
}

/// The source line of every closure kind's code pointer (`sections::SOURCE_LINES`), ascending.
fn closures_source_lines(a: &Analysis<'_>) -> Vec<(u64, Option<String>)> {
    let mut codes: Vec<u64> = a
        .block_kinds()
        .kinds
        .iter()
        .filter_map(|k| match k {
            heapsnap_analyze::GroupKey::Closure(code) => Some(*code),
            _ => None,
        })
        .collect();
    codes.sort_unstable();
    codes.dedup();
    codes.into_iter().map(|code| (code, a.names.source_line(code))).collect()
}

/// The summary (without its top groups) and every grouping.
fn groups(a: &Analysis<'_>) -> (heapsnap_analyze::Summary, Vec<(GroupBy, Vec<heapsnap_analyze::Group>)>) {
    let timer = PhaseTimer::start("index");
    // Saved without its top groups (a report takes them from the groupings); the kind
    // grouping it makes is kept by the analysis for the groupings below.
    let summary = heapsnap_analyze::summary(a, 0);
    timer.lap("summary");
    let _ = a.retainers();
    timer.lap("the roots' reach");
    // A grouping the snapshot does not allow (`tag` without reserved header bits) is left out.
    let groups: Vec<(GroupBy, Vec<_>)> = ALL_GROUPINGS.iter().filter_map(|&by| Some((by, a.group_by(by).ok()?))).collect();
    timer.lap("every grouping");
    (summary, groups)
}

/// Every section but the addresses and the referrers.
fn from_tree<'a>(a: &'a Analysis<'_>, needs: Needs, stage: &mut dyn FnMut(&IndexBuilder<'a>, Needs)) -> IndexBuilder<'a> {
    let tree = &a.tree;
    let preorder = a.preorder();
    let r = tree.reachable_count();
    let parts = meta(a);
    let meta = &parts.meta;
    let mut b = IndexBuilder::default();
    add_meta(&mut b, &parts);
    stage(&b, Needs::Meta);

    let timer = PhaseTimer::start("index");
    // The nodes right below the super-root and the root kinds, with the labels reports give them.
    let (tops, label_names) = a.labelled_tops();
    let mut top_pairs: Vec<(NodeId, u32)> = tops.into_iter().map(|(p, l)| (preorder[p as usize], l)).collect();
    top_pairs.par_sort_unstable();
    let (top_nodes, top_label_ids): (Vec<NodeId>, Vec<u32>) = top_pairs.into_iter().unzip();
    timer.lap("top labels");

    let retained: Vec<u64> = (0..r).map(|p| tree.retained_pre.get(p)).collect();
    // Children of every reachable node, largest retained first (as the reports list them).
    let (offsets, kids) = tree.children_pre();
    let mut sorted_kids = kids;
    {
        // Parents in runs of about equal numbers of children, each run sorted on one core.
        let runs = rayon::current_num_threads() * 8;
        let per_run = (sorted_kids.len() / runs).max(1 << 14) as u32;
        let mut bounds = vec![0usize];
        for p in 0..r {
            if offsets[p + 1] - offsets[*bounds.last().expect("one bound")] >= per_run {
                bounds.push(p + 1);
            }
        }
        if *bounds.last().expect("one bound") != r {
            bounds.push(r);
        }
        let mut chunks: Vec<(std::ops::Range<usize>, &mut [u32])> = Vec::with_capacity(bounds.len());
        let mut rest: &mut [u32] = &mut sorted_kids;
        for w in bounds.windows(2) {
            let len = (offsets[w[1]] - offsets[w[0]]) as usize;
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(len);
            chunks.push((w[0]..w[1], mine));
            rest = tail;
        }
        chunks.into_par_iter().for_each(|(parents, kids)| {
            let base = offsets[parents.start] as usize;
            for p in parents {
                let s = &mut kids[offsets[p] as usize - base..offsets[p + 1] as usize - base];
                if s.len() > 1 {
                    s.sort_unstable_by(|&x, &y| {
                        retained[y as usize].cmp(&retained[x as usize]).then(preorder[x as usize].cmp(&preorder[y as usize]))
                    });
                }
            }
        });
    }
    timer.lap("children sorted");
    // The tree in its own preorder, children in that order: a node's children are then the
    // node after it, and each next one past the subtree of the one before, so that no list of
    // children is saved. `order` maps the new numbers to the search's.
    let mut order: Vec<u32> = Vec::with_capacity(r);
    let mut stack = vec![0u32];
    while let Some(p) = stack.pop() {
        order.push(p);
        stack.extend(sorted_kids[offsets[p as usize] as usize..offsets[p as usize + 1] as usize].iter().rev());
    }
    drop((offsets, sorted_kids, stack));
    let mut subtree = vec![1u32; r];
    // A node comes after its dominator in the search's numbering: one pass from the end sums.
    for p in (1..r).rev() {
        let d = tree.idom_pre[p] as usize;
        subtree[d] += subtree[p];
    }
    let (tree_stream, tree_checkpoints) = crate::tree::encode_tree(order.iter().map(|&p| subtree[p as usize]));
    let tree_nodes: Vec<NodeId> = order.par_iter().map(|&p| preorder[p as usize]).collect();
    drop(subtree);
    let (reachable, preorder_marks, preorder_back) = crate::tree::encode_preorder_inverse(&tree_nodes, a.graph.node_count());
    // In words, as u32: the few larger than 32 GiB (or not whole words) listed apart.
    let retained_words: Vec<u32> = order
        .par_iter()
        .map(|&p| retained[p as usize])
        .map(|x| if x % 8 == 0 && x / 8 < u32::MAX as u64 { (x / 8) as u32 } else { u32::MAX })
        .collect();
    let retained_large: Vec<u64> =
        (0..r).filter(|&q| retained_words[q] == u32::MAX).flat_map(|q| [q as u64, retained[order[q] as usize]]).collect();
    drop((retained, order));
    timer.lap("the tree in its own preorder");

    b.add(TREE, tree_stream);
    b.add_u64_vec(TREE_CHECKPOINTS, tree_checkpoints);
    b.add_u64_vec(REACHABLE, reachable);
    b.add_u64_vec(PREORDER_MARKS, preorder_marks);
    b.add_u32_vec(PREORDER_BACK, preorder_back);
    b.add_u32_vec(PREORDER, tree_nodes);
    b.add_u32_vec(RETAINED, retained_words);
    b.add_u64_vec(RETAINED_LARGE, retained_large);
    let kinds = a.block_kinds();
    let kind_ids: Vec<u32> = (0..kinds.len()).into_par_iter().map(|i| kinds.id(i)).collect();
    b.add(KIND_IDS, narrow_ids(&kind_ids, kinds.kinds.len(), meta.kind_id_bytes));
    drop(kind_ids);
    b.add_u32_vec(TOP_NODES, top_nodes);
    b.add(TOP_LABEL_IDS, narrow_ids(&top_label_ids, label_names.len(), kind_id_bytes(label_names.len())));
    b.add_compressed(TOP_LABELS, &json(&label_names));
    if needs >= Needs::Paths {
        b.add_u32_vec(ROOT_EDGES, a.graph.roots.iter().flat_map(|e| [e.node, e.record]).collect());
    }
    // The types (made by the `type` grouping above), so that reports need not walk again.
    let typing = heapsnap_analyze::AnalysedHeap::typing(a);
    if let Some((typing, types)) = typing.and_then(|t| Some((t, crate::saved_types::encode(&t.saved()?)?))) {
        // Untyped (`NO_TYPE`) as the width's largest value, which numbers no type.
        let width = kind_id_bytes(typing.type_count());
        b.add(TYPE_IDS, narrow_ids(&typing.node_types().widened(), u32::MAX as usize, width));
        // Read in place, each type parsed when a report reads it: not compressed.
        b.add(TYPES, types);
    }
    b
}

/// Ids below `count` in `width` bytes each (1, 2 or 4: [`kind_id_bytes`]); the width's largest
/// value, and any id past `count`, is none.
fn narrow_ids(ids: &[u32], count: usize, width: u8) -> Vec<u8> {
    let none = count as u32;
    match width {
        1 => ids.par_iter().map(|&k| k.min(none).min(u8::MAX as u32) as u8).collect(),
        2 => ids.iter().flat_map(|&k| (k.min(none).min(u16::MAX as u32) as u16).to_le_bytes()).collect(),
        _ => ids.iter().flat_map(|&k| k.to_le_bytes()).collect(),
    }
}

/// The referrers and shortest-path parents: a bit per plain node (its only referrer is its
/// immediate dominator, its parent too: most heap objects), the others' lists encoded.
fn add_referrers(b: &mut IndexBuilder<'_>, a: &Analysis<'_>, ref_offsets: &[u32], refs: &[u32]) {
    let n = a.graph.node_count();
    let tree = &a.tree;
    let parents = a.shortest_parents();
    let parent = |v: usize| parents.get(v as NodeId, tree);
    let refs_of = |v: usize| &refs[ref_offsets[v] as usize..ref_offsets[v + 1] as usize];
    let plain_node = |v: usize| {
        let idom = tree.idom(v as NodeId);
        idom != NO_NODE && parent(v) == idom && refs_of(v) == [idom]
    };
    let plain: Vec<u64> = (0..n.div_ceil(64))
        .into_par_iter()
        .map(|w| (w * 64..(w * 64 + 64).min(n)).filter(|&v| plain_node(v)).fold(0u64, |bits, v| bits | 1 << (v % 64)))
        .collect();
    let others = (0..n).filter(|&v| plain[v / 64] >> (v % 64) & 1 == 0).map(|v| (v as NodeId, refs_of(v), parent(v)));
    let (stream, checkpoints) = crate::compact::encode_referrers(others);
    b.add_u64_vec(PLAIN_REFERRERS, plain);
    b.add(REFERRERS, stream);
    b.add_u64_vec(REFERRER_CHECKPOINTS, checkpoints);
}

/// Where every block node's first field is in its region (in words from its base), as
/// [`crate::compact::encode_block_places`] saves it (steps, far places, checkpoints), and the
/// regions with blocks (`first node, end node, region index` triples, by first node).
fn block_places(g: &HeapGraph<'_>) -> (Vec<u8>, Vec<u32>, Vec<u32>, Vec<u32>) {
    let blocks = &g.blocks;
    let first = blocks.first_block_node as usize;
    let mut offsets = vec![u32::MAX; g.node_count().saturating_sub(first)];
    let mut regions: Vec<[u32; 3]> = Vec::new();
    for r in blocks.block_regions() {
        let rb = &blocks.regions[r];
        let Some(index) = blocks.snap.region_index_of(rb.base) else { continue };
        for b in blocks.region_blocks(r) {
            offsets[b.node as usize - first] = ((b.address - rb.base) / 8) as u32;
        }
        regions.push([rb.nodes.start, rb.nodes.end, index as u32]);
    }
    regions.sort_unstable();
    let starts: Vec<usize> = regions.iter().map(|e| e[0] as usize - first).collect();
    let (steps, far, checkpoints) = crate::compact::encode_block_places(&offsets, &starts);
    (steps, far, checkpoints, regions.into_iter().flatten().collect())
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
