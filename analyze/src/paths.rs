//! Shortest paths from the roots to objects, ignoring weak references (in the style of Eclipse
//! MAT's "merge shortest paths to GC roots"): one breadth-first search from the super-root, then
//! each target's chain of BFS parents. Identical chains are merged with counts; runs of the same
//! step (a list's tail field, repeated) are folded into one step with a repeat count.

use crate::analysed_heap::AnalysedHeap;
use crate::blocks::{NodeId, PointsTo};
use crate::graph::SUPER_ROOT;
use crate::kinds::key_name;
use crate::model::{GroupKey, NodeKind, Role, Structure};
use heapsnap_values as ocaml;
use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};

/// Steps walked at most when following many objects (see `paths`).
const STEP_BUDGET: usize = 4_000_000;
const NO_FIELD: u32 = u32::MAX;
const FOLDED: u32 = u32::MAX - 1;
/// A field shown by name: this bit, and the name's id among the labels.
const NAMED: u32 = 1 << 31;

/// Merged paths fold the field index of blocks bigger than this (arrays, hash table buckets).
const FOLD_ABOVE_FIELDS: u64 = 16;

/// What to find paths to.
#[derive(Clone, Debug)]
pub enum PathQuery {
    Address(u64),
    /// Blocks whose block tag is this (0 for records and tuples, 252 for strings, ...).
    Tag(u8),
    /// Blocks whose reserved header bits hold this value (runtimes configured with them).
    Reserved(u32),
    /// Blocks whose kind is this one, as `top --by kind` names it.
    Kind(String),
    /// These nodes (e.g. the sampled blocks allocated at one site, [`crate::sites`]).
    Nodes(Vec<NodeId>),
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Step {
    /// What the object is (its kind, or `module M`).
    pub label: String,
    /// The field of the previous object that points here: its index, or `*` when merged paths
    /// fold the indices of a large block (an array or a hash table's buckets). Absent for the
    /// first object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// How many consecutive objects this step stands for (smallest and largest seen).
    pub repeat_min: u64,
    pub repeat_max: u64,
    /// Address of an example object (for a single target: the object itself).
    pub example: String,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct MergedPath {
    /// Targets whose shortest path has this shape.
    pub count: u64,
    pub root_kind: String,
    pub root: String,
    pub steps: Vec<Step>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct PathsReport {
    /// Objects the query matched.
    pub targets: u64,
    /// Objects whose paths were computed: an even sample when more than the limit matched,
    /// cut short when their chains are very long (a budget of 4 million steps).
    pub sampled: u64,
    /// Sampled objects that no root reaches through strong references.
    pub unreachable: u64,
    pub paths: Vec<MergedPath>,
}

/// The objects a query selects.
pub fn select<'s>(a: &impl AnalysedHeap<'s>, query: &PathQuery) -> Result<Vec<NodeId>, crate::error::AnalyzeError> {
    match query {
        PathQuery::Address(x) => Ok(vec![a.node_at(*x)?]),
        PathQuery::Nodes(nodes) => Ok(nodes.clone()),
        PathQuery::Tag(t) => Ok(a.blocks_where(&|b| b.header.tag == *t)),
        PathQuery::Reserved(v) => {
            check_reserved_bits(a.layout().reserved_bits())?;
            Ok(a.blocks_where(&|b| b.header.reserved == *v))
        }
        PathQuery::Kind(k) => {
            // Name each distinct kind once; a kind matches when its name is the query, exactly.
            let names: HashMap<GroupKey, String> = a.kinds().into_iter().map(|key| (key, key_name(a.names(), &key))).collect();
            if !names.values().any(|n| n == k) {
                let mut close: Vec<&str> = names.values().filter(|n| n.contains(k.as_str())).map(String::as_str).collect();
                close.sort_unstable();
                close.truncate(5);
                let hint = if close.is_empty() { String::new() } else { format!(" (kinds containing it: {})", close.join(", ")) };
                return Err(crate::error::AnalyzeError::BadQuery(format!(
                    "no object of kind {k:?} in this snapshot{hint}; kinds are named as `heapsnap top --by kind` lists them"
                )));
            }
            let kinds: Vec<GroupKey> = names.into_iter().filter(|(_, n)| n == k).map(|(key, _)| key).collect();
            Ok(a.blocks_of_kinds(&kinds))
        }
    }
}

/// Refuses `--reserved` on a snapshot whose runtime has no reserved header bits (every block
/// would hold 0).
pub fn check_reserved_bits(reserved_bits: u32) -> Result<(), crate::error::AnalyzeError> {
    if reserved_bits == 0 {
        return Err(crate::error::AnalyzeError::BadQuery(
            "--reserved selects by the reserved header bits, and this snapshot's runtime has none: use --tag (block tag) or --kind".into(),
        ));
    }
    Ok(())
}

/// Paths to the selected objects; `limit` caps how many objects are followed (evenly sampled),
/// `max_paths` how many distinct chains are reported.
pub fn paths<'s>(
    a: &impl AnalysedHeap<'s>,
    query: &PathQuery,
    limit: usize,
    max_paths: usize,
) -> Result<PathsReport, crate::error::AnalyzeError> {
    let targets = select(a, query)?;
    let single = matches!(query, PathQuery::Address(_));
    let mut sample: Vec<NodeId> = if targets.len() > limit {
        let stride = targets.len() as f64 / limit as f64;
        (0..limit).map(|i| targets[(i as f64 * stride) as usize]).collect()
    } else {
        targets.clone()
    };
    let (chains, unreachable) = if single {
        chains_to_one(a, sample[0], max_paths)
    } else {
        let (chains, unreachable, followed) = chains_to_many(a, &sample);
        sample.truncate(followed);
        (chains, unreachable)
    };
    let mut merged: Vec<MergedPath> = Vec::new();
    // (root, [(label, field)]) -> index in `merged`
    type Shape = (String, Vec<(String, Option<String>)>);
    let mut index: HashMap<Shape, usize> = HashMap::default();
    let mut labeller = StepLabeller::new(single);
    for c in chains {
        // c = [super-root, kind node, top, ..., target]
        // The root the chain starts from: the records of its kind that hold its first object.
        let (kind, root) = match a.node_kind(c[1]) {
            Some(NodeKind::Roots(k)) => (k.label().to_string(), crate::retainers::held_by(a, k, c[2])),
            _ => ("?".into(), "?".into()),
        };
        let steps = labeller.steps(a, &c);
        let shape = (root.clone(), steps.iter().map(|s| (s.label.clone(), s.field.clone())).collect::<Vec<_>>());
        match index.get(&shape) {
            Some(&i) if !single => {
                let m = &mut merged[i];
                m.count += 1;
                for (s, new) in m.steps.iter_mut().zip(&steps) {
                    s.repeat_min = s.repeat_min.min(new.repeat_min);
                    s.repeat_max = s.repeat_max.max(new.repeat_max);
                }
            }
            _ => {
                index.insert(shape, merged.len());
                merged.push(MergedPath { count: 1, root_kind: kind, root, steps });
            }
        }
    }
    if !single {
        merged.sort_by(|x, y| y.count.cmp(&x.count).then(x.steps.len().cmp(&y.steps.len())));
    }
    merged.truncate(max_paths);
    Ok(PathsReport { targets: targets.len() as u64, sampled: sample.len() as u64, unreachable, paths: merged })
}

/// The paths to one object: its shortest, then one through each other referrer (at most
/// `max_paths` are shown); and whether no root reaches it (1) or some does (0).
fn chains_to_one<'s>(a: &impl AnalysedHeap<'s>, v: NodeId, max_paths: usize) -> (Vec<Vec<NodeId>>, u64) {
    let Some(shortest) = chain(a, v) else { return (Vec::new(), 1) };
    let mut chains = vec![shortest];
    // The shortest path comes first and stays first (sorted by length, stably): the others
    // are needed only when more than one is shown (a search of every edge each).
    let referrers = if max_paths > 1 { a.referrers(v, 16) } else { Vec::new() };
    for r in referrers {
        if Some(r) == a.bfs_parent(v) {
            continue;
        }
        if let Some(mut c) = chain(a, r).filter(|c| !c.contains(&v)) {
            c.push(v);
            chains.push(c);
        }
    }
    chains.sort_by_key(|c| c.len());
    (chains, 0)
}

