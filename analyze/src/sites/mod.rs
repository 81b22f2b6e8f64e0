//! Allocation sites: the call stack that allocated each block statmemprof tracks (the
//! snapshot's `memprof` section, FORMAT.md §3.12), joined with the retainer analysis.
//!
//! A tracked block's stack comes from its *user data*, what the program's tracker returned:
//! * an OCaml integer: memtrace's allocation id, looked up in a memtrace trace
//!   (`--memtrace FILE`, crate `heapsnap-memtrace`);
//! * a pointer to a block of tag 0 whose every field is a frame descriptor the snapshot lists
//!   (FORMAT.md §3.14): a `Printexc.raw_backtrace`, as a tracker returning `info.callstack`
//!   keeps it, decoded through the descriptors' return addresses and the line tables;
//! * anything else: the tracker keeps something of its own, counted, never guessed at.
//!
//! The *site* of a block is the innermost frame of its stack outside the standard library
//! (`Stdlib*`, `Camlinternal*`), or its innermost frame when every frame is the library's.

pub mod report;

use crate::analysed_heap::AnalysedHeap;
use crate::blocks::{NodeId, PointsTo};
use crate::error::AnalyzeError;
use crate::names::function_name;
use heapsnap_format::{MemprofRecord, Snapshot, MEMPROF_DEALLOCATED, MEMPROF_DELETED, MEMPROF_OFFSET};
use heapsnap_memtrace::Trace;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

/// One frame of an allocation stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct SiteFrame {
    /// The function as OCaml names it in backtraces (`Server.open_session`), or the code
    /// address when nothing names it.
    pub function: String,
    /// The source file as the debug information names it (directories dropped); empty when
    /// unknown.
    pub file: String,
    /// 0 when unknown.
    pub line: u32,
}

impl SiteFrame {
    /// `file:line`.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// Part of OCaml's standard library (skipped when naming a site).
    pub fn is_stdlib(&self) -> bool {
        self.function.starts_with("Stdlib") || self.function.starts_with("Camlinternal")
    }

    /// `file:line (function)`.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.location(), self.function)
    }

    /// Whether `FILE:LINE` (as `path --site` takes it) names this frame: the line is equal and
    /// the file is this one, or a path ending with it.
    pub fn matches(&self, file: &str, line: u32) -> bool {
        let short = file.rsplit('/').next().unwrap_or(file);
        self.line == line && self.file == short
    }
}

/// Where a block's stack came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StackSource {
    Memtrace,
    Callstack,
}

impl StackSource {
    /// As JSON names it.
    pub fn name(self) -> &'static str {
        match self {
            StackSource::Memtrace => "memtrace",
            StackSource::Callstack => "callstack",
        }
    }
}

/// A tracked block the join gave a stack.
#[derive(Clone, Debug)]
pub struct SampledBlock {
    pub node: NodeId,
    pub samples: u64,
    pub sampling_rate: f64,
    pub source: StackSource,
    /// Index in [`Sites::stacks`].
    pub stack: u32,
}

impl SampledBlock {
    /// The bytes this block's samples stand for: each sample is one word in 1/rate.
    pub fn estimated_bytes(&self) -> f64 {
        if self.sampling_rate > 0.0 {
            self.samples as f64 * 8.0 / self.sampling_rate
        } else {
            0.0
        }
    }
}

/// How the snapshot's tracked blocks met their stacks. Every tracked entry is counted in
/// exactly one of the fields after `tracked`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct JoinStats {
    /// Entries in the snapshot's statmemprof tables.
    pub tracked: u64,
    /// With a stack from the memtrace trace.
    pub from_memtrace: u64,
    /// With a stack decoded from the call stack the tracker stored.
    pub from_callstack: u64,
    /// A memtrace allocation id the trace has no event for: the trace lags the snapshot (the
    /// program still held those events in memory), or it is not this run's.
    pub no_event: u64,
    /// A memtrace allocation id, and no trace was given (`--memtrace FILE`).
    pub no_trace: u64,
    /// User data that is neither form (the tracker keeps something else).
    pub other_user_data: u64,
    /// The block is gone or not yet one (deallocated, deleted, or its allocation callback was
    /// running), or is no block of the snapshot.
    pub not_in_heap: u64,
    /// The sampling rates of the profiles (samples per word), ascending.
    pub sampling_rates: Vec<f64>,
    /// The trace file ends inside a packet (it was still being written): read up to there.
    pub trace_truncated: bool,
}

