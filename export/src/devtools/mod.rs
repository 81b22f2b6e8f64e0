//! V8's heap snapshot format (`.heapsnapshot`), as Chrome DevTools' Memory panel and memlab
//! load it: `snapshot.meta` describes the flat arrays `nodes` (7 numbers a node: type, name,
//! id, self size, edge count, trace node, detachedness) and `edges` (3 a node's edge, grouped
//! by node in node order: type, name or index, index of the target's first number in `nodes`),
//! then `strings` holds every name.
//!
//! What is exported: the nodes reachable from the roots (the synthetic root first, then the
//! root kinds, then the blocks, in heapsnap's node order); live blocks no root reaches are left
//! out (the report counts them). Self sizes are the analyser's: a block's bytes, header
//! included, 0 for static data, so DevTools' and memlab's retained sizes are heapsnap's.
//!
//! Limits: V8's loader (and memlab's) reads every number into a 32-bit unsigned array, and the
//! rest of the file (the strings above all) into one JavaScript string of at most 2^29 - 24
//! characters. The export checks both before it writes anything; past the string limit it names
//! strings `string` instead of by their contents (saying so), and refuses what still does not
//! fit, with the reason.

mod edges;
pub mod ids;
pub mod matching;
pub mod nodes;
pub mod strings;
mod sweep;
pub mod traces;

use crate::output::AtomicFile;
use crate::ExportError;
use edges::{exported_nodes, Edges, EDGE_TYPES};
use heapsnap_analyze::{Analysis, HeapFacts, HeapGraph, NodeId, Progress};
use nodes::{name_nodes, NodeNames, NODE_TYPES};
use rayon::prelude::*;
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use strings::{write_json_string, StringTable};
use traces::Traces;

pub const NODE_FIELDS: [&str; 7] = ["type", "name", "id", "self_size", "edge_count", "trace_node_id", "detachedness"];
const NODE_FIELD_COUNT: u64 = NODE_FIELDS.len() as u64;
const EDGE_FIELD_COUNT: u64 = 3;

/// What a loader can read.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The largest number (and array length) V8's loader keeps: it reads into `Uint32Array`s.
    pub max_number: u64,
    /// The longest JavaScript string (V8 on 64-bit machines: 2^29 - 24 UTF-16 units); the
    /// file minus its `nodes` and `edges` arrays must fit in one.
    pub max_string_chars: u64,
    /// The most bytes of a string shown in its node's name.
    pub string_preview: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_number: u64::from(u32::MAX), max_string_chars: (1 << 29) - 24, string_preview: 64 }
    }
}

/// One of the biggest dominators, with the id DevTools and memlab show it under.
#[derive(Clone, Debug, Serialize)]
pub struct Exported {
    pub id: u32,
    pub address: String,
    pub name: String,
    #[serde(rename = "type")]
    pub node_type: &'static str,
    pub self_size: u64,
    /// Retained bytes, as heapsnap computes them.
    pub retained: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct DevtoolsReport {
    pub format: &'static str,
    pub output: String,
    pub bytes: u64,
    pub nodes: u64,
    pub edges: u64,
    pub strings: u64,
    /// Characters of the file outside `nodes` and `edges` (what must fit one JavaScript string).
    pub string_chars: u64,
    /// Live blocks no root reaches: not exported.
    pub unreachable_left_out: u64,
    /// Whether strings are named by their contents (false when that would pass the limit).
    pub string_previews: bool,
    /// How the node ids were given, and how far they are stable.
    pub ids: IdsReport,
    /// The blocks that retain most, largest first.
    pub largest: Vec<Exported>,
    pub seconds: f64,
}

/// An earlier snapshot of the same process: the export keeps the ids its objects have in the
/// baseline's own export ([`ids`], [`matching`]).
pub struct Baseline<'a, 's> {
    pub analysis: &'a Analysis<'s>,
    /// How the user named it (for reports).
    pub name: String,
}

/// How ids were given.
#[derive(Clone, Debug, Serialize)]
pub struct IdsReport {
    /// `address` (no baseline: stable while a block does not move) or `baseline`.
    pub from: &'static str,
    pub baseline: Option<String>,
    /// With a baseline: how many objects each rule matched.
    pub matched: Option<matching::MatchCounts>,
    /// With a baseline: blocks that keep their baseline id, blocks with an id of their own,
    /// and the baseline's blocks whose id no block took.
    pub kept: Option<u64>,
    pub new: Option<u64>,
    pub baseline_not_found: Option<u64>,
    /// One sentence on where the ids are stable and where not.
    pub note: String,
}

impl IdsReport {
    fn from_addresses() -> IdsReport {
        IdsReport {
            from: "address",
            baseline: None,
            matched: None,
            kept: None,
            new: None,
            baseline_not_found: None,
            note: "node ids follow addresses: an object keeps its id in the export of a later snapshot only if it did not move \
                   (a compaction or a promotion moves blocks); export later snapshots with --baseline THIS_SNAPSHOT to keep the ids of the objects heapsnap can match"
                .into(),
        }
    }

