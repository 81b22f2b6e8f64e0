//! `--redact`: string and bytes contents never reach the disk; lengths, headers and the rest of
//! the heap do.

use crate::dump_support::*;
use heapsnap_format::{RegionKind, Snapshot};

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn heap_bytes(snap: &Snapshot) -> Vec<u8> {
    snap.regions()
        .filter(|r| matches!(r.kind(), RegionKind::MinorHeap | RegionKind::Pool | RegionKind::Large))
        .flat_map(|r| r.bytes.to_vec())
        .collect()
}

#[test]
fn redaction_zeroes_strings_and_keeps_the_heap_exact() {
    let program = sample_path("cache_leak");
    let dir = tempfile::tempdir().unwrap();
    let mut sample = Sample::start(&program, &[]);
    sample.wait_ready(1);
    dump_ok(sample.pid(), &dir.path().join("plain.snap"), &[]);
    dump_ok(sample.pid(), &dir.path().join("redacted.snap"), &["--redact"]);
    sample.release();
    let (_, status) = sample.finish();
    assert!(status.success());

    let plain = Snapshot::open(dir.path().join("plain.snap")).unwrap();
    let redacted = Snapshot::open(dir.path().join("redacted.snap")).unwrap();
    assert!(!plain.metadata().redacted);
    assert!(redacted.metadata().redacted);
    // The cache's keys ("req-000123") and 1000-byte payloads ("AAAA...") are in the plain heap only.
    let (p, r) = (heap_bytes(&plain), heap_bytes(&redacted));
    assert!(contains(&p, b"req-000123") && contains(&p, &[b'A'; 64]));
    assert!(!contains(&r, b"req-0") && !contains(&r, &[b'A'; 16]), "string contents reached the redacted file");
    // The same heap otherwise: same regions, same blocks, all reachable.
    assert_eq!(p.len(), r.len());
    reachability(&redacted).assert_exact("redacted cache_leak");
    // Each string keeps its length: its last byte (the padding count) is kept.
    let mut strings_with_length = Vec::new();
    for reg in redacted.regions().filter(|reg| reg.kind() == RegionKind::Pool && reg.header.block_wsize == 3) {
        let words = reg.words();
        for i in (reg.header.first_block as usize / 8..words.len()).step_by(3) {
            if words[i] as u8 == 252 && (words[i] >> 10) & 0xff == 2 {
                strings_with_length.push(words[i + 2] >> 56);
            }
        }
    }
    assert!(!strings_with_length.is_empty());
    // "req-NNNNNN" is 10 bytes in 16: the last byte is 16 - 1 - 10 = 5.
    assert!(strings_with_length.iter().all(|&pad| pad == 5), "{strings_with_length:?}");
}
