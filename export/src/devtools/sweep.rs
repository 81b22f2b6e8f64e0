//! The blocks of many nodes, in one pass over their regions. `BlockMap::block` finds one
//! block in log time; the export reads every block several times, and a pass over the
//! regions' blocks in node order (which the export's node order is) costs a fraction of that.

use heapsnap_analyze::{BlockMap, BlockRef, NodeId};

/// Calls `f(i, block)` for each `nodes[i]` that is a block; `nodes` ascending.
pub fn for_each_block<'s>(blocks: &BlockMap<'s>, nodes: &[NodeId], mut f: impl FnMut(usize, BlockRef<'s>)) {
    let mut i = 0;
    while i < nodes.len() {
        let Some(r) = blocks.region_of_node(nodes[i]) else {
            i += 1;
            continue;
        };
        let end = blocks.regions[r as usize].nodes.end;
        for b in blocks.region_blocks(r as usize) {
            while i < nodes.len() && nodes[i] < b.node {
                i += 1;
            }
            if i >= nodes.len() || nodes[i] >= end {
                break;
            }
            if nodes[i] == b.node {
                f(i, b);
                i += 1;
            }
        }
        while i < nodes.len() && nodes[i] < end {
            i += 1;
        }
    }
}

/// What freeing a block would give back (as `Analysis::freeable`): its bytes, header
/// included, 0 for static data.
pub fn freeable(blocks: &BlockMap<'_>, b: &BlockRef<'_>) -> u64 {
    if blocks.regions[b.region as usize].kind == heapsnap_format::RegionKind::Static {
        0
    } else {
        b.header.bytes()
    }
}

#[cfg(test)]
mod tests {
    use heapsnap_analyze::{Analysis, Progress};
    use heapsnap_testkit::synth::large_heap_shape;

    #[test]
    fn the_sweep_finds_what_lookups_find() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.heapsnap");
        large_heap_shape(2000).heap.write(&path).unwrap();
        let snap = heapsnap_format::Snapshot::open(&path).unwrap();
        let a = Analysis::new(&snap, &Progress::hidden()).unwrap();
        let blocks = &a.graph.blocks;
        // Every third node, and some that are not blocks.
        let nodes: Vec<u32> = (0..a.graph.node_count() as u32).step_by(3).collect();
        let mut seen = Vec::new();
        super::for_each_block(blocks, &nodes, |i, b| {
            assert_eq!(b.node, nodes[i]);
            assert_eq!(Some(b.address), blocks.block(nodes[i]).map(|x| x.address));
            seen.push(i);
        });
        let expected: Vec<usize> = (0..nodes.len()).filter(|&i| blocks.block(nodes[i]).is_some()).collect();
        assert_eq!(seen, expected);
        assert!(seen.len() > 4000);
    }
}