/// The allocation stacks of a snapshot's sampled blocks.
#[derive(Clone)]
pub struct Sites {
    /// Sorted by node.
    pub blocks: Vec<SampledBlock>,
    /// Distinct frames.
    pub frames: Vec<SiteFrame>,
    /// Distinct stacks, as indices in `frames`, innermost frame first.
    pub stacks: Vec<Vec<u32>>,
    pub stats: JoinStats,
}

/// Refuses a trace of another process or program: the trace's pid and executable name must be
/// the snapshot's.
pub fn check_trace(snap: &Snapshot, trace: &Trace<'_>) -> Result<(), AnalyzeError> {
    let meta = snap.metadata();
    let info = trace.info();
    let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let trace_exe = base(&info.executable_name);
    let snap_exe = meta.executable.as_deref().map(base);
    let same_pid = meta.pid.is_some_and(|p| u64::from(p) == info.pid);
    let same_exe = snap_exe.as_deref() == Some(trace_exe.as_str());
    if same_pid && same_exe {
        return Ok(());
    }
    Err(AnalyzeError::BadQuery(format!(
        "the memtrace trace is of another {}: it traced pid {} ({}), the snapshot is of pid {} ({}); give the trace written by the run the snapshot was taken of",
        if same_exe { "run" } else { "program" },
        info.pid,
        info.executable_name,
        meta.pid.map_or("unknown".to_string(), |p| p.to_string()),
        meta.executable.as_deref().unwrap_or("unknown executable"),
    )))
}

