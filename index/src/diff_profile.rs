//! The diff's sections (21-23 by kind; 43-45 by OCaml type, when the snapshot has names): a
//! snapshot's classification as `heapsnap diff` compares it ([`SavedProfile`]: groups, the
//! dominator tree by signature, every group's members by shortest-path signature), so that a
//! diff of indexed snapshots only compares. The strings are JSON; the tries' nodes and the
//! member counts are `u64` words read from the mapped file.
//!
//! Every id in them is checked when read (parents before children, labels within their lists,
//! signatures within the path trie): a hostile file gives a wrong diff at worst, never a panic
//! or an endless walk up a trie.

use crate::file::{IndexBuilder, IndexError, IndexFile};
use crate::sections::{DIFF_MEMBERS, DIFF_META, DIFF_NODES, TYPED_DIFF_MEMBERS, TYPED_DIFF_META, TYPED_DIFF_NODES};
use heapsnap_analyze::diff::{SavedMember, SavedProfile};
use heapsnap_analyze::signatures::classify::EDGE_ROOT;
use heapsnap_analyze::signatures::trie::{SigNode, SigTrie};
use heapsnap_analyze::{Group, GroupBy};
use serde::{Deserialize, Serialize};

/// The groupings the index saves the diff's classification for: by kind (the web UI's, and
/// `diff`'s default without OCaml names) and, when the snapshot has OCaml names, by type
/// (`diff`'s default with them). A diff by another grouping analyses its snapshots.
pub const SAVED_GROUPINGS: [GroupBy; 2] = [GroupBy::Kind, GroupBy::Type];

/// The sections (meta data, trie nodes, member counts) of the classification by `by`, when
/// the index saves one.
fn sections_of(by: GroupBy) -> Option<[u32; 3]> {
    match by {
        GroupBy::Kind => Some([DIFF_META, DIFF_NODES, DIFF_MEMBERS]),
        GroupBy::Type => Some([TYPED_DIFF_META, TYPED_DIFF_NODES, TYPED_DIFF_MEMBERS]),
        _ => None,
    }
}

/// Words per trie node in [`DIFF_NODES`]: `parent | label << 32`, `root | edge << 32 | depth <<
/// 40 | folded << 56`, count, retained, and the bytes of its objects themselves (the flame
/// graph's; 0 in the path trie).
const NODE_WORDS: usize = 5;
/// Words per member count in [`DIFF_MEMBERS`]: `group | signature << 32`, count, first, address.
const MEMBER_WORDS: usize = 4;

/// [`DIFF_META`]'s JSON.
#[derive(Serialize, Deserialize)]
struct DiffMeta {
    /// The grouping's name (`kind`).
    by: String,
    names: bool,
    objects: u64,
    reachable_bytes: u64,
    groups: Vec<Group>,
    dom: TrieNames,
    paths: TrieNames,
    member_groups: Vec<String>,
}

/// A trie's strings and its node count (its nodes are in [`DIFF_NODES`], the dominator trie's
/// first).
#[derive(Serialize, Deserialize)]
struct TrieNames {
    nodes: u64,
    shape_names: Vec<String>,
    field_labels: Vec<Vec<Option<String>>>,
    root_labels: Vec<String>,
}

fn names_of(t: &SigTrie) -> TrieNames {
    TrieNames {
        nodes: t.nodes.len() as u64,
        shape_names: t.shape_names.clone(),
        field_labels: t.field_labels.clone(),
        root_labels: t.root_labels.clone(),
    }
}

fn node_words(n: &SigNode, own_bytes: u64) -> [u64; NODE_WORDS] {
    [
        n.parent as u64 | (n.label as u64) << 32,
        n.root as u64 | (n.edge as u64) << 32 | (n.depth as u64) << 40 | (n.folded as u64) << 56,
        n.count,
        n.retained,
        own_bytes,
    ]
}

