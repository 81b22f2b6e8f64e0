//! `verify`: is the snapshot a consistent OCaml heap?
//!
//! Always errors: a scanned field that points into a block-holding region (pool, minor heap,
//! large allocation, static data) but to no block (a free slot, a garbage block, the inside of
//! a block, a pool header, the dead part of a minor heap, static data without a header), a root
//! that does, and a malformed header (a size that overflows its slot or region, an infix or
//! empty header where a block starts). Pointers outside every such region (code, C data, the
//! runtime's atoms, `caml_ephe_none`) are counted, never errors: OCaml 5 has no naked pointers
//! into the heap, and abstract and custom contents are not scanned at all.
//!
//! With `strict` (for snapshots taken at a quiet point right after `Gc.compact`), also an error:
//! an allocated major-heap block (pool or large) that no root reaches, unless weak references
//! (ephemeron keys, weak arrays, the data of dead ephemerons, roots flagged WEAK such as
//! `Gc.finalise`d values) reach it: that is a missed root.
//!
//! Or floating garbage: a block the collector marked before it became unreachable stays until
//! a later cycle frees it, and one snapshot cannot tell it from a block whose root was missed.
//! So such blocks keep failing the check, and the report says which of them may be floating
//! garbage given the GC state the snapshot records, and how to get a clean check
//! ([`FloatingGarbage`]).

use crate::blocks::{PointsTo, NO_NODE};
use crate::error::AnalyzeError;
use crate::graph::{HeapGraph, SUPER_ROOT};
use crate::progress::Progress;
use heapsnap_format::{RegionKind, RootKind, Snapshot};
use heapsnap_values::{self as ocaml, Colour};
use serde::Serialize;
use std::collections::BTreeMap;

const MAX_LISTED: usize = 100;

#[derive(Serialize, Clone, Debug)]
pub struct VerifyProblem {
    /// `pointer_to_no_block`, `root_to_no_block`, `malformed_header`, `unreachable_major_block`.
    pub kind: String,
    /// The block (first field) or header holding the problem.
    pub address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub detail: String,
}

#[derive(Serialize, Clone, Debug)]
pub struct VerifyReport {
    pub ok: bool,
    pub strict: bool,
    pub objects: u64,
    pub reachable_objects: u64,
    /// Major-heap blocks reached only through weak references.
    pub weakly_reachable_objects: u64,
    pub unreachable_major_objects: u64,
    pub unreachable_minor_objects: u64,
    pub external_pointers: u64,
    /// Count of every kind of error (`pointer_to_no_block:free_slot`, ...).
    pub error_counts: BTreeMap<String, u64>,
    /// The first errors found (at most 100).
    pub errors: Vec<VerifyProblem>,
    pub warnings: Vec<String>,
    /// With `strict` and unreachable major blocks: which of them may be floating garbage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floating_garbage: Option<FloatingGarbage>,
}

/// Unreachable major-heap blocks that may be floating garbage: blocks that died after the
/// major GC last marked them (or that it allocated marked), which it frees only when a later
/// cycle ends. They still fail the check: a missed root looks the same in one snapshot.
#[derive(Serialize, Clone, Debug)]
pub struct FloatingGarbage {
    /// How many of the unreachable major blocks may be floating garbage.
    pub blocks: u64,
    pub bytes: u64,
    /// Their count per colour (`unmarked`, `marked`).
    pub by_colour: BTreeMap<String, u64>,
    /// The GC state the snapshot records, in words.
    pub gc_state: String,
    /// Why these blocks may be floating garbage, and how to get a clean check.
    pub explanation: String,
}

/// Whether an unreachable major block of colour `colour` may be floating garbage. OCaml 5's
/// collector runs one cycle after another: an unmarked block was marked by the previous cycle
/// (the colours swap when a cycle ends) and the current one frees it when it ends; a marked one
/// was marked, or allocated, by the current cycle, and the next one frees it. OCaml 4.14's
/// white blocks are freed by the next sweep, and its black ones (marked by the cycle under
/// way) by the one after. A block that no marking can have reached (not markable, free) is no
/// floating garbage.
fn may_be_floating(colour: Colour) -> bool {
    matches!(colour, Colour::Marked | Colour::Unmarked)
}

fn gc_state(snap: &Snapshot) -> String {
    let meta = snap.metadata();
    match meta.ocaml4_gc {
        Some(gc) => {
            format!("OCaml {}, major GC phase {}", meta.ocaml_version, serde_name(gc.phase))
        }
        None if meta.ocaml_version.starts_with("4.") => format!("OCaml {}, major GC phase not recorded", meta.ocaml_version),
        None => format!("OCaml {}: a major cycle is always under way (the colours say which blocks it has marked)", meta.ocaml_version),
    }
}

