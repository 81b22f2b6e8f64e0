//! Reading an analysed snapshot through its index: the same questions [`Analysis`] answers
//! (retained sizes, dominators, children, names, referrers), without the graph.
//!
//! Every array comes from a checked section; every lookup is bounds-checked, so a hostile but
//! well-formed index gives wrong answers at worst, never a panic or an endless loop.
//!
//! [`Analysis`]: heapsnap_analyze::Analysis

use crate::compact::{BlockPlaces, ReferrerTable, Referrers, BLOCK_RUN, REFERRER_RUN};
use crate::file::{IndexError, IndexFile};
use crate::sections::*;
use crate::tree::Tree;
use heapsnap_analyze::ocaml::{self, HeaderLayout};
use heapsnap_analyze::{
    chunk_colour, shape_key, AnalysedHeap, AnalyzeError, BadPointer, BadPointerFacts, BlockRef, Group, GroupBy, GroupKey, HeapFacts,
    KindTallies, KindTally, Names, NodeId, NodeKind, PointsTo, RootShare,
};
use heapsnap_format::{RegionKind, RootKind, Snapshot};
use rustc_hash::FxHashMap as HashMap;
use std::borrow::Cow;
use std::sync::OnceLock;

/// Which sections a caller reads: they are checked when the view opens. Each holds the one
/// before it; an index is written with the sections of the command that built it, and built
/// again, with more, for the first command that needs more (`INDEX.md`, "Levels").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Needs {
    /// Totals, groups and the summary's suspects only.
    Meta,
    /// The meta data and the diff's classification (`diff`; the tree's level does not hold
    /// it, the whole index does).
    Diff,
    /// The dominator tree too.
    Tree,
    /// The tree and what paths walk: referrers, shortest-path parents, the roots' edges
    /// (`suspects`, `path`, `inspect`).
    Paths,
    /// Everything: the paths' level and the diff's classification.
    All,
}

impl Needs {
    /// The sections of this level (an index holding them all serves it; the blocks' types are
    /// optional: a snapshot without OCaml names has none).
    pub fn sections(self) -> &'static [u32] {
        match self {
            Needs::Meta => &[META, GROUPS_KIND, GROUPS_CLOSURE, GROUPS_ROOT, ROOT_SHARES],
            Needs::Diff => &[META, GROUPS_KIND, GROUPS_CLOSURE, GROUPS_ROOT, ROOT_SHARES, DIFF_META, DIFF_NODES, DIFF_MEMBERS],
            // Naming a Hashtbl's parts resolves the pointers between them (by address).
            Needs::Tree => &[
                META,
                GROUPS_KIND,
                GROUPS_CLOSURE,
                GROUPS_ROOT,
                ROOT_SHARES,
                TREE,
                TREE_CHECKPOINTS,
                REACHABLE,
                PREORDER_MARKS,
                PREORDER_BACK,
                PREORDER,
                RETAINED,
                RETAINED_LARGE,
                BLOCK_STEPS,
                BLOCK_FAR,
                BLOCK_CHECKPOINTS,
                KIND_IDS,
                BLOCK_REGIONS,
                TOP_NODES,
                TOP_LABEL_IDS,
                TOP_LABELS,
            ],
            Needs::Paths => &[
                META,
                GROUPS_KIND,
                GROUPS_CLOSURE,
                GROUPS_ROOT,
                ROOT_SHARES,
                TREE,
                TREE_CHECKPOINTS,
                REACHABLE,
                PREORDER_MARKS,
                PREORDER_BACK,
                PREORDER,
                RETAINED,
                RETAINED_LARGE,
                BLOCK_STEPS,
                BLOCK_FAR,
                BLOCK_CHECKPOINTS,
                KIND_IDS,
                BLOCK_REGIONS,
                PLAIN_REFERRERS,
                REFERRERS,
                REFERRER_CHECKPOINTS,
                ROOT_EDGES,
                TOP_NODES,
                TOP_LABEL_IDS,
                TOP_LABELS,
            ],
            Needs::All => &[
                META,
                GROUPS_KIND,
                GROUPS_CLOSURE,
                GROUPS_ROOT,
                ROOT_SHARES,
                TREE,
                TREE_CHECKPOINTS,
                REACHABLE,
                PREORDER_MARKS,
                PREORDER_BACK,
                PREORDER,
                RETAINED,
                RETAINED_LARGE,
                BLOCK_STEPS,
                BLOCK_FAR,
                BLOCK_CHECKPOINTS,
                KIND_IDS,
                BLOCK_REGIONS,
                PLAIN_REFERRERS,
                REFERRERS,
                REFERRER_CHECKPOINTS,
                ROOT_EDGES,
                TOP_NODES,
                TOP_LABEL_IDS,
                TOP_LABELS,
                DIFF_META,
                DIFF_NODES,
                DIFF_MEMBERS,
            ],
        }
    }
}