    fn following(name: &str, m: &matching::Matching, f: &ids::Followed) -> IdsReport {
        IdsReport {
            from: "baseline",
            baseline: Some(name.to_string()),
            matched: Some(m.counts.clone()),
            kept: Some(f.kept),
            new: Some(f.new),
            baseline_not_found: Some(f.baseline_not_found),
            note: format!(
                "{} of {} blocks keep the id they have in the export of {name} (matched by contents {}, roots {}, fields {}, referrers {}, address {}); \
                 the other {} have ids of their own: objects {name} does not have, or that moved where heapsnap cannot match them",
                f.kept,
                f.kept + f.new,
                m.counts.contents,
                m.counts.roots,
                m.counts.fields,
                m.counts.referrers,
                m.counts.address,
                f.new
            ),
        }
    }
}

/// Everything known before a byte is written.
struct Plan<'a, 's> {
    graph: &'a HeapGraph<'s>,
    order: Vec<NodeId>,
    names: NodeNames,
    table: StringTable,
    edges: Edges<'a, 's>,
    ids: Vec<u32>,
    edge_counts: Vec<u32>,
    total_edges: u64,
    header: Vec<u8>,
    string_previews: bool,
    /// Allocation stacks of sampled blocks (empty without them).
    traces: Traces,
    /// What follows `edges` up to the strings.
    tail: String,
}

const CHUNK: usize = 1 << 15;
/// More than the header and the tail of the file take besides the strings.
const HEADER_ROOM: usize = 4096;

/// Writes the snapshot of `a` to `path` (owner-only, atomically), ids from addresses.
pub fn export(a: &Analysis<'_>, path: &Path, limits: &Limits, progress: &Progress) -> Result<DevtoolsReport, ExportError> {
    export_with(a, &Extras::default(), path, limits, progress)
}

/// What an export may add to the snapshot's own analysis.
#[derive(Default)]
pub struct Extras<'e, 'a, 's> {
    /// The sampled blocks' allocation stacks, written as DevTools' allocation trace tree
    /// ([`traces`]).
    pub sites: Option<&'e heapsnap_analyze::sites::Sites>,
    /// An earlier snapshot whose objects keep, here, the ids they have in its export.
    pub baseline: Option<&'e Baseline<'a, 's>>,
}

