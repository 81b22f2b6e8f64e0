//! Random snapshots written with the crate's writer read back equal, through both the mapped
//! and the in-memory reader; the file's layout is exactly the one the spec encoder produces;
//! lookups agree with naive models.

use crate::common::*;
use heapsnap_format::*;
use proptest::prelude::*;
use std::os::unix::fs::PermissionsExt;
use xxhash_rust::xxh3::xxh3_64;

#[derive(Clone, Debug)]
struct RegionSpec {
    header: RegionHeader,
    bytes: Vec<u8>,
    /// Where to cut the bytes when streaming them in pieces (empty: one write_region call).
    cuts: Vec<usize>,
}

#[derive(Clone, Debug)]
struct Spec {
    metadata: Metadata,
    /// Strings to intern; records name them by index (None: no name).
    strings: Vec<String>,
    roots: Option<Vec<(RootRecord, Option<usize>)>>,
    regions: Vec<RegionSpec>,
    symbols: Option<Vec<(SymbolRecord, Option<usize>)>>,
    dwarf: Vec<(String, Vec<u8>)>,
    custom_ops: Option<Vec<(u64, Option<usize>)>>,
    ephemerons: Option<Vec<u64>>,
    unknown: Vec<(u32, u32, Vec<u8>)>,
    /// The order in which sections are written (a shuffled list of section ids).
    order: Vec<Part>,
}

#[derive(Clone, Copy, Debug)]
enum Part {
    Metadata,
    Roots,
    Region(usize),
    Symbols,
    Dwarf(usize),
    CustomOps,
    Ephemerons,
    Unknown(usize),
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z_][a-zA-Z0-9_.]{0,24}",
        any::<String>().prop_map(|s| s.chars().take(12).collect()),
        Just(String::new()),
        Just("with\0nul".to_string()),
    ]
}

fn metadata_strategy() -> impl Strategy<Value = Metadata> {
    let domain = (any::<u16>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(id, a, b, c)| {
        let mut v = [a, b, c];
        v.sort();
        DomainInfo { id, minor_start: v[0], young_ptr: v[1], minor_end: v[2] }
    });
    let trigger = prop_oneof![
        Just(Trigger::Manual),
        Just(Trigger::Compaction),
        Just(Trigger::Signal),
        Just(Trigger::Interval),
        Just(Trigger::Exit),
        Just(Trigger::Core),
        Just(Trigger::Synthetic),
        Just(Trigger::Memory),
    ];
    let colours = Just(vec![0u8, 1, 2, 3]).prop_shuffle().prop_map(|c| ColourEncoding {
        marked: c[0],
        unmarked: c[1],
        garbage: c[2],
        not_markable: c[3],
    });
    (
        (text(), 0u8..=31, colours, any::<Option<u32>>(), proptest::option::of(text()), proptest::option::of("[0-9a-f]{0,40}")),
        (any::<u64>(), trigger, text(), proptest::collection::vec(domain, 0..4), any::<Option<u64>>(), any::<bool>()),
        (
            proptest::collection::vec(text(), 0..3),
            any::<bool>(),
            proptest::option::of((any::<Option<u32>>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
                |(pid_inside, other_pid_namespace, other_mount_namespace, other_root)| heapsnap_format::Namespaces {
                    pid_inside,
                    other_pid_namespace,
                    other_mount_namespace,
                    other_root,
                },
            )),
            proptest::option::of(text()),
        ),
        (
            proptest::option::of(prop_oneof![Just(PoolGeometry::ocaml_5_1()), Just(PoolGeometry::ocaml_5_2())]),
            any::<bool>(),
            proptest::option::of(text()),
            proptest::option::of((0u64..4, any::<u64>()).prop_map(|(phase, sweep_pointer)| heapsnap_values::ocaml4::Ocaml4Gc {
                phase: heapsnap_values::ocaml4::GcPhase::from_code(phase).unwrap(),
                sweep_pointer,
            })),
            proptest::option::of((text(), text(), proptest::option::of(text()), proptest::collection::vec(text(), 0..3)).prop_map(
                |(requested, method, why_copy, not_frozen)| heapsnap_format::CaptureInfo { requested, method, why_copy, not_frozen },
            )),
            proptest::option::of(
                (text(), proptest::collection::vec((text(), text(), text()), 0..3), proptest::collection::vec(text(), 0..2)).prop_map(
                    |(reason, facts, guessed)| heapsnap_format::ProbedRuntime {
                        reason,
                        facts: facts.into_iter().map(|(fact, value, from)| heapsnap_format::ProbedFact { fact, value, from }).collect(),
                        guessed,
                    },
                ),
            ),
        ),
    )
        .prop_map(
            |(
                (ocaml_version, reserved_header_bits, colours, pid, executable, build_id),
                (time_unix_ns, trigger, dumper, domains, compactions, redacted),
                (warnings, bytecode, namespaces, host),
                (pools, forced_version, layouts_from, ocaml4_gc, capture, probed),
            )| Metadata {
                ocaml_version,
                word_size: 8,
                reserved_header_bits,
                colours,
                pid,
                executable,
                build_id,
                time_unix_ns,
                trigger,
                dumper,
                domains,
                compactions,
                redacted,
                warnings,
                pools,
                forced_version,
                bytecode,
                layouts_from,
                ocaml4_gc,
                capture,
                probed,
                namespaces,
                host,
            },
        )
}