fn floating_garbage_explanation(snap: &Snapshot) -> String {
    let version = &snap.metadata().ocaml_version;
    let compact = if version.starts_with("5.1.") {
        " On OCaml 5.1, `Gc.compact ()` is one major cycle and leaves the blocks that died during it behind."
    } else {
        ""
    };
    format!(
        "These blocks may be floating garbage: the major GC marked them (or allocated them marked) before they became unreachable, \
         and frees them only when a later cycle ends.{compact} For a clean check, call `Gc.full_major ()` (which finishes the current \
         cycle and runs a whole one) right before the dump, with the program quiet. Blocks that stay unreachable after that are \
         held by a root heapsnap missed: please report them."
    )
}

/// Checks a snapshot (see the module documentation).
pub fn verify(snap: &Snapshot, strict: bool) -> Result<VerifyReport, AnalyzeError> {
    verify_with(snap, strict, &Progress::hidden())
}

pub fn verify_with(snap: &Snapshot, strict: bool, progress: &Progress) -> Result<VerifyReport, AnalyzeError> {
    let graph = HeapGraph::build(snap, progress)?;
    Ok(verify_graph(&graph, strict))
}

/// A unit enum's name as the JSON says it (`free_slot`, `unmarked`, `idle`).
fn serde_name<T: Serialize + std::fmt::Debug>(v: T) -> String {
    serde_json::to_value(&v).ok().and_then(|j| j.as_str().map(str::to_string)).unwrap_or_else(|| format!("{v:?}"))
}

pub fn verify_graph(graph: &HeapGraph<'_>, strict: bool) -> VerifyReport {
    let blocks = &graph.blocks;
    let snap = blocks.snap;
    let mut errors = Vec::new();
    let mut error_counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut warnings = Vec::new();

    if blocks.malformed_count > 0 {
        error_counts.insert("malformed_header".into(), blocks.malformed_count);
        for m in blocks.malformed.iter().take(MAX_LISTED) {
            errors.push(VerifyProblem {
                kind: "malformed_header".into(),
                address: format!("{:#x}", m.address),
                field: None,
                value: None,
                detail: format!("{}: {}", m.region_kind, m.reason),
            });
        }
    }
    for (k, n) in &graph.bad_by_kind {
        error_counts.insert(format!("pointer_to_no_block:{}", serde_name(*k)), *n);
    }
    if graph.pointers.bad > 0 {
        list_bad_pointers(graph, &mut errors);
    }

    // Reachability over strong edges (and the data of live ephemerons).
    let n = graph.node_count();
    let mut reached = vec![false; n];
    bfs(graph, &[SUPER_ROOT], &mut reached);
    let reachable_objects = reached.iter().enumerate().filter(|&(v, &r)| r && blocks.is_block(v as u32)).count() as u64;
    // What weak references reach, beyond that.
    let mut weak_seeds: Vec<u32> = graph.weak_edges.iter().map(|&(_, k)| k).collect();
    weak_seeds.extend(graph.ephemerons.iter().filter(|e| !e.data_live).filter_map(|e| e.data));
    weak_seeds.extend(graph.weak_roots.iter().copied());
    let mut weakly = reached.clone();
    bfs(graph, &weak_seeds, &mut weakly);

    let (mut unreachable_major, mut unreachable_minor, mut weak_only) = (0u64, 0u64, 0u64);
    let (mut floating_blocks, mut floating_bytes, mut floating_by_colour) = (0u64, 0u64, BTreeMap::<String, u64>::new());
    let mut unreachable_listed = 0;
    for r in blocks.block_regions() {
        let kind = blocks.regions[r].kind;
        for b in blocks.region_blocks(r) {
            if reached[b.node as usize] {
                continue;
            }
            match kind {
                RegionKind::MinorHeap => unreachable_minor += 1,
                RegionKind::Pool | RegionKind::Large | RegionKind::HeapChunk => {
                    if weakly[b.node as usize] {
                        weak_only += 1;
                        continue;
                    }
                    unreachable_major += 1;
                    let floating = may_be_floating(b.header.colour);
                    if floating {
                        floating_blocks += 1;
                        floating_bytes += b.header.bytes();
                        *floating_by_colour.entry(serde_name(b.header.colour)).or_default() += 1;
                    }
                    if strict && unreachable_listed < MAX_LISTED && errors.len() < 2 * MAX_LISTED {
                        unreachable_listed += 1;
                        errors.push(VerifyProblem {
                            kind: "unreachable_major_block".into(),
                            address: format!("{:#x}", b.address),
                            field: None,
                            value: None,
                            detail: format!(
                                "{} ({} bytes, {:?}) is reached by no root{}",
                                ocaml::tag_name(b.header.tag),
                                b.header.bytes(),
                                b.header.colour,
                                if floating { " (may be floating garbage)" } else { "" }
                            ),
                        });
                    }
                }
                _ => {}
            }
        }
    }
    let mut floating_garbage = None;
    if strict && unreachable_major > 0 {
        error_counts.insert("unreachable_major_block".into(), unreachable_major);
        if floating_blocks > 0 {
            floating_garbage = Some(FloatingGarbage {
                blocks: floating_blocks,
                bytes: floating_bytes,
                by_colour: floating_by_colour,
                gc_state: gc_state(snap),
                explanation: floating_garbage_explanation(snap),
            });
        }
    }

    let not_markable = blocks
        .block_regions()
        .filter(|&r| matches!(blocks.regions[r].kind, RegionKind::Pool | RegionKind::Large))
        .flat_map(|r| blocks.region_blocks(r))
        .filter(|b| b.header.colour == Colour::NotMarkable)
        .count();
    if not_markable > 0 {
        warnings.push(format!("{not_markable} major-heap blocks have the NOT_MARKABLE colour (a continuation being darkened?)"));
    }
    if graph.orphan_stack_records > 0 {
        warnings.push(format!(
            "{} suspended stacks have references recorded but no continuation block points to them",
            graph.orphan_stack_records
        ));
    }
    if graph.bad_ephemerons > 0 {
        warnings.push(format!("{} entries of the ephemeron list are not abstract blocks", graph.bad_ephemerons));
    }
    if graph.repeated_ephemerons > 0 {
        warnings.push(format!(
            "{} entries of the ephemeron list repeat an ephemeron listed before them (a runtime lists each once; repeats are skipped)",
            graph.repeated_ephemerons
        ));
    }
    if snap.roots().iter().any(|r| r.is_conservative()) {
        warnings.push("some roots were found by a conservative scan".into());
    }
    warnings.extend(snap.metadata().warnings.iter().map(|w| format!("dumper: {w}")));

    let total_errors: u64 = error_counts.values().sum();
    VerifyReport {
        ok: total_errors == 0,
        strict,
        objects: blocks.regions.iter().map(|r| r.counts.live_blocks).sum(),
        reachable_objects,
        weakly_reachable_objects: weak_only,
        unreachable_major_objects: unreachable_major,
        unreachable_minor_objects: unreachable_minor,
        external_pointers: graph.pointers.external,
        error_counts,
        errors,
        warnings,
        floating_garbage,
    }
}