/// [`export`], with [`Extras`].
pub fn export_with(
    a: &Analysis<'_>,
    extras: &Extras<'_, '_, '_>,
    path: &Path,
    limits: &Limits,
    progress: &Progress,
) -> Result<DevtoolsReport, ExportError> {
    let start = std::time::Instant::now();
    let timer = heapsnap_analyze::PhaseTimer::start("devtools");
    let (order, slot_of) = exported_nodes(a);
    let step = progress.step("devtools: naming nodes", 0);
    let mut previews = limits.string_preview;
    let (mut table, mut names) = names_and_table(a, &order, previews);
    if (table.json_bytes + HEADER_ROOM) as u64 > limits.max_string_chars && previews > 0 {
        eprintln!(
            "heapsnap: the strings' contents would make the string table {} characters, past V8's limit of {}: strings are named `string`",
            table.json_bytes, limits.max_string_chars
        );
        previews = 0;
        (table, names) = names_and_table(a, &order, previews);
    }
    step.finish_and_clear();
    timer.lap("names");
    let traces = extras.sites.map(|s| Traces::build(a, s, &mut table)).unwrap_or_default();
    let tail = traces.tail();
    let hashtbl = std::mem::take(&mut names.hashtbl);
    let edges = Edges::new(a, &slot_of, &hashtbl, &mut table);
    let step = progress.step("devtools: counting edges", 0);
    let mut edge_counts = vec![0u32; order.len()];
    let graph = &a.graph;
    edge_counts.par_chunks_mut(CHUNK).zip(order.par_chunks(CHUNK)).for_each(|(counts, nodes)| {
        each_edge(&edges, graph, nodes, |i, _, _, _| counts[i] += 1);
    });
    step.finish_and_clear();
    let total_edges: u64 = edge_counts.iter().map(|&c| u64::from(c)).sum();
    timer.lap("edges counted");
    let (ids, ids_report) = match extras.baseline {
        None => (ids::node_ids(&a.graph, &order), IdsReport::from_addresses()),
        Some(b) => {
            let step = progress.step("devtools: matching objects with the baseline", 0);
            let (old_order, old_slot_of) = exported_nodes(b.analysis);
            let old_ids = ids::node_ids(&b.analysis.graph, &old_order);
            let m = matching::match_objects(b.analysis, &old_order, a, &order);
            let (ids, followed) = ids::node_ids_following(&a.graph, &order, &old_ids, &old_slot_of, &m.old_of);
            step.finish_and_clear();
            (ids, IdsReport::following(&b.name, &m, &followed))
        }
    };
    timer.lap("ids");
    let mut plan = Plan {
        graph: &a.graph,
        order,
        names,
        table,
        edges,
        ids,
        edge_counts,
        total_edges,
        header: Vec::new(),
        string_previews: previews > 0,
        traces,
        tail,
    };
    plan.header = header(&plan);
    check_limits(&plan, limits)?;

    let mut out = AtomicFile::create(path)?;
    write_all(&plan, &mut out, progress)?;
    let bytes = out.commit()?;
    timer.lap("written");
    let largest = largest(a, &plan, 20);
    let live: u64 = a.graph.blocks.regions.iter().map(|r| r.counts.live_blocks).sum();
    let exported_blocks = plan.order.len() as u64 - 1 - a.graph.root_kinds.len() as u64;
    Ok(DevtoolsReport {
        format: "devtools",
        output: path.display().to_string(),
        bytes,
        nodes: plan.order.len() as u64,
        edges: plan.total_edges,
        strings: plan.table.list.len() as u64,
        string_chars: (plan.header.len() + plan.table.json_bytes + plan.tail.len()) as u64,
        unreachable_left_out: live.saturating_sub(exported_blocks),
        string_previews: plan.string_previews,
        ids: ids_report,
        largest,
        seconds: start.elapsed().as_secs_f64(),
    })
}

fn names_and_table(a: &Analysis<'_>, order: &[NodeId], previews: usize) -> (StringTable, NodeNames) {
    let mut table = StringTable::default();
    // V8 names its root "": keep string 0 the empty string, as V8's files have it.
    table.intern("");
    let names = name_nodes(a, order, previews, &mut table);
    (table, names)
}

/// `{"snapshot":{...},"nodes":[` with the meta data V8 writes.
fn header(plan: &Plan<'_, '_>) -> Vec<u8> {
    let meta = serde_json::json!({
        "node_fields": NODE_FIELDS,
        "node_types": [NODE_TYPES, "string", "number", "number", "number", "number", "number"],
        "edge_fields": ["type", "name_or_index", "to_node"],
        "edge_types": [EDGE_TYPES, "string_or_number", "node"],
        "trace_function_info_fields": ["function_id", "name", "script_name", "script_id", "line", "column"],
        "trace_node_fields": ["id", "function_info_index", "count", "size", "children"],
        "sample_fields": ["timestamp_us", "last_assigned_id"],
        "location_fields": ["object_index", "script_id", "line", "column"],
    });
    let snapshot = serde_json::json!({
        "meta": meta,
        "node_count": plan.order.len(),
        "edge_count": plan.total_edges,
        "trace_function_count": plan.traces.function_count,
    });
    format!("{{\"snapshot\":{snapshot},\n\"nodes\":[").into_bytes()
}