fn name(strings: usize) -> impl Strategy<Value = Option<usize>> {
    if strings == 0 {
        Just(None).boxed()
    } else {
        proptest::option::of(0..strings).boxed()
    }
}

fn root_strategy(strings: usize) -> impl Strategy<Value = (RootRecord, Option<usize>)> {
    (any::<u16>(), any::<u16>(), any::<u32>(), any::<[u64; 4]>(), name(strings)).prop_map(|(kind, domain, flags, w, name)| {
        let record =
            RootRecord { kind, domain, flags, thread: w[0], slot: w[1], value: w[2], origin: w[3], name: StrId::NONE, reserved: 0 };
        (record, name)
    })
}

/// Non-overlapping regions: consecutive (gap, length) pairs from a random start, written in a
/// shuffled order. Gaps of 0 make regions (and empty ones) touch.
fn regions_strategy() -> impl Strategy<Value = Vec<RegionSpec>> {
    let one = (
        0u64..4,
        0usize..24,
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u8>(),
        proptest::collection::vec(any::<prop::sample::Index>(), 0..3),
    );
    ((0u64..1 << 40).prop_map(|b| b * 8), proptest::collection::vec(one, 0..8)).prop_map(|(start, parts)| {
        let mut at = start;
        parts
            .into_iter()
            .map(|(gap, words, kind, domain, flags, block_wsize, owner, fill, cuts)| {
                at += gap * 8;
                let len = words * 8;
                let bytes: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                let first_block = if len == 0 { 0 } else { (block_wsize as usize % (len + 1)) as u32 };
                let header = RegionHeader { kind, domain, flags, base: at, block_wsize, first_block, owner };
                at += len as u64;
                let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(len + 1)).collect();
                cuts.sort();
                RegionSpec { header, bytes, cuts }
            })
            .collect()
    })
}

fn symbol_strategy(strings: usize) -> impl Strategy<Value = (SymbolRecord, Option<usize>)> {
    // Small address space, so that symbols nest, overlap, share starts and are sizeless.
    (0u64..200, prop_oneof![Just(0u64), 1u64..8, 8u64..120], 1u32..5, name(strings))
        .prop_map(|(start, len, kind, name)| (SymbolRecord { start, end: start + len, name: StrId::NONE, kind }, name))
}

