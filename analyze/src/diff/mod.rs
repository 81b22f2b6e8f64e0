//! Comparing successive snapshots of one program: what grew, where it sits, and the leak
//! suspects.
//!
//! Objects move (promotion, compaction), so addresses mean nothing from one snapshot to the
//! next. The diff compares what is stable:
//!
//! * **groups** (by tag, kind, closure or root), matched by name: their count, shallow and
//!   retained bytes in each snapshot (`groups`);
//! * **places** in the dominator tree, matched by path signature: a root's name, then the chain
//!   of fields and shapes, array indices folded to `[*]` and runs of one shape folded into one
//!   step ([`crate::signatures`], `merge`, `places`); when every snapshot has OCaml names,
//!   typed blocks are their types and their fields are named by their labels;
//! * with three snapshots or more, **leak suspects**: the groups whose count grew at every
//!   step, each with the shortest retainer paths of its members merged by signature, and how
//!   many members each path gained from the first snapshot to the last (`suspect_paths`).
//!
//! Snapshots of different programs, builds, OCaml versions or header layouts are refused
//! ([`check_pair`]). Two snapshots are analysed at a time, concurrently.
//!
//! ```no_run
//! use heapsnap_analyze::diff::{diff, DiffOptions, Input};
//! use heapsnap_analyze::Progress;
//! let (a, b) = (heapsnap_format::Snapshot::open("1.heapsnap")?, heapsnap_format::Snapshot::open("2.heapsnap")?);
//! let inputs = [Input { name: "1.heapsnap".into(), snap: &a, saved: None }, Input { name: "2.heapsnap".into(), snap: &b, saved: None }];
//! let report = diff(&inputs, &DiffOptions::default(), &Progress::stderr())?;
//! for place in &report.growth {
//!     println!("{:+} bytes  {}", place.delta_retained, place.description);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod compat;
mod groups;
mod merge;
mod places;
mod profile;
mod saved;
mod suspect_paths;

#[cfg(test)]
mod tests;

use crate::error::AnalyzeError;
use crate::model::GroupBy;
use crate::progress::Progress;
use crate::signatures::trie;
use heapsnap_format::Snapshot;
use merge::MergedTrie;
use profile::{profile, Kept, Profile};
use serde::Serialize;
use std::time::Instant;

pub use compat::{check_pair, warnings, Incompatibility};
pub use groups::GroupDiff;
pub use places::Place;
pub use saved::{has_names, saved_profile, SavedMember, SavedProfile};

/// What can stop a diff.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("a diff needs at least two snapshots (got {0})")]
    TooFewSnapshots(usize),
    #[error("cannot compare {first} with {other}: {reason}")]
    Incompatible { first: String, other: String, reason: Incompatibility },
    #[error("{name}: {source}")]
    Analyze { name: String, source: AnalyzeError },
}

/// A snapshot to compare, and the name the report gives it (its path).
pub struct Input<'a> {
    pub name: String,
    pub snap: &'a Snapshot,
    /// Its profile, saved by an earlier analysis (the analysis index): used instead of
    /// analysing the snapshot when it was made for the diff's grouping and use of names.
    pub saved: Option<&'a SavedProfile>,
}

