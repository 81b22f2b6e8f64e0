//! The reader must never panic, hang or allocate absurdly, whatever the input; whatever it
//! accepts must be safe to walk in full. The first input byte picks the mode (reseal checksums
//! first, skip checksum verification): see `exercise::fuzz_one`, shared with the stable
//! mutation test in `format/tests/snapshot_file/fuzz_mutations.rs`.
#![no_main]

#[path = "../../tests/snapshot_file/common/exercise.rs"]
mod exercise;

libfuzzer_sys::fuzz_target!(|data: &[u8]| exercise::fuzz_one(data));
