//! Reading an OCaml 5 runtime's [`Facts`] from the target itself, as Go's `gocore` reads Go
//! versions: each fact from where the runtime keeps it, never from the version string.
//!
//! - Size classes: the runtime's own `wsize_sizeclass` and `wastage_sizeclass` tables in the
//!   executable's data (element types from DWARF); the pool size is the one every class's
//!   wasted words agree with; the pool header's size is `sizeof(struct pool)`.
//! - Where a pool's wasted words lie (before its blocks, from 5.2, or after them, in 5.1): the
//!   pools in the running heap, whose slot headers only read as headers under one of the two.
//! - Compaction: `caml_compactions_count` exists. Statmemprof's entry tables: DWARF's
//!   `struct memprof_domain_s` has `entries`.
//! - `stw_domains.domains` and `thread_table`: arrays or pointers, from their DWARF types.
//! - Fields of a continuation: no type says it; the continuations in the stopped heap do
//!   ([`measure_continuation_fields`]).
//! - How free pool slots are marked (a zero header, or OCaml 5.4's runs): the pools in the
//!   stopped heap ([`super::free_runs`]).
//!
//! On a release heapsnap knows, every probed fact must equal the release's ([`Probe::disagreement`]):
//! that is how a patched or mis-built runtime is caught. On one it does not know, the probed
//! facts are the facts ([`Probe::facts`]), and a fact that cannot be established is a refusal
//! that names it.

use super::facts::Facts;
use super::free_runs;
use super::layout::HeapLayout;
use super::versions::{self, Indirection};
use crate::common::regions::CapturedRegion;
use crate::dwarf::TypeIndex;
use crate::elf::Executable;
use crate::source::{MemorySource, ReadExt};
use heapsnap_format::ProbedFact;
use heapsnap_format::RegionKind;
use heapsnap_values::{HeaderFormat, PoolGeometry, CONT_TAG};
use std::collections::BTreeSet;

/// Pools read, at most, to tell where wasted words lie.
const POOLS_SAMPLED: usize = 64;

/// NOT_MARKABLE, the one colour every OCaml 5 runtime fixes (`caml/shared_heap.h`).
const NOT_MARKABLE: u8 = 3;

/// What the probe found of one runtime; each fact is its value or why it could not be known.
#[derive(Clone, Debug)]
pub struct Probe {
    pub size_classes: Result<SizeClassTables, String>,
    /// `Some(true)` when the wasted words come first; `None` before the heap was sampled.
    pub waste_first: Option<Result<bool, String>>,
    pub compaction: bool,
    pub memprof: Result<bool, String>,
    pub domain_table: Result<Indirection, String>,
    /// `None` when systhreads is not linked in.
    pub thread_table: Option<Result<Indirection, String>>,
}

/// The runtime's size-class tables and pool sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeClassTables {
    pub wsize: Vec<u32>,
    pub wastage: Vec<u32>,
    pub pool_wsize: u32,
    pub header_wsize: u32,
}

impl SizeClassTables {
    fn geometry(&self, waste_first: bool) -> PoolGeometry {
        PoolGeometry::from_tables(self.pool_wsize, self.header_wsize, &self.wsize, &self.wastage, waste_first)
    }
}

/// How an indirection reads in reports.
fn said(i: &Indirection) -> String {
    match i {
        Indirection::InlineArray => "an array inline".to_string(),
        Indirection::Pointer => "a pointer to an array".to_string(),
    }
}

/// A fact the probe could not establish on a release heapsnap does not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unestablished {
    pub fact: &'static str,
    pub why: String,
}

impl Probe {
    /// Probes what the executable and its DWARF say. `source` may be running: only the
    /// executable's constant data is read from it.
    pub fn statics(exe: &Executable, types: &TypeIndex, heap: &HeapLayout, source: &dyn MemorySource, bias: u64) -> Probe {
        Probe {
            size_classes: size_class_tables(exe, types, heap, source, bias),
            waste_first: None,
            compaction: exe.symbol("caml_compactions_count").is_some(),
            memprof: memprof(types),
            domain_table: indirection(types, "stw_domains", "domain.c", "domains"),
            thread_table: types.variable("thread_table", "st_stubs.c").ok().map(|_| indirection(types, "thread_table", "st_stubs.c", "")),
        }
    }

