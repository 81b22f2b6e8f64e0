//! A small structure-aware mutator over valid seed snapshots, for the stable fuzz tests.
//! Deterministic for a given seed, so a failure can be replayed.

use super::*;

/// splitmix64: tiny, good enough, reproducible.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Valid snapshots of varied shapes to start from.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut seeds = vec![assemble(&baseline())];

    let mut sections = baseline();
    sections[2].body.clear();
    sections.insert(4, Sec { kind: 77, flags: 0, body: b"optional".to_vec() });
    sections.push(region_sec(region_header(RegionKind::FiberStack, 0x3000), &[0x33; 24]));
    sections.push(region_sec(region_header(RegionKind::Other, 0x3018), &[]));
    sections.push(dwarf_sec(b".debug_info", &[0xab; 40]));
    let mut file = assemble(&sections);
    edit_header(&mut file, |h| h.version_minor = 4);
    seeds.push(file);

    // Nested and sizeless symbols, many strings, several domains.
    seeds.push(written(|w| {
        let m = Metadata {
            domains: (0..3)
                .map(|i| DomainInfo {
                    id: i,
                    minor_start: 0x1000 * i as u64,
                    minor_end: 0x1000 * i as u64 + 0x800,
                    young_ptr: 0x1000 * i as u64 + 0x400,
                })
                .collect(),
            warnings: vec!["domain 2 was mid-collection".into()],
            pools: None,
            forced_version: false,
            bytecode: false,
            layouts_from: None,
            ocaml4_gc: None,
            capture: None,
            probed: None,
            namespaces: None,
            host: None,
            ..metadata()
        };
        w.write_metadata(&m).unwrap();
        let names: Vec<StrId> = (0..12).map(|i| w.intern(&format!("caml_fn_{i}"))).collect();
        let mut symbols: Vec<SymbolRecord> =
            (0..12u64).map(|i| symbol(0x100 + i * 8, 0x100 + i * 8 + (12 - i) * 16, names[i as usize])).collect();
        symbols.push(symbol(0x140, 0x140, names[0]));
        w.write_symbols(&mut symbols).unwrap();
        let roots: Vec<RootRecord> = (0..6).map(|i| root(RootKind::from_code(1 + i as u16), 0x8000 + i * 16, names[i as usize])).collect();
        w.write_roots(&roots).unwrap();
        for i in 0..4u64 {
            let header = RegionHeader {
                block_wsize: 2 + i as u32,
                first_block: 8 * i as u32,
                ..region_header(RegionKind::Pool, 0x8000 + i * 0x100)
            };
            w.write_region(&header, &[i as u8; 0x80]).unwrap();
        }
        w.write_custom_ops(&[CustomOpsRecord { address: 0x9000, identifier: names[3], reserved: 0 }]).unwrap();
        w.write_ephemerons(&[0x8008, 0x8108]).unwrap();
    }));

    // The smallest valid snapshot.
    seeds.push(written(|w| w.write_metadata(&metadata()).unwrap()));
    seeds
}

fn interesting_u64(rng: &mut Rng, file: &[u8]) -> u64 {
    let len = file.len() as u64;
    let table_offset = if file.len() >= 32 { trailer(file).table_offset } else { 0 };
    match rng.below(4) {
        0 => rng.pick(&[0, 1, 7, 8, 31, 32, 48, 64, u32::MAX as u64, u64::MAX, u64::MAX - 7, 1 << 60, 1 << 63, i64::MAX as u64]),
        1 => rng.pick(&[
            len,
            len.wrapping_sub(32),
            len.wrapping_sub(64),
            table_offset,
            table_offset.wrapping_add(8),
            table_offset.wrapping_sub(8),
        ]),
        2 => rng.next() % (len + 64),
        _ => rng.next(),
    }
}

/// A random table entry's field position (and width), if the table can be found.
fn table_field(rng: &mut Rng, file: &[u8]) -> Option<(usize, usize)> {
    if file.len() < 64 {
        return None;
    }
    let t = trailer(file);
    let count = t.section_count.min(4096) as usize;
    let at = (t.table_offset as usize).checked_add(rng.below(count) * SectionEntry::SIZE)?;
    // kind, flags, offset, length, checksum
    let (field, width) = rng.pick(&[(0, 4), (4, 4), (8, 8), (16, 8), (24, 8)]);
    (at.checked_add(field + width)? <= file.len()).then_some((at + field, width))
}

