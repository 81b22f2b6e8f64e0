//! Section 19, the typing's types ([`crate::sections::TYPES`]): each type's JSON apart, after a
//! table of where each starts, read in place. A report reads a few of a real heap's tens of
//! thousands of types (most of them closures'): it parses those, and neither decompresses nor
//! scans the others.
//!
//! Layout: `conflicts`, `mismatches`, `typed_objects`, `typed_bytes` (`u64` each), the type
//! count `n` (`u32`), 4 bytes of zeros, `n + 1` offsets (`u32`, non-decreasing, from the end of
//! the offsets), then the types' JSON (`heapsnap_analyze::TypeNames`), type `i` from offset `i`
//! to offset `i + 1`.

use heapsnap_analyze::SavedTypes;

/// The bytes before the offsets.
const HEAD: usize = 40;

/// The section's body for `saved`. `None` when its JSON would not fit `u32` offsets.
pub fn encode(saved: &SavedTypes) -> Option<Vec<u8>> {
    let entries: Vec<Vec<u8>> = saved.types.iter().map(|t| serde_json::to_vec(t).expect("a type's names serialise")).collect();
    let total: usize = entries.iter().map(Vec::len).sum();
    u32::try_from(total).ok()?;
    let count = u32::try_from(entries.len()).ok()?;
    let mut out = Vec::with_capacity(HEAD + 4 * (entries.len() + 1) + total);
    for word in [saved.conflicts, saved.mismatches, saved.typed_objects, saved.typed_bytes] {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut at = 0u32;
    out.extend_from_slice(&at.to_le_bytes());
    for entry in &entries {
        at += entry.len() as u32;
        out.extend_from_slice(&at.to_le_bytes());
    }
    for entry in &entries {
        out.extend_from_slice(entry);
    }
    Some(out)
}

/// The typing saved in `bytes`, each type its JSON where it lies (parsed when a report first
/// reads it). `None` when the layout is not that of a typing: short, offsets that go back or
/// past the end.
pub fn decode(bytes: &[u8]) -> Option<SavedTypes<&[u8]>> {
    let word = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let word32 = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let count = word32(32)? as usize;
    let entries_start = HEAD.checked_add(count.checked_add(1)?.checked_mul(4)?)?;
    let entries = bytes.get(entries_start..)?;
    let offsets = bytes.get(HEAD..entries_start)?;
    let mut types = Vec::with_capacity(count);
    let mut start = 0usize;
    for (i, offset) in offsets.chunks_exact(4).enumerate() {
        let end = u32::from_le_bytes(offset.try_into().ok()?) as usize;
        if i == 0 {
            if end != 0 {
                return None;
            }
            continue;
        }
        types.push(entries.get(start..end)?);
        start = end;
    }
    Some(SavedTypes { types, conflicts: word(0)?, mismatches: word(8)?, typed_objects: word(16)?, typed_bytes: word(24)? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use heapsnap_analyze::TypeNames;

    fn saved(types: usize) -> SavedTypes {
        let types = (0..types).map(|i| TypeNames { name: format!("t{i}"), parts: None }).collect();
        SavedTypes { types, conflicts: 1, mismatches: 2, typed_objects: 3, typed_bytes: 4 }
    }

    /// Each type reads back as its JSON, the counts as they were.
    #[test]
    fn types_read_back_one_by_one() {
        for n in [0, 1, 3] {
            let bytes = encode(&saved(n)).unwrap();
            let back = decode(&bytes).expect("a typing");
            assert_eq!((back.conflicts, back.mismatches, back.typed_objects, back.typed_bytes), (1, 2, 3, 4));
            let names: Vec<TypeNames> = back.types.iter().map(|json| serde_json::from_slice(json).unwrap()).collect();
            assert_eq!(names.iter().map(|t| t.name.clone()).collect::<Vec<_>>(), (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>());
        }
    }

    /// Every truncation, an offset that goes back, past the end or does not start at 0, and a
    /// count past the offsets are refused, never a panic.
    #[test]
    fn a_damaged_layout_is_refused() {
        let bytes = encode(&saved(3)).unwrap();
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_none(), "truncated to {len}");
        }
        let with = |at: usize, value: u32| {
            let mut b = bytes.clone();
            b[at..at + 4].copy_from_slice(&value.to_le_bytes());
            b
        };
        let (first, second, last) = (HEAD, HEAD + 4, HEAD + 12);
        let end = u32::from_le_bytes(bytes[last..last + 4].try_into().unwrap());
        assert!(decode(&with(first, 1)).is_none(), "the first offset is not 0");
        assert!(decode(&with(second, end + 1)).is_none(), "an offset past the next");
        assert!(decode(&with(last, end + 1)).is_none(), "the last offset past the end");
        assert!(decode(&with(32, 4)).is_none(), "more types than offsets");
        assert!(decode(&with(32, u32::MAX)).is_none(), "a count past any section");
    }
}
