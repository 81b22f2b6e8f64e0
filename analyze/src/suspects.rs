//! The `suspects` report: where retained memory accumulates in one snapshot, in the style of
//! Eclipse MAT's leak suspects. A suspect is an *accumulation point*: starting from each object
//! right below the roots that retains at least `min_percent` of the reachable bytes, the walk
//! goes down the dominator tree while one child retains most of its parent
//! ([`DOMINANT_CHILD_PERCENT`]), and stops at the object where the memory fans out, or at a
//! collection (a `Hashtbl`, a list, a `Map`, an array, ...) holding more than one element: the
//! object a person can act on. Each suspect comes with its type, its count of elements, saying
//! which count it is, and its shortest path from a named root.
//!
//! The report also says which bytes only stack frames hold ([`StackOnly`]): the bytes the
//! `stack` roots' node dominates, which no global, C root or other root reaches. Stack frames
//! name no variables, so no type can come from them; the report says which frames hold them.

use crate::analysed_heap::AnalysedHeap;
use crate::blocks::NodeId;
use crate::graph::SUPER_ROOT;
use crate::kinds::key_name;
use crate::model::{GroupKey, NodeKind, Structure};
use crate::names::function_name;
use crate::paths::{paths, MergedPath, PathQuery};
use heapsnap_format::RootKind;
use heapsnap_values as ocaml;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `summary` lists the suspects retaining at least this percentage of the reachable bytes, at
/// most [`SUMMARY_SUSPECTS_SHOWN`] of them (the analysis index saves that list).
pub const SUMMARY_SUSPECTS_MIN_PERCENT: f64 = 10.0;
pub const SUMMARY_SUSPECTS_SHOWN: usize = 5;

/// The walk goes down to a child that retains at least this share of its parent.
pub const DOMINANT_CHILD_PERCENT: u64 = 80;
/// Cells of a list, or nodes of a `Map`/`Set`, counted at most (a count past it is a lower bound).
const MAX_COUNTED: u64 = 10_000_000;
/// Links of a chain counted at most (each is a step down the dominator tree).
const MAX_CHAINED: u64 = 1_000_000;
/// Stack-only objects whose frame is looked for, largest first; the rest are counted as
/// "not attributed".
const MAX_ATTRIBUTED: usize = 100_000;

/// What a count of elements counts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ElementCount {
    pub count: u64,
    /// `Hashtbl entries`, `array elements`, `list cells`, `Map bindings`, `Set elements`,
    /// `Queue elements`, `Stack elements`, `Buffer bytes`, `linked blocks of its kind (a
    /// chain)` for the head of a chain of blocks of one kind, or `fields` for a block whose type
    /// is not known (`fields (an untyped block: an array or a record)`: heapsnap cannot tell which).
    pub of: String,
    /// False when the count stopped at its limit (10 million cells or nodes, a million links):
    /// a lower bound.
    pub exact: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Suspect {
    /// The accumulation point.
    pub node: NodeId,
    pub address: String,
    /// As `dominators` describes it (type, structure, size).
    pub description: String,
    /// Its OCaml type, when typed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
    /// Its kind, as `top --by kind` names it (a structure, else its shape: `block tag 0 size 4`).
    pub kind: String,
    pub shallow: u64,
    pub retained: u64,
    /// Retained bytes as a percentage of all reachable bytes.
    pub percent: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elements: Option<ElementCount>,
    /// The object right below the roots where the walk down started (the suspect itself when
    /// the memory fans out there), and the root it is attributed to.
    pub top_address: String,
    pub top_description: String,
    pub top_retained: u64,
    pub held_by: String,
    /// The shortest path from a root to the suspect (absent when none was found).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<MergedPath>,
}