/// Adds the three sections of `p` to an index (nothing for a grouping it does not save).
pub fn add(b: &mut IndexBuilder<'_>, p: &SavedProfile) {
    let Some([meta_section, nodes_section, members_section]) = sections_of(p.by) else { return };
    let meta = DiffMeta {
        by: p.by.name().to_string(),
        names: p.names,
        objects: p.objects,
        reachable_bytes: p.reachable_bytes,
        groups: p.groups.clone(),
        dom: names_of(&p.dom),
        paths: names_of(&p.paths),
        member_groups: p.member_groups.clone(),
    };
    b.add_compressed(meta_section, &serde_json::to_vec(&meta).expect("the diff's meta data serialises"));
    let own = p.dom_own_bytes.iter().copied().chain(std::iter::repeat(0));
    let dom = p.dom.nodes.iter().zip(own).flat_map(|(n, own)| node_words(n, own));
    let paths = p.paths.nodes.iter().flat_map(|n| node_words(n, 0));
    // Read whole by a diff, never in place: compressed (most of their words' bytes are zeros).
    let nodes: Vec<u64> = dom.chain(paths).collect();
    b.add_compressed(nodes_section, bytemuck::cast_slice(&nodes));
    let members: Vec<u64> =
        p.members.iter().flat_map(|m| [m.group as u64 | (m.signature as u64) << 32, m.count, m.first, m.address]).collect();
    b.add_compressed(members_section, bytemuck::cast_slice(&members));
}

fn bad(what: &str) -> IndexError {
    IndexError::Inconsistent(format!("diff sections: {what}"))
}

/// A trie from its words, every id checked.
fn trie(words: &[u64], names: TrieNames) -> Result<SigTrie, IndexError> {
    let mut nodes = Vec::with_capacity(words.len() / NODE_WORDS);
    for (i, w) in words.chunks_exact(NODE_WORDS).enumerate() {
        let (parent, label) = (w[0] as u32, (w[0] >> 32) as u32);
        let (root, edge, depth, folded) = (w[1] as u32, (w[1] >> 32) as u8, (w[1] >> 40) as u16, (w[1] >> 56) & 1 == 1);
        let node = SigNode { parent, edge, label, depth, folded, root, count: w[2], retained: w[3] };
        if i == 0 {
            // The empty signature, above the roots.
            if parent != 0 || edge != EDGE_ROOT {
                return Err(bad("a trie's first node"));
            }
        } else {
            let labels = if edge == EDGE_ROOT { names.root_labels.len() } else { names.shape_names.len() };
            let parent_ok = if edge == EDGE_ROOT { parent == 0 } else { parent != 0 && (parent as usize) < i };
            if !parent_ok || label as usize >= labels || root as usize >= names.root_labels.len() {
                return Err(bad(&format!("trie node {i}")));
            }
        }
        nodes.push(node);
    }
    Ok(SigTrie::from_parts(nodes, names.shape_names, names.field_labels, names.root_labels))
}

/// The saved profile by `by`, every section checked (None: the index has no diff sections for
/// it).
pub fn read(file: &IndexFile, by: GroupBy) -> Result<Option<SavedProfile>, IndexError> {
    let Some([meta_section, nodes_section, members_section]) = sections_of(by) else { return Ok(None) };
    if !file.has(meta_section) {
        return Ok(None);
    }
    let meta: DiffMeta = serde_json::from_slice(file.section(meta_section)?).map_err(|e| bad(&format!("meta data: {e}")))?;
    let words = file.u64s(nodes_section)?;
    let (dom_nodes, path_nodes) = (meta.dom.nodes as usize, meta.paths.nodes as usize);
    if dom_nodes == 0
        || path_nodes == 0
        || words.len() / NODE_WORDS != dom_nodes.saturating_add(path_nodes)
        || words.len() % NODE_WORDS != 0
    {
        return Err(bad("node count"));
    }
    let (dom_words, path_words) = words.split_at(dom_nodes * NODE_WORDS);
    let dom_own_bytes = dom_words.chunks_exact(NODE_WORDS).map(|w| w[4]).collect();
    let dom = trie(dom_words, meta.dom)?;
    let paths = trie(path_words, meta.paths)?;
    let member_words = file.u64s(members_section)?;
    if member_words.len() % MEMBER_WORDS != 0 {
        return Err(bad("member counts"));
    }
    let members = member_words
        .chunks_exact(MEMBER_WORDS)
        .map(|w| {
            let m = SavedMember { group: w[0] as u32, signature: (w[0] >> 32) as u32, count: w[1], first: w[2], address: w[3] };
            if m.group as usize >= meta.member_groups.len() || m.signature as usize >= paths.nodes.len() {
                return Err(bad("a member count's group or signature"));
            }
            Ok(m)
        })
        .collect::<Result<Vec<_>, _>>()?;
    if GroupBy::from_name(&meta.by) != Some(by) {
        return Err(bad("grouping"));
    }
    Ok(Some(SavedProfile {
        by,
        names: meta.names,
        objects: meta.objects,
        reachable_bytes: meta.reachable_bytes,
        groups: meta.groups,
        dom,
        dom_own_bytes,
        paths,
        member_groups: meta.member_groups,
        members,
    }))
}
