//! memtrace traces, end to end: the reader against memtrace's own rendering, the writer's round
//! trips, damaged traces and mutation fuzzing. One test binary, so that the suite links once.

mod common;

mod errors;
mod fuzz_mutations;
mod reference;
mod roundtrip;
mod sample;
