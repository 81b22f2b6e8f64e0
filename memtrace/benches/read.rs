//! Reading a memtrace trace of 10^6 events: streaming every event with its backtrace, and
//! building the index of live allocations with their call stacks.
//!
//!     cargo bench -p heapsnap-memtrace                        # a synthetic trace of 10^6 events
//!     cargo bench -p heapsnap-memtrace -- --events 5000000
//!     cargo bench -p heapsnap-memtrace -- --trace FILE.ctf    # a real trace
//!     (`cargo test --all-targets` runs it on 50k events, as a smoke test)
//!
//! The synthetic trace comes from the crate's writer, shaped like a program's (see
//! tests/common/synthetic.rs): backtraces of up to 60 frames walking a call tree of 400
//! functions, most blocks dying young. Times are the best of 5 runs, from a memory-mapped file.

#[path = "../tests/traces/common/synthetic.rs"]
mod synthetic;

use heapsnap_memtrace::{Event, Trace};
use heapsnap_testkit::bench::best_of;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value_of = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let measuring = args.iter().any(|a| a == "--bench");
    let dir = tempfile::tempdir().unwrap();
    let path = match value_of("--trace") {
        Some(path) => PathBuf::from(path),
        None => {
            let events: usize = value_of("--events").map(|v| v.parse().unwrap()).unwrap_or(if measuring { 1_000_000 } else { 50_000 });
            let started = Instant::now();
            let bytes = synthetic::trace(events, 1);
            println!("synthetic trace: {events} events, {:.1} MB, written in {:.2?}", bytes.len() as f64 / 1e6, started.elapsed());
            let path = dir.path().join("bench.ctf");
            std::fs::write(&path, bytes).unwrap();
            path
        }
    };
    let trace = Trace::open(&path).unwrap();
    let size = trace.bytes().len() as f64;
    let runs = if measuring { 5 } else { 1 };

    // Streaming: every event, every backtrace code.
    let (streaming, (events, frames)) = best_of(runs, || {
        let mut events = trace.events();
        let (mut count, mut frames) = (0u64, 0u64);
        while let Some(event) = events.next_event().unwrap() {
            count += 1;
            if let Event::Alloc(alloc) = event {
                frames += alloc.backtrace.codes().len() as u64;
            }
        }
        (count, frames)
    });
    let per_second = |d: Duration| events as f64 / d.as_secs_f64() / 1e6;
    println!(
        "events:  {events} events ({frames} backtrace frames) in {streaming:.2?}: {:.1} M events/s, {:.0} MB/s",
        per_second(streaming),
        size / streaming.as_secs_f64() / 1e6
    );

    // The index: live allocations, call stacks in a tree.
    let (indexing, (live, nodes)) = best_of(runs, || {
        let index = trace.index().unwrap();
        (index.len(), index.stack_nodes())
    });
    println!("index:   {live} live allocations, {nodes} call-stack nodes, in {indexing:.2?}: {:.1} M events/s", per_second(indexing));

    // Resolving every live allocation's frames to source locations.
    let index = trace.index().unwrap();
    let (resolving, resolved) =
        best_of(runs, || index.allocations().map(|a| index.frames(a).filter(|f| f.location.is_some()).count()).sum::<usize>());
    println!("frames:  {resolved} frames of the live allocations resolved in {resolving:.2?}");
}