/// The bytes that only stack frames hold, by frame.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct StackOnly {
    pub bytes: u64,
    pub percent: f64,
    /// Largest first. An object reached by several frames is counted under the frame of its
    /// shortest path (each object once).
    pub frames: Vec<FrameShare>,
    /// Bytes of objects whose frame was not looked for (past the first 100,000 objects).
    pub not_attributed: u64,
    /// Of `bytes`, those of blocks with an OCaml type: stack frames name no variables, but
    /// what else holds a block (a closure's environment) may type it. Absent without types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typed_bytes: Option<u64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FrameShare {
    /// The function of the frame (`Asmgen.compile_fundecl`), or its symbol when it has no
    /// OCaml name.
    pub function: String,
    /// `file:line` of the frame's return address (where the function was when dumped), when the
    /// snapshot has line tables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    pub bytes: u64,
    /// Objects right below the stack roots (each the top of what it retains) counted here.
    pub objects: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct SuspectsReport {
    pub reachable_bytes: u64,
    /// The threshold: a suspect retains at least this percentage of the reachable bytes.
    pub min_percent: f64,
    /// Largest retained first.
    pub suspects: Vec<Suspect>,
    /// Absent when the snapshot has no stack roots at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_only: Option<StackOnly>,
}

/// `bytes` as a percentage of `total` (of 1 when `total` is 0).
fn share(bytes: u64, total: u64) -> f64 {
    bytes as f64 * 100.0 / total.max(1) as f64
}

impl SuspectsReport {
    /// Sets every percentage from the bytes it is a share of, as [`suspects`] computes it: a
    /// report read back from JSON (the analysis index saves one) then prints exactly as the
    /// report computed, whatever the JSON reader's rounding of decimals.
    pub fn restore_percents(&mut self) {
        for s in &mut self.suspects {
            s.percent = share(s.retained, self.reachable_bytes);
        }
        if let Some(st) = &mut self.stack_only {
            st.percent = share(st.bytes, self.reachable_bytes);
        }
    }
}

/// The suspects retaining at least `min_percent` of the reachable bytes (at most `limit`, 0:
/// all), and what only stack frames hold.
pub fn suspects<'s>(a: &impl AnalysedHeap<'s>, min_percent: f64, limit: usize) -> SuspectsReport {
    let total = a.reachable_bytes();
    let threshold = ((total as f64 * min_percent / 100.0).ceil() as u64).max(1);
    let mut found: Vec<(NodeId, (NodeId, Option<ElementCount>))> = Vec::new();
    let mut todo = vec![SUPER_ROOT];
    while let Some(v) = todo.pop() {
        if matches!(a.node_kind(v), Some(NodeKind::SuperRoot | NodeKind::Roots(_))) {
            todo.extend(a.children_retaining(v, threshold));
        } else {
            found.push((v, accumulation_point(a, v, threshold)));
        }
    }
    found.sort_by(|(_, (x, _)), (_, (y, _))| a.retained(*y).cmp(&a.retained(*x)).then(x.cmp(y)));
    if limit > 0 {
        found.truncate(limit);
    }
    let percent = |bytes: u64| share(bytes, total);
    let address = |v: NodeId| a.address(v).map_or_else(String::new, |x| format!("{x:#x}"));
    let suspects = found
        .into_iter()
        .map(|(top, (v, count))| {
            let path = a.address(v).and_then(|x| paths(a, &PathQuery::Address(x), 1, 1).ok()).and_then(|p| p.paths.into_iter().next());
            // A collection counts its elements; the head of a chain its links.
            let elements = match count {
                Some(e) if e.of != FIELDS => Some(e),
                other => match chain_length(a, v) {
                    (1, _) => other,
                    (count, exact) => Some(ElementCount { count, of: CHAINED.to_string(), exact }),
                },
            };
            Suspect {
                node: v,
                address: address(v),
                description: a.describe(v),
                r#type: a.type_label(v),
                kind: a.kind_of_node(v).map_or_else(String::new, |k| key_name(a.names(), &k)),
                shallow: a.shallow(v),
                retained: a.retained(v),
                percent: percent(a.retained(v)),
                elements,
                top_address: address(top),
                top_description: a.describe(top),
                top_retained: a.retained(top),
                held_by: a.top_label(top),
                path,
            }
        })
        .collect();
    SuspectsReport { reachable_bytes: total, min_percent, suspects, stack_only: stack_only(a) }
}