/// Ids of 1, 2 or 4 bytes each (kinds: [`Meta::kind_id_bytes`]; top labels: the section's
/// length over the count); the width's largest value is none.
#[derive(Clone, Copy)]
enum NarrowIds<'s> {
    U8(&'s [u8]),
    U16(&'s [u16]),
    U32(&'s [u32]),
}

impl<'s> NarrowIds<'s> {
    fn new(bytes: &'s [u8], width: u8) -> Option<Self> {
        match width {
            1 => Some(NarrowIds::U8(bytes)),
            2 => bytemuck::try_cast_slice(bytes).ok().map(NarrowIds::U16),
            4 => bytemuck::try_cast_slice(bytes).ok().map(NarrowIds::U32),
            _ => None,
        }
    }

    fn len(&self) -> usize {
        match self {
            NarrowIds::U8(v) => v.len(),
            NarrowIds::U16(v) => v.len(),
            NarrowIds::U32(v) => v.len(),
        }
    }

    /// Id `i` (a block's kind: from the first block node), None when it has none.
    fn get(&self, i: usize) -> Option<u32> {
        match self {
            NarrowIds::U8(v) => v.get(i).filter(|&&k| k != u8::MAX).map(|&k| k as u32),
            NarrowIds::U16(v) => v.get(i).filter(|&&k| k != u16::MAX).map(|&k| k as u32),
            NarrowIds::U32(v) => v.get(i).filter(|&&k| k != u32::MAX).copied(),
        }
    }
}

/// Retained bytes of preorder number `p`: in words in `pre` (`u32::MAX`: in `large`, by number).
fn retained_at(pre: &[u32], large: &[[u64; 2]], p: usize) -> u64 {
    let Some(&words) = pre.get(p) else { return 0 };
    if words != u32::MAX {
        return words as u64 * 8;
    }
    let i = large.partition_point(|e| e[0] < p as u64);
    large.get(i).filter(|e| e[0] == p as u64).map_or(0, |e| e[1])
}

/// Children counted by kind on one core ([`IndexView`]'s `tally_children`).
const CHILDREN_PER_TALLY: usize = 1 << 14;

/// How many children of a node [`IndexView::children_iter`] notes the preorder numbers of.
const REMEMBERED_CHILDREN: usize = 64;

pub struct IndexView<'s> {
    pub snap: &'s Snapshot,
    pub meta: std::sync::Arc<Meta>,
    pub names: Names<'s>,
    pub layout: HeaderLayout,
    /// The dominator tree, read in place (empty below the tree's level).
    tree: Tree<'s>,
    /// In words (`u32::MAX`: in `retained_large`).
    retained_pre: &'s [u32],
    retained_large: &'s [[u64; 2]],
    /// Per block node: its first field's offset in its region, in words.
    places: BlockPlaces<'s>,
    kind_ids: NarrowIds<'s>,
    /// `[first node, end node, region index]`, by first node.
    block_regions: &'s [[u32; 3]],
    /// By the snapshot's region index: its entry in `block_regions` (`u32::MAX`: none).
    region_entry: Vec<u32>,
    /// Referrers and shortest-path parents.
    referrers: ReferrerTable<'s>,
    root_edges: &'s [u32],
    top_nodes: &'s [u32],
    top_label_ids: NarrowIds<'s>,
    top_labels: Vec<String>,
    modules: HashMap<u64, &'s str>,
    /// The snapshot's free blocks (OCaml 4.14), read when a bad pointer is first classified.
    free_blocks: OnceLock<Vec<u64>>,
    /// The blocks' OCaml types, read from the index when a report first needs them (the
    /// index is tied to the snapshot's names: `annotate` changes the snapshot).
    typing: OnceLock<Option<heapsnap_analyze::Typing<'s>>>,
    /// Each grouping's groups (by [`groups_section`]), read when a report first lists them.
    groups: [OnceLock<Vec<Group>>; 5],
    /// The roots' shares, read when a report first lists them.
    root_shares: OnceLock<Vec<RootShare>>,
    /// The diff's classifications the index saves, read and checked when the view is opened
    /// for a diff.
    diff: Vec<heapsnap_analyze::diff::SavedProfile>,
    file: &'s IndexFile,
}

impl<'s> IndexView<'s> {
    /// The diff's classification of the snapshot by `by` (when the view was opened for
    /// [`Needs::Diff`] and the index saves that grouping's).
    pub fn diff_profile(&self, by: GroupBy) -> Option<&heapsnap_analyze::diff::SavedProfile> {
        self.diff.iter().find(|p| p.by == by)
    }

    pub fn open(snap: &'s Snapshot, file: &'s IndexFile, needs: Needs) -> Result<Self, IndexError> {
        let meta = file.meta()?;
        let wanted = needs.sections();
        file.check(wanted)?;
        let u32s = |k: u32| if wanted.contains(&k) { file.u32s(k) } else { Ok(&[][..]) };
        let u64s = |k: u32| if wanted.contains(&k) { file.u64s(k) } else { Ok(&[][..]) };
        let n = meta.node_count as usize;
        let r = meta.reachable_count as usize;
        let view = IndexView {
            snap,
            names: Names::new(snap).with_saved(file),
            layout: HeaderLayout::new(snap.metadata().reserved_header_bits, snap.metadata().colours),
            tree: if wanted.contains(&TREE) {
                Tree::new(
                    u32s(PREORDER)?,
                    file.section(TREE)?,
                    u64s(TREE_CHECKPOINTS)?,
                    u64s(REACHABLE)?,
                    u64s(PREORDER_MARKS)?,
                    u32s(PREORDER_BACK)?,
                    n,
                )
                .map_err(|e| IndexError::Inconsistent(format!("dominator tree: {e}")))?
            } else {
                Tree::default()
            },
            retained_pre: u32s(RETAINED)?,
            retained_large: bytemuck::cast_slice(u64s(RETAINED_LARGE)?.get(..u64s(RETAINED_LARGE)?.len() / 2 * 2).unwrap_or(&[])),
            places: BlockPlaces {
                steps: if wanted.contains(&BLOCK_STEPS) { file.section(BLOCK_STEPS)? } else { &[] },
                far: bytemuck::cast_slice(u32s(BLOCK_FAR)?.get(..u32s(BLOCK_FAR)?.len() / 2 * 2).unwrap_or(&[])),
                checkpoints: u32s(BLOCK_CHECKPOINTS)?,
            },
            kind_ids: if wanted.contains(&KIND_IDS) {
                NarrowIds::new(file.section(KIND_IDS)?, meta.kind_id_bytes).ok_or(IndexError::Section(KIND_IDS))?
            } else {
                NarrowIds::U32(&[])
            },
            block_regions: bytemuck::cast_slice(u32s(BLOCK_REGIONS)?.get(..u32s(BLOCK_REGIONS)?.len() / 3 * 3).unwrap_or(&[])),
            region_entry: Vec::new(),
            referrers: ReferrerTable::new(
                u64s(PLAIN_REFERRERS)?,
                if wanted.contains(&REFERRERS) { file.section(REFERRERS)? } else { &[] },
                u64s(REFERRER_CHECKPOINTS)?,
            ),
            root_edges: u32s(ROOT_EDGES)?,
            top_nodes: u32s(TOP_NODES)?,
            top_label_ids: if wanted.contains(&TOP_LABEL_IDS) {
                let bytes = file.section(TOP_LABEL_IDS)?;
                let tops = u32s(TOP_NODES)?.len();
                let width = bytes.len().checked_div(tops).unwrap_or(1);
                NarrowIds::new(bytes, width as u8).filter(|ids| ids.len() == tops).ok_or(IndexError::Section(TOP_LABEL_IDS))?
            } else {
                NarrowIds::U32(&[])
            },
            top_labels: if wanted.contains(&TOP_LABELS) {
                serde_json::from_slice(file.section(TOP_LABELS)?).map_err(|e| IndexError::Inconsistent(format!("top labels: {e}")))?
            } else {
                Vec::new()
            },
            modules: snap
                .roots()
                .iter()
                .filter(|r| matches!(r.root_kind(), RootKind::Global | RootKind::DynGlobal))
                .filter(|r| r.slot != 0)
                .filter_map(|r| Some((r.slot.checked_sub(8 * r.origin)?, heapsnap_analyze::module_name(snap.string(r.name)?))))
                .collect(),
            free_blocks: OnceLock::new(),
            typing: OnceLock::new(),
            groups: Default::default(),
            root_shares: OnceLock::new(),
            diff: if needs == Needs::Diff {
                let mut saved = Vec::new();
                for by in crate::diff_profile::SAVED_GROUPINGS {
                    saved.extend(crate::diff_profile::read(file, by)?);
                }
                saved
            } else {
                Vec::new()
            },
            file,
            meta,
        };
        let mut view = view;
        // Each region's entry, by the snapshot's region index (a bad index is left out).
        view.region_entry = vec![u32::MAX; snap.region_count()];
        for (i, e) in view.block_regions.iter().enumerate() {
            if let Some(slot) = view.region_entry.get_mut(e[2] as usize) {
                *slot = i as u32;
            }
        }
        let blocks = n.saturating_sub(view.meta.first_block_node as usize);
        let non_plain = n - view.referrers.plain.ones().min(n);
        let lengths: [(&str, usize, usize, u32); 12] = [
            ("preorder", view.tree.reachable_count(), r, PREORDER),
            ("retained sizes", view.retained_pre.len(), r, RETAINED),
            ("large retained sizes", view.file.section(RETAINED_LARGE).map_or(0, |b| b.len() % 16), 0, RETAINED_LARGE),
            ("block steps", view.places.steps.len(), blocks, BLOCK_STEPS),
            ("far block places", view.file.section(BLOCK_FAR).map_or(0, |b| b.len() % 8), 0, BLOCK_FAR),
            ("block checkpoints", view.places.checkpoints.len(), blocks.div_ceil(BLOCK_RUN), BLOCK_CHECKPOINTS),
            ("block regions", view.file.section(BLOCK_REGIONS).map_or(0, |b| b.len() % 12), 0, BLOCK_REGIONS),
            ("kinds", view.kind_ids.len(), blocks, KIND_IDS),
            ("plain referrers", view.referrers.plain.words.len(), n.div_ceil(64), PLAIN_REFERRERS),
            ("referrer checkpoints", view.referrers.checkpoints.len(), non_plain.div_ceil(REFERRER_RUN), REFERRER_CHECKPOINTS),
            ("root edges", view.root_edges.len() % 2, 0, ROOT_EDGES),
            ("top labels", view.top_label_ids.len(), view.top_nodes.len(), TOP_LABEL_IDS),
        ];
        for (what, got, want, kind) in lengths {
            if wanted.contains(&kind) && got != want {
                return Err(IndexError::Inconsistent(format!("{what}: {got} entries for {want}")));
            }
        }
        if view.meta.root_kinds.len() + 1 > view.meta.first_block_node as usize || view.meta.first_block_node as usize > n {
            return Err(IndexError::Inconsistent("root kinds".into()));
        }
        Ok(view)
    }

    /// The typing the index saved, when it has one that fits its node types (the index is
    /// tied to the snapshot, hence to its names: they are not read).
    fn saved_typing(&self) -> Option<heapsnap_analyze::Typing<'s>> {
        let n = self.meta.node_count as usize;
        let bytes = self.file.section(TYPE_IDS).ok()?;
        // Read where it is mapped, as narrow as saved (untyped: the width's largest value in both).
        let ids = match NarrowIds::new(bytes, bytes.len().checked_div(n)? as u8).filter(|ids| ids.len() == n)? {
            NarrowIds::U8(ids) => heapsnap_analyze::NodeTypes::U8(ids.into()),
            NarrowIds::U16(ids) => heapsnap_analyze::NodeTypes::U16(ids.into()),
            NarrowIds::U32(ids) => heapsnap_analyze::NodeTypes::U32(ids.into()),
        };
        heapsnap_analyze::Typing::from_saved_json(ids, crate::saved_types::decode(self.file.section(TYPES).ok()?)?)
    }

    /// Whether the index has this section.
    pub fn has_section(&self, kind: u32) -> bool {
        self.file.has(kind)
    }

    /// A JSON list section (a grouping's groups, the roots' shares): empty when the index has
    /// none (a grouping the snapshot does not allow), or a hostile one that does not parse.
    fn json_list<T: serde::de::DeserializeOwned>(&self, kind: u32) -> Vec<T> {
        self.file.section(kind).ok().and_then(|bytes| serde_json::from_slice(bytes).ok()).unwrap_or_default()
    }

    fn pre(&self, node: NodeId) -> Option<usize> {
        self.tree.pre(node)
    }

    /// Children in the dominator tree, largest retained first: in the tree's preorder, the
    /// node right after this one, then each next one past the subtree of the one before (each
    /// subtree at least one number long: this ends).
    pub fn children_iter(&self, node: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.children_pre(node).map(|(c, _)| c)
    }

    /// [`IndexView::children_iter`], with each child's preorder number.
    fn children_pre(&self, node: NodeId) -> impl Iterator<Item = (NodeId, usize)> + '_ {
        let tree = &self.tree;
        let (first, end) = self.pre(node).and_then(|p| Some((p + 1, p + tree.size(p)?))).unwrap_or((0, 0));
        let (mut next, mut cursor, mut met) = (first, tree.cursor(), 0);
        std::iter::from_fn(move || {
            let c = next;
            if c >= end {
                return None;
            }
            next = c + tree.size_at(c, &mut cursor)?;
            let &v = tree.preorder.get(c)?;
            // Reports look the first (largest) children up again; remembering the millions
            // after them would only push those out of the cache.
            if met < REMEMBERED_CHILDREN {
                tree.remember(v, c);
                met += 1;
            }
            Some((v, c))
        })
    }

    /// Retained bytes of preorder number `p`.
    fn retained_at(&self, p: usize) -> u64 {
        retained_at(self.retained_pre, self.retained_large, p)
    }

    pub fn children_count(&self, node: NodeId) -> usize {
        self.children_iter(node).count()
    }

    fn root_kind(&self, node: NodeId) -> Option<RootKind> {
        let k = (node as usize).checked_sub(1).filter(|_| node < self.meta.first_block_node)?;
        self.meta.root_kinds.get(k).map(|&code| RootKind::from_code(code))
    }

    /// The address of a block node's first field (None: no block).
    fn block_address(&self, node: NodeId) -> Option<u64> {
        let first = self.meta.first_block_node;
        let i = self.block_regions.partition_point(|e| e[0] <= node).checked_sub(1)?;
        let [start, end, region] = self.block_regions[i];
        if node >= end || region as usize >= self.snap.region_count() {
            return None;
        }
        let offset = self.places.offset(node.checked_sub(first)? as usize, start.checked_sub(first)? as usize)?;
        self.snap.region(region as usize).base().checked_add(offset as u64 * 8)
    }

    /// The first block node of the snapshot's region `r` whose first field is at `address` or
    /// after it, and the region's end node (its block nodes ascend by address).
    fn first_at_or_after(&self, r: usize, address: u64) -> Option<(NodeId, NodeId)> {
        let &i = self.region_entry.get(r).filter(|&&i| i != u32::MAX)?;
        let [start, end, _] = *self.block_regions.get(i as usize)?;
        let first = self.meta.first_block_node;
        let (start_i, end_i) = (start.checked_sub(first)? as usize, end.checked_sub(first)? as usize);
        if start_i > end_i || end_i > self.places.steps.len() {
            return None;
        }
        let base = self.snap.region(r).base();
        let target = address.checked_sub(base)? / 8;
        // The blocks ascend by address: a binary search, each probe summing a run of steps.
        let (mut lo, mut hi) = (start_i, end_i);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.places.offset(mid, start_i).is_some_and(|o| (o as u64) < target) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some((first + lo as NodeId, end))
    }

    /// The node of the block whose first field is at `address`.
    fn exact(&self, address: u64) -> Option<NodeId> {
        let r = self.snap.region_index_of(address)?;
        let (v, end) = self.first_at_or_after(r, address)?;
        (v < end && self.block_address(v) == Some(address)).then_some(v)
    }

    /// Whether some block of the snapshot's region `r` starts in `[start, end)`.
    fn has_block_in(&self, r: usize, start: u64, end: u64) -> bool {
        self.first_at_or_after(r, start).is_some_and(|(v, last)| v < last && self.block_address(v).is_some_and(|a| a < end))
    }

    /// The chain of dominators from the super-root down to `node` (bounded: a corrupt index
    /// cannot make it loop).
    pub fn dominator_chain(&self, node: NodeId) -> Vec<NodeId> {
        let mut chain = vec![node];
        let mut x = node;
        while let Some(d) = self.idom(x) {
            if chain.len() > self.node_count() {
                break;
            }
            chain.push(d);
            x = d;
        }
        chain.reverse();
        chain
    }

    /// Block nodes, in node order.
    pub fn block_nodes(&self) -> std::ops::Range<NodeId> {
        self.meta.first_block_node..self.meta.node_count
    }
}