fn bfs(graph: &HeapGraph<'_>, seeds: &[u32], reached: &mut [bool]) {
    let mut queue: Vec<u32> = Vec::new();
    for &s in seeds {
        if s != NO_NODE && !reached[s as usize] {
            reached[s as usize] = true;
            queue.push(s);
        }
    }
    while let Some(u) = queue.pop() {
        for &t in graph.successors(u) {
            if !reached[t as usize] {
                reached[t as usize] = true;
                queue.push(t);
            }
        }
    }
}

/// Finds the first bad pointers again, with their sources (only when some exist).
fn list_bad_pointers(graph: &HeapGraph<'_>, errors: &mut Vec<VerifyProblem>) {
    let blocks = &graph.blocks;
    let snap = blocks.snap;
    let limit = errors.len() + MAX_LISTED;
    for (i, r) in snap.roots().iter().enumerate() {
        if errors.len() >= limit {
            return;
        }
        if r.root_kind() == RootKind::SuspendedStack || !ocaml::is_pointer(r.value) {
            continue;
        }
        if let PointsTo::Bad(k) = blocks.resolve(r.value) {
            errors.push(VerifyProblem {
                kind: "root_to_no_block".into(),
                address: format!("{:#x}", r.slot),
                field: None,
                value: Some(format!("{:#x}", r.value)),
                detail: format!("root {i} ({}): {}", crate::names::root_label(snap, r), serde_name(k)),
            });
        }
    }
    let mut suspended: std::collections::HashMap<u64, Vec<u64>> = std::collections::HashMap::new();
    for r in snap.roots().iter().filter(|r| r.root_kind() == RootKind::SuspendedStack) {
        suspended.entry(r.origin).or_default().push(r.value);
    }
    for reg in blocks.block_regions() {
        for b in blocks.region_blocks(reg) {
            if errors.len() >= limit {
                return;
            }
            let mut report = |field: Option<usize>, v: u64| {
                if let PointsTo::Bad(k) = blocks.resolve(v) {
                    if errors.len() < limit {
                        errors.push(VerifyProblem {
                            kind: "pointer_to_no_block".into(),
                            address: format!("{:#x}", b.address),
                            field,
                            value: Some(format!("{v:#x}")),
                            detail: format!("{} in {}: {}", ocaml::tag_name(b.header.tag), blocks.regions[reg].kind, serde_name(k)),
                        });
                    }
                }
            };
            if b.header.tag == ocaml::CONT_TAG {
                let stack = b.fields.first().map_or(0, |&f| f & !1);
                for &v in suspended.get(&stack).into_iter().flatten().filter(|&&v| ocaml::is_pointer(v)) {
                    report(None, v);
                }
            } else {
                b.header.scanned_fields(b.fields, |i, v| report(Some(i), v));
            }
        }
    }
}
