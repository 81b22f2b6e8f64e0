//! Mutated traces must never make the reader panic or hang: every input ends in a trace read to
//! its end, or in an error. Seeds: a synthetic trace and, when memtrace's source is on the
//! machine, its test trace of ocamlopt (a real program's, v003).
//!
//! HEAPSNAP_FUZZ_CASES (default 3000) sets the number of mutated inputs.

use heapsnap_memtrace::{Event, Trace};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn seeds() -> &'static Vec<Vec<u8>> {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut seeds = vec![crate::common::synthetic::trace(6000, 9)];
        let dir = tempfile::tempdir().unwrap();
        if let Some(path) = crate::common::memtrace_test_trace(dir.path()) {
            seeds.push(std::fs::read(path).unwrap());
        }
        seeds
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Overwrites bytes at a fraction of the length with a value of 1 to 8 bytes.
    Write {
        at: f64,
        value: u64,
        width: usize,
    },
    FlipBit {
        at: f64,
        bit: u8,
    },
    Truncate {
        at: f64,
    },
    /// Removes or repeats a range.
    Delete {
        at: f64,
        len: usize,
    },
    Duplicate {
        at: f64,
        len: usize,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let value =
        prop_oneof![Just(0u64), Just(u64::MAX), Just(0xffff), Just(252), Just(253), Just(254), Just(255), Just(0xc1fc_1fc1), any::<u64>()];
    prop_oneof![
        4 => (0.0..1.0, value, 1usize..=8).prop_map(|(at, value, width)| Mutation::Write { at, value, width }),
        4 => (0.0..1.0, 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        1 => (0.0..1.0).prop_map(|at| Mutation::Truncate { at }),
        1 => (0.0..1.0, 1usize..200).prop_map(|(at, len)| Mutation::Delete { at, len }),
        1 => (0.0..1.0, 1usize..200).prop_map(|(at, len)| Mutation::Duplicate { at, len }),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    let position = |at: f64, len: usize| ((at * len as f64) as usize).min(len.saturating_sub(1));
    match *mutation {
        Mutation::Write { at, value, width } => {
            let at = position(at, bytes.len());
            let end = (at + width).min(bytes.len());
            bytes[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
        }
        Mutation::FlipBit { at, bit } => {
            let at = position(at, bytes.len());
            bytes[at] ^= 1 << bit;
        }
        Mutation::Truncate { at } => bytes.truncate(position(at, bytes.len())),
        Mutation::Delete { at, len } => {
            let at = position(at, bytes.len());
            bytes.drain(at..(at + len).min(bytes.len()));
        }
        Mutation::Duplicate { at, len } => {
            let at = position(at, bytes.len());
            let copy = bytes[at..(at + len).min(bytes.len())].to_vec();
            bytes.splice(at..at, copy);
        }
    }
}

/// Everything a user can do with a trace: header, every event with its frames, the index.
fn read_everything(bytes: &[u8]) -> Result<usize, heapsnap_memtrace::Error> {
    let trace = Trace::from_bytes(bytes)?;
    let mut events = trace.events();
    let mut frames = 0;
    while let Some(event) = events.next_event()? {
        if let Event::Alloc(alloc) = event {
            frames += alloc.backtrace.frames().map(|f| f.location.map_or(0, |l| l.filename.len())).sum::<usize>();
        }
    }
    let index = trace.index()?;
    for alloc in index.allocations() {
        frames += index.frames(alloc).count();
    }
    Ok(frames)
}

#[test]
fn mutated_traces_never_panic_or_hang() {
    for seed in seeds() {
        read_everything(seed).expect("a seed is a valid trace");
    }
    let cases = std::env::var("HEAPSNAP_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let input = (0..seeds().len(), prop::collection::vec(mutation(), 1..6));
    let (accepted, refused) = (Cell::new(0u32), Cell::new(0u32));
    runner
        .run(&input, |(seed, mutations)| {
            let mut bytes = seeds()[seed].clone();
            for m in &mutations {
                if !bytes.is_empty() {
                    apply(&mut bytes, m);
                }
            }
            let started = Instant::now();
            match read_everything(&bytes) {
                Ok(_) => accepted.set(accepted.get() + 1),
                Err(error) => {
                    let _ = error.to_string();
                    refused.set(refused.get() + 1);
                }
            }
            prop_assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
            Ok(())
        })
        .unwrap();
    let (accepted, refused) = (accepted.get(), refused.get());
    eprintln!("{accepted} mutated traces read to the end, {refused} refused");
    // Most mutations land in backtraces and event fields: both outcomes must be reached.
    assert!(accepted > 0 && refused > 0);
}
