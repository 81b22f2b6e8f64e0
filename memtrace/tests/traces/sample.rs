//! A real trace of samples/memtrace_sample.ml: the header names the child process, the
//! allocations carry backtraces naming the sample's source lines through both call paths,
//! sample counts agree with the rate, and promotions and collections match what the program
//! kept and dropped.

use crate::common::*;
use heapsnap_memtrace::{AllocSource, Event, Frame, Trace};
use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

const ITERATIONS: u32 = 20_000;
const RATE: f64 = 0.01;

/// Line numbers of the `(* SITE name *)` markers of the sample.
fn site_lines() -> HashMap<String, u32> {
    let source = std::fs::read_to_string(repo_root().join("samples/memtrace_sample.ml")).unwrap();
    let mut sites = HashMap::new();
    for (n, line) in source.lines().enumerate() {
        if let Some(at) = line.find("(* SITE ") {
            let name = line[at + 8..].split_whitespace().next().unwrap();
            sites.insert(name.to_string(), n as u32 + 1);
        }
    }
    assert_eq!(sites.len(), 6, "markers in memtrace_sample.ml: {sites:?}");
    sites
}

fn is_site(frame: &Frame<'_>, line: u32, function: &str) -> bool {
    frame.location.is_some_and(|l| l.filename.ends_with("memtrace_sample.ml") && l.line == line && l.defname == function)
}

/// What a site's allocation looks like, from its innermost frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Site {
    Leak,
    Churn { depth: usize },
    Big,
    External,
}

