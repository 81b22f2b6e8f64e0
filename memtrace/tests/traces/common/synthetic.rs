//! Synthetic traces from `heapsnap_memtrace::write::TraceWriter`, shaped like a program's:
//! backtraces walk a random call tree (shared prefixes, recursion, repeated subsequences), and
//! most allocations die young.

use heapsnap_memtrace::write::TraceWriter;
use heapsnap_memtrace::{AllocSource, Location, TraceInfo};
use std::borrow::Cow;

pub const START_TIME: u64 = 1_700_000_000_000_000;

pub fn info(pid: u64) -> TraceInfo {
    TraceInfo {
        version: 3,
        sample_rate: 1e-4,
        word_size: 64,
        executable_name: "/usr/bin/synthetic".into(),
        host_name: "host".into(),
        ocaml_runtime_params: "s=256k".into(),
        pid,
        initial_domain: 0,
        start_time: START_TIME,
        context: Some("synthetic".into()),
    }
}

/// xorshift64*: deterministic and dependency-free.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The code of function `f`'s call site `site`, and its locations (two for inlined sites).
pub fn code(f: u64, site: u64) -> u64 {
    0x40_0000 + f * 64 + site * 8
}

pub fn locations_of(f: u64, site: u64) -> Vec<Location<'static>> {
    let location = |g: u64| Location {
        filename: Cow::Owned(format!("src/module_{}.ml", g % 40)),
        line: (10 + g * 7 + site) as u32,
        start_char: 2,
        end_char: 30,
        defname: Cow::Owned(format!("Module_{}.function_{g}", g % 40)),
    };
    if site == 3 {
        vec![location(f), location(f + 1000)]
    } else {
        vec![location(f)]
    }
}

/// A trace of about `events` events (allocations, promotions, collections).
pub fn trace(events: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let mut writer = TraceWriter::new(&info(4242));
    let functions = 400;
    for f in 0..functions {
        for site in 0..4 {
            writer.define_location(code(f, site), locations_of(f, site));
        }
    }
    let mut time = START_TIME;
    let mut stack: Vec<u64> = vec![code(0, 0)];
    let mut young: Vec<u64> = Vec::new();
    let mut written = 0;
    while written < events {
        // Walk the call tree: return, call, or recurse.
        match rng.below(10) {
            0..=3 if stack.len() > 1 => {
                stack.pop();
            }
            4..=7 if stack.len() < 60 => stack.push(code(rng.below(functions), rng.below(4))),
            8 if stack.len() < 50 => {
                let top = *stack.last().unwrap();
                stack.extend(std::iter::repeat_n(top, 1 + rng.below(10) as usize));
            }
            _ => {}
        }
        time += rng.below(50);
        let (length, source) = match rng.below(20) {
            0 => (300 + rng.below(5000), AllocSource::Major),
            1 => (1 + rng.below(2000), AllocSource::External),
            _ => (1 + rng.below(40), AllocSource::Minor),
        };
        let nsamples = if length > 16 || rng.below(8) == 0 { 1 + rng.below(3) } else { 1 };
        let id = writer.alloc(time, length, nsamples, source, &stack);
        written += 1;
        if source == AllocSource::Minor {
            young.push(id);
        }
        // A minor collection now and then: a few survivors are promoted, the rest collected.
        if young.len() >= 64 {
            for id in young.drain(..) {
                if rng.below(8) == 0 {
                    writer.promote(time, id);
                } else {
                    writer.collect(time, id);
                }
                written += 1;
            }
        }
    }
    writer.finish()
}
