//! Finds which symbols reach an address in O(log n), however symbols nest or overlap.
//!
//! The symbols that start at or before an address are a prefix of the (sorted) table; of those,
//! the innermost holder is the last one whose range still reaches the address. A max-tree over
//! each symbol's last covered address answers "the last index <= k whose last address is >= a"
//! in one descent, where a backward scan would be linear (e.g. behind a long nested function).

use crate::layout::SymbolRecord;

/// The last address a symbol covers: a sizeless symbol (end == start) covers its start only.
pub(crate) fn last_address(symbol: &SymbolRecord) -> u64 {
    if symbol.end > symbol.start {
        symbol.end - 1
    } else {
        symbol.start
    }
}

pub(crate) struct SymbolIndex {
    /// A complete binary tree in an array: node 1 is the root, node i has children 2i and 2i+1,
    /// leaf i is node `leaves + i`; each node holds the largest last address below it.
    max_last: Vec<u64>,
    /// Number of leaves: the symbol count rounded up to a power of two.
    leaves: usize,
}

impl SymbolIndex {
    pub(crate) fn new(symbols: &[SymbolRecord]) -> Self {
        let leaves = symbols.len().next_power_of_two();
        // Padding leaves hold 0; they are never visited, since queries stop at a real index.
        let mut max_last = vec![0u64; 2 * leaves];
        for (i, symbol) in symbols.iter().enumerate() {
            max_last[leaves + i] = last_address(symbol);
        }
        for node in (1..leaves).rev() {
            max_last[node] = max_last[2 * node].max(max_last[2 * node + 1]);
        }
        SymbolIndex { max_last, leaves }
    }

    /// The largest index `<= k` whose symbol's last address is `>= address`.
    pub(crate) fn last_reaching(&self, k: usize, address: u64) -> Option<usize> {
        self.descend(1, 0, self.leaves, k, address)
    }

    /// Right subtree first. A subtree wholly left of `k` whose maximum reaches the address always
    /// yields an answer, so the descent visits O(log n) nodes.
    fn descend(&self, node: usize, first: usize, width: usize, k: usize, address: u64) -> Option<usize> {
        if first > k || self.max_last[node] < address {
            return None;
        }
        if width == 1 {
            return Some(first);
        }
        let half = width / 2;
        self.descend(2 * node + 1, first + half, half, k, address).or_else(|| self.descend(2 * node, first, half, k, address))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::StrId;

    fn sym(start: u64, end: u64) -> SymbolRecord {
        SymbolRecord { start, end, name: StrId::NONE, kind: 1 }
    }

    #[test]
    fn finds_an_enclosing_symbol_far_behind() {
        // One long function, then 1000 small sizeless ones inside it.
        let mut symbols = vec![sym(0, 10_000)];
        symbols.extend((1..=1000).map(|i| sym(i * 5, i * 5)));
        let index = SymbolIndex::new(&symbols);
        assert_eq!(index.last_reaching(symbols.len() - 1, 5003), Some(0));
        assert_eq!(index.last_reaching(symbols.len() - 1, 5000), Some(1000));
        assert_eq!(index.last_reaching(symbols.len() - 1, 10_000), None);
    }

    #[test]
    fn single_symbol() {
        let index = SymbolIndex::new(&[sym(16, 32)]);
        assert_eq!(index.last_reaching(0, 31), Some(0));
        assert_eq!(index.last_reaching(0, 32), None);
    }
}