    /// The facts of a release heapsnap does not know, from the probe alone; the first fact
    /// it could not establish when there is one. With `force`, such a fact takes the newest
    /// known release's value and is listed in the second part of the result.
    pub fn facts(&self, force: bool) -> Result<(Facts, Vec<&'static str>), Unestablished> {
        let mut facts = Facts::of_release(versions::newest());
        facts.continuation_fields = None;
        facts.compaction = self.compaction;
        let mut guessed = Vec::new();
        let mut unknown = |fact: &'static str, why: &String| {
            if force {
                guessed.push(fact);
                Ok(())
            } else {
                Err(Unestablished { fact, why: why.clone() })
            }
        };
        let waste_first = self.waste_first.clone().unwrap_or_else(|| Err("the heap was not sampled".into()));
        match (&self.size_classes, &waste_first) {
            (Ok(tables), Ok(first)) => facts.pools = tables.geometry(*first),
            (Err(why), _) => unknown("size classes", why)?,
            (Ok(tables), Err(why)) => {
                unknown("where a pool's wasted words lie", why)?;
                facts.pools = tables.geometry(true);
            }
        }
        match &self.memprof {
            Ok(m) => facts.memprof = *m,
            Err(why) => unknown("statmemprof's entry tables", why)?,
        }
        match &self.domain_table {
            Ok(i) => facts.domain_table = *i,
            Err(why) => unknown("stw_domains.domains", why)?,
        }
        match &self.thread_table {
            Some(Ok(i)) => facts.thread_table = *i,
            Some(Err(why)) => unknown("thread_table", why)?,
            None => {}
        }
        Ok((facts, guessed))
    }

    /// The first fact of `facts` (a known release's) that the probe established otherwise:
    /// (fact, what the probe found, what the release says). Facts the probe could not
    /// establish are not disagreements.
    pub fn disagreement(&self, facts: &Facts) -> Option<(&'static str, String, String)> {
        if let Ok(t) = &self.size_classes {
            let known: Vec<u32> = facts.pools.size_classes.iter().map(|c| c.wsize).collect();
            if t.wsize != known {
                return Some(("size classes", format!("{:?}", t.wsize), format!("{known:?}")));
            }
            if t.pool_wsize != facts.pools.pool_wsize {
                return Some(("pool size", format!("{} words", t.pool_wsize), format!("{} words", facts.pools.pool_wsize)));
            }
            if t.header_wsize != facts.pools.header_wsize {
                return Some(("pool header", format!("{} words", t.header_wsize), format!("{} words", facts.pools.header_wsize)));
            }
            if let Some(Ok(first)) = self.waste_first {
                let probed = t.geometry(first);
                if probed != facts.pools {
                    let starts = |g: &PoolGeometry| format!("{:?}", g.size_classes.iter().map(|c| c.first_block).collect::<Vec<_>>());
                    return Some(("where each size class's first block lies", starts(&probed), starts(&facts.pools)));
                }
            }
        }
        if self.compaction != facts.compaction {
            let says = |c: bool| if c { "caml_compactions_count exists" } else { "no caml_compactions_count" }.to_string();
            return Some(("compaction", says(self.compaction), says(facts.compaction)));
        }
        let differs = |fact: &'static str, probed: &Result<String, String>, known: String| match probed {
            Ok(p) if *p != known => Some((fact, p.clone(), known)),
            _ => None,
        };
        let show = |r: &Result<Indirection, String>| r.as_ref().map(said).map_err(Clone::clone);
        differs(
            "statmemprof's entry tables",
            &self.memprof.as_ref().map(|m| m.to_string()).map_err(Clone::clone),
            facts.memprof.to_string(),
        )
        .or_else(|| differs("stw_domains.domains", &show(&self.domain_table), said(&facts.domain_table)))
        .or_else(|| match &self.thread_table {
            Some(t) => differs("thread_table", &show(t), said(&facts.thread_table)),
            None => None,
        })
    }

    /// The facts established, for the report and the metadata.
    pub fn report(&self) -> Vec<ProbedFact> {
        let mut out = Vec::new();
        let mut push = |fact: &'static str, value: Result<String, String>, from: &str| match value {
            Ok(value) => out.push(ProbedFact { fact: fact.to_string(), value, from: from.to_string() }),
            Err(why) => out.push(ProbedFact { fact: fact.to_string(), value: "not established".into(), from: why }),
        };
        match &self.size_classes {
            Ok(t) => {
                push("size classes", Ok(format!("{:?}", t.wsize)), "wsize_sizeclass in the executable");
                push("pool size", Ok(format!("{} words", t.pool_wsize)), "wastage_sizeclass in the executable");
                push("pool header", Ok(format!("{} words", t.header_wsize)), "sizeof(struct pool) in DWARF");
            }
            Err(why) => push("size classes", Err(why.clone()), ""),
        }
        match &self.waste_first {
            Some(r) => push(
                "where a pool's wasted words lie",
                r.as_ref().map(|&f| if f { "before its blocks" } else { "after its blocks" }.to_string()).map_err(Clone::clone),
                "slot headers of pools in the heap",
            ),
            None => push("where a pool's wasted words lie", Err("not sampled".into()), ""),
        }
        push("compaction", Ok(self.compaction.to_string()), "the symbol caml_compactions_count");
        push(
            "statmemprof's entry tables",
            self.memprof.as_ref().map(|m| m.to_string()).map_err(Clone::clone),
            "struct memprof_domain_s in DWARF",
        );
        push("stw_domains.domains", self.domain_table.as_ref().map(said).map_err(Clone::clone), "its DWARF type");
        if let Some(t) = &self.thread_table {
            push("thread_table", t.as_ref().map(said).map_err(Clone::clone), "its DWARF type");
        }
        out
    }
}