impl Sites {
    /// Joins the snapshot's tracked blocks with their stacks. `trace` must be of the same run
    /// (see [`check_trace`], which this calls).
    pub fn new<'s>(a: &impl AnalysedHeap<'s>, trace: Option<&Trace<'_>>) -> Result<Sites, AnalyzeError> {
        let snap = a.snap();
        let Some(entries) = snap.memprof() else {
            return Err(AnalyzeError::BadQuery(
                "this snapshot has no statmemprof tables (OCaml 5.1 and 5.2 have no statmemprof; 4.14 and 5.3 and later have): allocation sites need a program sampled with Gc.Memprof or memtrace".into(),
            ));
        };
        if let Some(t) = trace {
            check_trace(snap, t)?;
        }
        let mut join = Join::new(a);
        let mut wanted: Vec<(usize, u64, NodeId)> = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            join.stats.tracked += 1;
            let Some(node) = join.tracked_node(e) else {
                join.stats.not_in_heap += 1;
                continue;
            };
            join.rates.insert(e.sampling_rate.to_bits());
            if e.user_data & 1 == 1 {
                if trace.is_some() {
                    wanted.push((i, e.user_data >> 1, node));
                } else {
                    join.stats.no_trace += 1;
                }
            } else if let Some(stack) = join.callstack(e.user_data) {
                join.push(node, e, StackSource::Callstack, stack);
                join.stats.from_callstack += 1;
            } else {
                join.stats.other_user_data += 1;
            }
        }
        if let Some(trace) = trace {
            let ids: FxHashSet<u64> = wanted.iter().map(|&(_, id, _)| id).collect();
            let index = trace.select(|id| ids.contains(&id)).map_err(|e| AnalyzeError::BadQuery(format!("the memtrace trace: {e}")))?;
            join.stats.trace_truncated = index.stats().truncated_tail;
            // The frames of each location code, made once.
            let mut of_code: FxHashMap<heapsnap_memtrace::LocationCode, Vec<u32>> = FxHashMap::default();
            // The stack of each of the trace's call stacks, made once.
            let mut of_stack: FxHashMap<u32, u32> = FxHashMap::default();
            let mut stack_ids: Vec<u32> = Vec::new();
            for (i, id, node) in wanted {
                let Some(alloc) = index.get(id) else {
                    join.stats.no_event += 1;
                    continue;
                };
                if let Some(&stack) = of_stack.get(&alloc.stack_id()) {
                    join.push(node, &entries[i], StackSource::Memtrace, stack);
                    join.stats.from_memtrace += 1;
                    continue;
                }
                stack_ids.clear();
                for code in index.codes(alloc) {
                    let frames = of_code.entry(code).or_insert_with(|| {
                        let frames: Vec<SiteFrame> = index
                            .frames_of_code(code)
                            .map(|f| match f.location {
                                Some(l) => SiteFrame { function: l.defname.to_string(), file: short(&l.filename), line: l.line },
                                None => SiteFrame { function: format!("code {:#x}", f.code), file: String::new(), line: 0 },
                            })
                            .collect();
                        frames.into_iter().map(|f| join.frame_id(f)).collect()
                    });
                    stack_ids.extend_from_slice(frames);
                }
                // The trace's stacks are distinct already: no need to look for an equal one.
                let stack = join.stacks.len() as u32;
                join.stacks.push(stack_ids.clone());
                of_stack.insert(alloc.stack_id(), stack);
                join.push(node, &entries[i], StackSource::Memtrace, stack);
                join.stats.from_memtrace += 1;
            }
        }
        Ok(join.finish())
    }

    /// Keeps the sampled blocks `keep` selects.
    pub fn retain(&mut self, keep: impl Fn(&SampledBlock) -> bool) {
        self.blocks.retain(keep);
    }

    /// The sampled block of a node, if any.
    pub fn block_of(&self, node: NodeId) -> Option<&SampledBlock> {
        self.blocks.binary_search_by_key(&node, |b| b.node).ok().map(|i| &self.blocks[i])
    }

    /// A block's allocation stack, innermost frame first.
    pub fn stack(&self, b: &SampledBlock) -> Vec<SiteFrame> {
        self.stacks[b.stack as usize].iter().map(|&f| self.frames[f as usize].clone()).collect()
    }

    /// The frames (indices in `frames`) naming a block's site: `depth` frames from the
    /// innermost one outside the standard library.
    pub fn site_frames(&self, b: &SampledBlock, depth: usize) -> &[u32] {
        let stack = &self.stacks[b.stack as usize];
        let first = stack.iter().position(|&f| !self.frames[f as usize].is_stdlib()).unwrap_or(0);
        &stack[first.min(stack.len())..(first + depth.max(1)).min(stack.len())]
    }

    /// The sampled blocks whose site (innermost frame outside the standard library) is
    /// `FILE:LINE`, by node.
    pub fn blocks_at(&self, file: &str, line: u32) -> Vec<NodeId> {
        self.blocks
            .iter()
            .filter(|b| self.site_frames(b, 1).first().is_some_and(|&f| self.frames[f as usize].matches(file, line)))
            .map(|b| b.node)
            .collect()
    }
}

/// Parses `FILE:LINE`.
pub fn parse_site(s: &str) -> Result<(String, u32), String> {
    let (file, line) = s.rsplit_once(':').ok_or_else(|| format!("{s:?} is no site: give FILE:LINE, as `top --by site` names sites"))?;
    let line = line.parse::<u32>().map_err(|e| format!("{s:?}: bad line number: {e}"))?;
    if file.is_empty() {
        return Err(format!("{s:?}: the file is missing (FILE:LINE)"));
    }
    Ok((file.to_string(), line))
}

fn short(file: &str) -> String {
    file.rsplit('/').next().unwrap_or(file).to_string()
}

/// The join's working state.
struct Join<'a, 's, A: AnalysedHeap<'s>> {
    a: &'a A,
    /// Return address by frame descriptor (FORMAT.md §3.14).
    descriptors: FxHashMap<u64, u64>,
    /// Decoded frames by return address.
    at_return: FxHashMap<u64, Vec<u32>>,
    /// Stack index by user-data block (call stacks are often shared by promotion).
    callstacks: FxHashMap<u64, Option<u32>>,
    frames: Vec<SiteFrame>,
    frame_ids: FxHashMap<SiteFrame, u32>,
    stacks: Vec<Vec<u32>>,
    stack_ids: FxHashMap<Vec<u32>, u32>,
    blocks: Vec<SampledBlock>,
    rates: FxHashSet<u64>,
    stats: JoinStats,
    _s: std::marker::PhantomData<&'s ()>,
}