fn spec_strategy() -> impl Strategy<Value = Spec> {
    proptest::collection::vec(text(), 0..6).prop_flat_map(|strings| {
        let n = strings.len();
        (
            metadata_strategy(),
            Just(strings),
            proptest::option::of(proptest::collection::vec(root_strategy(n), 0..12)),
            regions_strategy(),
            proptest::option::of(proptest::collection::vec(symbol_strategy(n), 0..40)),
            proptest::collection::btree_map("\\.debug_[a-z_]{1,24}", proptest::collection::vec(any::<u8>(), 0..40), 0..3),
            proptest::option::of(proptest::collection::vec((any::<u64>(), name(n)), 0..4)),
            proptest::option::of(proptest::collection::vec(any::<u64>(), 0..6)),
            proptest::collection::vec((100u32..100_000, any::<u32>(), proptest::collection::vec(any::<u8>(), 0..30)), 0..3),
        )
            .prop_flat_map(|(metadata, strings, roots, regions, symbols, dwarf, custom_ops, ephemerons, unknown)| {
                let dwarf: Vec<(String, Vec<u8>)> = dwarf.into_iter().collect();
                let unknown: Vec<(u32, u32, Vec<u8>)> =
                    unknown.into_iter().map(|(kind, flags, body)| (kind, flags & !SECTION_FLAG_REQUIRED, body)).collect();
                let mut order = vec![Part::Metadata];
                order.extend(roots.as_ref().map(|_| Part::Roots));
                order.extend((0..regions.len()).map(Part::Region));
                order.extend(symbols.as_ref().map(|_| Part::Symbols));
                order.extend((0..dwarf.len()).map(Part::Dwarf));
                order.extend(custom_ops.as_ref().map(|_| Part::CustomOps));
                order.extend(ephemerons.as_ref().map(|_| Part::Ephemerons));
                order.extend((0..unknown.len()).map(Part::Unknown));
                let spec = Spec { metadata, strings, roots, regions, symbols, dwarf, custom_ops, ephemerons, unknown, order: vec![] };
                (Just(spec), Just(order).prop_shuffle())
            })
            .prop_map(|(spec, order)| Spec { order, ..spec })
    })
}

/// The string a reader gives back for what was interned (NULs cannot be stored).
fn stored(s: &str) -> String {
    s.replace('\0', "")
}

fn write(spec: &Spec, path: &std::path::Path) -> (Vec<StrId>, Vec<SymbolRecord>) {
    let mut w = SnapshotWriter::create(path).unwrap();
    let ids: Vec<StrId> = spec.strings.iter().map(|s| w.intern(s)).collect();
    let id = |name: Option<usize>| name.map_or(StrId::NONE, |i| ids[i]);
    let mut symbols: Vec<SymbolRecord> = Vec::new();
    for part in &spec.order {
        match *part {
            Part::Metadata => w.write_metadata(&spec.metadata).unwrap(),
            Part::Roots => {
                let roots: Vec<RootRecord> = spec.roots.as_ref().unwrap().iter().map(|(r, n)| RootRecord { name: id(*n), ..*r }).collect();
                w.write_roots(&roots).unwrap();
            }
            Part::Region(i) => {
                let r = &spec.regions[i];
                if r.cuts.is_empty() {
                    w.write_region(&r.header, &r.bytes).unwrap();
                } else {
                    let mut stream = w.begin_region(&r.header).unwrap();
                    let mut from = 0;
                    for &cut in r.cuts.iter().chain([r.bytes.len()].iter()) {
                        stream.write(&r.bytes[from..cut]).unwrap();
                        from = cut;
                    }
                    stream.finish().unwrap();
                }
            }
            Part::Symbols => {
                symbols = spec.symbols.as_ref().unwrap().iter().map(|(s, n)| SymbolRecord { name: id(*n), ..*s }).collect();
                w.write_symbols(&mut symbols).unwrap();
            }
            Part::Dwarf(i) => w.write_dwarf(&spec.dwarf[i].0, &spec.dwarf[i].1).unwrap(),
            Part::CustomOps => {
                let ops: Vec<CustomOpsRecord> = spec
                    .custom_ops
                    .as_ref()
                    .unwrap()
                    .iter()
                    .map(|&(address, n)| CustomOpsRecord { address, identifier: id(n), reserved: 0 })
                    .collect();
                w.write_custom_ops(&ops).unwrap();
            }
            Part::Ephemerons => w.write_ephemerons(spec.ephemerons.as_ref().unwrap()).unwrap(),
            Part::Unknown(i) => {
                let (kind, flags, body) = &spec.unknown[i];
                w.write_raw_section(*kind, *flags, body).unwrap();
            }
        }
    }
    w.finish().unwrap();
    (ids, symbols)
}

