//! The snapshot file's reader and writer, end to end: round trips, bad and hostile input,
//! and the mutation fuzzing that seeds cargo-fuzz (allocation bounds are `tests/allocation.rs`, alone
//! in its binary). One test binary, so that
//! the suite links once.

mod common;

mod bad_input;
mod fuzz_mutations;
mod memprof_frames;
mod plugin_dwarf;
mod roundtrip;
mod writer_errors;
