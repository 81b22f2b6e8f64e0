//! `heapsnap dump` on every sample at its READY point: the snapshot is valid and exact (the
//! blocks reachable from its roots are the live blocks of its regions), and the sample goes
//! on as if nothing happened (same output, same exit status).

use crate::dump_support::*;
use heapsnap_format::{RegionKind, RootKind, Snapshot};

macro_rules! sample_test {
    ($($test:ident => $name:expr, [$($arg:expr),*];)*) => {
        $(
            #[test]
            fn $test() {
                check_sample($name, &[$($arg),*]);
            }
        )*
    };
}

sample_test! {
    cache_leak => "cache_leak", [];
    closure_list => "closure_list", [];
    effect_cont => "effect_cont", [];
    systhread_stack => "systhread_stack", [];
    domains_shared => "domains_shared", [];
    bigarray_sample => "bigarray_sample", [];
    lazy_sample => "lazy_sample", [];
    objects_sample => "objects_sample", [];
    long_list => "long_list", [];
    large_array => "large_array", [];
    steady_state => "steady_state", [];
}

/// weak_ephemeron keeps its weak-only data alive through Gc.compact in the slots of a kept
/// array, cleared just before READY: that data is reachable only weakly, and nothing is garbage.
#[test]
fn weak_ephemeron() {
    let snaps = check_sample("weak_ephemeron", &[]);
    assert!(snaps[0].ephemerons().len() >= 501, "500 ephemerons and a weak array");
}

#[test]
fn suspended_continuations_are_attributed_to_their_stack() {
    let snaps = check_sample("effect_cont", &[]);
    let snap = &snaps[0];
    let suspended: Vec<_> = snap.roots().iter().filter(|r| r.root_kind() == RootKind::SuspendedStack).collect();
    assert!(!suspended.is_empty(), "effect_cont: no suspended-stack reference");
    for r in &suspended {
        let region = snap.region_of(r.slot).expect("suspended slot in a region");
        assert_eq!(region.kind(), RegionKind::FiberStack);
    }
    // Each origin is the head fiber of a continuation: a fiber stack region is owned by it.
    let owners: Vec<u64> = snap.regions().filter(|r| r.kind() == RegionKind::FiberStack).map(|r| r.header.owner).collect();
    assert!(suspended.iter().all(|r| owners.contains(&r.origin)));
}

#[test]
fn systhreads_stacks_and_descriptors_are_roots() {
    let snaps = check_sample("systhread_stack", &[]);
    let snap = &snaps[0];
    let threads: std::collections::BTreeSet<u64> =
        snap.roots().iter().filter(|r| r.root_kind() == RootKind::Thread).map(|r| r.thread).collect();
    assert!(threads.len() >= 2, "systhread_stack: thread descriptors for {threads:?}");
    let stacks = snap.regions().filter(|r| r.kind() == RegionKind::FiberStack).count();
    assert!(stacks >= 2, "systhread_stack: {stacks} fiber stacks");
}

#[test]
fn every_domain_is_dumped() {
    let snaps = check_sample("domains_shared", &[]);
    let snap = &snaps[0];
    assert!(snap.metadata().domains.len() >= 2, "domains: {:?}", snap.metadata().domains);
    let with_minor: std::collections::BTreeSet<u16> =
        snap.regions().filter(|r| r.kind() == RegionKind::MinorHeap).map(|r| r.header.domain).collect();
    assert!(!with_minor.is_empty());
}

/// With 16 reserved header bits (rhb16 toolchain): detected, and the reserved values survive.
#[test]
fn reserved_header_bits_are_detected_and_kept() {
    let program = rhb16_samples_dir().join("reserved_bits");
    let dir = tempfile::tempdir().unwrap();
    let mut sample = Sample::start(&program, &[]);
    sample.wait_ready(1);
    let path = dir.path().join("rb.snap");
    let report = dump_ok(sample.pid(), &path, &[]);
    assert_eq!(report["reserved_header_bits"], 16);
    sample.release();
    let (lines, status) = sample.finish();
    assert!(status.success(), "{lines:?}");
    let snap = Snapshot::open(&path).unwrap();
    assert_eq!(snap.metadata().reserved_header_bits, 16);
    reachability(&snap).assert_exact("reserved_bits");
    let mut reserved: std::collections::BTreeMap<u64, usize> = Default::default();
    for r in snap.regions().filter(|r| matches!(r.kind(), RegionKind::Pool | RegionKind::Large)) {
        let words = r.words();
        let stride = if r.kind() == RegionKind::Pool { r.header.block_wsize as usize } else { words.len() };
        let mut i = r.header.first_block as usize / 8;
        while i < words.len() {
            if words[i] >> 48 != 0 {
                *reserved.entry(words[i] >> 48).or_default() += 1;
            }
            i += stride.max(1);
        }
    }
    // 100 promoted blocks with 7, 50 with 42, 10 large ones with 1000, 5 with 65535.
    assert_eq!(reserved.get(&7), Some(&100), "{reserved:?}");
    assert_eq!(reserved.get(&42), Some(&50), "{reserved:?}");
    assert_eq!(reserved.get(&1000), Some(&10), "{reserved:?}");
    assert_eq!(reserved.get(&65535), Some(&5), "{reserved:?}");
}

/// The oracle is not vacuous: without the module globals' roots, cache_leak's cache is missed.
#[test]
fn the_oracle_notices_a_missing_root() {
    let snaps = check_sample("cache_leak", &[]);
    let r = reachability_from(&snaps[0], |root| root.root_kind() != RootKind::Global);
    assert!(r.missed.len() > 15_000, "only {} blocks missed without the globals", r.missed.len());
}