/// `wsize_sizeclass` and `wastage_sizeclass`, read where the executable keeps them, with the
/// element sizes DWARF gives; the pool size is solved from them.
fn size_class_tables(
    exe: &Executable,
    types: &TypeIndex,
    heap: &HeapLayout,
    source: &dyn MemorySource,
    bias: u64,
) -> Result<SizeClassTables, String> {
    let count = heap.num_sizeclasses as usize;
    let wsize = read_table(exe, types, source, bias, "wsize_sizeclass", count)?;
    let wastage = read_table(exe, types, source, bias, "wastage_sizeclass", count)?;
    let header_wsize = (heap.pool_header_bytes / 8) as u32;
    if wsize.is_empty() || wsize.windows(2).any(|w| w[0] >= w[1]) || wsize.contains(&0) {
        return Err(format!("wsize_sizeclass {wsize:?} is not a rising list of sizes"));
    }
    if wsize.iter().zip(&wastage).any(|(w, waste)| waste >= w) {
        return Err(format!("wastage_sizeclass {wastage:?} has a class that wastes a whole block of {wsize:?}"));
    }
    let pool_wsize = solve_pool_wsize(header_wsize, &wsize, &wastage)
        .ok_or_else(|| format!("no pool size below 1 Mi words leaves the wasted words of wastage_sizeclass {wastage:?}"))?;
    Ok(SizeClassTables { wsize, wastage, pool_wsize, header_wsize })
}

/// The pool size, in words, that leaves each class `wastage[i]` words after its whole blocks
/// of `wsize[i]` words and a header of `header` words: the smallest one above the largest
/// class (the runtime's sizes share no common period below millions of words, so it is the
/// only plausible one).
fn solve_pool_wsize(header: u32, wsize: &[u32], wastage: &[u32]) -> Option<u32> {
    let largest = *wsize.iter().max()?;
    (header + largest..1 << 20).find(|&pool| wsize.iter().zip(wastage).all(|(&w, &waste)| (pool - header) % w == waste))
}