/// Down the dominator tree from `v` while one child retains most of its parent (and at least
/// `threshold`), stopping at a collection of more than one element; with the element count of
/// the node it stops at (counting a list walks it: the suspect's report does not walk it again).
fn accumulation_point<'s>(a: &impl AnalysedHeap<'s>, v: NodeId, threshold: u64) -> (NodeId, Option<ElementCount>) {
    let mut x = v;
    loop {
        let count = element_count(a, x);
        if count.as_ref().is_some_and(|c| c.count > 1 && c.of != FIELDS) {
            return (x, count);
        }
        let Some(c) = dominant_child(a, x) else { return (x, count) };
        if a.retained(c) < threshold {
            return (x, count);
        }
        // A chain of blocks of one kind (a compiler's sequence of instructions, a hand-made
        // linked list) loses a little at each link: the walk would stop at whichever link
        // falls under the threshold. Its head is where the memory accumulates.
        if a.kind_of_node(c).is_some() && a.kind_of_node(c) == a.kind_of_node(x) {
            return (x, count);
        }
        x = c;
    }
}

/// The child of `v` in the dominator tree that retains at least [`DOMINANT_CHILD_PERCENT`] of it.
fn dominant_child<'s>(a: &impl AnalysedHeap<'s>, v: NodeId) -> Option<NodeId> {
    let c = a.first_child_where(v, &|_| true)?;
    (a.retained(c).saturating_mul(100) >= a.retained(v).saturating_mul(DOMINANT_CHILD_PERCENT)).then_some(c)
}

/// The blocks of a chain starting at `v`: at each link, its largest child in the dominator
/// tree of the same kind (near the end, a link's own contents may outweigh the rest).
fn chain_length<'s>(a: &impl AnalysedHeap<'s>, v: NodeId) -> (u64, bool) {
    let kind = a.kind_of_node(v);
    let mut count = 1;
    let mut x = v;
    while let Some(c) = a.first_child_where(x, &|c| a.kind_of_node(c) == kind) {
        if count == MAX_CHAINED {
            return (count, false);
        }
        count += 1;
        x = c;
    }
    (count, true)
}

/// What the count of a chain's head counts.
const CHAINED: &str = "linked blocks of its kind (a chain)";
/// What a count of a block of unknown type counts.
const FIELDS: &str = "fields (an untyped block: an array or a record)";

/// A block's count of elements: a recognised structure's own count, a typed array's length, a
/// list's cells, a `Map`'s or `Set`'s nodes; for another block its number of fields.
pub fn element_count<'s>(a: &impl AnalysedHeap<'s>, v: NodeId) -> Option<ElementCount> {
    let b = a.block(v)?;
    let int = |i: usize| b.fields.get(i).filter(|&&w| w & 1 == 1).map(|&w| ((w as i64) >> 1).max(0) as u64);
    let exact = |count: u64, of: &str| Some(ElementCount { count, of: of.to_string(), exact: true });
    let counted = |(count, exact): (u64, bool), of: &str| Some(ElementCount { count, of: of.to_string(), exact });
    match a.kind_of(&b) {
        GroupKey::Structure(Structure::Hashtbl) => exact(int(0)?, "Hashtbl entries"),
        GroupKey::Structure(Structure::Queue) => exact(int(0)?, "Queue elements"),
        GroupKey::Structure(Structure::Stack) => exact(int(1)?, "Stack elements"),
        GroupKey::Structure(Structure::Buffer) => exact(int(1)?, "Buffer bytes"),
        GroupKey::Structure(Structure::ListCell) => counted(list_cells(a, v), "list cells"),
        GroupKey::Structure(Structure::MapNode) => counted(tree_nodes(a, v, 5, 3), "Map bindings"),
        GroupKey::Structure(Structure::SetNode) => counted(tree_nodes(a, v, 4, 2), "Set elements"),
        _ if b.header.tag == ocaml::DOUBLE_ARRAY_TAG => exact(b.fields.len() as u64, "array elements"),
        _ if a.type_label(v).is_some_and(|t| t.ends_with(" array")) => exact(b.fields.len() as u64, "array elements"),
        _ if b.header.tag == 0 && a.type_label(v).is_none() => exact(b.fields.len() as u64, FIELDS),
        _ => None,
    }
}

/// The cells of the list starting at `v`: 2-field blocks of tag 0 linked by their field 1.
fn list_cells<'s>(a: &impl AnalysedHeap<'s>, v: NodeId) -> (u64, bool) {
    let mut count = 0;
    let mut cell = a.block(v);
    while let Some(b) = cell {
        if count == MAX_COUNTED {
            return (count, false);
        }
        count += 1;
        cell = a.block_of_pointer(b.fields[1]).filter(|n| n.header.tag == 0 && n.fields.len() == 2);
    }
    (count, true)
}

