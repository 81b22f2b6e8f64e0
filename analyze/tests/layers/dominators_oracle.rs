//! Dominators against petgraph's `simple_fast` (the oracle) on random and adversarial graphs,
//! and the retained-size identity: retained(n) = shallow(n) + sum of retained(children).

use heapsnap_analyze::{csr_from_edges, dominators_and_retained, Csr, NONE};
use petgraph::graph::{DiGraph, NodeIndex};
use proptest::prelude::*;

fn check(n: usize, edges: &[(u32, u32)]) {
    let (offsets, targets) = csr_from_edges(n, edges);
    let shallow = |v: u32| u64::from(v % 7) * 8 + 16;
    let tree = dominators_and_retained(Csr { offsets: &offsets, targets: &targets }, 0, shallow);

    let mut g = DiGraph::<(), ()>::with_capacity(n, edges.len());
    for _ in 0..n {
        g.add_node(());
    }
    for &(a, b) in edges {
        g.add_edge(NodeIndex::new(a as usize), NodeIndex::new(b as usize), ());
    }
    let oracle = petgraph::algo::dominators::simple_fast(&g, NodeIndex::new(0));
    for v in 0..n {
        let expected = oracle.immediate_dominator(NodeIndex::new(v)).map_or(NONE, |d| d.index() as u32);
        assert_eq!(tree.idom(v as u32), expected, "idom of {v} in {edges:?}");
    }
    // retained(n) = shallow(n) + sum of retained(children)
    let mut sum_children = vec![0u64; n];
    for v in 0..n as u32 {
        let d = tree.idom(v);
        if d != NONE {
            sum_children[d as usize] += tree.retained(v);
        }
    }
    for v in 0..n as u32 {
        if tree.is_reachable(v) {
            assert_eq!(tree.retained(v), shallow(v) + sum_children[v as usize], "retained of {v}");
        } else {
            assert_eq!(tree.retained(v), 0);
        }
    }
    // preorder lists each reachable node once, dominators first
    let mut pos = vec![usize::MAX; n];
    let preorder = tree.preorder();
    // Subtree sums by preorder number: the root's counts every reachable node.
    let counts = heapsnap_analyze::subtree_sums(&tree, |_| 1);
    assert_eq!(counts[0] as usize, tree.reachable_count());
    for (i, &v) in preorder.iter().enumerate() {
        assert_eq!(pos[v as usize], usize::MAX);
        pos[v as usize] = i;
    }
    for &v in &preorder[1..] {
        assert!(pos[tree.idom(v) as usize] < pos[v as usize]);
    }
    // Union retained sizes of three groups (nodes by v % 4; 3 is no group), by brute force: a
    // reachable node counts for a group when it or one of its dominators below the root is a
    // member. Then the same with the root's children in no group, which `union_retained` walks
    // below them in parallel.
    let by_residue = |v: u32| if v % 4 == 3 || v == 0 { NONE } else { v % 4 };
    let below_first_level = |v: u32| if tree.idom(v) == 0 { NONE } else { by_residue(v) };
    for group in [&by_residue as &(dyn Fn(u32) -> u32 + Sync), &below_first_level] {
        let mut expected = vec![0u64; 3];
        for v in (0..n as u32).filter(|&v| tree.is_reachable(v)) {
            let mut member_of = [false; 3];
            let mut x = v;
            while x != 0 {
                if group(x) != NONE {
                    member_of[group(x) as usize] = true;
                }
                x = tree.idom(x);
            }
            for g in 0..3 {
                if member_of[g] {
                    expected[g] += shallow(v);
                }
            }
        }
        assert_eq!(tree.union_retained(3, |p| group(preorder[p])), expected, "union retained in {edges:?}");
    }
}

fn graph_strategy() -> impl Strategy<Value = (usize, Vec<(u32, u32)>)> {
    (1usize..60).prop_flat_map(|n| {
        let edge = (0..n as u32, 0..n as u32);
        (Just(n), prop::collection::vec(edge, 0..n * 3))
    })
}

/// Heap-like: mostly a tree (one referrer each), with a few extra references and cycles.
fn heap_like_strategy() -> impl Strategy<Value = (usize, Vec<(u32, u32)>)> {
    (2usize..300).prop_flat_map(|n| {
        let parents = prop::collection::vec(any::<prop::sample::Index>(), n - 1);
        let extra = prop::collection::vec((0..n as u32, 0..n as u32), 0..n / 4 + 1);
        (Just(n), parents, extra).prop_map(|(n, parents, extra)| {
            let mut edges: Vec<(u32, u32)> = parents.iter().enumerate().map(|(i, p)| (p.index(i + 1) as u32, i as u32 + 1)).collect();
            edges.extend(extra);
            (n, edges)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn random_graphs_match_petgraph((n, edges) in graph_strategy()) {
        check(n, &edges);
    }

    #[test]
    fn heap_like_graphs_match_petgraph((n, edges) in heap_like_strategy()) {
        check(n, &edges);
    }
}

#[test]
fn list_with_hub_array() {
    // root -> hub, root -> head; hub -> every cell; cell i -> cell i+1.
    let cells = 3000u32;
    let (hub, first) = (1u32, 2u32);
    let mut edges = vec![(0, hub), (0, first)];
    for i in 0..cells {
        edges.push((hub, first + i));
        if i + 1 < cells {
            edges.push((first + i, first + i + 1));
        }
    }
    check((first + cells) as usize, &edges);
}

#[test]
fn list_cells_sharing_a_referent() {
    // a list whose cells all point to one shared value, plus back edges
    let cells = 3000u32;
    let shared = 1u32;
    let mut edges = vec![(0, 2)];
    for i in 0..cells {
        let c = 2 + i;
        edges.push((c, shared));
        if i + 1 < cells {
            edges.push((c, c + 1));
        }
        if i % 10 == 9 {
            edges.push((c, c - 5));
        }
    }
    check((2 + cells) as usize, &edges);
}

#[test]
fn self_loops_duplicates_and_unreachable() {
    check(6, &[(0, 1), (1, 1), (0, 2), (0, 2), (2, 3), (3, 2), (4, 5), (5, 3)]);
    check(1, &[]);
    check(3, &[(1, 2), (2, 0)]);
}