impl<'s> HeapFacts<'s> for IndexView<'s> {
    fn snap(&self) -> &'s Snapshot {
        self.snap
    }

    fn names(&self) -> &Names<'s> {
        &self.names
    }

    fn layout(&self) -> &HeaderLayout {
        &self.layout
    }

    fn node_count(&self) -> usize {
        self.meta.node_count as usize
    }

    fn node_kind(&self, node: NodeId) -> Option<NodeKind> {
        if node == 0 {
            Some(NodeKind::SuperRoot)
        } else if node < self.meta.first_block_node {
            self.root_kind(node).map(NodeKind::Roots)
        } else {
            let b = self.block(node)?;
            Some(NodeKind::Block(self.snap.region(b.region as usize).kind()))
        }
    }

    /// The block behind a node, read from the snapshot (its colour as the analysis gives it).
    fn block(&self, node: NodeId) -> Option<BlockRef<'s>> {
        if node < self.meta.first_block_node {
            return None;
        }
        let address = self.block_address(node)?;
        let r = self.snap.region_index_of(address)?;
        let region = self.snap.region(r);
        let words = region.words();
        let w = ((address - region.base()) / 8) as usize;
        let hd = *words.get(w.checked_sub(1)?)?;
        let mut header = self.layout.decode(hd);
        if region.kind() == RegionKind::HeapChunk {
            header.colour = chunk_colour(&self.layout, self.snap.metadata().ocaml4_gc.as_ref(), address - 8, hd);
        }
        let end = (w as u64 + header.wosize).min(words.len() as u64) as usize;
        Some(BlockRef { node, address, header, fields: words.get(w..end)?, region: r as u32 })
    }

    fn module_of(&self, node: NodeId) -> Option<&'s str> {
        self.modules.get(&self.block_address(node)?).copied()
    }

    /// As `BlockMap::resolve`, from the saved addresses and the snapshot's words.
    fn resolve(&self, value: u64) -> PointsTo {
        if let Some(v) = self.exact(value) {
            return PointsTo::Node(v);
        }
        let Some(r) = self.snap.region_index_of(value) else {
            let dead_minor = self.snap.metadata().domains.iter().any(|d| (d.minor_start..d.young_ptr).contains(&value));
            return if dead_minor { PointsTo::Bad(BadPointer::DeadMinor) } else { PointsTo::External };
        };
        let region = self.snap.region(r);
        let holds_blocks = match region.kind() {
            RegionKind::Pool | RegionKind::MinorHeap | RegionKind::Static | RegionKind::HeapChunk => true,
            RegionKind::Large => self.has_block_in(r, region.base(), region.base() + region.words().len() as u64 * 8),
            _ => false,
        };
        if !holds_blocks {
            return PointsTo::External;
        }
        if !(value - region.base()).is_multiple_of(8) {
            return PointsTo::Bad(BadPointer::Misaligned);
        }
        // An infix pointer resolves to its closure.
        let w = (value - region.base()) / 8;
        let words = region.words();
        let infix = (|| {
            let h = self.layout.decode(*words.get(w.checked_sub(1)? as usize)?);
            if h.tag != ocaml::INFIX_TAG {
                return None;
            }
            let start = w.checked_sub(h.wosize)?;
            let closure = self.layout.decode(*words.get(start.checked_sub(1)? as usize)?);
            (closure.tag == ocaml::CLOSURE_TAG).then_some(())?;
            self.exact(region.base() + start * 8)
        })();
        if let Some(v) = infix {
            return PointsTo::Node(v);
        }
        let free_blocks = self.free_blocks.get_or_init(|| self.snap.free_blocks());
        let facts = BadPointerFacts { snap: self.snap, layout: &self.layout, gc4: self.snap.metadata().ocaml4_gc.as_ref(), free_blocks };
        PointsTo::Bad(facts.classify(r, value))
    }

    fn is_ephemeron(&self, node: NodeId) -> bool {
        self.address(node).is_some_and(|x| self.snap.ephemerons().contains(&x))
    }

    fn idom(&self, node: NodeId) -> Option<NodeId> {
        let q = self.tree.parent(self.pre(node)?)?;
        let &d = self.tree.preorder.get(q)?;
        // The next question is often the dominator's own (a chain, a path).
        self.tree.remember(d, q);
        Some(d)
    }

    fn root_records(&self, node: NodeId) -> Vec<u32> {
        let pairs: &[[u32; 2]] = bytemuck::cast_slice(&self.root_edges[..self.root_edges.len() / 2 * 2]);
        let start = pairs.partition_point(|p| p[0] < node);
        pairs[start..].iter().take_while(|p| p[0] == node).map(|p| p[1]).collect()
    }
}

