//! How the pools' free slots are marked. OCaml 5.1 to 5.3 give a free slot a zero header.
//! OCaml 5.4 (ocaml/ocaml#13616) run-length encodes them instead: the first slot of a run of
//! free slots has a header no block of the shared heap can have (colour NOT_MARKABLE, tag
//! `No_scan_tag`), whose size is the number of free slots that follow it; those are not
//! written, and keep whatever they held, headers of dead blocks included.
//!
//! A snapshot says "free" with a zero header (FORMAT.md), so a runtime of the second kind
//! read by probing has its runs cleared in the copy: every header of a run becomes zero. A
//! release heapsnap knows by its file must have no run: one that has is not that release.

use crate::common::copied_world::Capture;
use crate::common::regions::CapturedRegion;
use heapsnap_format::{ProbedFact, RegionKind};
use heapsnap_values::{HeaderFormat, NO_SCAN_TAG};

/// The fact, as probing reports it and a refusal names it.
pub const FACT: &str = "free pool slots";

/// What a zero-header runtime says of the fact.
pub const ZERO_HEADER: &str = "a zero header";

/// Whether `hd` opens a run of free slots: colour `not_markable`, tag `No_scan_tag`.
pub fn is_run_header(hd: u64, not_markable: u8) -> bool {
    hd as u8 == NO_SCAN_TAG && (hd >> 8) & 3 == not_markable as u64
}

/// The runs of free slots in the copied pools: `(region index, first slot's offset, slots
/// that follow)`. An error names a run that overruns its pool.
pub fn find_runs(regions: &[CapturedRegion], format: HeaderFormat, not_markable: u8) -> Result<Vec<(usize, usize, usize)>, String> {
    let mut runs = Vec::new();
    for (i, r) in regions.iter().enumerate().filter(|(_, r)| r.kind == RegionKind::Pool) {
        let slots: Vec<usize> = r.slot_offsets().collect();
        let mut s = 0;
        while s < slots.len() {
            let hd = r.word(slots[s]);
            if is_run_header(hd, not_markable) {
                let following = format.wosize(hd) as usize;
                if s + following >= slots.len() {
                    return Err(format!(
                        "the run of free slots at {:#x} counts {following} slots after it, past its pool's end",
                        r.base + slots[s] as u64
                    ));
                }
                runs.push((i, slots[s], following));
                s += following;
            }
            s += 1;
        }
    }
    Ok(runs)
}

/// Clears the runs of `runs` in the copy: every slot of a run gets a zero header.
pub fn clear_runs(cap: &mut Capture, runs: &[(usize, usize, usize)]) {
    for &(i, first, following) in runs {
        let r = &mut cap.regions[i];
        let stride = r.block_wsize as usize * 8;
        for k in 0..=following {
            let at = first + k * stride;
            r.bytes[at..at + 8].fill(0);
        }
    }
}

/// The probed fact: how the runtime marks free slots, from the pools of the stopped heap.
pub fn probed_fact(runs: usize, slots: usize) -> ProbedFact {
    let (value, from) = match runs {
        0 => (ZERO_HEADER.to_string(), "no run header in the pools of the stopped heap".to_string()),
        n => (
            "runs: a NOT_MARKABLE No_scan_tag header counts the free slots after it".to_string(),
            format!("{n} run headers ({slots} free slots) in the pools of the stopped heap"),
        ),
    };
    ProbedFact { fact: FACT.into(), value, from }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOT_MARKABLE: u8 = 3;

    fn header(wosize: u64, colour: u64, tag: u64) -> u64 {
        (wosize << 10) | (colour << 8) | tag
    }

    fn pool(words: &[u64]) -> CapturedRegion {
        CapturedRegion {
            kind: RegionKind::Pool,
            domain: 0,
            base: 0x1000,
            block_wsize: 2,
            first_block: 16,
            owner: 0,
            bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn runs_are_found_and_cleared_with_their_stale_slots() {
        let format = HeaderFormat { reserved_bits: 0 };
        let live = header(1, 0, 0);
        // A pool header, then slots: a live block, a run of 2 that follows its head (the
        // first stale, a dead block's header), a live block, a run of one.
        let words = [0, 0, live, 7, header(2, 3, 251), 0, live, 8, 0, 0, live, 9, header(0, 3, 251), 0];
        let mut cap = Capture { regions: vec![pool(&words)], ..Default::default() };
        let runs = find_runs(&cap.regions, format, NOT_MARKABLE).unwrap();
        assert_eq!(runs, vec![(0, 32, 2), (0, 96, 0)]);
        clear_runs(&mut cap, &runs);
        assert_eq!(cap.regions[0].blocks(format), vec![(16, live), (80, live)]);
        // A live NOT_MARKABLE block of another tag is not a run.
        assert!(!is_run_header(header(2, 3, 0), NOT_MARKABLE));
        assert!(!is_run_header(header(2, 2, 251), NOT_MARKABLE));
    }

    #[test]
    fn a_run_past_its_pool_is_an_error() {
        let format = HeaderFormat { reserved_bits: 0 };
        let words = [0, 0, header(1, 0, 0), 7, header(5, 3, 251), 0];
        let err = find_runs(&[pool(&words)], format, NOT_MARKABLE).unwrap_err();
        assert!(err.contains("past its pool's end"), "{err}");
    }
}