/// The shortest path to each object of `sample`, in order, until [`STEP_BUDGET`] steps have
/// been walked (deep chains, a long list's cells, cost their length each); how many objects no
/// root reaches, and how many were followed.
fn chains_to_many<'s>(a: &impl AnalysedHeap<'s>, sample: &[NodeId]) -> (Vec<Vec<NodeId>>, u64, usize) {
    let mut budget = STEP_BUDGET;
    let mut followed = 0;
    let mut unreachable = 0;
    let mut chains = Vec::new();
    for &v in sample {
        if budget == 0 {
            break;
        }
        followed += 1;
        match chain(a, v) {
            None => unreachable += 1,
            Some(c) => {
                budget = budget.saturating_sub(c.len());
                chains.push(c);
            }
        }
    }
    (chains, unreachable, followed)
}

/// What a path's step shows for one node: its label's id, its field (a number, [`NO_FIELD`],
/// [`FOLDED`], or [`NAMED`] with a label id), its address, and its structure and role, which
/// its children's roles depend on.
type StepInfo = (u32, u32, u64, Option<Structure>, Option<Role>);

/// Labels the steps of many paths. What a step shows depends on the node only (its BFS parent
/// is fixed): computed once per node, as chains share their beginnings.
struct StepLabeller {
    /// One object's paths: every step described in full, and no step folded or merged.
    single: bool,
    memo: HashMap<NodeId, StepInfo>,
    labels: Vec<String>,
    label_ids: HashMap<String, u32>,
    key_names: HashMap<GroupKey, String>,
}

impl StepLabeller {
    fn new(single: bool) -> StepLabeller {
        StepLabeller { single, memo: HashMap::default(), labels: Vec::new(), label_ids: HashMap::default(), key_names: HashMap::default() }
    }