/// The in-bounds table entries of `file`, if its table can be found.
fn entries(file: &[u8]) -> Vec<SectionEntry> {
    if file.len() < 64 {
        return Vec::new();
    }
    let t = trailer(file);
    let fits = t.section_count.checked_mul(32).and_then(|n| n.checked_add(t.table_offset)) == Some(file.len() as u64 - 32);
    if !fits {
        return Vec::new();
    }
    table(file).into_iter().filter(|e| e.offset.checked_add(e.length).is_some_and(|end| end <= file.len() as u64)).collect()
}

/// Structure-aware: overwrite a word inside one section's body; for regions, often move the
/// base next to another region's, to make regions overlap or touch.
fn damage_body(rng: &mut Rng, file: &mut [u8]) {
    let entries = entries(file);
    if entries.is_empty() {
        return;
    }
    let entry = entries[rng.below(entries.len())];
    if entry.length < 8 {
        return;
    }
    let regions: Vec<&SectionEntry> = entries.iter().filter(|e| e.kind == SectionKind::Region.code() && e.length >= 32).collect();
    if entry.kind == SectionKind::Region.code() && entry.length >= 32 && rng.chance(2) {
        let other = regions[rng.below(regions.len())];
        let other_base = u64::from_le_bytes(file[other.offset as usize + 8..other.offset as usize + 16].try_into().unwrap());
        let shift = (rng.below(9) as u64).wrapping_sub(4).wrapping_mul(8);
        write_le(file, entry.offset as usize + 8, 8, other_base.wrapping_add(shift));
        return;
    }
    let at = entry.offset as usize + rng.below(entry.length as usize / 8) * 8 + rng.pick(&[0, 0, 4]);
    let value = if rng.chance(2) {
        rng.pick(&[0u64, 1, 2, 3, 8, 16, 0xffff_ffff, u64::MAX, entry.length, entry.length + 1])
    } else {
        interesting_u64(rng, file)
    };
    write_le(file, at, rng.pick(&[4, 8]), value);
}

fn write_le(file: &mut [u8], at: usize, width: usize, value: u64) {
    if at + width <= file.len() {
        file[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
    }
}

/// 1 to 4 mutations of `input`, then, half of the time, resealed checksums.
pub fn mutate(rng: &mut Rng, input: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut file = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = file.len();
        match rng.below(13) {
            9 | 10 => damage_body(rng, &mut file),
            0 if len > 0 => {
                let at = rng.below(len);
                file[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                file[at] = rng.pick(&[0, 1, 0x7f, 0x80, 0xff, b'{', b'"', b'0', b' ']);
            }
            2 if len >= 8 => {
                let at = if rng.chance(2) { rng.below(len / 8) * 8 } else { rng.below(len - 7) };
                let value = interesting_u64(rng, &file);
                write_le(&mut file, at, 8, value);
            }
            3 if len >= 4 => {
                let at = rng.below(len - 3);
                let value = rng.pick(&[0u64, 1, 2, 3, 4, 5, 6, 7, 8, 9, 99, 0xffff, 0xffff_fffe, 0xffff_ffff]);
                write_le(&mut file, at, 4, value);
            }
            4 => file.truncate(rng.below(len + 1)),
            5 if len > 0 => {
                let from = rng.below(len);
                let to = (from + 1 + rng.below(64)).min(len);
                file.drain(from..to);
            }
            6 if len > 0 => {
                let from = rng.below(len);
                let to = (from + 1 + rng.below(64)).min(len);
                let chunk = file[from..to].to_vec();
                let at = rng.below(len + 1);
                file.splice(at..at, chunk);
            }
            7 => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                file.truncate(cut);
                file.extend_from_slice(&other[from..]);
            }
            8 if len > 0 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len());
                let to = (from + 1 + rng.below(64)).min(other.len());
                let at = rng.below(len);
                let n = (to - from).min(len - at);
                file[at..at + n].copy_from_slice(&other[from..from + n]);
            }
            _ => {
                // Structure-aware: damage one field of one section table entry.
                if let Some((at, width)) = table_field(rng, &file) {
                    let value = if width == 4 {
                        rng.pick(&[0u64, 1, 2, 3, 4, 5, 6, 7, 8, 9, 99, 0xffff_ffff])
                    } else {
                        interesting_u64(rng, &file)
                    };
                    write_le(&mut file, at, width, value);
                }
            }
        }
    }
    if rng.chance(2) {
        reseal(&mut file);
    }
    file
}
