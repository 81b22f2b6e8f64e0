//! Bounded fuzzing on stable Rust: mutated snapshots must never make the reader panic or hang,
//! and whatever it accepts must be safe to walk in full (see `common/exercise.rs`).
//!
//! HEAPSNAP_FUZZ_SECS (default 20) and HEAPSNAP_FUZZ_ITERATIONS (default 300000) bound the run,
//! whichever comes first; HEAPSNAP_FUZZ_SEED picks another mutation sequence. A failing input
//! is saved to the temporary directory and its path printed, with the seed and iteration.

use crate::common::exercise::{fuzz_one, read_and_walk};
use crate::common::mutate::{mutate, seeds, Rng};
use heapsnap_format::{ReadOptions, Snapshot};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The error's variant (and, for section errors, the problem's), to see how deep inputs reach.
fn error_class(file: &[u8], options: &ReadOptions) -> String {
    match Snapshot::from_bytes_with(file, options) {
        Ok(_) => "accepted".into(),
        Err(e) => {
            let debug = format!("{e:?}");
            let variant: String = debug.chars().take_while(|c| c.is_alphanumeric()).collect();
            match debug.find("problem: ") {
                Some(at) => format!("{variant}/{}", debug[at + 9..].chars().take_while(|c| c.is_alphanumeric()).collect::<String>()),
                None => variant,
            }
        }
    }
}

#[test]
fn mutated_snapshots_never_panic_or_hang() {
    let seconds = env_number("HEAPSNAP_FUZZ_SECS", 20);
    let iterations = env_number("HEAPSNAP_FUZZ_ITERATIONS", 300_000);
    let seed = env_number("HEAPSNAP_FUZZ_SEED", 0x4ea9_5a9e);
    let seeds = seeds();
    for s in &seeds {
        assert!(read_and_walk(s, &ReadOptions::default()), "a seed is not a valid snapshot");
    }
    let mut rng = Rng(seed);
    let mut classes: BTreeMap<String, u64> = BTreeMap::new();
    let start = Instant::now();
    let mut done = 0u64;
    while done < iterations && start.elapsed() < Duration::from_secs(seconds) {
        let base = &seeds[rng.below(seeds.len())];
        let file = mutate(&mut rng, base, &seeds);
        let options = ReadOptions { verify_checksums: !rng.chance(3) };
        let began = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| read_and_walk(&file, &options)));
        let took = began.elapsed();
        if outcome.is_err() || took > Duration::from_secs(2) {
            let path = std::env::temp_dir().join(format!("heapsnap-fuzz-seed{seed}-iteration{done}.bin"));
            std::fs::write(&path, &file).unwrap();
            panic!(
                "input {} (seed {seed}, iteration {done}, verify_checksums {}) {}; saved to {}",
                file.len(),
                options.verify_checksums,
                if outcome.is_err() { "panicked".to_string() } else { format!("took {took:?}") },
                path.display()
            );
        }
        // Classifying costs a second read: only sample it.
        if done.is_multiple_of(16) {
            *classes.entry(error_class(&file, &options)).or_default() += 1;
        }
        done += 1;
    }
    eprintln!("fuzzed {done} inputs in {:.1?} (seed {seed}); sampled outcomes:", start.elapsed());
    for (class, n) in &classes {
        eprintln!("  {n:>7}  {class}");
    }
    // The mutator must reach past the outer checks, or this test proves little.
    assert!(done >= 2000.min(iterations), "only {done} inputs in {seconds} s");
    if done >= 20_000 {
        let reached = |prefix: &str| classes.keys().any(|c| c.starts_with(prefix));
        for deep in [
            "accepted",
            "Section/ChecksumMismatch",
            "Section/BadRecord",
            "Section/Invalid",
            "BadSectionTable",
            "TableChecksum",
            "OverlappingRegions",
        ] {
            assert!(reached(deep), "no sampled input reached {deep}: {classes:?}");
        }
    }
}

/// The cargo-fuzz target's entry point, run over the seeds in every mode.
#[test]
fn fuzz_target_entry_point_accepts_the_seeds() {
    for seed in seeds() {
        for mode in 0..4u8 {
            let mut input = vec![mode];
            input.extend_from_slice(&seed);
            fuzz_one(&input);
        }
    }
    fuzz_one(&[]);
    fuzz_one(&[1]);
}

/// Writes the seed corpus for the cargo-fuzz target when HEAPSNAP_FUZZ_CORPUS names a directory
/// (used by `fuzz/run.sh`); otherwise only checks the seeds.
#[test]
fn seed_corpus() {
    let seeds = seeds();
    let Some(dir) = std::env::var_os("HEAPSNAP_FUZZ_CORPUS") else { return };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (i, seed) in seeds.iter().enumerate() {
        for mode in 0..4u8 {
            let mut input = vec![mode];
            input.extend_from_slice(seed);
            std::fs::write(dir.join(format!("seed-{i}-mode-{mode}")), input).unwrap();
        }
    }
}
