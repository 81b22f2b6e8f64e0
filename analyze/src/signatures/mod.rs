//! Path signatures of an analysed snapshot's blocks: what each reachable block is (its group
//! and shape, [`classify`]), which field of its immediate dominator holds it, and the dominator
//! tree aggregated by signature ([`trie`], [`domtrie`]). The snapshot diff compares signatures
//! across snapshots; the flame graph export (crate `heapsnap-export`) stacks one snapshot's.

pub mod classify;
pub mod domtrie;
mod shape;
pub mod trie;
