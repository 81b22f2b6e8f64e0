//! A snapshot's part of a diff, made once and kept: its groups, its dominator tree by signature
//! and every group's members counted by the signature of their shortest path. The analysis
//! index saves it (crate `heapsnap-index`), so that a diff of indexed snapshots only compares:
//! [`super::Input::saved`].
//!
//! The suspects of a diff are known only once every snapshot is profiled; their paths are the
//! members of their groups counted by path signature. Saved for every group, they are summed
//! by the suspects' names when the diff reads them, the example of a path being the member
//! the search met first (as when the diff counts the suspects' members itself).

use super::profile::{group_list, root_group_list, Profile};
use super::suspect_paths::{every_group, member_chains, Member, MemberChains};
use crate::analysed_heap::AnalysedHeap;
use crate::full_analysis::Analysis;
use crate::model::{Group, GroupBy};
use crate::signatures::classify::classify_with_types;
use crate::signatures::domtrie::{dominator_trie, NOT_A_BLOCK};
use crate::signatures::trie::SigTrie;
use rustc_hash::FxHashMap;

/// One snapshot's classification as the diff reads it.
pub struct SavedProfile {
    /// The grouping it was made for.
    pub by: GroupBy,
    /// Whether its shapes and roots use the snapshot's OCaml names (a diff uses them only when
    /// every snapshot has them).
    pub names: bool,
    /// Live blocks, static data included.
    pub objects: u64,
    pub reachable_bytes: u64,
    /// The groups, largest retained first.
    pub groups: Vec<Group>,
    /// The dominator tree by signature.
    pub dom: SigTrie,
    /// The bytes of the objects of each signature of `dom` themselves (static data counts 0):
    /// the flame graph's stacks (crate `heapsnap-export`).
    pub dom_own_bytes: Vec<u64>,
    /// The shortest paths by signature.
    pub paths: SigTrie,
    /// The names of the groups [`SavedProfile::members`] count (`--by root`: the roots').
    pub member_groups: Vec<String>,
    /// Every group's members by path signature, by group then signature.
    pub members: Vec<SavedMember>,
}

/// The members of one group with one path signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedMember {
    /// An index in [`SavedProfile::member_groups`].
    pub group: u32,
    /// A node of [`SavedProfile::paths`].
    pub signature: u32,
    pub count: u64,
    /// When the search met the first of them (the lowest is a path's example).
    pub first: u64,
    /// The address of that first one.
    pub address: u64,
}

/// Whether a snapshot's OCaml names are usable (the analysis reads a names section that does
/// not parse as none).
pub fn has_names(snap: &heapsnap_format::Snapshot) -> bool {
    snap.ocaml_names().is_some_and(|json| heapsnap_names::Program::parse(json).is_ok())
}

/// The profile of an analysed snapshot, grouped `by`, with its OCaml names when it has them
/// (the analysis must not have forgotten them).
pub fn saved_profile(a: &Analysis<'_>, by: GroupBy) -> SavedProfile {
    let timer = crate::progress::PhaseTimer::start("diff's classification");
    let typing = a.typing();
    let classified = classify_with_types(a, by, typing);
    timer.lap("classes");
    let dom = dominator_trie(a, &classified);
    timer.lap("dominator signatures");
    let groups = if by == GroupBy::Root { root_group_list(&dom) } else { group_list(&classified, &dom.group_retained) };
    let dom_own_bytes = own_bytes_by_signature(a, &dom.sig_pre, dom.trie.len());
    timer.lap("own bytes by dominator signature");
    let member = every_group(&classified, Some((&dom.sig_pre, &dom.trie)), by);
    let chains = member_chains(a, &classified, &member);
    timer.lap("members by path signature");
    let member_groups = if by == GroupBy::Root { dom.trie.root_labels.clone() } else { classified.groups.names.clone() };
    let mut members: Vec<SavedMember> = chains
        .counts
        .iter()
        .map(|(&(group, signature), m)| SavedMember { group, signature, count: m.count, first: m.first, address: m.address })
        .collect();
    members.sort_unstable_by_key(|m| (m.group, m.signature));
    SavedProfile {
        by,
        names: has_names(a.graph.blocks.snap),
        objects: a.graph.blocks.regions.iter().map(|r| r.counts.live_blocks).sum(),
        reachable_bytes: a.reachable_bytes(),
        groups,
        dom: dom.trie,
        dom_own_bytes,
        paths: chains.trie,
        member_groups,
        members,
    }
}

/// The bytes of the reachable blocks of each dominator signature (`sig_pre`: each preorder
/// number's), static data counting 0 ([`crate::facts::HeapFacts::freeable`]). The blocks are swept in address
/// order, region by region on every core, rather than each reachable node's block looked up:
/// a lookup by node is a search, and the nodes in preorder are scattered.
fn own_bytes_by_signature(a: &Analysis<'_>, sig_pre: &[u32], signatures: usize) -> Vec<u64> {
    use rayon::prelude::*;
    let blocks = &a.graph.blocks;
    let pre_of = &a.tree.pre_of;
    let regions: Vec<usize> = blocks.block_regions().filter(|&r| blocks.regions[r].kind != heapsnap_format::RegionKind::Static).collect();
    // One sum per core: a sum per signature for every part of a finer split would be zeroed
    // and added up for nothing.
    let part = regions.len().div_ceil(rayon::current_num_threads()).max(1);
    regions
        .par_chunks(part)
        .map(|regions| {
            let mut own = vec![0u64; signatures];
            for &r in regions {
                for b in blocks.region_blocks(r) {
                    let Some(&p) = pre_of.get(b.node as usize) else { continue };
                    match sig_pre.get(p as usize) {
                        Some(&sig) if sig != NOT_A_BLOCK => own[sig as usize] += b.header.bytes(),
                        _ => {}
                    }
                }
            }
            own
        })
        .reduce(
            || vec![0u64; signatures],
            |mut sum, part| {
                sum.iter_mut().zip(part).for_each(|(s, x)| *s += x);
                sum
            },
        )
}

fn copy(t: &SigTrie) -> SigTrie {
    SigTrie::from_parts(t.nodes.clone(), t.shape_names.clone(), t.field_labels.clone(), t.root_labels.clone())
}

impl SavedProfile {
    /// What the diff compares of this snapshot.
    pub(super) fn profile(&self) -> Profile {
        Profile {
            groups: self.groups.clone(),
            dom: copy(&self.dom),
            objects: self.objects,
            reachable_bytes: self.reachable_bytes,
            timings: Vec::new(),
        }
    }

    /// The members of the `suspects` groups (by name) counted by path signature, as the diff
    /// counts them on an analysed snapshot.
    pub(super) fn suspect_chains(&self, suspects: &[String]) -> MemberChains {
        let index: FxHashMap<&str, u32> = suspects.iter().enumerate().map(|(i, s)| (s.as_str(), i as u32)).collect();
        let suspect_of: Vec<Option<u32>> = self.member_groups.iter().map(|g| index.get(g.as_str()).copied()).collect();
        let mut counts: FxHashMap<(u32, u32), Member> = FxHashMap::default();
        for m in &self.members {
            let Some(&Some(s)) = suspect_of.get(m.group as usize) else { continue };
            let e = counts.entry((s, m.signature)).or_insert(Member { count: 0, first: m.first, address: m.address });
            e.count += m.count;
            if m.first < e.first {
                (e.first, e.address) = (m.first, m.address);
            }
        }
        MemberChains { trie: copy(&self.paths), counts }
    }
}