#[derive(Clone, Debug)]
pub struct DiffOptions {
    pub by: GroupBy,
    /// Groups listed (0: all).
    pub limit: usize,
    /// Growth (bytes, first to last snapshot) below which a group is no suspect and a place
    /// not reported.
    pub min_growth: u64,
    pub max_suspects: usize,
    /// Paths per suspect.
    pub max_paths: usize,
    pub max_places: usize,
    /// Accept a different build-id of the same executable.
    pub allow_rebuilt: bool,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions { by: GroupBy::Kind, limit: 30, min_growth: 4096, max_suspects: 10, max_paths: 5, max_places: 10, allow_rebuilt: false }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SnapshotInfo {
    pub name: String,
    pub pid: Option<u32>,
    pub time_unix_ns: u64,
    pub trigger: heapsnap_format::Trigger,
    pub compactions: Option<u64>,
    pub objects: u64,
    pub reachable_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProgramInfo {
    pub executable: Option<String>,
    pub build_id: Option<String>,
    pub ocaml_version: String,
    pub reserved_header_bits: u8,
}

/// A retainer path of a suspect's members, merged by signature.
#[derive(Clone, Debug, Serialize)]
pub struct SuspectPath {
    pub signature: String,
    pub description: String,
    pub steps: Vec<trie::StepText>,
    /// Members with this path in the first and in the last snapshot.
    pub count: [u64; 2],
    /// Their difference: the members this path gained.
    pub new: i64,
    /// Address of one member in the last snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Suspect {
    #[serde(flatten)]
    pub group: GroupDiff,
    /// Paths that gained members, most first.
    pub paths: Vec<SuspectPath>,
    /// Distinct paths that gained members (before `max_paths`).
    pub growing_paths: u64,
    /// Where the group's sampled blocks were allocated, the sites that grew most first (when
    /// the snapshots have statmemprof's tables with stacks; filled by the caller,
    /// [`crate::sites::report::suspect_sites`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<crate::sites::report::SiteGrowth>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DiffReport {
    pub by: GroupBy,
    pub program: ProgramInfo,
    /// Oldest first.
    pub snapshots: Vec<SnapshotInfo>,
    pub warnings: Vec<String>,
    /// Whether signatures and descriptions use the OCaml names (roots by identifier, typed
    /// blocks by type, fields by label): only when every snapshot has them (a warning says why
    /// not when some have).
    pub ocaml_names: bool,
    pub min_growth: u64,
    /// Groups in any snapshot, and the `limit` that grew most.
    pub total_groups: u64,
    pub groups: Vec<GroupDiff>,
    /// With three snapshots or more; empty otherwise.
    pub suspects: Vec<Suspect>,
    /// Where retained bytes grew in the dominator tree.
    pub growth: Vec<Place>,
    /// Wall-clock seconds of each step of the diff.
    pub timings: Vec<Timing>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Timing {
    pub step: String,
    pub seconds: f64,
}

/// Compares snapshots, oldest first.
pub fn diff(inputs: &[Input<'_>], opts: &DiffOptions, progress: &Progress) -> Result<DiffReport, DiffError> {
    if inputs.len() < 2 {
        return Err(DiffError::TooFewSnapshots(inputs.len()));
    }
    let first = &inputs[0];
    for other in &inputs[1..] {
        compat::check_pair(first.snap, other.snap, opts.allow_rebuilt).map_err(|reason| DiffError::Incompatible {
            first: first.name.clone(),
            other: other.name.clone(),
            reason,
        })?;
    }
    for i in inputs {
        opts.by.check(i.snap).map_err(|source| DiffError::Analyze { name: i.name.clone(), source })?;
    }
    let snaps: Vec<&Snapshot> = inputs.iter().map(|i| i.snap).collect();
    let mut warnings = compat::warnings(&snaps);
    let ocaml_names = match names_note(inputs) {
        Ok(used) => used,
        Err(note) => {
            warnings.push(note);
            false
        }
    };
    let mut timings: Vec<Timing> = Vec::new();
    let mut time = |step: String, seconds: f64| timings.push(Timing { step, seconds });

    let timer = crate::progress::PhaseTimer::start("diff");
    let t = Instant::now();
    let (profiles, kept) = analyse_all(inputs, opts.by, ocaml_names, progress)?;
    let saved = inputs.iter().filter(|i| i.saved.is_some_and(|s| s.by == opts.by && s.names == ocaml_names)).count();
    timer.lap(&format!("{} snapshots profiled ({saved} read from their index)", inputs.len()));
    let k = profiles.len();
    time("analysis".into(), t.elapsed().as_secs_f64());
    for (i, p) in profiles.iter().enumerate() {
        for (step, s) in &p.timings {
            time(format!("snapshot {}: {step}", i + 1), *s);
        }
    }

    let t = Instant::now();
    let group_lists: Vec<&[crate::model::Group]> = profiles.iter().map(|p| p.groups.as_slice()).collect();
    let all_groups = groups::diff_groups(&group_lists);
    let mut suspect_groups = groups::suspects(&all_groups, opts.min_growth);
    suspect_groups.truncate(opts.max_suspects);
    let mut merged = MergedTrie::new(k);
    for (i, p) in profiles.iter().enumerate() {
        merged.add(&p.dom, Some(i));
    }
    let growth = places::growth_places(&merged, opts.min_growth, opts.max_places);
    time("compare".into(), t.elapsed().as_secs_f64());
    timer.lap("compared");

    let t = Instant::now();
    let suspects = match kept {
        Some((kf, kl)) if !suspect_groups.is_empty() => {
            let step = progress.step("diff: paths of the suspects", 0);
            let s = suspects_with_paths(suspect_groups, opts, (kf, &profiles[0].dom), (kl, &profiles[k - 1].dom));
            step.finish_and_clear();
            s
        }
        _ => Vec::new(),
    };
    time("suspect paths".into(), t.elapsed().as_secs_f64());
    timer.lap("the suspects' paths");

    let meta = first.snap.metadata();
    let total_groups = all_groups.len() as u64;
    let mut listed = all_groups;
    if opts.limit > 0 {
        listed.truncate(opts.limit);
    }
    Ok(DiffReport {
        by: opts.by,
        program: ProgramInfo {
            executable: meta.executable.clone(),
            build_id: meta.build_id.clone(),
            ocaml_version: meta.ocaml_version.clone(),
            reserved_header_bits: meta.reserved_header_bits,
        },
        snapshots: inputs
            .iter()
            .zip(&profiles)
            .map(|(i, p)| {
                let m = i.snap.metadata();
                SnapshotInfo {
                    name: i.name.clone(),
                    pid: m.pid,
                    time_unix_ns: m.time_unix_ns,
                    trigger: m.trigger,
                    compactions: m.compactions,
                    objects: p.objects,
                    reachable_bytes: p.reachable_bytes,
                }
            })
            .collect(),
        warnings,
        ocaml_names,
        min_growth: opts.min_growth,
        total_groups,
        groups: listed,
        suspects,
        growth,
        timings,
    })
}

/// Whether the diff can use OCaml names: `Ok(true)` when every snapshot has them, `Ok(false)`
/// when none has, and when only some have, why they are not used (signatures must be the same
/// in every snapshot to match: a root named `Cache_leak.cache` in one and `Cache_leak.1` in
/// another would be two places).
fn names_note(inputs: &[Input<'_>]) -> Result<bool, String> {
    // A names section that does not parse is no names (the analysis reads it so); a saved
    // profile says whether they parsed (not parsed again).
    let named = |i: &Input<'_>| i.saved.map_or_else(|| saved::has_names(i.snap), |p| p.names);
    let missing: Vec<&str> = inputs.iter().filter(|i| !named(i)).map(|i| i.name.as_str()).collect();
    if missing.is_empty() || missing.len() == inputs.len() {
        return Ok(missing.is_empty());
    }
    Err(format!(
        "OCaml names not used: {} {} none, so every snapshot is compared by block shapes and field numbers (add names to each with `heapsnap annotate SNAP --cmt DIR`)",
        missing.join(", "),
        if missing.len() == 1 { "has" } else { "have" }
    ))
}

/// What the suspects' paths are counted from in the first and the last snapshot: the analysis
/// kept, or the profile saved.
pub(crate) enum PathSource<'s> {
    Analysed(Box<Kept<'s>>),
    Saved(&'s SavedProfile),
}

/// Profiles every snapshot: from its saved profile when it has one for this grouping and use
/// of names, else by analysing it, two at a time: the middle ones first (only their profiles
/// stay), then the first and the last, kept analysed when there are three snapshots or more
/// (the suspects' paths need them).
#[allow(clippy::type_complexity)]
fn analyse_all<'s>(
    inputs: &[Input<'s>],
    by: GroupBy,
    names: bool,
    progress: &Progress,
) -> Result<(Vec<Profile>, Option<(PathSource<'s>, PathSource<'s>)>), DiffError> {
    let k = inputs.len();
    let bar = progress.step("diff: analysing", k as u64);
    let usable = |i: usize| inputs[i].saved.filter(|s| s.by == by && s.names == names);
    let run = |i: usize, keep: bool| -> Result<(Profile, Option<PathSource<'s>>), DiffError> {
        let r = match usable(i) {
            Some(saved) => {
                let t = Instant::now();
                let mut p = saved.profile();
                p.timings.push(("read from the index", t.elapsed().as_secs_f64()));
                Ok((p, keep.then_some(PathSource::Saved(saved))))
            }
            None => {
                if inputs[i].saved.is_some() {
                    crate::progress::PhaseTimer::start("diff").lap(&format!(
                        "{}: its saved profile is not by {} with{} names: analysing it",
                        inputs[i].name,
                        by.name(),
                        if names { "" } else { "out" }
                    ));
                }
                profile(inputs[i].snap, by, keep, names)
                    .map(|(p, kept)| (p, kept.map(|kept| PathSource::Analysed(Box::new(kept)))))
                    .map_err(|source| DiffError::Analyze { name: inputs[i].name.clone(), source })
            }
        };
        bar.inc(1);
        r
    };
    let mut profiles: Vec<Option<Profile>> = (0..k).map(|_| None).collect();
    let middle: Vec<usize> = (1..k - 1).collect();
    for pair in middle.chunks(2) {
        match *pair {
            [x, y] => {
                let (px, py) = rayon::join(|| run(x, false), || run(y, false));
                profiles[x] = Some(px?.0);
                profiles[y] = Some(py?.0);
            }
            [x] => profiles[x] = Some(run(x, false)?.0),
            _ => unreachable!("chunks of at most two"),
        }
    }
    let keep = k >= 3;
    let (first, last) = rayon::join(|| run(0, keep), || run(k - 1, keep));
    let (first, kept_first) = first?;
    let (last, kept_last) = last?;
    profiles[0] = Some(first);
    profiles[k - 1] = Some(last);
    bar.finish_and_clear();
    let profiles = profiles.into_iter().map(|p| p.expect("every snapshot profiled")).collect();
    Ok((profiles, kept_first.zip(kept_last)))
}

/// Paths of the suspects' members in the first and last snapshots, matched by signature.
fn suspects_with_paths(
    suspect_groups: Vec<GroupDiff>,
    opts: &DiffOptions,
    first: (PathSource<'_>, &trie::SigTrie),
    last: (PathSource<'_>, &trie::SigTrie),
) -> Vec<Suspect> {
    let names: Vec<String> = suspect_groups.iter().map(|g| g.name.clone()).collect();
    // Each analysis moves to the thread that uses it (they are not shareable between threads).
    let chains = |(source, dom): (PathSource<'_>, &trie::SigTrie)| match source {
        PathSource::Analysed(kept) => {
            let d = kept.dom_sig_pre.as_deref().map(|s| (s, dom));
            let member = suspect_paths::membership(&kept.classified, d, opts.by, &names);
            suspect_paths::member_chains(&kept.analysis, &kept.classified, &member)
        }
        PathSource::Saved(saved) => saved.suspect_chains(&names),
    };
    let (cf, cl) = rayon::join(|| chains(first), || chains(last));
    let mut merged = MergedTrie::new(0);
    let map_first = merged.add(&cf.trie, None);
    let map_last = merged.add(&cl.trie, None);
    // (suspect, merged signature) -> ([first, last], example in the last)
    let mut per: std::collections::HashMap<(u32, u32), ([u64; 2], u64)> = std::collections::HashMap::new();
    for (&(s, sig), m) in &cf.counts {
        per.entry((s, map_first[sig as usize])).or_insert(([0, 0], 0)).0[0] += m.count;
    }
    for (&(s, sig), m) in &cl.counts {
        let e = per.entry((s, map_last[sig as usize])).or_insert(([0, 0], 0));
        e.0[1] += m.count;
        e.1 = m.address;
    }
    suspect_groups
        .into_iter()
        .enumerate()
        .map(|(i, group)| {
            let mut paths: Vec<SuspectPath> = per
                .iter()
                .filter(|(&(s, _), (c, _))| s == i as u32 && c[1] > c[0])
                .map(|(&(_, sig), &(count, example))| {
                    let steps = merged.steps(sig);
                    SuspectPath {
                        signature: trie::signature_text(&steps, false),
                        description: trie::signature_text(&steps, true),
                        steps,
                        count,
                        new: count[1] as i64 - count[0] as i64,
                        example: (example != 0).then(|| format!("{example:#x}")),
                    }
                })
                .collect();
            paths.sort_by(|x, y| y.new.cmp(&x.new).then(x.signature.cmp(&y.signature)));
            let growing_paths = paths.len() as u64;
            paths.truncate(opts.max_paths);
            Suspect { group, paths, growing_paths, sites: Vec::new() }
        })
        .collect()
}
