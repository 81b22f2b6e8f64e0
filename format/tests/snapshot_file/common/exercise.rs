//! What the fuzzers do with one input: shared by the stable mutation test
//! (`tests/snapshot_file/fuzz_mutations.rs`) and the cargo-fuzz target (`fuzz/fuzz_targets/read.rs`), so
//! both check the same thing. Must itself never panic on any input.

use heapsnap_format::{ReadOptions, SectionEntry, Snapshot, StrId, Trailer, END_MAGIC};
use xxhash_rust::xxh3::xxh3_64;

/// Recomputes every in-bounds section checksum and the table checksum, where the trailer and
/// table are sound enough to find. Mutated inputs go through this half of the time, so that
/// the validation behind the checksums is reached too.
pub fn reseal(bytes: &mut [u8]) {
    let len = bytes.len();
    if len < 64 {
        return;
    }
    let trailer_at = len - Trailer::SIZE;
    let mut trailer: Trailer = bytemuck::pod_read_unaligned(&bytes[trailer_at..]);
    let table_end = trailer.section_count.checked_mul(SectionEntry::SIZE as u64).and_then(|n| n.checked_add(trailer.table_offset));
    if trailer.end_magic != END_MAGIC || table_end != Some(trailer_at as u64) {
        return;
    }
    let table_at = trailer.table_offset as usize;
    for i in 0..trailer.section_count as usize {
        let at = table_at + i * SectionEntry::SIZE;
        let mut entry: SectionEntry = bytemuck::pod_read_unaligned(&bytes[at..at + SectionEntry::SIZE]);
        let end = entry.offset.checked_add(entry.length);
        if let Some(end) = end.filter(|&end| end <= table_at as u64) {
            entry.checksum = xxh3_64(&bytes[entry.offset as usize..end as usize]);
            bytes[at..at + SectionEntry::SIZE].copy_from_slice(bytemuck::bytes_of(&entry));
        }
    }
    trailer.table_checksum = xxh3_64(&bytes[table_at..trailer_at]);
    bytes[trailer_at..].copy_from_slice(bytemuck::bytes_of(&trailer));
}

/// One fuzz input: the first byte picks the mode (bit 0: reseal checksums first, bit 1: skip
/// checksum verification), the rest is the file.
pub fn fuzz_one(data: &[u8]) {
    let Some((&mode, file)) = data.split_first() else { return };
    let mut file = file.to_vec();
    if mode & 1 != 0 {
        reseal(&mut file);
    }
    let options = ReadOptions { verify_checksums: mode & 2 == 0 };
    read_and_walk(&file, &options);
}

/// Opens `file`; if it is accepted, calls every accessor on everything it holds and checks the
/// invariants the reader promises. Returns whether the file was accepted.
pub fn read_and_walk(file: &[u8], options: &ReadOptions) -> bool {
    match Snapshot::from_bytes_with(file, options) {
        Ok(snapshot) => {
            walk(&snapshot);
            true
        }
        Err(error) => {
            // Formatting the error must work too (it is what users see).
            let _ = error.to_string();
            false
        }
    }
}

fn walk(snapshot: &Snapshot) {
    let _ = snapshot.header();
    let _ = snapshot.ocaml_names().map(str::len);
    let _ = serde_json::to_string(snapshot.metadata()).expect("metadata serialises");
    for entry in snapshot.sections() {
        let _ = entry.section_kind().to_string();
    }
    for root in snapshot.roots() {
        let _ = (root.root_kind().label(), root.root_kind().is_root(), root.is_conservative());
        if !root.name.is_none() {
            assert!(snapshot.string(root.name).is_some(), "validated root name does not resolve");
        }
    }
    for op in snapshot.custom_ops() {
        if !op.identifier.is_none() {
            assert!(snapshot.string(op.identifier).is_some(), "validated identifier does not resolve");
        }
    }
    let _ = snapshot.ephemerons().iter().fold(0u64, |a, &e| a.wrapping_add(e));
    let symbols = snapshot.symbols();
    for (i, symbol) in symbols.iter().enumerate() {
        let _ = symbol.symbol_kind();
        assert!(symbol.start <= symbol.end);
        if i > 0 {
            assert!((symbols[i - 1].start, symbols[i - 1].end) <= (symbol.start, symbol.end));
        }
        for address in [symbol.start, symbol.end.saturating_sub(1), symbol.end, symbol.start.wrapping_sub(1)] {
            if let Some((found, _name)) = snapshot.symbol_at(address) {
                let holds = found.start <= address && (address < found.end || (found.start == found.end && found.start == address));
                assert!(holds, "symbol_at({address:#x}) returned {found:?}, which does not hold it");
            }
        }
    }
    let mut previous_end = 0u64;
    for (index, region) in snapshot.regions().enumerate() {
        let _ = (region.kind().label(), region.header.block_wsize, region.header.owner, region.section);
        assert!(region.base() >= previous_end || region.bytes.is_empty(), "regions overlap after validation");
        assert!(region.header.first_block as usize <= region.bytes.len());
        previous_end = region.end();
        let _ = region.words().len();
        let _ = region.word_at(region.base());
        let _ = region.word_at(region.base().wrapping_add(3));
        if !region.bytes.is_empty() {
            assert_eq!(snapshot.region_index_of(region.base()), Some(index));
            assert_eq!(snapshot.region_index_of(region.end() - 1), Some(index));
            assert!(region.contains(region.end() - 1));
            assert_eq!(region.word_at(region.end() - 8), region.words().last().copied());
        }
        let _ = snapshot.region_of(region.end());
        let _ = snapshot.region_of(region.base().wrapping_sub(1));
    }
    for name in snapshot.dwarf_section_names() {
        assert!(snapshot.dwarf_section(name).is_some());
    }
    let _ = snapshot.load_bias();
    for d in snapshot.plugin_dwarf() {
        assert!(!d.name.is_empty() && d.name.len() <= heapsnap_format::DWARF_NAME_LEN);
    }
    // Arbitrary ids must be answered, not panic.
    for id in [0, 1, 7, u32::MAX - 1, snapshot.bytes().len() as u32] {
        let _ = snapshot.string(StrId(id));
    }
}
