//! Node ids. DevTools' Comparison view matches objects of two snapshots by id, so ids should
//! name the same object in every snapshot of one process. heapsnap derives a block's id from
//! its address: the same while the block does not move (major-heap blocks until a compaction;
//! a minor-heap block gets a new id when it is promoted). Ids are odd, as V8's are, and below
//! 2^31 (every loader reads them as 32-bit numbers): `1` the synthetic root, `3 + 2 × code` the
//! node of a root kind, and for a block `2h + 1` where `h` is a hash of its address in
//! `[64, 2^30)`. Two addresses with one hash (about `n / 2^30` of `n` blocks) are told apart by
//! giving the later block, in node order, the next free hash: that block's id is stable only
//! while its neighbour's collision recurs.
//!
//! With a baseline (an earlier snapshot of the same process, `export --baseline OLD`), ids
//! follow objects rather than addresses: an object [`super::matching`] finds in the baseline
//! keeps the id it has in the baseline's own export (`export OLD`), moved or not; any other
//! object gets its address's id unless the baseline's export uses that id (for an object that
//! may be gone, or moved elsewhere), else the next id neither uses.

use heapsnap_analyze::{HeapGraph, NodeId, SUPER_ROOT};
use rayon::prelude::*;
use rustc_hash::FxHashSet;

/// Hashes below this are kept for the root and root-kind nodes.
const FIRST_BLOCK_HASH: u32 = 64;
const HASHES: u32 = 1 << 30;

/// The hash of a block's address, in `[FIRST_BLOCK_HASH, HASHES)`.
pub fn address_hash(address: u64) -> u32 {
    let mixed = (address >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    FIRST_BLOCK_HASH + ((mixed >> 32) % u64::from(HASHES - FIRST_BLOCK_HASH)) as u32
}

/// The address of every node of `order` (ascending; 0: not a block).
fn addresses(graph: &HeapGraph<'_>, order: &[NodeId]) -> Vec<u64> {
    let mut out = vec![0u64; order.len()];
    out.par_chunks_mut(1 << 14).zip(order.par_chunks(1 << 14)).for_each(|(out, nodes)| {
        super::sweep::for_each_block(&graph.blocks, nodes, |i, b| out[i] = b.address);
    });
    out
}

/// The hash part of the id of a synthetic node or of a block at `address`.
fn plain_hash(graph: &HeapGraph<'_>, v: NodeId, address: u64) -> u32 {
    if v == SUPER_ROOT {
        0
    } else if let Some(k) = graph.root_kind_of(v) {
        1 + u32::from(k.code()).min(FIRST_BLOCK_HASH - 2)
    } else if address != 0 {
        address_hash(address)
    } else {
        FIRST_BLOCK_HASH
    }
}

/// The id of every exported node (`order`: the nodes, in node order).
pub fn node_ids(graph: &HeapGraph<'_>, order: &[NodeId]) -> Vec<u32> {
    let address = addresses(graph, order);
    let mut hashes: Vec<u32> = order.par_iter().zip(&address).map(|(&v, &x)| plain_hash(graph, v, x)).collect();
    let mut sorted = hashes.clone();
    sorted.par_sort_unstable();
    let repeated: FxHashSet<u32> = sorted.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
    if !repeated.is_empty() {
        let mut claimed: FxHashSet<u32> = FxHashSet::default();
        for h in hashes.iter_mut() {
            if !repeated.contains(h) || claimed.insert(*h) {
                continue;
            }
            // A later holder of a taken hash: the next hash no node has or has claimed.
            let mut next = *h;
            loop {
                next = if next + 1 >= HASHES { FIRST_BLOCK_HASH } else { next + 1 };
                if sorted.binary_search(&next).is_err() && claimed.insert(next) {
                    break;
                }
            }
            *h = next;
        }
    }
    hashes.into_iter().map(|h| 2 * h + 1).collect()
}

/// The hash part of an id.
fn hash_of(id: u32) -> u32 {
    id / 2
}

/// What following a baseline gave.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Followed {
    /// Exported blocks that keep their baseline id.
    pub kept: u64,
    /// Exported blocks with an id of their own (new objects, and objects not matched).
    pub new: u64,
    /// Blocks of the baseline's export that no exported block took the id of.
    pub baseline_not_found: u64,
}

/// The id of every exported node, following the baseline's ids: `old_ids` by the baseline's
/// slots, `old_slot_of` its slot of each node, `old_of` the baseline node of each node.
pub fn node_ids_following(
    graph: &HeapGraph<'_>,
    order: &[NodeId],
    old_ids: &[u32],
    old_slot_of: &[u32],
    old_of: &[NodeId],
) -> (Vec<u32>, Followed) {
    const NOT_KEPT: u32 = u32::MAX;
    let baseline_id = |v: NodeId| {
        let o = *old_of.get(v as usize)?;
        let slot = *old_slot_of.get(o as usize)?;
        old_ids.get(slot as usize).copied()
    };
    // Per node: the baseline's hash when the object is matched, else NOT_KEPT.
    let kept: Vec<u32> = order.par_iter().map(|&v| baseline_id(v).map_or(NOT_KEPT, hash_of)).collect();
    let mut forbidden: Vec<u32> = old_ids.iter().map(|&id| hash_of(id)).collect();
    forbidden.par_sort_unstable();
    let mut claimed: FxHashSet<u32> = FxHashSet::default();
    let mut hashes = Vec::with_capacity(order.len());
    let mut followed = Followed::default();
    let address = addresses(graph, order);
    for ((&v, &k), &x) in order.iter().zip(&kept).zip(&address) {
        let h = if v < graph.blocks.first_block_node {
            plain_hash(graph, v, 0)
        } else if k != NOT_KEPT {
            followed.kept += 1;
            k
        } else {
            followed.new += 1;
            let mut h = plain_hash(graph, v, x);
            // Not an id of the baseline's (another object there), nor one taken here.
            while forbidden.binary_search(&h).is_ok() || claimed.contains(&h) {
                h = if h + 1 >= HASHES { FIRST_BLOCK_HASH } else { h + 1 };
            }
            claimed.insert(h);
            h
        };
        hashes.push(h);
    }
    let used: FxHashSet<u32> = kept.iter().copied().filter(|&k| k != NOT_KEPT).collect();
    followed.baseline_not_found = forbidden.iter().filter(|&&h| h >= FIRST_BLOCK_HASH && !used.contains(&h)).count() as u64;
    (hashes.into_iter().map(|h| 2 * h + 1).collect(), followed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_stay_in_range() {
        for a in [0u64, 8, 0x7f00_0000_0008, u64::MAX - 7, 0x5555_5555_5550] {
            let h = address_hash(a);
            assert!((FIRST_BLOCK_HASH..HASHES).contains(&h));
            assert!(2 * h + 1 < 1 << 31);
        }
        assert_ne!(address_hash(0x7f00_0000_0008), address_hash(0x7f00_0000_0010));
    }
}
