//! The allocations still alive at the end of a trace, with their call stacks, read in one pass.
//! Call stacks are stored once in a tree of (parent, code) nodes: consecutive backtraces share
//! long prefixes, which the trace encodes and the tree keeps shared.

use crate::error::Error;
use crate::events::AllocSource;
use crate::events::{frames_of_code, Event, EventReader, Frame};
use crate::location::{LocationCode, LocationTable};
use rustc_hash::FxHashMap;

/// The parent of outermost frames; also the stack of an allocation with an empty backtrace.
const NO_NODE: u32 = u32::MAX;

/// A sampled allocation not collected by the end of the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocInfo {
    pub id: u64,
    /// Microseconds since the Unix epoch.
    pub time: u64,
    pub domain: u16,
    pub length_words: u64,
    pub nsamples: u64,
    pub source: AllocSource,
    /// A promotion event was seen: the block moved from the minor to the major heap.
    pub promoted: bool,
    /// Innermost node of the call stack in the index's tree.
    stack: u32,
}

impl AllocInfo {
    /// Its call stack in the index (equal for allocations with equal backtraces).
    pub fn stack_id(&self) -> u32 {
        self.stack
    }

    /// In the major heap by the end of the trace: allocated there or promoted.
    pub fn is_major(&self) -> bool {
        self.source == AllocSource::Major || self.promoted
    }
}

struct Node {
    parent: u32,
    code: LocationCode,
}

#[derive(Default)]
struct CallTree {
    nodes: Vec<Node>,
    children: FxHashMap<(u32, LocationCode), u32>,
}

impl CallTree {
    fn child(&mut self, parent: u32, code: LocationCode) -> Result<u32, Error> {
        if let Some(&node) = self.children.get(&(parent, code)) {
            return Ok(node);
        }
        let node = u32::try_from(self.nodes.len()).ok().filter(|&n| n != NO_NODE).ok_or(Error::IndexTooLarge)?;
        self.nodes.push(Node { parent, code });
        self.children.insert((parent, code), node);
        Ok(node)
    }
}

/// Counts over the whole trace, to judge how complete the index is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceStats {
    pub allocations: u64,
    pub promotions: u64,
    pub collections: u64,
    /// Promotions and collections of ids with no live allocation (never allocated in this
    /// trace, or already collected).
    pub unmatched_promotions: u64,
    pub unmatched_collections: u64,
    /// Packets another process wrote (after a fork), skipped.
    pub skipped_packets: usize,
    /// Time of the last event (microseconds since the epoch), or the start time.
    pub end_time: u64,
    /// The file ends inside a packet ([`crate::Trace::select`] reads up to there: a trace still
    /// being written).
    pub truncated_tail: bool,
}

/// Allocations alive at the end of the trace, by allocation id.
pub struct LiveIndex<'t> {
    live: FxHashMap<u64, AllocInfo>,
    tree: CallTree,
    locations: LocationTable<'t>,
    stats: TraceStats,
}

impl<'t> LiveIndex<'t> {
    pub(crate) fn build(events: EventReader<'t>) -> Result<Self, Error> {
        Self::build_with(events, |_| true, true)
    }

    /// Keeps the allocations `wanted` selects; with `drop_collected`, only those not collected
    /// by the end of the trace. A heap snapshot's join keeps collected ones too: a trace read
    /// after the snapshot was taken may already record their collection.
    pub(crate) fn build_with(mut events: EventReader<'t>, wanted: impl Fn(u64) -> bool, drop_collected: bool) -> Result<Self, Error> {
        let mut live: FxHashMap<u64, AllocInfo> = FxHashMap::default();
        let mut tree = CallTree::default();
        // Per domain: the codes of the last backtrace put in the tree, and the tree node of each
        // of its frames, outermost first. Consecutive backtraces share long prefixes.
        let mut paths: FxHashMap<u16, (Vec<LocationCode>, Vec<u32>)> = FxHashMap::default();
        let mut stats = TraceStats { end_time: events.info().start_time, ..TraceStats::default() };
        loop {
            let event = match events.next_event() {
                Ok(Some(event)) => event,
                Ok(None) => break,
                // Keeping collected allocations means reading a trace that may still grow.
                Err(Error::Truncated { .. }) if !drop_collected => {
                    stats.truncated_tail = true;
                    break;
                }
                Err(e) => return Err(e),
            };
            match event {
                Event::Alloc(alloc) => {
                    stats.allocations += 1;
                    stats.end_time = alloc.time;
                    if !wanted(alloc.id) {
                        continue;
                    }
                    let (last, path) = paths.entry(alloc.domain).or_default();
                    let codes = alloc.backtrace.codes();
                    let shared = last.iter().zip(codes).take_while(|(a, b)| a == b).count();
                    last.truncate(shared);
                    path.truncate(shared);
                    for &code in &codes[shared..] {
                        let parent = path.last().copied().unwrap_or(NO_NODE);
                        path.push(tree.child(parent, code)?);
                        last.push(code);
                    }
                    let info = AllocInfo {
                        id: alloc.id,
                        time: alloc.time,
                        domain: alloc.domain,
                        length_words: alloc.length_words,
                        nsamples: alloc.nsamples,
                        source: alloc.source,
                        promoted: false,
                        stack: path.last().copied().unwrap_or(NO_NODE),
                    };
                    live.insert(alloc.id, info);
                }
                Event::Promote { id, time, .. } => {
                    stats.promotions += 1;
                    stats.end_time = time;
                    match live.get_mut(&id) {
                        Some(info) => info.promoted = true,
                        None => stats.unmatched_promotions += 1,
                    }
                }
                Event::Collect { id, time, .. } => {
                    stats.collections += 1;
                    stats.end_time = time;
                    let known = if drop_collected { live.remove(&id).is_some() } else { live.contains_key(&id) };
                    if !known {
                        stats.unmatched_collections += 1;
                    }
                }
            }
        }
        stats.skipped_packets = events.skipped_packets();
        Ok(LiveIndex { live, tree, locations: events.into_locations(), stats })
    }

    pub fn get(&self, id: u64) -> Option<&AllocInfo> {
        self.live.get(&id)
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The live allocations, in no particular order.
    pub fn allocations(&self) -> impl Iterator<Item = &AllocInfo> {
        self.live.values()
    }

    /// The allocation's backtrace codes, innermost first.
    pub fn codes<'a>(&'a self, alloc: &AllocInfo) -> impl Iterator<Item = LocationCode> + 'a {
        let mut node = alloc.stack;
        std::iter::from_fn(move || {
            let current = self.tree.nodes.get(node as usize)?;
            node = current.parent;
            Some(current.code)
        })
    }

    /// The allocation's source frames, innermost first (inlined functions expanded).
    pub fn frames<'a>(&'a self, alloc: &AllocInfo) -> impl Iterator<Item = Frame<'a>> + 'a {
        let locations: &'a LocationTable<'a> = &self.locations;
        self.codes(alloc).flat_map(move |code| frames_of_code(locations, code))
    }

    /// The source frames of one backtrace code, innermost first (inlined functions expanded).
    pub fn frames_of_code<'a>(&'a self, code: LocationCode) -> impl Iterator<Item = Frame<'a>> + 'a {
        let locations: &'a LocationTable<'a> = &self.locations;
        frames_of_code(locations, code)
    }

    pub fn locations(&self) -> &LocationTable<'t> {
        &self.locations
    }

    pub fn stats(&self) -> &TraceStats {
        &self.stats
    }

    /// Distinct call-stack prefixes stored.
    pub fn stack_nodes(&self) -> usize {
        self.tree.nodes.len()
    }
}
