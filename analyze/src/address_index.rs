//! Address -> region in (nearly) constant time. Resolving every pointer of a heap of tens of
//! millions of objects by binary search over tens of thousands of pools would cost more than
//! the rest of the analysis, so the address space the regions cover is cut into 32 KiB
//! granules, and a table says which region is the first to overlap each granule. Runs of
//! granules are grouped into a few dense segments (pools are mapped close together), so the
//! table's size is bounded by the regions' size, never by the span of the address space.

use heapsnap_format::Snapshot;

const GRANULE_SHIFT: u32 = 15;
/// Runs of granules closer than this are merged into one segment (gap entries cost 4 bytes each).
const MERGE_GAP_GRANULES: u64 = 256;
const NONE: u32 = u32::MAX;

struct Segment {
    first_granule: u64,
    granules: u64,
    table_offset: usize,
}

pub struct AddressIndex {
    segments: Vec<Segment>,
    table: Vec<u32>,
    /// `(base, end)` of every region, in address order (the snapshot's region order).
    bounds: Vec<(u64, u64)>,
}

impl AddressIndex {
    pub fn new(snap: &Snapshot) -> Self {
        let bounds: Vec<(u64, u64)> = snap.regions().map(|r| (r.base(), r.end())).collect();
        Self::from_bounds(bounds)
    }

    /// `bounds` must be sorted and non-overlapping (the snapshot reader guarantees it).
    pub fn from_bounds(bounds: Vec<(u64, u64)>) -> Self {
        let mut runs: Vec<(u64, u64)> = Vec::new(); // [first, last] granules, merged
        for &(base, end) in bounds.iter().filter(|(b, e)| e > b) {
            let (first, last) = (base >> GRANULE_SHIFT, (end - 1) >> GRANULE_SHIFT);
            match runs.last_mut() {
                Some(run) if first <= run.1.saturating_add(MERGE_GAP_GRANULES) => run.1 = run.1.max(last),
                _ => runs.push((first, last)),
            }
        }
        let mut segments = Vec::with_capacity(runs.len());
        let mut offset = 0usize;
        for &(first, last) in &runs {
            let granules = last - first + 1;
            segments.push(Segment { first_granule: first, granules, table_offset: offset });
            offset += granules as usize;
        }
        let mut table = vec![NONE; offset];
        for (index, &(base, end)) in bounds.iter().enumerate().filter(|(_, (b, e))| e > b) {
            let (first, last) = (base >> GRANULE_SHIFT, (end - 1) >> GRANULE_SHIFT);
            let seg = &segments[segments.partition_point(|s| s.first_granule <= first) - 1];
            for g in first..=last {
                let slot = &mut table[seg.table_offset + (g - seg.first_granule) as usize];
                if *slot == NONE {
                    *slot = index as u32;
                }
            }
        }
        AddressIndex { segments, table, bounds }
    }

    /// Index (in address order) of the region holding `address`.
    #[inline]
    pub fn region_of(&self, address: u64) -> Option<usize> {
        let granule = address >> GRANULE_SHIFT;
        let after = self.segments.partition_point(|s| s.first_granule <= granule);
        let seg = self.segments.get(after.checked_sub(1)?)?;
        let rel = granule - seg.first_granule;
        if rel >= seg.granules {
            return None;
        }
        let mut index = self.table[seg.table_offset + rel as usize];
        if index == NONE {
            return None;
        }
        // The granule may hold the ends of several small regions: walk forward to ours.
        while let Some(&(base, end)) = self.bounds.get(index as usize) {
            if base > address {
                return None;
            }
            if address < end {
                return Some(index as usize);
            }
            index += 1;
        }
        None
    }

    /// Bytes of lookup table (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.table.len() * 4 + self.bounds.len() * 16 + self.segments.len() * 24
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_regions_and_gaps() {
        let bounds = vec![
            (0x1000, 0x1040),
            (0x1040, 0x1100),
            (0x9000, 0x11000),
            (0x7f00_0000_0000, 0x7f00_0000_8000),
            (0x7f00_0000_8000, 0x7f00_0001_0000),
        ];
        let index = AddressIndex::from_bounds(bounds.clone());
        for (i, &(b, e)) in bounds.iter().enumerate() {
            assert_eq!(index.region_of(b), Some(i));
            assert_eq!(index.region_of(e - 8), Some(i));
        }
        assert_eq!(index.region_of(0x1100), None);
        assert_eq!(index.region_of(0xfff), None);
        assert_eq!(index.region_of(0x8ff8), None);
        assert_eq!(index.region_of(0x7f00_0001_0000), None);
        assert_eq!(index.region_of(0x5555_0000_0000), None);
        assert_eq!(index.region_of(u64::MAX - 7), None);
        assert_eq!(index.region_of(0), None);
    }
}