fn read_table(
    exe: &Executable,
    types: &TypeIndex,
    source: &dyn MemorySource,
    bias: u64,
    name: &str,
    count: usize,
) -> Result<Vec<u32>, String> {
    let var = types.variable(name, "shared_heap.c").map_err(|e| format!("{name}: {e}"))?;
    let ty = types.variable_type(var).ok_or_else(|| format!("{name} has no DWARF type"))?;
    let len = types.array_len(ty).ok_or_else(|| format!("{name} is not an array in DWARF"))?;
    if len as usize != count {
        return Err(format!("{name} has {len} entries, caml_heap_state.avail_pools {count}"));
    }
    let element = types.array_element(ty).and_then(|e| types.size_of(e)).ok_or_else(|| format!("{name}'s elements have no size"))?;
    if !(1..=8).contains(&element) {
        return Err(format!("{name}'s elements are {element} bytes"));
    }
    // A static const of a header: every file that uses it has a copy. DWARF's is shared_heap.c's.
    let address =
        if var.address != 0 { var.address } else { exe.addresses_of(name).into_iter().next().ok_or(format!("no symbol {name}"))? };
    let bytes = source.read_bytes(bias + address, element as usize * count).map_err(|e| format!("{name}: {e}"))?;
    Ok(unsigned_entries(&bytes, element as usize))
}

/// A C table of little-endian unsigned entries of `element` bytes each.
pub(super) fn unsigned_entries(bytes: &[u8], element: usize) -> Vec<u32> {
    bytes.chunks(element).map(|c| c.iter().rev().fold(0u64, |acc, &b| (acc << 8) | b as u64) as u32).collect()
}

fn memprof(types: &TypeIndex) -> Result<bool, String> {
    match types.type_named("memprof_domain_s") {
        Ok(ty) => Ok(types.members(ty).iter().any(|(m, _)| m == "entries")),
        // 5.1's memprof.c has stubs only, and no such structure.
        Err(_) => match types.variable("caml_memprof_main_domain", "memprof.c") {
            Ok(_) => Err("memprof.c has variables but no struct memprof_domain_s in DWARF".into()),
            Err(_) => Ok(false),
        },
    }
}

pub(crate) fn indirection(t: &TypeIndex, var: &str, file: &str, member: &str) -> Result<Indirection, String> {
    let v = t.variable(var, file).map_err(|e| e.to_string())?;
    let ty = if member.is_empty() { t.variable_type(v) } else { t.variable_field(v, var, member).map_err(|e| e.to_string())?.ty };
    match ty {
        Some(ty) if t.array_len(ty).is_some() => Ok(Indirection::InlineArray),
        Some(ty) if t.is_pointer(ty) => Ok(Indirection::Pointer),
        _ => Err(format!("{var}{}{member} is neither an array nor a pointer in DWARF", if member.is_empty() { "" } else { "." })),
    }
}

/// Where a pool's wasted words lie, from pools read in the running heap: for each class that
/// wastes words, the slots' headers only read as headers (zero or a run's for a free slot, else
/// a block that fits the slot) when the slots start where they really are. `pools` are candidate pool
/// addresses; a pool that cannot be read, or that changes under us, only weakens the evidence.
pub fn waste_first(source: &dyn MemorySource, tables: &SizeClassTables, pool_sz: u64, pools: &[u64]) -> Result<bool, String> {
    let (mut bad_first, mut bad_last, mut informative) = (0usize, 0usize, 0usize);
    let pool_bytes = tables.pool_wsize as usize * 8;
    for &pool in pools {
        if informative >= POOLS_SAMPLED {
            break;
        }
        let Ok(bytes) = source.read_bytes(pool, pool_bytes) else { continue };
        let word = |at: usize| bytes.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let sz = (word(pool_sz as usize & !7) >> (8 * (pool_sz % 8))) as u32 as usize;
        let (Some(&w), Some(&waste)) = (tables.wsize.get(sz), tables.wastage.get(sz)) else { continue };
        if waste == 0 {
            continue;
        }
        let count = |start_words: u32| {
            let (mut bad, mut live) = (0usize, 0usize);
            let mut at = (tables.header_wsize + start_words) as usize * 8;
            while at + w as usize * 8 <= pool_bytes {
                let hd = word(at);
                // Bits 10..40 hold the size whatever the reserved bits above them.
                let wosize = (hd >> 10) & 0x3fff_ffff;
                // A run of free slots (OCaml 5.4's encoding, `free_runs`) opens with a header
                // whose size counts slots, not words: it says nothing of where blocks start.
                if hd != 0 && !free_runs::is_run_header(hd, NOT_MARKABLE) {
                    if (1..w as u64).contains(&wosize) {
                        live += 1;
                    } else {
                        bad += 1;
                    }
                }
                at += w as usize * 8;
            }
            (bad, live)
        };
        let (first, first_live) = count(waste);
        let (last, _) = count(0);
        if first_live > 0 || first > 0 {
            informative += 1;
            bad_first += first;
            bad_last += last;
        }
    }
    match (bad_first, bad_last) {
        (0, 0) => {
            Err(format!("{informative} pools of size classes that waste words were read, and their slots read as headers either way"))
        }
        (0, b) if b >= 2 => Ok(true),
        (b, 0) if b >= 2 => Ok(false),
        (f, l) => Err(format!("in {informative} pools, {f} slots misread with the wasted words first and {l} with them last")),
    }
}