/// The nodes of the balanced tree (`Map`: 5 fields, right subtree in field 3; `Set`: 4 and 2)
/// whose root is `v`.
fn tree_nodes<'s>(a: &impl AnalysedHeap<'s>, v: NodeId, size: usize, right: usize) -> (u64, bool) {
    let mut count = 0;
    let mut todo = vec![a.block(v)];
    while let Some(node) = todo.pop() {
        let Some(b) = node.filter(|b| b.header.tag == 0 && b.fields.len() == size) else { continue };
        if count == MAX_COUNTED {
            return (count, false);
        }
        count += 1;
        todo.push(a.block_of_pointer(b.fields[0]));
        todo.push(a.block_of_pointer(b.fields[right]));
    }
    (count, true)
}

/// The bytes the `stack` roots' node dominates, by the frame that holds each object right
/// below it (the frame of its shortest path).
pub fn stack_only<'s>(a: &impl AnalysedHeap<'s>) -> Option<StackOnly> {
    let stack = a.children(SUPER_ROOT).into_iter().find(|&c| a.node_kind(c) == Some(NodeKind::Roots(RootKind::Stack)));
    let has_stack_roots = a.snap().roots().iter().any(|r| r.root_kind() == RootKind::Stack);
    let Some(stack) = stack else {
        return has_stack_roots.then(StackOnly::default);
    };
    let total = a.reachable_bytes();
    let bytes = a.retained(stack);
    let snap = a.snap();
    let mut frames: BTreeMap<(String, Option<String>), (u64, u64)> = BTreeMap::new();
    let mut not_attributed = 0;
    let mut below: FxHashMap<NodeId, Option<NodeId>> = FxHashMap::default();
    for (i, top) in a.children(stack).into_iter().enumerate() {
        let retained = a.retained(top);
        // The object a frame holds itself: the first below the stack roots' node on the
        // shortest path.
        let held = (i < MAX_ATTRIBUTED).then(|| first_below(a, stack, top, &mut below)).flatten();
        let record = held.and_then(|h| {
            a.root_records(h).into_iter().filter_map(|r| snap.roots().get(r as usize)).find(|r| r.root_kind() == RootKind::Stack)
        });
        let Some(record) = record else {
            not_attributed += retained;
            continue;
        };
        let function = snap
            .string(record.name)
            .filter(|s| !s.is_empty())
            .map_or_else(|| "(unknown function)".to_string(), |s| function_name(s).into_owned());
        let location = (record.origin != 0).then(|| a.names().source_line(record.origin)).flatten();
        let entry = frames.entry((function, location)).or_default();
        entry.0 += retained;
        entry.1 += 1;
    }
    let mut frames: Vec<FrameShare> =
        frames.into_iter().map(|((function, location), (bytes, objects))| FrameShare { function, location, bytes, objects }).collect();
    frames.sort_by(|x, y| y.bytes.cmp(&x.bytes).then_with(|| x.function.cmp(&y.function)));
    Some(StackOnly { bytes, percent: share(bytes, total), frames, not_attributed, typed_bytes: a.typed_bytes_dominated_by(stack) })
}

/// The node right below `stack` on the shortest path to `v` (bounded by the node count).
/// Paths share their beginnings: what was found for each node walked is kept in `known`, so
/// that many objects behind one long path cost its length once.
fn first_below<'s>(a: &impl AnalysedHeap<'s>, stack: NodeId, v: NodeId, known: &mut FxHashMap<NodeId, Option<NodeId>>) -> Option<NodeId> {
    let mut walked = Vec::new();
    let mut x = v;
    let found = loop {
        if let Some(&f) = known.get(&x) {
            break f;
        }
        if walked.len() > a.node_count() {
            break None;
        }
        walked.push(x);
        match a.bfs_parent(x) {
            Some(p) if p == stack => break Some(x),
            Some(p) if p != SUPER_ROOT => x = p,
            _ => break None,
        }
    };
    for w in walked {
        known.insert(w, found);
    }
    found
}