impl<'a, 's, A: AnalysedHeap<'s>> Join<'a, 's, A> {
    fn new(a: &'a A) -> Self {
        let descriptors = a.snap().memprof_frames().into_iter().map(|r| (r.descriptor, r.return_address)).collect();
        Join {
            a,
            descriptors,
            at_return: FxHashMap::default(),
            callstacks: FxHashMap::default(),
            frames: Vec::new(),
            frame_ids: FxHashMap::default(),
            stacks: Vec::new(),
            stack_ids: FxHashMap::default(),
            blocks: Vec::new(),
            rates: FxHashSet::default(),
            stats: JoinStats::default(),
            _s: std::marker::PhantomData,
        }
    }

    /// The node of a tracked block still in the heap.
    fn tracked_node(&self, e: &MemprofRecord) -> Option<NodeId> {
        if e.flags & (MEMPROF_DEALLOCATED | MEMPROF_DELETED | MEMPROF_OFFSET) != 0 {
            return None;
        }
        match self.a.resolve(e.block) {
            PointsTo::Node(n) if self.a.address(n) == Some(e.block) => Some(n),
            _ => None,
        }
    }

    fn frame_id(&mut self, frame: SiteFrame) -> u32 {
        if let Some(&f) = self.frame_ids.get(&frame) {
            return f;
        }
        let f = self.frames.len() as u32;
        self.frames.push(frame.clone());
        self.frame_ids.insert(frame, f);
        f
    }

    fn intern(&mut self, stack: &[u32]) -> u32 {
        if let Some(&s) = self.stack_ids.get(stack) {
            return s;
        }
        let s = self.stacks.len() as u32;
        self.stacks.push(stack.to_vec());
        self.stack_ids.insert(stack.to_vec(), s);
        s
    }

    fn push(&mut self, node: NodeId, e: &MemprofRecord, source: StackSource, stack: u32) {
        self.blocks.push(SampledBlock { node, samples: e.samples, sampling_rate: e.sampling_rate, source, stack });
    }

    /// The stack of a user-data value that is a raw backtrace: a block of tag 0 whose fields
    /// are all frame descriptors the snapshot lists.
    fn callstack(&mut self, value: u64) -> Option<u32> {
        if let Some(&s) = self.callstacks.get(&value) {
            return s;
        }
        let s = self.decode_callstack(value);
        self.callstacks.insert(value, s);
        s
    }

    fn decode_callstack(&mut self, value: u64) -> Option<u32> {
        let PointsTo::Node(n) = self.a.resolve(value) else { return None };
        let b = self.a.block(n).filter(|b| b.address == value && b.header.tag == 0 && !b.fields.is_empty())?;
        let mut frames = Vec::new();
        for &slot in b.fields {
            // `Val_backtrace_slot`: the descriptor's address with bit 0 set.
            let descriptor = (slot & 1 == 1).then(|| slot - 1)?;
            let retaddr = *self.descriptors.get(&descriptor)?;
            frames.extend(self.frames_at(retaddr));
        }
        Some(self.intern(&frames))
    }

    /// The source frames of a call's return address, innermost first: the call instruction is
    /// the byte before it.
    fn frames_at(&mut self, retaddr: u64) -> Vec<u32> {
        if let Some(f) = self.at_return.get(&retaddr) {
            return f.clone();
        }
        let names = self.a.names();
        let pc = retaddr.wrapping_sub(1);
        let function = names.symbol(pc).map_or_else(|| format!("{retaddr:#x}"), |s| function_name(s).to_string());
        let mut frames: Vec<SiteFrame> =
            names.source_frames(pc).into_iter().map(|(file, line)| SiteFrame { function: function.clone(), file, line }).collect();
        if frames.is_empty() {
            frames.push(SiteFrame { function, file: String::new(), line: 0 });
        }
        let ids: Vec<u32> = frames.into_iter().map(|f| self.frame_id(f)).collect();
        self.at_return.insert(retaddr, ids.clone());
        ids
    }

    fn finish(mut self) -> Sites {
        self.blocks.sort_by_key(|b| b.node);
        let mut rates: Vec<f64> = self.rates.iter().map(|&r| f64::from_bits(r)).collect();
        rates.sort_by(f64::total_cmp);
        self.stats.sampling_rates = rates;
        Sites { blocks: self.blocks, frames: self.frames, stacks: self.stacks, stats: self.stats }
    }
}
