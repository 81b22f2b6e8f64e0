//! The compact encodings of the index's largest sections (INDEX.md): varints, the blocks' places
//! as one byte per block, and the referrers and shortest-path parents as a bit per node plus the
//! exceptions' lists (the dominator tree's are in `crate::tree`).
//!
//! Writing is straightforward; reading never trusts the bytes: a varint past the end or too
//! long, a node past the count, a tree whose subtrees do not nest, reads as `None` (or refuses
//! the section when the view opens), never a panic, and every walk is bounded.

use heapsnap_analyze::{NodeId, NO_NODE};

/// How many exceptions' lists one checkpoint of [`ReferrerTable`] covers: a lookup decodes at
/// most this many entries.
pub const REFERRER_RUN: usize = 16;
/// How many blocks one checkpoint of [`BlockPlaces`] covers: a lookup sums at most this many steps.
pub const BLOCK_RUN: usize = 32;
/// A block step that does not fit a byte: the block's offset is in the far list.
pub const FAR_STEP: u8 = u8::MAX;

/// Appends `x` as LEB128 (7 bits a byte, low first).
pub fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push(x as u8 | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Reads a LEB128 value at `*at`, moving past it; `None` past the end or past 64 bits.
#[inline]
pub fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        x |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b < 0x80 {
            return Some(x);
        }
    }
    None
}

fn zigzag(x: i64) -> u64 {
    ((x << 1) ^ (x >> 63)) as u64
}

fn unzigzag(x: u64) -> i64 {
    (x >> 1) as i64 ^ -((x & 1) as i64)
}

/// Where each block's first field is (in words from its region's base), as one byte a block:
/// the step from the block before it in the same region, or for a region's first block its
/// offset; [`FAR_STEP`] when it does not fit, the offset then in the far list. Returns the
/// steps, the `(block index, offset)` far pairs, and every [`BLOCK_RUN`]th block's offset.
pub fn encode_block_places(offsets: &[u32], region_starts: &[usize]) -> (Vec<u8>, Vec<u32>, Vec<u32>) {
    let mut steps = Vec::with_capacity(offsets.len());
    let mut far = Vec::new();
    let mut starts = region_starts.iter().peekable();
    for (i, &o) in offsets.iter().enumerate() {
        let region_start = starts.next_if(|&&s| s == i).is_some();
        let step = if region_start || i == 0 { Some(o) } else { o.checked_sub(offsets[i - 1]) };
        match step.filter(|&s| s < u32::from(FAR_STEP)) {
            Some(s) => steps.push(s as u8),
            None => {
                steps.push(FAR_STEP);
                far.extend([i as u32, o]);
            }
        }
    }
    let checkpoints = offsets.iter().step_by(BLOCK_RUN).copied().collect();
    (steps, far, checkpoints)
}

/// Reads [`encode_block_places`]'s sections.
#[derive(Clone, Copy, Default)]
pub struct BlockPlaces<'s> {
    pub steps: &'s [u8],
    /// `(block index, offset)`, by block index.
    pub far: &'s [[u32; 2]],
    pub checkpoints: &'s [u32],
}

impl BlockPlaces<'_> {
    /// The offset of block `i`, whose region's first block is `region_start` (≤ `i`).
    pub fn offset(&self, i: usize, region_start: usize) -> Option<u32> {
        let run = i / BLOCK_RUN * BLOCK_RUN;
        let (mut acc, from) = if run > region_start {
            (*self.checkpoints.get(run / BLOCK_RUN)?, run + 1)
        } else {
            (self.far_or(region_start, 0)?, region_start + 1)
        };
        for j in from..=i {
            acc = self.far_or(j, acc)?;
        }
        Some(acc)
    }

    /// Block `j`'s offset given the one before it.
    #[inline]
    fn far_or(&self, j: usize, before: u32) -> Option<u32> {
        match *self.steps.get(j)? {
            FAR_STEP => {
                let k = self.far.partition_point(|e| (e[0] as usize) < j);
                self.far.get(k).filter(|e| e[0] as usize == j).map(|e| e[1])
            }
            s => before.checked_add(u32::from(s)),
        }
    }
}