fn check_limits(plan: &Plan<'_, '_>, limits: &Limits) -> Result<(), ExportError> {
    let too_large = |what: String| {
        Err(ExportError::TooLarge(format!(
            "this snapshot cannot be written in V8's heap snapshot format: {what}; DevTools and memlab would fail to load it. \
             Use heapsnap's own reports (or a flame graph) for this snapshot"
        )))
    };
    let nodes = plan.order.len() as u64;
    if nodes * NODE_FIELD_COUNT > limits.max_number {
        return too_large(format!(
            "{nodes} nodes need {} numbers in `nodes`, past the loader's {}",
            nodes * NODE_FIELD_COUNT,
            limits.max_number
        ));
    }
    if plan.total_edges * EDGE_FIELD_COUNT > limits.max_number {
        return too_large(format!(
            "{} edges need {} numbers in `edges`, past the loader's {}",
            plan.total_edges,
            plan.total_edges * EDGE_FIELD_COUNT,
            limits.max_number
        ));
    }
    if let Some((v, &size)) = plan.order.iter().zip(&plan.names.size).max_by_key(|&(_, s)| s) {
        if size > limits.max_number {
            let at = plan.graph.blocks.block(*v).map_or_else(String::new, |b| format!(" at {:#x}", b.address));
            return too_large(format!("the block{at} has {size} bytes, past the loader's largest number {}", limits.max_number));
        }
    }
    if let Some(&id) = plan.ids.iter().max() {
        if u64::from(id) > limits.max_number {
            return too_large(format!("node id {id} is past the loader's largest number {}", limits.max_number));
        }
    }
    let chars = (plan.header.len() + plan.table.json_bytes + plan.tail.len()) as u64;
    if chars > limits.max_string_chars {
        return too_large(format!(
            "its {} names take {chars} characters, past the {} of one JavaScript string",
            plan.table.list.len(),
            limits.max_string_chars
        ));
    }
    Ok(())
}

fn write_all(plan: &Plan<'_, '_>, out: &mut impl Write, progress: &Progress) -> Result<(), ExportError> {
    out.write_all(&plan.header)?;
    let n = plan.order.len();
    let chunks: Vec<std::ops::Range<usize>> = (0..n).step_by(CHUNK).map(|s| s..(s + CHUNK).min(n)).collect();
    let bar = progress.step("devtools: writing nodes", n as u64);
    write_chunks(out, &chunks, |r| node_text(plan, r), &bar)?;
    bar.finish_and_clear();
    out.write_all(b"],\n\"edges\":[")?;
    let bar = progress.step("devtools: writing edges", n as u64);
    write_chunks(out, &chunks, |r| edge_text(plan, r), &bar)?;
    bar.finish_and_clear();
    out.write_all(plan.tail.as_bytes())?;
    let mut text = Vec::with_capacity(1 << 20);
    for (i, s) in plan.table.list.iter().enumerate() {
        if i > 0 {
            text.push(b',');
        }
        write_json_string(&mut text, s);
        if text.len() > 1 << 20 {
            out.write_all(&text)?;
            text.clear();
        }
    }
    text.extend_from_slice(b"]}\n");
    out.write_all(&text)?;
    Ok(())
}

/// Formats chunks in parallel, a few at a time, and writes them in order.
fn write_chunks(
    out: &mut impl Write,
    chunks: &[std::ops::Range<usize>],
    text: impl Fn(std::ops::Range<usize>) -> Vec<u8> + Sync,
    bar: &indicatif::ProgressBar,
) -> std::io::Result<()> {
    let mut first = true;
    for batch in chunks.chunks(2 * rayon::current_num_threads().max(1)) {
        let texts: Vec<Vec<u8>> = batch.par_iter().map(|r| text(r.clone())).collect();
        for (t, r) in texts.iter().zip(batch) {
            if t.is_empty() {
                continue;
            }
            if !first {
                out.write_all(b",")?;
            }
            first = false;
            out.write_all(t)?;
            bar.inc(r.len() as u64);
        }
    }
    Ok(())
}