    fn intern(&mut self, label: String) -> u32 {
        let labels = &mut self.labels;
        *self.label_ids.entry(label.clone()).or_insert_with(|| {
            labels.push(label);
            labels.len() as u32 - 1
        })
    }

    /// The steps of chain `c` (`[super-root, kind node, top, ..., target]`) from its top object
    /// down; a run of steps alike (a list's cells) is one step repeated, unless `single`.
    fn steps<'s>(&mut self, a: &impl AnalysedHeap<'s>, c: &[NodeId]) -> Vec<Step> {
        let mut steps: Vec<Step> = Vec::new();
        for i in 2..c.len() {
            let (label, field, address, _, _) = self.info(a, c, i);
            let field_text = match field {
                NO_FIELD => None,
                FOLDED => Some("*".to_string()),
                f if f & NAMED != 0 && f < FOLDED => Some(self.labels[(f & !NAMED) as usize].clone()),
                f => Some(f.to_string()),
            };
            let label = &self.labels[label as usize];
            match steps.last_mut() {
                Some(last) if !self.single && &last.label == label && last.field == field_text && field_text.is_some() => {
                    last.repeat_min += 1;
                    last.repeat_max += 1;
                }
                _ => steps.push(Step {
                    label: label.clone(),
                    field: field_text,
                    repeat_min: 1,
                    repeat_max: 1,
                    example: format!("{address:#x}"),
                }),
            }
        }
        steps
    }

    /// What the step to `c[i]` shows, from its holder `c[i - 1]` (none for the top object, `i`
    /// = 2).
    fn info<'s>(&mut self, a: &impl AnalysedHeap<'s>, c: &[NodeId], i: usize) -> StepInfo {
        let v = c[i];
        if let Some(&info) = self.memo.get(&v) {
            return info;
        }
        let holder = if i > 2 { self.memo.get(&c[i - 1]).map(|m| (m.3, m.4)) } else { None };
        let block = a.block(v);
        let key = block.map(|b| a.kind_of(&b));
        let field = if i > 2 {
            let parent_size = a.block(c[i - 1]).map_or(0, |b| b.header.wosize);
            if !self.single && parent_size > FOLD_ABOVE_FIELDS {
                FOLDED // a BFS tree edge: some field points here, which one is folded
            } else {
                field_pointing(a, c[i - 1], v).map_or(NO_FIELD, |f| f as u32)
            }
        } else {
            NO_FIELD
        };
        let structure = match key {
            Some(GroupKey::Structure(s)) => Some(s),
            _ => None,
        };
        let role = holder.and_then(|(s, r)| Role::of_child(s, r, (field < FOLDED).then_some(field as usize)));
        let label = if self.single {
            a.describe(v)
        } else if let Some(m) = a.module_of(v) {
            format!("module {m}")
        } else if let Some(t) = a.type_label(v) {
            t
        } else if let Some(key) = key {
            self.key_names.entry(key).or_insert_with(|| key_name(a.names(), &key)).clone()
        } else {
            a.describe(v)
        };
        let label = match role {
            Some(r) => format!("{} ({label})", r.name()),
            _ => label,
        };
        let label = self.intern(label);
        // The field by its OCaml name when the holder's type (or module) names it.
        let named = (i > 2 && field < FOLDED).then(|| a.field_label(c[i - 1], field as usize)).flatten();
        let field = match named {
            Some(name) => NAMED | self.intern(name),
            None => field,
        };
        let info = (label, field, block.map_or(0, |b| b.address), structure, role);
        self.memo.insert(v, info);
        info
    }
}

/// The chain of BFS parents from the super-root down to `v` (`[super-root, root kind, top, ...,
/// v]`); `None` when no root reaches `v`. Bounded by the node count: parents read from an index
/// file cannot make it loop.
fn chain<'s>(a: &impl AnalysedHeap<'s>, v: NodeId) -> Option<Vec<NodeId>> {
    let mut c = vec![v];
    let mut x = v;
    while x != SUPER_ROOT {
        // Bounded by the node count: parents that loop (a hostile index) end the walk.
        x = a.bfs_parent(x).filter(|_| c.len() <= a.node_count())?;
        c.push(x);
    }
    c.reverse();
    (c.len() >= 3).then_some(c)
}

/// The first scanned field of block `from` that points to `to`.
pub fn field_pointing<'s>(a: &impl AnalysedHeap<'s>, from: NodeId, to: NodeId) -> Option<usize> {
    let b = a.block(from)?;
    // Most pointers hold the target's address itself: compare words before resolving any.
    if let Some(target) = a.address(to) {
        let start = b.header.first_scanned_field(b.fields).unwrap_or(b.fields.len());
        if let Some(i) = b.fields.iter().skip(start).position(|&w| w == target) {
            return Some(start + i);
        }
    }
    let mut found = None;
    b.header.scanned_fields(b.fields, |i, v| {
        if found.is_none() && a.resolve(v) == PointsTo::Node(to) {
            found = Some(i);
        }
    });
    if found.is_none() && b.header.tag == ocaml::ABSTRACT_TAG {
        found = b.fields.iter().position(|&v| ocaml::is_pointer(v) && a.resolve(v) == PointsTo::Node(to));
    }
    found
}
