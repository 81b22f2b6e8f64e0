//! No allocation is sized by a length field that lies: reading any input (hostile or mutated,
//! and walking it in full when accepted) never makes one allocation larger than the input
//! warrants. A counting global allocator records the largest single request; this binary holds
//! one test only, so nothing else allocates meanwhile (which is why it is not part of the
//! `snapshot_file` binary).

#[path = "snapshot_file/common/mod.rs"]
mod common;

use common::exercise::read_and_walk;
use common::mutate::{mutate, seeds, Rng};
use common::*;
use heapsnap_format::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator with the caller's guarantees; the
// counter only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The largest single allocation made while reading and walking `file`.
fn largest_allocation(file: &[u8], verify_checksums: bool) -> usize {
    LARGEST.store(0, Ordering::Relaxed);
    read_and_walk(file, &ReadOptions { verify_checksums });
    LARGEST.load(Ordering::Relaxed)
}

/// What a reader may allocate at once: a copy of the input, an index over it, bookkeeping.
fn allowance(len: usize) -> usize {
    2 * len + 64 * 1024
}

fn hostile_inputs() -> Vec<Vec<u8>> {
    let file = assemble(&baseline());
    let t = trailer(&file);
    let mut inputs = Vec::new();
    for count in [1u64 << 60, u64::MAX, u32::MAX as u64, 1 << 40] {
        let mut f = file.clone();
        set_trailer(&mut f, &Trailer { section_count: count, ..t });
        inputs.push(f.clone());
        reseal(&mut f);
        inputs.push(f);
    }
    for index in 0..9 {
        for length in [u64::MAX, u64::MAX - 7, 1 << 40, u32::MAX as u64] {
            let mut f = file.clone();
            edit_entry(&mut f, index, |e| e.length = length);
            inputs.push(f);
        }
    }
    // Metadata claiming huge arrays, strings claiming huge ids.
    let mut big = serde_json::to_value(metadata()).unwrap();
    big["domains"] = serde_json::json!([{"id": 1, "minor_start": 0, "minor_end": 18446744073709551615u64, "young_ptr": 0}]);
    big["warnings"] = serde_json::Value::from(vec!["x"; 1000]);
    let mut sections = baseline();
    sections[0] = Sec::new(SectionKind::Metadata, serde_json::to_vec(&big).unwrap());
    inputs.push(assemble(&sections));
    let mut sections = baseline();
    sections[5] = records(SectionKind::Symbols, &vec![symbol(0, u64::MAX, StrId::NONE); 4000]);
    inputs.push(assemble(&sections));
    inputs
}

#[test]
fn reading_never_allocates_more_than_the_input_warrants() {
    for (i, input) in hostile_inputs().iter().enumerate() {
        for verify in [true, false] {
            let largest = largest_allocation(input, verify);
            assert!(largest <= allowance(input.len()), "hostile input {i}: {largest} bytes at once for a {}-byte file", input.len());
        }
    }
    let seeds = seeds();
    let mut rng = Rng(0xa110c);
    for iteration in 0..30_000 {
        let base = &seeds[rng.below(seeds.len())];
        let input = mutate(&mut rng, base, &seeds);
        let largest = largest_allocation(&input, rng.chance(2));
        assert!(largest <= allowance(input.len()), "mutation {iteration}: {largest} bytes at once for a {}-byte file", input.len());
    }
}