fn push_numbers(text: &mut Vec<u8>, numbers: &[u64]) {
    let mut buf = itoa::Buffer::new();
    for &x in numbers {
        if !text.is_empty() && *text.last().expect("not empty") != b'\n' {
            text.push(b',');
        }
        text.extend_from_slice(buf.format(x).as_bytes());
    }
}

/// The nodes of `range`, one per line.
fn node_text(plan: &Plan<'_, '_>, range: std::ops::Range<usize>) -> Vec<u8> {
    let mut text = Vec::with_capacity(range.len() * 32);
    for slot in range {
        if !text.is_empty() {
            text.extend_from_slice(b",\n");
        }
        let fields = [
            u64::from(plan.names.kind[slot]),
            u64::from(plan.names.name[slot]),
            u64::from(plan.ids[slot]),
            plan.names.size[slot],
            u64::from(plan.edge_counts[slot]),
            u64::from(plan.traces.by_node.get(&plan.order[slot]).copied().unwrap_or(0)),
            0,
        ];
        push_numbers(&mut text, &fields);
    }
    text
}

/// Calls `f(i, type, name_or_index, target slot)` for the edges of each of `nodes` (ascending),
/// in node order: the synthetic nodes', then the blocks' (found in one pass).
fn each_edge(edges: &Edges<'_, '_>, graph: &HeapGraph<'_>, nodes: &[NodeId], mut f: impl FnMut(usize, u8, u32, u32)) {
    let mut scratch = Vec::new();
    let first_block = graph.blocks.first_block_node;
    for (i, &v) in nodes.iter().enumerate().take_while(|&(_, &v)| v < first_block) {
        edges.each(v, None, &mut scratch, |kind, name, to| f(i, kind, name, to));
    }
    sweep::for_each_block(&graph.blocks, nodes, |i, b| {
        edges.each(nodes[i], Some(&b), &mut scratch, |kind, name, to| f(i, kind, name, to));
    });
}

/// The edges of the nodes of `range`, in node order.
fn edge_text(plan: &Plan<'_, '_>, range: std::ops::Range<usize>) -> Vec<u8> {
    let mut text = Vec::with_capacity(range.len() * 40);
    let mut written = vec![0u32; range.len()];
    each_edge(&plan.edges, plan.graph, &plan.order[range.clone()], |i, kind, name, to| {
        if !text.is_empty() {
            text.extend_from_slice(b",\n");
        }
        push_numbers(&mut text, &[u64::from(kind), u64::from(name), u64::from(to) * NODE_FIELD_COUNT]);
        written[i] += 1;
    });
    assert_eq!(written, plan.edge_counts[range], "the edges of a node are the same in both passes");
    text
}

fn largest(a: &Analysis<'_>, plan: &Plan<'_, '_>, count: usize) -> Vec<Exported> {
    let first_block = 1 + a.graph.root_kinds.len();
    let mut slots: Vec<usize> = (first_block.min(plan.order.len())..plan.order.len()).collect();
    let key = |&s: &usize| std::cmp::Reverse((a.retained(plan.order[s]), std::cmp::Reverse(plan.order[s])));
    if slots.len() > count {
        slots.select_nth_unstable_by_key(count, key);
        slots.truncate(count);
    }
    slots.sort_by_key(key);
    slots
        .into_iter()
        .map(|s| {
            let v = plan.order[s];
            Exported {
                id: plan.ids[s],
                address: a.address(v).map_or_else(String::new, |x| format!("{x:#x}")),
                name: plan.table.list[plan.names.name[s] as usize].clone(),
                node_type: NODE_TYPES[plan.names.kind[s] as usize],
                self_size: a.freeable(v),
                retained: a.retained(v),
            }
        })
        .collect()
}