/// The referrers and shortest-path parents of the nodes that are not plain (a plain node's only
/// referrer is its immediate dominator, its parent too): per node, in node order, the count,
/// where its parent is (0: none, `i + 1`: the `i`th referrer, `count + 1`: the node that
/// follows), then the referrers ascending, the first as its difference from the node (zigzag),
/// the others from the one before. Returns the stream and every [`REFERRER_RUN`]th entry's start.
pub fn encode_referrers<'a>(entries: impl Iterator<Item = (NodeId, &'a [NodeId], NodeId)>) -> (Vec<u8>, Vec<u64>) {
    let (mut out, mut checkpoints) = (Vec::new(), Vec::new());
    for (k, (v, refs, parent)) in entries.enumerate() {
        if k % REFERRER_RUN == 0 {
            checkpoints.push(out.len() as u64);
        }
        put_varint(&mut out, refs.len() as u64);
        let found = refs.iter().position(|&r| r == parent);
        match (parent, found) {
            (NO_NODE, _) => put_varint(&mut out, 0),
            (_, Some(i)) => put_varint(&mut out, i as u64 + 1),
            (_, None) => {
                put_varint(&mut out, refs.len() as u64 + 1);
                put_varint(&mut out, u64::from(parent));
            }
        }
        let mut last = v as i64;
        for (i, &r) in refs.iter().enumerate() {
            put_varint(&mut out, if i == 0 { zigzag(r as i64 - last) } else { (r as i64 - last) as u64 });
            last = r as i64;
        }
    }
    (out, checkpoints)
}

/// A bit array with the count of set bits before each word.
#[derive(Default)]
pub struct RankedBits<'s> {
    pub words: &'s [u64],
    ones_before: Vec<u32>,
}

impl<'s> RankedBits<'s> {
    pub fn new(words: &'s [u64]) -> Self {
        let mut ones = 0u32;
        let ones_before = words
            .iter()
            .map(|w| {
                let before = ones;
                ones = ones.saturating_add(w.count_ones());
                before
            })
            .collect();
        RankedBits { words, ones_before }
    }

    pub fn ones(&self) -> usize {
        self.ones_before.last().zip(self.words.last()).map_or(0, |(&b, w)| b as usize + w.count_ones() as usize)
    }

    pub fn get(&self, i: usize) -> Option<bool> {
        Some(*self.words.get(i / 64)? >> (i % 64) & 1 == 1)
    }

    /// Set bits before bit `i`.
    pub fn rank(&self, i: usize) -> Option<usize> {
        let w = *self.words.get(i / 64)?;
        Some(*self.ones_before.get(i / 64)? as usize + (w & ((1u64 << (i % 64)) - 1)).count_ones() as usize)
    }

    /// Where the `k`th clear bit is (counting from 0).
    pub fn select_zero(&self, k: usize) -> Option<usize> {
        let zeros_before = |w: usize| (w * 64).saturating_sub(self.ones_before[w] as usize);
        // The last word with at most `k` clear bits before it.
        let (mut lo, mut hi) = (0, self.words.len().min(self.ones_before.len()));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if zeros_before(mid) <= k {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let w = lo.checked_sub(1)?;
        let mut clear = !self.words[w];
        for _ in 0..k - zeros_before(w) {
            clear &= clear.wrapping_sub(1);
        }
        (clear != 0).then(|| w * 64 + clear.trailing_zeros() as usize)
    }
}

/// Reads [`encode_referrers`]'s sections.
#[derive(Default)]
pub struct ReferrerTable<'s> {
    /// A bit per node: plain.
    pub plain: RankedBits<'s>,
    pub stream: &'s [u8],
    pub checkpoints: &'s [u64],
}

/// A node's referrers and parent, as saved.
pub enum Referrers {
    /// Its immediate dominator, its parent too.
    Plain,
    Listed {
        referrers: Vec<NodeId>,
        parent: Option<NodeId>,
    },
}

impl<'s> ReferrerTable<'s> {
    pub fn new(plain: &'s [u64], stream: &'s [u8], checkpoints: &'s [u64]) -> Self {
        ReferrerTable { plain: RankedBits::new(plain), stream, checkpoints }
    }

    /// Node `v`'s entry, at most `max` referrers of it (`None`: past the table, or a corrupt
    /// entry).
    pub fn get(&self, v: NodeId, max: usize) -> Option<Referrers> {
        if self.plain.get(v as usize)? {
            return Some(Referrers::Plain);
        }
        // Its rank among the nodes that are not plain.
        let k = (v as usize).checked_sub(self.plain.rank(v as usize)?)?;
        let mut at = usize::try_from(*self.checkpoints.get(k / REFERRER_RUN)?).ok()?;
        for _ in 0..k % REFERRER_RUN {
            self.entry(&mut at, v, 0)?;
        }
        self.entry(&mut at, v, max)
    }