fn classify(frames: &[Frame<'_>], sites: &HashMap<String, u32>) -> Option<Site> {
    let site = |name: &str| sites[name];
    let first = frames.first()?;
    if is_site(first, site("make_block"), "Memtrace_sample.make_block") {
        let caller = frames.get(1)?;
        if is_site(caller, site("leak"), "Memtrace_sample.leak") {
            return Some(Site::Leak);
        }
        if is_site(caller, site("churn"), "Memtrace_sample.churn") {
            let depth = frames[2..].iter().take_while(|f| is_site(f, site("churn_recursion"), "Memtrace_sample.churn")).count();
            return Some(Site::Churn { depth });
        }
        return None;
    }
    if is_site(first, site("big_block"), "Memtrace_sample.big_block") {
        return Some(Site::Big);
    }
    // External allocations: memtrace drops its own frames, and external_alloc's is a tail call.
    is_site(first, site("external"), "Memtrace_sample").then_some(Site::External)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string()
}

/// `observed` is within five standard deviations of a Poisson count of mean `expected`.
fn assert_consistent_with_rate(what: &str, observed: u64, expected: f64) {
    let deviation = (observed as f64 - expected).abs() / expected.sqrt();
    assert!(deviation < 5.0, "{what}: {observed} samples, expected about {expected:.0} ({deviation:.1} sd away)");
}

#[test]
fn sample_trace_header_allocations_promotions_and_collections() {
    let Some(programs) = ocaml_programs() else { return };
    let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64;
    let recorded = record_sample(&programs, ITERATIONS, RATE);
    let finished = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64;
    let trace = Trace::open(&recorded.path).unwrap();
    let sites = site_lines();

    // The header.
    let info = trace.info();
    assert_eq!(info.pid, recorded.pid as u64);
    assert_eq!(std::fs::canonicalize(&info.executable_name).unwrap(), std::fs::canonicalize(&recorded.executable).unwrap());
    assert_eq!(info.host_name, hostname());
    assert_eq!(info.sample_rate, RATE);
    assert_eq!(info.word_size, 64);
    assert_eq!(info.version, 3);
    assert_eq!(info.context.as_deref(), Some("heapsnap-memtrace sample"));
    assert!((started..=finished).contains(&info.start_time), "start time {} not in [{started}, {finished}]", info.start_time);

    // Every event, by site.
    let mut site_of_id: HashMap<u64, Site> = HashMap::new();
    let mut codes_of_id: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut samples: BTreeMap<&str, u64> = BTreeMap::new();
    let mut churn_depths = [0u64; 8];
    let mut promoted: BTreeMap<&str, u64> = BTreeMap::new();
    let mut collected: BTreeMap<&str, u64> = BTreeMap::new();
    let mut next_id = 0;
    let mut last_time = info.start_time;
    let name = |site: Site| match site {
        Site::Leak => "leak",
        Site::Churn { .. } => "churn",
        Site::Big => "big",
        Site::External => "external",
    };
    let mut events = trace.events();
    while let Some(event) = events.next_event().unwrap() {
        match event {
            Event::Alloc(alloc) => {
                assert_eq!(alloc.id, next_id, "allocation ids count up from 0");
                next_id += 1;
                assert!(alloc.time >= last_time && alloc.time <= finished);
                last_time = alloc.time;
                assert!(alloc.nsamples >= 1 && alloc.nsamples <= alloc.length_words + 1, "{alloc:?}");
                codes_of_id.insert(alloc.id, alloc.backtrace.codes().to_vec());
                let frames: Vec<Frame<'_>> = alloc.backtrace.frames().collect();
                let Some(site) = classify(&frames, &sites) else {
                    // memtrace's own startup allocations, before the loop.
                    continue;
                };
                let (length, source) = match site {
                    Site::Leak | Site::Churn { .. } => (100, AllocSource::Minor),
                    Site::Big => (4096, AllocSource::Major),
                    Site::External => (1000, AllocSource::External),
                };
                assert_eq!((alloc.length_words, alloc.source), (length, source), "{site:?}");
                if let Site::Churn { depth } = site {
                    churn_depths[depth] += 1;
                }
                *samples.entry(name(site)).or_default() += alloc.nsamples;
                site_of_id.insert(alloc.id, site);
            }
            Event::Promote { id, .. } => *promoted.entry(site_of_id.get(&id).map_or("other", |&s| name(s))).or_default() += 1,
            Event::Collect { id, .. } => *collected.entry(site_of_id.get(&id).map_or("other", |&s| name(s))).or_default() += 1,
        }
    }
    assert_eq!(events.skipped_packets(), 0);
    let allocations = |wanted: &str| site_of_id.values().filter(|&&s| name(s) == wanted).count() as u64;
    eprintln!(
        "samples {samples:?}; allocations leak {} churn {}; promoted {promoted:?}; collected {collected:?}",
        allocations("leak"),
        allocations("churn")
    );

    // Samples are drawn over length + 1 words (the header counts).
    let n = ITERATIONS as f64;
    assert_consistent_with_rate("leak", samples["leak"], RATE * n * 101.0);
    assert_consistent_with_rate("churn", samples["churn"], RATE * n * 101.0);
    assert_consistent_with_rate("big", samples["big"], RATE * (n / 100.0) * 4097.0);
    assert_consistent_with_rate("external", samples["external"], RATE * (n / 100.0) * 1000.0);
    // Every recursion depth of churn appears, about as often as the others.
    for (depth, &count) in churn_depths.iter().enumerate() {
        assert!(count as f64 > allocations("churn") as f64 / 8.0 * 0.7, "churn depth {depth}: {count} of {}", allocations("churn"));
    }
    // A block of 4097 words at rate 0.01 is sampled but for a chance of 1e-18.
    assert_eq!(allocations("big"), 200);

    // Kept blocks are promoted and never collected; churned ones are collected; half of the big
    // blocks and of the external allocations are released.
    assert_eq!(promoted.get("leak").copied(), Some(allocations("leak")));
    assert_eq!(collected.get("leak"), None);
    // A churned block is promoted only if a minor collection runs while it is still held: when
    // memtrace's callback for that very allocation allocates.
    assert!(promoted.get("churn").copied().unwrap_or(0) * 100 < allocations("churn"), "churned blocks promoted: {promoted:?}");
    assert_eq!(collected.get("churn").copied(), Some(allocations("churn")));
    assert_eq!(promoted.get("big"), None);
    assert_eq!(collected.get("big").copied(), Some(100));
    assert_eq!(collected.get("external").copied(), Some(allocations("external") / 2));

    // The index keeps exactly the allocations not collected, with the same backtraces.
    let index = trace.index().unwrap();
    assert_eq!(index.stats().allocations, next_id);
    assert_eq!(index.stats().unmatched_collections, 0);
    assert_eq!(index.stats().unmatched_promotions, 0);
    let mut live: BTreeMap<&str, u64> = BTreeMap::new();
    for alloc in index.allocations() {
        let mut codes: Vec<u64> = index.codes(alloc).collect();
        codes.reverse();
        assert_eq!(codes, codes_of_id[&alloc.id], "the index's backtrace of allocation {}", alloc.id);
        let frames: Vec<Frame<'_>> = index.frames(alloc).collect();
        let Some(site) = classify(&frames, &sites) else { continue };
        assert_eq!(site_of_id[&alloc.id], site, "the index's backtrace of allocation {}", alloc.id);
        assert_eq!(alloc.is_major(), site != Site::External, "{site:?}");
        *live.entry(name(site)).or_default() += 1;
    }
    assert_eq!(live.get("leak").copied(), Some(allocations("leak")));
    assert_eq!(live.get("churn"), None);
    assert_eq!(live.get("big").copied(), Some(100));
    assert_eq!(live.get("external").copied(), Some(allocations("external") - allocations("external") / 2));
}