/// The innermost symbol holding `address`, found the slow way: among the holders, the latest
/// start, then the smallest end, then the first in the table.
fn naive_symbol_at(symbols: &[SymbolRecord], address: u64) -> Option<SymbolRecord> {
    symbols
        .iter()
        .enumerate()
        .filter(|(_, s)| s.start <= address && (address < s.end || (s.start == s.end && s.start == address)))
        .max_by_key(|(i, s)| (s.start, std::cmp::Reverse(s.end), std::cmp::Reverse(*i)))
        .map(|(_, s)| *s)
}

fn check(spec: &Spec, snapshot: &Snapshot, ids: &[StrId], written_symbols: &[SymbolRecord], file: &[u8]) {
    assert_eq!(snapshot.bytes(), file);
    assert_eq!(snapshot.header(), &FileHeader::current());
    assert_eq!(snapshot.metadata(), &spec.metadata);
    for (i, s) in spec.strings.iter().enumerate() {
        assert_eq!(snapshot.string(ids[i]), Some(stored(s).as_str()));
    }
    let name_of = |n: Option<usize>| n.map(|i| stored(&spec.strings[i]));

    let roots = snapshot.roots();
    let expected_roots = spec.roots.clone().unwrap_or_default();
    assert_eq!(roots.len(), expected_roots.len());
    for (got, (want, n)) in roots.iter().zip(&expected_roots) {
        assert_eq!(RootRecord { name: StrId::NONE, ..*got }, *want);
        assert_eq!(snapshot.string(got.name).map(str::to_owned), name_of(*n));
    }

    // Regions come back in (base, end) order, each with its header and bytes.
    // (Empty regions may share a base: those come in the order they were written.)
    let written_at = |i: usize| spec.order.iter().position(|p| matches!(p, Part::Region(j) if *j == i));
    let mut expected_regions: Vec<(usize, &RegionSpec)> = spec.regions.iter().enumerate().collect();
    expected_regions.sort_by_key(|(i, r)| (r.header.base, r.bytes.len(), written_at(*i)));
    let expected_regions: Vec<&RegionSpec> = expected_regions.into_iter().map(|(_, r)| r).collect();
    assert_eq!(snapshot.region_count(), expected_regions.len());
    for (got, want) in snapshot.regions().zip(expected_regions) {
        assert_eq!(got.header, &want.header);
        assert_eq!(got.bytes, &want.bytes[..]);
        assert_eq!(snapshot.sections()[got.section].section_kind(), SectionKind::Region);
    }
    // region_of / region_index_of agree with a linear search at every edge.
    for r in &spec.regions {
        let (base, end) = (r.header.base, r.header.base + r.bytes.len() as u64);
        for address in [base, base.wrapping_sub(1), end.wrapping_sub(1), end, base + (end - base) / 2] {
            let naive = snapshot.regions().position(|g| g.contains(address));
            assert_eq!(snapshot.region_index_of(address), naive, "address {address:#x}");
            assert_eq!(snapshot.region_of(address).map(|g| g.base()), naive.map(|i| snapshot.region(i).base()));
            if let Some(region) = snapshot.region_of(address) {
                let word = region.word_at(address & !7).unwrap();
                let offset = ((address & !7) - region.base()) as usize;
                assert_eq!(word.to_le_bytes(), region.bytes[offset..offset + 8]);
            }
        }
    }

    // Symbols: sorted by (start, end), the same multiset as written.
    let symbols = snapshot.symbols();
    assert!(symbols.windows(2).all(|w| (w[0].start, w[0].end) <= (w[1].start, w[1].end)));
    let key = |s: &SymbolRecord| (s.start, s.end, s.name, s.kind);
    let mut got: Vec<_> = symbols.iter().map(key).collect();
    let mut want: Vec<_> = written_symbols.iter().map(key).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    for address in (0..340).chain([u64::MAX]) {
        let found = snapshot.symbol_at(address);
        let naive = naive_symbol_at(symbols, address);
        assert_eq!(found.map(|(s, _)| *s), naive, "symbol_at({address})");
        if let Some((s, name)) = found {
            assert_eq!(name, snapshot.string(s.name).unwrap_or(""));
        }
    }

    let ops = snapshot.custom_ops();
    let expected_ops = spec.custom_ops.clone().unwrap_or_default();
    assert_eq!(ops.len(), expected_ops.len());
    for (got, (address, n)) in ops.iter().zip(&expected_ops) {
        assert_eq!(got.address, *address);
        assert_eq!(snapshot.string(got.identifier).map(str::to_owned), name_of(*n));
    }
    assert_eq!(snapshot.ephemerons(), &spec.ephemerons.clone().unwrap_or_default()[..]);

    let mut names: Vec<&str> = snapshot.dwarf_section_names().collect();
    names.sort();
    assert_eq!(names, spec.dwarf.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>());
    for (n, bytes) in &spec.dwarf {
        assert_eq!(snapshot.dwarf_section(n), Some(&bytes[..]));
    }

    // Unknown optional sections are kept in the table, bytes intact.
    let unknown: Vec<(u32, u32, &[u8])> = snapshot
        .sections()
        .iter()
        .filter(|e| matches!(e.section_kind(), SectionKind::Unknown(_)))
        .map(|e| (e.kind, e.flags, &file[e.offset as usize..(e.offset + e.length) as usize]))
        .collect();
    let expected_unknown: Vec<(u32, u32, &[u8])> = spec
        .order
        .iter()
        .filter_map(|p| match p {
            Part::Unknown(i) => Some((spec.unknown[*i].0, spec.unknown[*i].1, &spec.unknown[*i].2[..])),
            _ => None,
        })
        .collect();
    assert_eq!(unknown, expected_unknown);
}

