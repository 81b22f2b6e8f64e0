//! Traces from our writer read back event for event: random backtraces over a small set of
//! codes exercise cache hits, misses, evictions and prediction runs (up to the 255 limit).

use crate::common::synthetic::{info, START_TIME};
use heapsnap_memtrace::write::TraceWriter;
use heapsnap_memtrace::{AllocSource, Event, Location, Trace};
use proptest::prelude::*;
use std::borrow::Cow;

#[derive(Debug, Clone, PartialEq)]
enum Written {
    Alloc { id: u64, time: u64, length: u64, nsamples: u64, source: AllocSource, backtrace: Vec<u64> },
    Promote { id: u64, time: u64 },
    Collect { id: u64, time: u64 },
}

fn source() -> impl Strategy<Value = AllocSource> {
    prop_oneof![Just(AllocSource::Minor), Just(AllocSource::Major), Just(AllocSource::External)]
}

/// Backtraces from few codes, with runs of one code (deep recursion) and repeated sequences.
fn backtrace() -> impl Strategy<Value = Vec<u64>> {
    let piece = prop_oneof![
        (0u64..30).prop_map(|c| vec![c * 0x100 + 0x1000]),
        ((0u64..30), 1usize..400).prop_map(|(c, n)| vec![c * 0x100 + 0x1000; n]),
        prop::collection::vec(0u64..5000, 1..6).prop_map(|cs| cs.into_iter().map(|c| c * 0x40 + 0x7000).collect::<Vec<_>>()),
    ];
    prop::collection::vec(piece, 0..8).prop_map(|pieces| pieces.concat())
}

/// kind (0 short-able allocation, 1 allocation, 2 promotion, 3 collection), time step, length,
/// samples, source, backtrace, which earlier id.
type Step = (u8, u64, u64, u64, AllocSource, Vec<u64>, u64);

fn step() -> impl Strategy<Value = Step> {
    (0u8..4, 0u64..40_000_000, 0u64..70_000, 1u64..4, source(), backtrace(), any::<u64>())
}

fn write(steps: &[Step]) -> (Vec<u8>, Vec<Written>) {
    let mut writer = TraceWriter::new(&info(7));
    for c in 0..30 {
        let code = c * 0x100 + 0x1000;
        let location = Location {
            filename: Cow::Owned(format!("f{}.ml", c % 7)),
            line: c as u32,
            start_char: 1,
            end_char: 2,
            defname: Cow::Owned(format!("F.g{c}")),
        };
        writer.define_location(code, vec![location]);
    }
    let mut written = Vec::new();
    let mut time = START_TIME;
    let mut allocated = 0u64;
    for (kind, dt, length, nsamples, source, backtrace, pick) in steps {
        time += dt % 3 * (dt / 3 % 40_000_000); // some steps longer than a packet's 30 s
        if *kind < 2 || allocated == 0 {
            let nsamples = if *kind == 0 { 1 } else { *nsamples };
            let id = writer.alloc(time, *length, nsamples, *source, backtrace);
            assert_eq!(id, allocated);
            allocated += 1;
            written.push(Written::Alloc { id, time, length: *length, nsamples, source: *source, backtrace: backtrace.clone() });
        } else {
            let id = pick % allocated;
            if *kind == 2 {
                writer.promote(time, id);
                written.push(Written::Promote { id, time });
            } else {
                writer.collect(time, id);
                written.push(Written::Collect { id, time });
            }
        }
    }
    (writer.finish(), written)
}

fn read(bytes: &[u8]) -> Vec<Written> {
    let trace = Trace::from_bytes(bytes).unwrap();
    let mut events = trace.events();
    let mut out = Vec::new();
    while let Some(event) = events.next_event().unwrap() {
        out.push(match event {
            Event::Alloc(a) => Written::Alloc {
                id: a.id,
                time: a.time,
                length: a.length_words,
                nsamples: a.nsamples,
                source: a.source,
                backtrace: a.backtrace.codes().to_vec(),
            },
            Event::Promote { id, time, .. } => Written::Promote { id, time },
            Event::Collect { id, time, .. } => Written::Collect { id, time },
        });
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn written_traces_read_back(steps in prop::collection::vec(step(), 1..300)) {
        let (bytes, written) = write(&steps);
        prop_assert_eq!(read(&bytes), written);
    }
}

#[test]
fn header_and_locations_read_back() {
    let (bytes, _) = write(&[(1, 0, 5, 2, AllocSource::Major, vec![0x1000, 0x1100, 0x1100], 0)]);
    let trace = Trace::from_bytes(&bytes).unwrap();
    assert_eq!(trace.info(), &info(7));
    let mut events = trace.events();
    let Some(Event::Alloc(alloc)) = events.next_event().unwrap() else { panic!("no allocation") };
    let frames: Vec<String> = alloc.backtrace.frames().map(|f| f.location.unwrap().to_string()).collect();
    assert_eq!(frames, ["F.g1@f1.ml:1:1-2", "F.g1@f1.ml:1:1-2", "F.g0@f0.ml:0:1-2"]);
}

#[test]
fn synthetic_index_matches_a_replay() {
    let bytes = crate::common::synthetic::trace(200_000, 11);
    let trace = Trace::from_bytes(&bytes).unwrap();
    // Replay: which ids are alive at the end, and their backtraces.
    let mut alive = std::collections::HashMap::new();
    let mut events = trace.events();
    while let Some(event) = events.next_event().unwrap() {
        match event {
            Event::Alloc(a) => {
                alive.insert(a.id, a.backtrace.codes().to_vec());
            }
            Event::Collect { id, .. } => assert!(alive.remove(&id).is_some()),
            Event::Promote { .. } => {}
        }
    }
    let index = trace.index().unwrap();
    assert_eq!(index.len(), alive.len());
    for alloc in index.allocations() {
        let mut codes: Vec<u64> = index.codes(alloc).collect();
        codes.reverse();
        assert_eq!(&codes, &alive[&alloc.id]);
        // Inlined sites give two frames per code.
        assert!(index.frames(alloc).count() >= codes.len());
    }
}

#[test]
fn selected_allocations_keep_their_stacks_collected_or_not() {
    let bytes = crate::common::synthetic::trace(100_000, 5);
    let trace = Trace::from_bytes(&bytes).unwrap();
    let mut all = std::collections::HashMap::new();
    let mut events = trace.events();
    while let Some(event) = events.next_event().unwrap() {
        if let Event::Alloc(a) = event {
            all.insert(a.id, a.backtrace.codes().to_vec());
        }
    }
    // Every third id: most of them collected by the end of the trace.
    let selected = trace.select(|id| id % 3 == 0).unwrap();
    assert_eq!(selected.len(), all.keys().filter(|&&id| id % 3 == 0).count());
    assert!(selected.len() > trace.index().unwrap().len() / 3, "collected allocations are kept too");
    // Equal backtraces, and only they, share a stack id.
    let mut ids: std::collections::HashMap<Vec<u64>, u32> = std::collections::HashMap::new();
    let mut stacks: std::collections::HashMap<u32, Vec<u64>> = std::collections::HashMap::new();
    for alloc in selected.allocations() {
        let mut codes: Vec<u64> = selected.codes(alloc).collect();
        codes.reverse();
        assert_eq!(&codes, &all[&alloc.id], "id {}", alloc.id);
        assert_eq!(*ids.entry(codes.clone()).or_insert(alloc.stack_id()), alloc.stack_id());
        assert_eq!(stacks.entry(alloc.stack_id()).or_insert(codes.clone()), &codes);
    }
    assert!(ids.len() > 1);
}
