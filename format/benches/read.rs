//! Write and open+validate a snapshot of ~1 GiB of regions, and print throughputs.
//!
//!     CARGO_TARGET_DIR=target/fmt cargo bench -p heapsnap-format --bench read
//!
//! Environment: HEAPSNAP_BENCH_POOLS (default 32768 pools of 32 KiB = 1 GiB),
//! HEAPSNAP_BENCH_DIR (default: the system temporary directory), HEAPSNAP_BENCH_RUNS (default 3;
//! the best run is reported). Reads happen with the file in the page cache, right after writing:
//! they measure validation, not the disk.

use heapsnap_format::*;
use std::hint::black_box;
use std::time::{Duration, Instant};

const POOL_BYTES: usize = 32 * 1024;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn metadata() -> Metadata {
    Metadata {
        ocaml_version: "5.3.0".into(),
        word_size: 8,
        reserved_header_bits: 0,
        colours: ColourEncoding::OCAML5_INITIAL,
        pid: None,
        executable: None,
        build_id: None,
        time_unix_ns: 0,
        trigger: Trigger::Synthetic,
        dumper: "heapsnap-format bench".into(),
        domains: vec![],
        compactions: None,
        redacted: false,
        warnings: vec![],
        pools: None,
        forced_version: false,
        bytecode: false,
        layouts_from: None,
        ocaml4_gc: None,
        capture: None,
        probed: None,
        namespaces: None,
        host: None,
    }
}

fn gb_per_s(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / 1e9 / time.as_secs_f64()
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best: Option<(Duration, T)> = None;
    for _ in 0..runs {
        let start = Instant::now();
        let value = f();
        let elapsed = start.elapsed();
        match &best {
            Some((b, _)) if *b <= elapsed => {}
            _ => best = Some((elapsed, value)),
        }
    }
    best.expect("at least one run")
}

fn main() {
    let pools = env_number("HEAPSNAP_BENCH_POOLS", 32768);
    let runs = env_number("HEAPSNAP_BENCH_RUNS", 3).max(1);
    let dir = std::env::var_os("HEAPSNAP_BENCH_DIR").map(Into::into).unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(dir).expect("temporary directory");
    let path = dir.path().join("bench.heapsnap");
    let base = 0x7f00_0000_0000u64;
    // Realistic-looking words (not zeros, which some layers special-case).
    let mut pool: Vec<u64> = (0..POOL_BYTES as u64 / 8).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1).collect();

    let (write_time, file_bytes) = best_of(runs, || {
        let mut w = SnapshotWriter::create(&path).unwrap();
        w.write_metadata(&metadata()).unwrap();
        for i in 0..pools {
            pool[0] = i as u64;
            let header = RegionHeader {
                kind: RegionKind::Pool.code(),
                domain: 0,
                flags: 0,
                base: base + (i * POOL_BYTES) as u64,
                block_wsize: 4,
                first_block: 64,
                owner: 0,
            };
            w.write_region(&header, bytemuck::cast_slice(&pool)).unwrap();
        }
        w.finish().unwrap();
        std::fs::metadata(&path).unwrap().len()
    });
    let region_bytes = (pools * POOL_BYTES) as u64;
    println!(
        "snapshot: {pools} pools of {} KiB = {:.3} GB of regions, file {:.3} GB",
        POOL_BYTES / 1024,
        region_bytes as f64 / 1e9,
        file_bytes as f64 / 1e9
    );
    println!(
        "write (stream, checksum, fsync, rename): {:>8.1} ms  {:>6.2} GB/s",
        write_time.as_secs_f64() * 1e3,
        gb_per_s(file_bytes, write_time)
    );

    for verify_checksums in [true, false] {
        let options = ReadOptions { verify_checksums };
        let (time, snapshot) = best_of(runs, || Snapshot::open_with(&path, &options).unwrap());
        assert_eq!(snapshot.region_count(), pools);
        println!(
            "open + validate, checksums {:<3}:           {:>8.1} ms  {:>6.2} GB/s",
            if verify_checksums { "on" } else { "off" },
            time.as_secs_f64() * 1e3,
            gb_per_s(file_bytes, time)
        );
    }

    // What an analyser does next: find the region of many addresses.
    let snapshot = Snapshot::open_with(&path, &ReadOptions { verify_checksums: false }).unwrap();
    let lookups = 4_000_000u64;
    let span = region_bytes;
    let (time, found) = best_of(runs, || {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut found = 0u64;
        for _ in 0..lookups {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            found += snapshot.region_of((base + x % span) & !7).is_some() as u64;
        }
        black_box(found)
    });
    assert_eq!(found, lookups);
    println!("region_of over {pools} regions:             {:>8.1} ns per lookup", time.as_secs_f64() * 1e9 / lookups as f64);
}