/// The writer's layout guarantees: sections in write order, each starting where the previous
/// one's padding ends, zero padding, strings last, then the table and the trailer — i.e. the
/// file is byte for byte what the spec encoder makes of the same sections.
fn check_layout(snapshot: &Snapshot, file: &[u8]) {
    let entries = snapshot.sections();
    let sections: Vec<Sec> = entries
        .iter()
        .map(|e| Sec { kind: e.kind, flags: e.flags, body: file[e.offset as usize..(e.offset + e.length) as usize].to_vec() })
        .collect();
    assert_eq!(assemble(&sections), file, "the writer's layout differs from the spec encoder's");
    assert_eq!(entries.last().unwrap().section_kind(), SectionKind::Strings);
    for e in entries {
        assert_eq!(e.checksum, xxh3_64(&file[e.offset as usize..(e.offset + e.length) as usize]));
        let required = matches!(e.section_kind(), SectionKind::Metadata | SectionKind::Roots | SectionKind::Region);
        if !matches!(e.section_kind(), SectionKind::Unknown(_)) {
            assert_eq!(e.flags & SECTION_FLAG_REQUIRED != 0, required, "{}", e.section_kind());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn random_snapshots_round_trip(spec in spec_strategy()) {
        let (dir, path) = temp_path();
        let (ids, symbols) = write(&spec, &path);
        assert_eq!(files_in(dir.path()), vec!["test.heapsnap".to_string()], "a temporary file was left behind");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let file = std::fs::read(&path).unwrap();

        let mapped = Snapshot::open(&path).unwrap();
        check(&spec, &mapped, &ids, &symbols, &file);
        check_layout(&mapped, &file);
        let owned = Snapshot::from_bytes(&file).unwrap();
        check(&spec, &owned, &ids, &symbols, &file);
        let unverified = Snapshot::open_with(&path, &ReadOptions { verify_checksums: false }).unwrap();
        check(&spec, &unverified, &ids, &symbols, &file);
    }

    /// symbol_at against the naive model on dense random symbol tables.
    #[test]
    fn symbol_at_matches_the_naive_model(
        raw in proptest::collection::vec((0u64..64, prop_oneof![Just(0u64), 1u64..4, 4u64..64]), 1..200),
        probes in proptest::collection::vec(0u64..140, 1..50),
    ) {
        let (_dir, path) = temp_path();
        let mut w = SnapshotWriter::create(&path).unwrap();
        w.write_metadata(&metadata()).unwrap();
        let names: Vec<StrId> = (0..raw.len()).map(|i| w.intern(&format!("s{i}"))).collect();
        let mut symbols: Vec<SymbolRecord> =
            raw.iter().zip(&names).map(|(&(start, len), &name)| symbol(start, start + len, name)).collect();
        w.write_symbols(&mut symbols).unwrap();
        w.finish().unwrap();
        let snapshot = Snapshot::open(&path).unwrap();
        for address in probes {
            let found = snapshot.symbol_at(address).map(|(s, name)| (*s, name.to_owned()));
            let naive = naive_symbol_at(snapshot.symbols(), address).map(|s| (s, snapshot.string(s.name).unwrap().to_owned()));
            prop_assert_eq!(found, naive, "address {}", address);
        }
    }
}

#[test]
fn writer_output_matches_the_spec_encoder_for_the_baseline() {
    // The baseline's sections, written with the writer in the same order (strings come last).
    let base = baseline();
    let file = written(|w| {
        w.write_metadata(&metadata()).unwrap();
        let foo = w.intern("camlFoo");
        let bar = w.intern("caml_bar");
        assert_eq!((foo, bar), (StrId(0), StrId(8)));
        // Vec<u8> bodies are not 8-aligned: copy them into records.
        w.write_roots(&pod_vec::<RootRecord>(&base[2].body)).unwrap();
        w.write_region(&bytemuck::pod_read_unaligned(&base[3].body[..32]), &base[3].body[32..]).unwrap();
        w.write_region(&bytemuck::pod_read_unaligned(&base[4].body[..32]), &base[4].body[32..]).unwrap();
        w.write_symbols(&mut pod_vec::<SymbolRecord>(&base[5].body)).unwrap();
        w.write_dwarf(".debug_line", &base[6].body[32..]).unwrap();
        w.write_custom_ops(&pod_vec::<CustomOpsRecord>(&base[7].body)).unwrap();
        w.write_ephemerons(&pod_vec::<u64>(&base[8].body)).unwrap();
    });
    let mut in_writer_order = base.clone();
    let strings = in_writer_order.remove(1);
    in_writer_order.push(strings);
    assert_eq!(file, assemble(&in_writer_order));
}

#[test]
fn strings_are_interned_once_and_nul_is_dropped() {
    let (_dir, path) = temp_path();
    let mut w = SnapshotWriter::create(&path).unwrap();
    w.write_metadata(&metadata()).unwrap();
    let a = w.intern("camlA");
    assert_eq!(w.intern("camlA"), a);
    let nul = w.intern("a\0b");
    let empty = w.intern("");
    w.write_roots(&[root(RootKind::Global, 1, a), root(RootKind::Global, 1, nul), root(RootKind::Global, 1, empty)]).unwrap();
    w.finish().unwrap();
    let s = Snapshot::open(&path).unwrap();
    let names: Vec<Option<&str>> = s.roots().iter().map(|r| s.string(r.name)).collect();
    assert_eq!(names, vec![Some("camlA"), Some("ab"), Some("")]);
}

#[test]
fn an_empty_snapshot_has_only_metadata_and_strings() {
    let file = written(|w| w.write_metadata(&metadata()).unwrap());
    let s = Snapshot::from_bytes(&file).unwrap();
    let kinds: Vec<SectionKind> = s.sections().iter().map(|e| e.section_kind()).collect();
    assert_eq!(kinds, vec![SectionKind::Metadata, SectionKind::Strings]);
    assert_eq!((s.region_count(), s.roots().len(), s.symbols().len()), (0, 0, 0));
    assert!(s.symbol_at(0).is_none() && s.region_of(0).is_none());
}