impl<'s> AnalysedHeap<'s> for IndexView<'s> {
    fn kind_of(&self, b: &BlockRef<'_>) -> GroupKey {
        let id = (b.node as usize).checked_sub(self.meta.first_block_node as usize).and_then(|i| self.kind_ids.get(i));
        match id.and_then(|k| self.meta.kinds.get(k as usize)) {
            Some(&key) => key,
            // Only a corrupt index gets here: the block's shape is the best answer left.
            None => shape_key(b),
        }
    }

    /// From the saved kinds, without reading the block (the dominator report asks it of every
    /// small sibling).
    fn kind_of_node(&self, node: NodeId) -> Option<GroupKey> {
        let id = (node as usize).checked_sub(self.meta.first_block_node as usize).and_then(|i| self.kind_ids.get(i));
        match id.and_then(|k| self.meta.kinds.get(k as usize)) {
            Some(&key) => Some(key),
            None => self.block(node).map(|b| self.kind_of(&b)),
        }
    }

    fn kinds(&self) -> Vec<GroupKey> {
        self.meta.kinds.clone()
    }

    fn blocks_where(&self, keep: &(dyn Fn(&BlockRef<'s>) -> bool + Sync)) -> Vec<NodeId> {
        self.block_nodes().filter(|&v| self.block(v).is_some_and(|b| keep(&b))).collect()
    }

    fn blocks_of_kinds(&self, kinds: &[GroupKey]) -> Vec<NodeId> {
        let ids: Vec<u32> = (0..self.meta.kinds.len() as u32).filter(|&k| kinds.contains(&self.meta.kinds[k as usize])).collect();
        let first = self.meta.first_block_node;
        (0..self.kind_ids.len()).filter(|&i| self.kind_ids.get(i).is_some_and(|k| ids.contains(&k))).map(|i| first + i as NodeId).collect()
    }

    fn retained(&self, node: NodeId) -> u64 {
        self.pre(node).map_or(0, |p| self.retained_at(p))
    }

    /// From the children's preorder numbers, without looking any child up.
    fn children_retained<'a>(&'a self, node: NodeId) -> Box<dyn Iterator<Item = (NodeId, u64)> + 'a> {
        Box::new(self.children_pre(node).map(|(c, p)| (c, self.retained_at(p))))
    }

    /// This thread walks the children (each the one past the subtree of the one before) while
    /// the other cores count chunks of them by their saved kinds; the chunks' counts are then
    /// merged in order.
    fn tally_children(&self, node: NodeId, skip: usize) -> Vec<KindTally> {
        let (kind_ids, kinds, first_block) = (self.kind_ids, &self.meta.kinds, self.meta.first_block_node as usize);
        let (retained_pre, retained_large) = (self.retained_pre, self.retained_large);
        // As `kind_of_node` and `retained_at`, from what can be shared between threads (a
        // block whose saved kind is missing, in a corrupt index only, counts as no kind).
        let tally = move |chunk: Vec<(NodeId, u32)>| {
            let mut tallies = KindTallies::default();
            // Neighbours are often of one kind: a run of them is counted at once.
            let mut run: Option<KindTally> = None;
            for (c, p) in chunk {
                let kind = (c as usize).checked_sub(first_block).and_then(|i| kind_ids.get(i)).and_then(|k| kinds.get(k as usize)).copied();
                let retained = retained_at(retained_pre, retained_large, p as usize);
                match &mut run {
                    Some(r) if r.kind == kind => {
                        r.count += 1;
                        r.retained += retained;
                    }
                    _ => {
                        run.into_iter().for_each(|r| tallies.add(r));
                        run = Some(KindTally { kind, count: 1, retained, first: (c, retained) });
                    }
                }
            }
            run.into_iter().for_each(|r| tallies.add(r));
            tallies.into_vec()
        };
        let counted: std::sync::Mutex<Vec<(usize, Vec<KindTally>)>> = Default::default();
        rayon::in_place_scope(|scope| {
            let (tally, counted) = (&tally, &counted);
            let mut chunks = 0;
            let mut chunk = Vec::new();
            let mut send = |chunk: Vec<(NodeId, u32)>| {
                let at = chunks;
                chunks += 1;
                scope.spawn(move |_| {
                    let t = tally(chunk);
                    counted.lock().unwrap_or_else(|e| e.into_inner()).push((at, t));
                });
            };
            for (c, p) in self.children_pre(node).skip(skip) {
                chunk.push((c, p as u32));
                if chunk.len() == CHILDREN_PER_TALLY {
                    send(std::mem::replace(&mut chunk, Vec::with_capacity(CHILDREN_PER_TALLY)));
                }
            }
            if !chunk.is_empty() {
                send(chunk);
            }
        });
        let mut counted = counted.into_inner().unwrap_or_else(|e| e.into_inner());
        counted.sort_unstable_by_key(|&(at, _)| at);
        let mut all = KindTallies::default();
        counted.into_iter().for_each(|(_, t)| all.merge(t));
        all.into_vec()
    }

    fn reachable_bytes(&self) -> u64 {
        self.meta.summary.reachable_bytes
    }

    fn is_reachable(&self, node: NodeId) -> bool {
        self.tree.is_reachable(node)
    }

    fn children(&self, node: NodeId) -> Vec<NodeId> {
        self.children_iter(node).collect()
    }

    /// The saved label of a top object (the analysis's retainers).
    fn top_label(&self, node: NodeId) -> String {
        let found = self.top_nodes.binary_search(&node).ok().and_then(|i| self.top_label_ids.get(i));
        match found.and_then(|l| self.top_labels.get(l as usize)) {
            Some(label) => label.clone(),
            None => self.describe(node),
        }
    }

    fn referrers(&self, node: NodeId, max: usize) -> Vec<NodeId> {
        match self.referrers.get(node, max) {
            Some(Referrers::Plain) => self.idom(node).into_iter().take(max).collect(),
            Some(Referrers::Listed { referrers, .. }) => referrers,
            None => Vec::new(),
        }
    }

    fn bfs_parent(&self, node: NodeId) -> Option<NodeId> {
        match self.referrers.get(node, 0)? {
            Referrers::Plain => self.idom(node),
            Referrers::Listed { parent, .. } => parent.filter(|&p| (p as usize) < self.node_count()),
        }
    }

    fn groups(&self, by: GroupBy) -> Result<Cow<'_, [Group]>, AnalyzeError> {
        by.check(self.snap)?;
        let cell = &self.groups[by as usize];
        Ok(Cow::Borrowed(cell.get_or_init(|| self.json_list(groups_section(by)))))
    }

    fn root_shares(&self) -> Cow<'_, [RootShare]> {
        Cow::Borrowed(self.root_shares.get_or_init(|| self.json_list(ROOT_SHARES)))
    }

    fn unreachable(&self) -> (u64, u64) {
        (self.meta.summary.unreachable_objects, self.meta.summary.unreachable_bytes)
    }

    fn typing(&self) -> Option<&heapsnap_analyze::Typing<'_>> {
        self.typing.get_or_init(|| self.saved_typing().or_else(|| heapsnap_analyze::Typing::compute(self))).as_ref()
    }

    /// The saved tree is in its own preorder: what `v` dominates is the numbers of its subtree.
    fn typed_bytes_dominated_by(&self, v: NodeId) -> Option<u64> {
        let typing = self.typing()?;
        let p = self.pre(v)?;
        // A hostile index's size gives no subtree rather than an overflow.
        let end = p.checked_add(self.tree.size(p)?)?;
        let subtree = self.tree.preorder.get(p..end)?;
        // As the analysis counts it: what freeing a node gives back is what it retains less
        // what its children retain, so the typed nodes' own bytes are their retained bytes
        // less those of the nodes right below a typed one. The subtree is walked in preorder
        // with its open ancestors on a stack (where each one's subtree ends, whether it is
        // typed): the saved sizes and retained bytes read in order, no block looked up.
        let mut open: Vec<(usize, bool)> = Vec::new();
        let mut cursor = self.tree.cursor();
        let (mut typed_retained, mut below_typed) = (0u64, 0u64);
        for (q, &node) in (p..end).zip(subtree) {
            while open.last().is_some_and(|&(ends, _)| ends <= q) {
                open.pop();
            }
            let retained = self.retained_at(q);
            if open.last().is_some_and(|&(_, typed)| typed) {
                below_typed += retained;
            }
            let typed = typing.type_id(node) != heapsnap_analyze::NO_TYPE;
            if typed {
                typed_retained += retained;
            }
            // A hostile size past the subtree's end ends the walk's nesting there.
            open.push((q.saturating_add(self.tree.size_at(q, &mut cursor)?).min(end), typed));
        }
        Some(typed_retained.saturating_sub(below_typed))
    }
}
