//! Retained sizes as folded stacks (`frame;frame;frame bytes`, the input of flame-graph tools):
//! the dominator tree collapsed so that a leak is one wide tower.
//!
//! * `--by root` (the default): frames are the path signatures `diff` uses: the root's name,
//!   then one frame per step `.N shape` (the field of the dominator, `[*]` for an element of a
//!   large block), runs of one shape folded into one frame marked `+`, the parts of a stdlib
//!   `Hashtbl` named. Every object counts its own bytes under its dominator signature.
//! * `--by kind|tag|closure`: frames are the groups `top --by` lists (the dominators' groups,
//!   runs of one group folded); with `closure`, objects count under their nearest dominating
//!   closure (`(no closure)` above them all).
//!
//! The bytes of all stacks add up to the reachable bytes (static data counts 0, as in the
//! reports).

use heapsnap_analyze::diff::SavedProfile;
use heapsnap_analyze::signatures::classify::{classify, classify_with_types, EDGE_ROOT, NO_CLASS, NO_GROUP};
use heapsnap_analyze::signatures::domtrie::{dominator_trie, NOT_A_BLOCK};
use heapsnap_analyze::signatures::trie::{describe_named_chain, SigTrie, StepText};
use heapsnap_analyze::{AnalysedHeap, Analysis, GroupBy, HeapFacts};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// One stack and the bytes counted at its top frame.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Stack {
    pub frames: Vec<String>,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Folded {
    pub by: GroupBy,
    /// Largest first.
    pub stacks: Vec<Stack>,
    pub total_bytes: u64,
}

impl Folded {
    /// The folded text: one `frame;frame bytes` line per stack.
    pub fn lines(&self) -> Vec<String> {
        self.stacks
            .iter()
            .map(|s| format!("{} {}", s.frames.iter().map(|f| frame_text(f)).collect::<Vec<_>>().join(";"), s.bytes))
            .collect()
    }
}

/// A frame as folded text allows it: no `;` (the separator) and no line breaks.
fn frame_text(f: &str) -> String {
    f.replace(';', ",").replace(['\n', '\r'], " ")
}

pub fn folded(a: &Analysis<'_>, by: GroupBy) -> Folded {
    let stacks = match by {
        GroupBy::Root => by_signature(a),
        _ => by_group(a, by),
    };
    sorted(by, stacks)
}

/// The stacks by path signature (`--by root`) from the diff's classification saved in the
/// analysis index (its dominator trie and each signature's own bytes), without the graph;
/// `None` when it was saved for another grouping than `kind` (the one whose shapes the
/// signatures are made of).
pub fn folded_saved(saved: &SavedProfile) -> Option<Folded> {
    if saved.by != GroupBy::Kind {
        return None;
    }
    let trie = &saved.dom;
    let bytes = |id: usize| saved.dom_own_bytes.get(id).copied().unwrap_or(0);
    let stacks = (1..trie.len())
        .filter(|&id| bytes(id) > 0)
        .map(|id| Stack { frames: signature_frames(trie, id as u32), bytes: bytes(id) })
        .collect();
    Some(sorted(GroupBy::Root, stacks))
}

fn sorted(by: GroupBy, mut stacks: Vec<Stack>) -> Folded {
    stacks.retain(|s| s.bytes > 0);
    stacks.sort_by(|x, y| y.bytes.cmp(&x.bytes).then_with(|| x.frames.cmp(&y.frames)));
    let total_bytes = stacks.iter().map(|s| s.bytes).sum();
    Folded { by, stacks, total_bytes }
}

/// Each object's own bytes, by preorder number.
fn self_bytes(a: &Analysis<'_>, p: usize) -> u64 {
    a.freeable(a.preorder()[p])
}

fn by_signature(a: &Analysis<'_>) -> Vec<Stack> {
    // With OCaml names, typed blocks are their types and named fields their labels, as in `diff`.
    let classes = classify_with_types(a, GroupBy::Kind, a.typing());
    let dom = dominator_trie(a, &classes);
    let trie = &dom.trie;
    let mut bytes = vec![0u64; trie.len()];
    for (p, &sig) in dom.sig_pre.iter().enumerate() {
        if sig != NOT_A_BLOCK {
            bytes[sig as usize] += self_bytes(a, p);
        }
    }
    (1..trie.len()).filter(|&id| bytes[id] > 0).map(|id| Stack { frames: signature_frames(trie, id as u32), bytes: bytes[id] }).collect()
}

/// The frames of a signature: the root's name, then `.N shape` per step (`+`: a folded run).
fn signature_frames(trie: &SigTrie, id: u32) -> Vec<String> {
    signature_steps(trie, id)
        .into_iter()
        .map(|s| {
            let edge = if s.edge.is_empty() || s.edge == "root" { String::new() } else { format!("{} ", s.edge) };
            format!("{edge}{}{}", s.label, if s.folded { "+" } else { "" })
        })
        .collect()
}

/// The steps of a signature of a dominator trie as `diff` names them (a typed block's fields
/// by their labels).
pub(crate) fn signature_steps(trie: &SigTrie, id: u32) -> Vec<StepText> {
    let chain = trie.chain(id);
    // The label of the field an edge is, when the previous step's type names it.
    let field_label = |k: usize| -> Option<&str> {
        let (prev, node) = (&trie.nodes[chain[k.checked_sub(1)?] as usize], &trie.nodes[chain[k] as usize]);
        let fields = trie.field_labels.get(prev.label as usize).filter(|_| prev.edge != EDGE_ROOT)?;
        fields.get(node.edge as usize)?.as_deref()
    };
    let steps: Vec<(u8, &str, bool, Option<&str>)> = chain
        .iter()
        .enumerate()
        .map(|(k, &c)| (trie.nodes[c as usize].edge, trie.label_name(c), trie.nodes[c as usize].folded, field_label(k)))
        .collect();
    describe_named_chain(&steps)
}

fn by_group(a: &Analysis<'_>, by: GroupBy) -> Vec<Stack> {
    let c = classify(a, by);
    let tree = &a.tree;
    let r = tree.reachable_count();
    // Frame 0: above every group. Others: (parent frame, group).
    let mut frames: Vec<(u32, u32)> = vec![(0, NO_GROUP)];
    let mut index: FxHashMap<(u32, u32), u32> = FxHashMap::default();
    let mut frame_pre = vec![0u32; r];
    let mut bytes = vec![0u64];
    for p in 1..r {
        let class = c.class_pre[p];
        if class == NO_CLASS {
            continue; // a root kind
        }
        let group = c.class_group[class as usize];
        let parent = frame_pre[tree.idom_pre[p] as usize];
        let frame = if group == NO_GROUP || (parent != 0 && frames[parent as usize].1 == group) {
            parent
        } else {
            *index.entry((parent, group)).or_insert_with(|| {
                frames.push((parent, group));
                bytes.push(0);
                frames.len() as u32 - 1
            })
        };
        frame_pre[p] = frame;
        bytes[frame as usize] += self_bytes(a, p);
    }
    let name = |f: u32| match frames[f as usize].1 {
        NO_GROUP => "(no closure)".to_string(),
        g => c.groups.names[g as usize].clone(),
    };
    (0..frames.len() as u32)
        .filter(|&f| bytes[f as usize] > 0)
        .map(|f| {
            let mut chain = Vec::new();
            let mut x = f;
            while x != 0 {
                chain.push(name(x));
                x = frames[x as usize].0;
            }
            if chain.is_empty() {
                chain.push(name(0));
            }
            chain.reverse();
            Stack { frames: chain, bytes: bytes[f as usize] }
        })
        .collect()
}