/// Fields of the continuations in the stopped heap: the sizes of the `Cont_tag` blocks in
/// the minor heaps and in the pools of the small size classes that could hold them. `Ok(None)`
/// when there is none (then no stack is held by one, and the fact matters to nothing in this
/// heap); an error when they disagree.
pub fn measure_continuation_fields<'a>(
    regions: impl Iterator<Item = &'a CapturedRegion>,
    format: HeaderFormat,
) -> Result<Option<u64>, String> {
    let mut sizes = BTreeSet::new();
    for r in regions {
        match r.kind {
            RegionKind::MinorHeap => {
                for (_, hd) in r.blocks(format) {
                    if format.tag(hd) == CONT_TAG {
                        sizes.insert(format.wosize(hd));
                    }
                }
            }
            RegionKind::Pool if (2..=4).contains(&r.block_wsize) => {
                for at in r.slot_offsets() {
                    if r.bytes[at] == CONT_TAG {
                        sizes.insert(format.wosize(r.word(at)));
                    }
                }
            }
            _ => {}
        }
    }
    match sizes.len() {
        0 => Ok(None),
        1 => Ok(sizes.into_iter().next()),
        _ => Err(format!("continuations of {:?} fields were found", sizes.iter().collect::<Vec<_>>())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{DumpError, Result};
    use crate::source::{Mapping, ThreadState};
    use std::path::PathBuf;

    /// Pools at given addresses, and nothing else.
    struct Pools(Vec<(u64, Vec<u8>)>);

    impl MemorySource for Pools {
        fn pid(&self) -> Option<u32> {
            None
        }
        fn executable_path(&self) -> PathBuf {
            PathBuf::from("pools")
        }
        fn read(&self, address: u64, buf: &mut [u8]) -> Result<()> {
            let (base, bytes) = self.0.iter().find(|(b, v)| (*b..*b + v.len() as u64).contains(&address)).ok_or(DumpError::Read {
                address,
                len: buf.len(),
                reason: "unmapped".into(),
            })?;
            let at = (address - base) as usize;
            buf.copy_from_slice(bytes.get(at..at + buf.len()).ok_or(DumpError::Read {
                address,
                len: buf.len(),
                reason: "short".into(),
            })?);
            Ok(())
        }
        fn threads(&self) -> &[ThreadState] {
            &[]
        }
        fn mappings(&self) -> Result<Vec<Mapping>> {
            Ok(Vec::new())
        }
    }

    fn tables(geometry: &PoolGeometry) -> SizeClassTables {
        let wsize: Vec<u32> = geometry.size_classes.iter().map(|c| c.wsize).collect();
        let wastage = wsize.iter().map(|w| (geometry.pool_wsize - geometry.header_wsize) % w).collect();
        SizeClassTables { wsize, wastage, pool_wsize: geometry.pool_wsize, header_wsize: geometry.header_wsize }
    }

    /// A pool of class `sz` laid out by `geometry`, every other slot holding a block of the
    /// class's size whose fields are pointers (as a list's cells are), the others free. `sz`
    /// is at byte 24 of the header, as in `struct pool`.
    fn pool(geometry: &PoolGeometry, sz: usize) -> Vec<u8> {
        let mut words = vec![0u64; geometry.pool_wsize as usize];
        words[3] = sz as u64;
        let class = &geometry.size_classes[sz];
        let w = class.wsize as usize;
        let mut at = class.first_block as usize / 8;
        let mut n = 0;
        while at + w <= words.len() {
            if n % 2 == 0 {
                words[at] = ((w as u64 - 1) << 10) | 0x300;
                for f in 1..w {
                    words[at + f] = 0x7f00_1234_5000 + 8 * (at + f) as u64;
                }
            }
            at += w;
            n += 1;
        }
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn the_pool_size_is_solved_from_each_release_s_tables() {
        for geometry in [PoolGeometry::ocaml_5_1(), PoolGeometry::ocaml_5_2()] {
            let t = tables(&geometry);
            assert_eq!(solve_pool_wsize(geometry.header_wsize, &t.wsize, &t.wastage), Some(geometry.pool_wsize));
            // A pool of other size is found from its own wastage.
            let other: Vec<u32> = t.wsize.iter().map(|w| (8192 - geometry.header_wsize) % w).collect();
            assert_eq!(solve_pool_wsize(geometry.header_wsize, &t.wsize, &other), Some(8192));
            // One edited entry fits no pool size.
            let mut edited = t.wastage.clone();
            edited[31] = (edited[31] + 1) % t.wsize[31];
            assert_eq!(solve_pool_wsize(geometry.header_wsize, &t.wsize, &edited), None);
        }
    }

    #[test]
    fn where_wasted_words_lie_is_read_from_the_pools() {
        for (geometry, first) in [(PoolGeometry::ocaml_5_2(), true), (PoolGeometry::ocaml_5_1(), false)] {
            let t = tables(&geometry);
            // Classes 4 (5 words, 2 wasted) and 6 (7 words, 4 wasted) in both releases.
            let pools = Pools(vec![(0x10_0000, pool(&geometry, 4)), (0x20_0000, pool(&geometry, 6))]);
            assert_eq!(waste_first(&pools, &t, 24, &[0x10_0000, 0x20_0000, 0x90_0000]), Ok(first), "waste first: {first}");
            // Pools of classes that waste nothing, or empty ones, cannot tell.
            let empty = vec![0u8; geometry.pool_wsize as usize * 8];
            let useless = Pools(vec![(0x10_0000, pool(&geometry, 3)), (0x20_0000, empty)]);
            let why = waste_first(&useless, &t, 24, &[0x10_0000, 0x20_0000]).unwrap_err();
            assert!(why.contains("either way"), "{why}");
        }
        // Pools laid out by neither rule are not read as either.
        let g = PoolGeometry::ocaml_5_2();
        let mut shifted = g.clone();
        shifted.size_classes[4].first_block += 8;
        let pools = Pools(vec![(0x10_0000, pool(&shifted, 4))]);
        assert!(waste_first(&pools, &tables(&g), 24, &[0x10_0000]).is_err());
    }

    /// OCaml 5.4's free slots open runs whose headers count slots, not words: they say nothing
    /// of where blocks start.
    #[test]
    fn run_headers_of_free_slots_do_not_mislead_the_waste_probe() {
        let geometry = PoolGeometry::ocaml_5_2();
        let with_runs = |sz: usize| {
            let mut bytes = pool(&geometry, sz);
            let class = &geometry.size_classes[sz];
            let (w, first) = (class.wsize as usize * 8, class.first_block as usize);
            // `pool` leaves every other slot free: each becomes a run of 100 slots' header.
            let mut at = first + w;
            while at + w <= bytes.len() {
                bytes[at..at + 8].copy_from_slice(&((100u64 << 10) | 0x300 | 251).to_le_bytes());
                at += 2 * w;
            }
            bytes
        };
        let pools = Pools(vec![(0x10_0000, with_runs(4)), (0x20_0000, with_runs(6))]);
        assert_eq!(waste_first(&pools, &tables(&geometry), 24, &[0x10_0000, 0x20_0000]), Ok(true));
    }

    fn region(kind: RegionKind, words: &[u64], block_wsize: u32, first_block: u32) -> CapturedRegion {
        CapturedRegion {
            kind,
            domain: 0,
            base: 0x1000,
            block_wsize,
            first_block,
            owner: 0,
            bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn continuation_fields_are_measured_on_the_heap() {
        let format = HeaderFormat { reserved_bits: 0 };
        let cont = |fields: u64| (fields << 10) | CONT_TAG as u64;
        let minor = region(RegionKind::MinorHeap, &[cont(2), 1, 1, 1 << 10, 5], 0, 0);
        let pool = region(RegionKind::Pool, &[0, 0, 0, 0, cont(2), 1, 1, 0, 0, 0], 3, 32);
        assert_eq!(measure_continuation_fields([&minor, &pool].into_iter(), format), Ok(Some(2)));
        assert_eq!(measure_continuation_fields([&pool].into_iter(), format), Ok(Some(2)));
        let none = region(RegionKind::MinorHeap, &[1 << 10, 5], 0, 0);
        assert_eq!(measure_continuation_fields([&none].into_iter(), format), Ok(None));
        let other = region(RegionKind::MinorHeap, &[cont(1), 1], 0, 0);
        assert!(measure_continuation_fields([&minor, &other].into_iter(), format).unwrap_err().contains("[1, 2]"));
    }

    fn probe_of(facts: &Facts) -> Probe {
        Probe {
            size_classes: Ok(tables(&facts.pools)),
            waste_first: Some(Ok(facts.pools.size_classes[4].first_block > 8 * facts.pools.header_wsize)),
            compaction: facts.compaction,
            memprof: Ok(facts.memprof),
            domain_table: Ok(facts.domain_table),
            thread_table: Some(Ok(facts.thread_table)),
        }
    }

    #[test]
    fn each_known_release_agrees_with_its_own_probe_and_no_other() {
        for (i, release) in versions::RELEASES.iter().enumerate() {
            let facts = Facts::of_release(release);
            let probe = probe_of(&facts);
            assert_eq!(probe.disagreement(&facts), None, "{}", release.series);
            let (probed, guessed) = probe.facts(false).expect("every fact established");
            assert!(guessed.is_empty());
            assert_eq!(Facts { continuation_fields: facts.continuation_fields, ..probed }, facts, "{}", release.series);
            for other in &versions::RELEASES[i + 1..] {
                let (fact, ..) = probe.disagreement(&Facts::of_release(other)).expect("releases differ");
                assert!(!fact.is_empty());
            }
        }
    }

    #[test]
    fn each_altered_fact_is_named() {
        let facts = Facts::of_release(versions::newest());
        let altered = |change: &dyn Fn(&mut Probe)| {
            let mut p = probe_of(&facts);
            change(&mut p);
            p.disagreement(&facts).map(|d| d.0)
        };
        assert_eq!(altered(&|p| p.size_classes.as_mut().unwrap().wsize[9] += 1), Some("size classes"));
        assert_eq!(altered(&|p| p.size_classes.as_mut().unwrap().pool_wsize *= 2), Some("pool size"));
        assert_eq!(altered(&|p| p.size_classes.as_mut().unwrap().header_wsize += 1), Some("pool header"));
        assert_eq!(altered(&|p| p.waste_first = Some(Ok(false))), Some("where each size class's first block lies"));
        assert_eq!(altered(&|p| p.compaction = false), Some("compaction"));
        assert_eq!(altered(&|p| p.memprof = Ok(false)), Some("statmemprof's entry tables"));
        assert_eq!(altered(&|p| p.domain_table = Ok(Indirection::InlineArray)), Some("stw_domains.domains"));
        assert_eq!(altered(&|p| p.thread_table = Some(Ok(Indirection::InlineArray))), Some("thread_table"));
        // What the probe could not establish is no disagreement on a known release...
        assert_eq!(altered(&|p| p.memprof = Err("no DWARF".into())), None);
        // ... but a refusal that names it on an unknown one, unless forced.
        let mut p = probe_of(&facts);
        p.waste_first = Some(Err("no pool to read".into()));
        let refusal = p.facts(false).unwrap_err();
        assert_eq!((refusal.fact, refusal.why.as_str()), ("where a pool's wasted words lie", "no pool to read"));
        let (_, guessed) = p.facts(true).expect("forced");
        assert_eq!(guessed, ["where a pool's wasted words lie"]);
    }
}