    /// Decodes the entry at `*at` (of node `v`), keeping at most `max` referrers.
    fn entry(&self, at: &mut usize, v: NodeId, max: usize) -> Option<Referrers> {
        let s = self.stream;
        let count = get_varint(s, at)?;
        let code = get_varint(s, at)?;
        let explicit = if code == count.checked_add(1)? { Some(node(get_varint(s, at)?)?) } else { None };
        let mut referrers = Vec::new();
        let mut last = v as i64;
        let mut parent = explicit;
        for i in 0..count {
            let x = get_varint(s, at)?;
            let r = if i == 0 { last.checked_add(unzigzag(x))? } else { last.checked_add(i64::try_from(x).ok()?)? };
            let r = node(u64::try_from(r).ok()?)?;
            if i + 1 == code {
                parent = Some(r);
            }
            if (i as usize) < max {
                referrers.push(r);
            }
            last = r as i64;
        }
        Some(Referrers::Listed { referrers, parent })
    }
}

fn node(x: u64) -> Option<NodeId> {
    u32::try_from(x).ok().filter(|&v| v != NO_NODE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_read_back_and_refuse_what_is_cut_or_too_long() {
        let values = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX];
        let mut out = Vec::new();
        values.iter().for_each(|&x| put_varint(&mut out, x));
        let mut at = 0;
        let read: Vec<u64> = values.iter().map(|_| get_varint(&out, &mut at).unwrap()).collect();
        assert_eq!((read.as_slice(), at), (&values[..], out.len()));
        assert_eq!(get_varint(&out, &mut at), None, "past the end");
        assert_eq!(get_varint(&[0x80, 0x80], &mut 0), None, "cut");
        assert_eq!(get_varint(&[0xff; 11], &mut 0), None, "more than 64 bits");
        for x in [-5i64, -1, 0, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(x)), x);
        }
    }

    #[test]
    fn block_places_read_back_across_runs_regions_and_far_steps() {
        // Two regions (blocks 0..50 and 50..90), steps of 1..5 words, a big block and a gap.
        let mut offsets = Vec::new();
        let mut at = 1u32;
        for i in 0..90u32 {
            if i == 50 {
                at = 3;
            }
            offsets.push(at);
            at += 1 + i % 5 + if i == 20 { 1000 } else { 0 } + if i == 70 { 300 } else { 0 };
        }
        let (steps, far, checkpoints) = encode_block_places(&offsets, &[0, 50]);
        assert_eq!((steps.len(), checkpoints.len()), (90, 3));
        assert_eq!(far, [21, offsets[21], 71, offsets[71]]);
        let places = BlockPlaces { steps: &steps, far: bytemuck::cast_slice(&far), checkpoints: &checkpoints };
        for (i, &o) in offsets.iter().enumerate() {
            assert_eq!(places.offset(i, if i < 50 { 0 } else { 50 }), Some(o), "block {i}");
        }
        assert_eq!(places.offset(90, 50), None, "past the blocks");
    }

    #[test]
    fn referrers_read_back_with_their_parents() {
        // Nodes 0..70: 3 and 65 are plain; the others list referrers and a parent.
        let lists: Vec<Vec<NodeId>> = (0..70u32).map(|v| if v % 3 == 0 { vec![] } else { vec![v / 2, v + 1, 100 + v] }).collect();
        let parent = |v: u32| match v % 3 {
            0 => NO_NODE,
            1 => v + 1,
            _ => 5000 + v,
        };
        let plain = |v: usize| v == 3 || v == 65;
        let (stream, checkpoints) =
            encode_referrers((0..70).filter(|&v| !plain(v)).map(|v| (v as NodeId, &lists[v][..], parent(v as u32))));
        let bits = [1u64 << 3, 1u64 << 1];
        let table = ReferrerTable::new(&bits, &stream, &checkpoints);
        assert_eq!(checkpoints.len(), 68usize.div_ceil(REFERRER_RUN));
        for v in 0..70u32 {
            match table.get(v, 2).unwrap() {
                Referrers::Plain => assert!(plain(v as usize), "node {v}"),
                Referrers::Listed { referrers, parent: p } => {
                    assert!(!plain(v as usize));
                    assert_eq!(referrers, lists[v as usize].iter().take(2).copied().collect::<Vec<_>>(), "node {v}");
                    assert_eq!(p, Some(parent(v)).filter(|&p| p != NO_NODE), "node {v}");
                }
            }
        }
        assert!(table.get(128, 1).is_none(), "past the bits");
    }
}
