//! The shared heap's pools (runtime/shared_heap.c, caml/sizeclasses.h): a pool is `pool_wsize`
//! words, a `struct pool` header, then blocks of one size class. Where the blocks start differs
//! by version: 5.1 puts them right after the header and leaves the wasted words at the end;
//! 5.2 and later put the waste first (`POOL_SLAB_WOFFSET`). The size-class tables differ too.
//! A snapshot records the geometry of its runtime, so the analyser never assumes one.

use serde::{Deserialize, Serialize};

/// Bytes of `struct large_alloc` (owner, next) before a large block's header, in every OCaml 5.
pub const LARGE_ALLOC_HEADER_BYTES: usize = 16;

/// One size class: words per slot, header included, and the byte offset of the first slot's
/// header from the start of the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeClass {
    pub wsize: u32,
    pub first_block: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolGeometry {
    /// Words in a pool, its header included (`POOL_WSIZE`).
    pub pool_wsize: u32,
    /// Words of `struct pool` (`POOL_HEADER_WSIZE`).
    pub header_wsize: u32,
    pub size_classes: Vec<SizeClass>,
}

/// 5.1's `wsize_sizeclass` and `wastage_sizeclass` (waste at the end of the pool).
const WSIZE_5_1: [u32; 32] =
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 23, 26, 29, 33, 37, 42, 47, 53, 59, 65, 73, 81, 89, 99, 108, 118, 128];
const WASTAGE_5_1: [u32; 32] =
    [0, 0, 0, 0, 2, 0, 4, 4, 6, 2, 0, 4, 12, 6, 12, 21, 10, 3, 0, 22, 18, 3, 11, 21, 62, 4, 42, 87, 33, 96, 80, 124];
/// 5.2's and 5.3's (waste at the start, after the header).
const WSIZE_5_2: [u32; 32] =
    [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 17, 19, 22, 25, 28, 32, 33, 37, 42, 47, 53, 59, 65, 73, 81, 89, 99, 108, 118, 128];
const WASTAGE_5_2: [u32; 32] =
    [0, 0, 0, 0, 2, 0, 4, 4, 2, 0, 4, 12, 12, 7, 0, 17, 4, 28, 0, 22, 18, 3, 11, 21, 62, 4, 42, 87, 33, 96, 80, 124];

impl PoolGeometry {
    /// The geometry of pools of `pool_wsize` words with a header of `header_wsize` words, from
    /// the runtime's two tables; `waste_first` says whether the wasted words come before the
    /// blocks (5.2 and later) or after them (5.1).
    pub fn from_tables(pool_wsize: u32, header_wsize: u32, wsize: &[u32], wastage: &[u32], waste_first: bool) -> PoolGeometry {
        let size_classes = wsize
            .iter()
            .zip(wastage)
            .map(|(&w, &waste)| SizeClass { wsize: w, first_block: 8 * (header_wsize + if waste_first { waste } else { 0 }) })
            .collect();
        PoolGeometry { pool_wsize, header_wsize, size_classes }
    }

    /// OCaml 5.1.
    pub fn ocaml_5_1() -> PoolGeometry {
        PoolGeometry::from_tables(4096, 4, &WSIZE_5_1, &WASTAGE_5_1, false)
    }

    /// OCaml 5.2 and 5.3 (and the geometry of snapshots written before it was recorded, which
    /// were all of 5.3).
    pub fn ocaml_5_2() -> PoolGeometry {
        PoolGeometry::from_tables(4096, 4, &WSIZE_5_2, &WASTAGE_5_2, true)
    }

    /// The geometry the registry (`releases.tsv`'s `pools` column) names: "5.1" (5.1's tables,
    /// waste last) or "5.2" (5.2's tables, waste first, as in every later release so far).
    pub fn named(name: &str) -> Option<PoolGeometry> {
        match name {
            "5.1" => Some(PoolGeometry::ocaml_5_1()),
            "5.2" => Some(PoolGeometry::ocaml_5_2()),
            _ => None,
        }
    }

    /// Blocks of at most this many words, header included, live in pools; bigger ones are
    /// large allocations (`SIZECLASS_MAX`).
    pub fn sizeclass_max(&self) -> usize {
        self.size_classes.iter().map(|c| c.wsize as usize).max().unwrap_or(0)
    }

    /// The smallest size class whose slots hold a block of `whsize` words (header included).
    pub fn sizeclass_of_whsize(&self, whsize: usize) -> Option<usize> {
        self.size_classes.iter().position(|c| c.wsize as usize >= whsize).filter(|_| whsize >= 1)
    }

    /// Byte offset of the first slot in a pool of size class `sizeclass`.
    pub fn first_block_bytes(&self, sizeclass: usize) -> Option<usize> {
        self.size_classes.get(sizeclass).map(|c| c.first_block as usize)
    }

    /// What is wrong with this geometry, if anything: every class's slots must fit in a pool
    /// after the header.
    pub fn problem(&self) -> Option<String> {
        if self.size_classes.is_empty() || self.size_classes.len() > 256 || self.pool_wsize == 0 || self.pool_wsize > 1 << 24 {
            return Some(format!("{} size classes in pools of {} words", self.size_classes.len(), self.pool_wsize));
        }
        let pool_bytes = 8 * u64::from(self.pool_wsize);
        self.size_classes.iter().enumerate().find_map(|(i, c)| {
            let fits = c.wsize > 0
                && c.first_block % 8 == 0
                && u64::from(c.first_block) >= 8 * u64::from(self.header_wsize)
                && u64::from(c.first_block) + 8 * u64::from(c.wsize) <= pool_bytes;
            (!fits).then(|| format!("size class {i}: {} words per block from byte {}", c.wsize, c.first_block))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_fills_its_pool_exactly() {
        for (geometry, waste_first) in [(PoolGeometry::ocaml_5_1(), false), (PoolGeometry::ocaml_5_2(), true)] {
            assert_eq!(geometry.problem(), None);
            let wastage = if waste_first { WASTAGE_5_2 } else { WASTAGE_5_1 };
            for (sz, c) in geometry.size_classes.iter().enumerate() {
                let slots = (4096 - 4 - wastage[sz]) / c.wsize;
                assert_eq!(4 + wastage[sz] + slots * c.wsize, 4096, "class {sz}");
                let expected_first = if waste_first { 4 + wastage[sz] } else { 4 };
                assert_eq!(c.first_block, 8 * expected_first, "class {sz}");
            }
        }
    }

    #[test]
    fn size_classes() {
        let g = PoolGeometry::ocaml_5_2();
        assert_eq!(g.sizeclass_of_whsize(1), Some(0));
        assert_eq!(g.sizeclass_of_whsize(9), Some(8));
        assert_eq!(g.sizeclass_of_whsize(128), Some(31));
        assert_eq!(g.sizeclass_of_whsize(129), None);
        assert_eq!(g.sizeclass_max(), 128);
        assert_eq!(PoolGeometry::ocaml_5_1().sizeclass_of_whsize(9), Some(8));
        assert_eq!(PoolGeometry::ocaml_5_1().first_block_bytes(8), Some(32));
        assert_eq!(g.first_block_bytes(8), Some(48));
    }

    #[test]
    fn impossible_geometries_are_named() {
        let mut g = PoolGeometry::ocaml_5_2();
        g.size_classes[3].first_block = 8 * 4095;
        assert!(g.problem().unwrap().contains("size class 3"));
        assert!(PoolGeometry { pool_wsize: 4096, header_wsize: 4, size_classes: vec![] }.problem().is_some());
    }
}
