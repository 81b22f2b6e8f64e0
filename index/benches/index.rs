//! What the analysis index costs and buys: the first look at a fresh snapshot against the
//! analysis alone, the index's size against the snapshot's at each level, and each report with
//! the index in place.
//!
//!     cargo bench -p heapsnap-index --bench index                  # 1M and 10M objects
//!     cargo bench -p heapsnap-index --bench index -- --sizes 10
//!     cargo bench -p heapsnap-index --bench index -- --snapshot COPY [--snapshot COPY2 ...]
//!     (`cargo test --all-targets` runs it on 50k objects, as a smoke test)
//!
//! **Real snapshots** (`--snapshot`, each a copy: its index is written beside it): the whole
//! index built, its size against the snapshot's and its largest sections, then each report's
//! second look in-process (median of 7: open the snapshot and the index, check what the report
//! reads, answer), and the diff of three or more from their indexes. Version 12 of the index
//! (issue 27) was measured so, on copies of dune's snapshots (`/work/real/snaps/dune/at-15s`,
//! `at-40s`, `at-70s`: 1.17M objects, 58.6 MB, with OCaml names from `heapsnap annotate`) and
//! of menhir's at 3 s (15M nodes, 376 MB), on this 2-core machine under another engineer's load
//! (2 to 3.5):
//!
//!     mkdir -p /tmp/named /tmp/menhir
//!     cp /work/real/snaps/dune/at-{15,40,70}s.heapsnap /tmp/named/
//!     cp /work/real/snaps/menhir/at-3s.heapsnap /tmp/menhir/
//!     cargo bench -p heapsnap-index --bench index -- --snapshot /tmp/named/at-15s.heapsnap \
//!         --snapshot /tmp/named/at-40s.heapsnap --snapshot /tmp/named/at-70s.heapsnap
//!     cargo bench -p heapsnap-index --bench index -- --snapshot /tmp/menhir/at-3s.heapsnap
//!
//!       snapshot        MB index MB      x | summary     top by type by root suspect  domin. inspect    path
//!     at-40s.heapsnap  58.6     24.7  0.42x |   11.9ms    8.1ms   11.0ms   24.8ms   20.7ms   32.2ms   26.0ms   24.3ms
//!     at-3s.heapsnap  376.4    132.1  0.35x |   24.8ms   23.1ms   25.5ms   27.4ms   67.5ms   54.5ms   40.1ms   39.4ms
//!     diff of dune's 3 snapshots from their indexes: 179.9ms
//!
//! The size, with the commit before (version 11) and after: dune at 40 s 47.2 MB (0.81x) ->
//! 24.7 MB (0.42x); menhir 150.9 MB (0.40x) -> 132.1 MB (0.35x); at 10M synthetic objects
//! (no names) 0.47x both. Built as `rm -f X.hsidx; HEAPSNAP_INDEX_IN_BACKGROUND=0 heapsnap
//! suspects X`. Where version 11's went on dune: the meta data's JSON (9.75 MB: every grouping
//! and the roots' shares, parsed by every report), the diff's JSON and words (13.5 MB), the
//! types' JSON (2.1 MB) and their ids in `u32` (4.7 MB). Version 12 gives every grouping and the
//! roots' shares a section of their own, compresses the JSON and the diff's words (LZ4), narrows
//! the types' ids, and saves the typing self-contained (each type's name and its parts' names).
//!
//! The second looks as commands, the whole index in place (`HEAPSNAP_INDEX_IN_BACKGROUND=0
//! heapsnap REPORT X`, median of 7 runs; `inspect` and `path` of the largest object below the
//! roots: `0x7f3d7ad22060` on dune, `0x7ff206532fc8` on menhir; `diff` of the three dune
//! copies), version 11 -> 12, in ms:
//!
//!                       summary  top  --by type  --by root  suspects  dominators  info  inspect  path  diff
//!     dune at 40 s       46->23  43->17  43->23   44->41    58->39      336->49  417->41  320->43 320->37  871->304
//!     menhir at 3 s      51->48  53->51  56->41      -     194->95      166->86  482->93  145->79 148->71    -
//!
//! On dune every report but `diff` answers within 50 ms (there the typing's reload was 0.3 s:
//! the snapshot's OCaml names parsed and every type interned again; `info` and `diff` parsed
//! the names to count them or to see that they parse: the meta data now digests them; `path`
//! parsed them to label roots: the index saves the module fields' paths). The rest of a diff is
//! its own comparing (`HEAPSNAP_TRACE=1`: 0.15 s). On menhir the command adds about 40 ms to
//! the in-process figures: the snapshot (376 MB) is opened and validated twice (once to see
//! whether the index serves the command, once to use it), each touching pages across it.
//!
//! The first look is unchanged (`rm -f X.hsidx; heapsnap summary X`, the completion in the
//! background on, waiting for it between runs with `flock X true`; 5 runs each on dune at 40 s,
//! medians): 924 ms before, 905 ms after.
//!
//! Later, on a slower machine, with dune 3.17.2 and menhir dumped again (`scripts/real-snapshots.sh`:
//! dune 1.76M objects, menhir 5.03M in 5389 regions), `scripts/bench-second-looks.sh X OLD`
//! (median of 7, A/B in one run, load about 1.3), the commit before -> the regions' headers
//! read from the file (their pages no longer faulted in and unmapped) and the saved typing read
//! where it is mapped, in ms:
//!
//!                       summary  top  --by type  --by root  suspects  dominators
//!     dune at 40 s       39->34  32->26  38->31   67->53    54->49      92->85
//!     menhir at 3 s      42->17  39->16  43->19   43->20    75->36      82->47
//!
//! Then each saved type's JSON parsed only when a report reads it (serde_json's `RawValue`),
//! against the same base in a later run (load 1.5-2.6: medians rose for both), in ms:
//!
//!                       summary  top  --by type  --by root  suspects  dominators
//!     dune at 40 s       40->31  25->21  40->33   70->60    59->56     107->88 (best 93->62)
//!     menhir at 3 s      44->20  36->17  42->19   42->19    76->42      86->53
//!
//! On dune `dominators` is still above 50 ms: opening the index (its sections checked and
//! decompressed, about 20% of it), the executable's line tables parsed for its closures'
//! source lines (16%), the types' list scanned (8%).
//!
//! Then the closures' source lines saved (section 42), version 13's types read in place (each
//! type's JSON after a table of offsets: nothing decompressed or scanned), and a command line's
//! parsed sections left to its exit rather than freed before it prints. The session's base
//! (`ba9cd31`, version 12, on a copy of each snapshot) then the last commit, one after the
//! other (`HEAPSNAP=BIN scripts/bench-second-looks.sh X`, median of 7, load about 1), in ms:
//!
//!                       summary  top  --by type  --by root  suspects  dominators
//!     dune at 40 s       37->32  32->23  39->33   67->49    52->48      94->46 (best 81->41)
//!     menhir at 3 s      29->18  29->16  33->14   34->16    56->40      60->41
//!
//! Every second look is within 50 ms on both. Dune's index grows 33.1 -> 35.3 MB (0.42x its
//! snapshot: section 19 is no longer compressed), menhir's 70.1 -> 70.4 MB.
//!
//! Snapshots are the synthetic `large_heap` shape of `heapsnap-analyze`'s benchmark (cached in
//! `<target>/heapsnap-bench/`, shared with it). For each size, in one run:
//!
//! - `analysis`: open the snapshot, graph, dominators, a `top --by kind` (no index);
//! - the first look as the command runs it with the completion in the background (its
//!   default): the answer of a first `summary` (its suspects too) and of a first `top` from the
//!   analysis, no index written (printed below the row);
//! - `1st sum.`: a first `summary` as the command runs it with the completion in the background
//!   off (the analysis, the summary and its suspects, the meta-data index written), then
//!   `meta KiB`, the index's size;
//! - `2nd sum.`: a second `summary` (the index opened, the saved report read), best of 3;
//! - `dom. after` and `all x`: the first `dominators` after it (the analysis again, the whole
//!   index written) and the index's size against the snapshot's;
//! - `1st dom.` and `tree x`: a `dominators` on the snapshot without an index (the tree's
//!   sections written, not the paths'), and that index's size;
//! - then, best of 3 with the whole index in place, each report as a command runs it: open the
//!   snapshot and the index, check the sections the report reads, answer.
//!
//! Peak memory is not measured here: time the command line instead, as the figures in the
//! reports of this work were taken (`HEAPSNAP_TRACE=1` prints each phase on stderr):
//!
//!     S=target/heapsnap-bench/large_heap_v2_1428571.heapsnap    # made by `--sizes 10`
//!     rm -f $S.hsidx; HEAPSNAP_TRACE=1 /usr/bin/time -v target/release/heapsnap summary $S
//!     /usr/bin/time -v target/release/heapsnap summary $S         # the second look
//!
//! (Before each first look, wait for the previous one's completion: `flock $S true`; it holds
//! that lock, and running beside it slows the look and its figures.) Each trace line says the
//! resident memory, its peak so far and what the allocator holds (in use, and freed but
//! resident): the snapshot is mapped, so a first look's memory beyond it is the peak minus the
//! file's size (318 MB at 10M objects). `cargo run --release -p heapsnap-analyze --example
//! first_look -- $S` times first looks in one process and prints the peak.
//!
//! Issue 27's goal is 40 B/object. At 10M objects, 5 first looks each in turn with the commit
//! before (`/usr/bin/time`, medians; load about 1.3):
//!
//!       peak         beyond the snapshot   first summary (wall)
//!       1053 MB      76.1 B/object         2.13s      two commits before (load 3.3 to 4)
//!        748 MB      44.8 B/object         1.23s      before
//!        697 MB      39.6 B/object         1.12s      after (min 0.94s)
//!
//! What made the difference (the trace): the breadth-first search of the suspects' paths ran
//! beside the roots' labels and the groups, its levels (4.6M nodes wide here) doubling in place,
//! and its transient memory came on top of theirs; it now goes only as deep as the suspects are
//! (`walks::PartialParents`: two levels here), and the full search the index needs keeps its
//! levels in fixed chunks. The groups' walk down the dominator tree kept a stack as deep as the
//! longest list (1.4M cells: 16 MB, and its doubling); it now keeps only the nodes with children
//! left. Freed pages are given back before the tree's child lists are made. The peak is now the
//! groups' walk: 364 MiB of the heap in use, with the dominators' DFS at 650 MiB resident before.
//! The allocator's heap was then grown ahead with transparent huge pages (79k page faults ->
//! 29k), for about 5 MB more at the peak; session 24 dropped the huge pages (`analyze/src/mem.rs`
//! says why): the peak was unchanged (687 vs 690 MB resident). The peak was not the same in
//! every run, though: in about one run in three it was 728 MB (42.8 B/object), the roots'
//! reach's per-top-object arrays not fitting where its per-node array had been freed (which
//! depended on where the threads' parts had landed beside it). Its pages are now given back
//! when it goes: 688 MB (38.6 B/object) in every run.
//! Small blocks then moved to mimalloc (`heapsnap_analyze::SplitAllocator`): its pages add
//! 6.5 MiB committed (`MIMALLOC_SHOW_STATS=1`), 694 MB at the peak (39.3 B/object) in 3 of 3
//! runs; dune's peak 319-330 -> 332-333 MB, menhir's 391-392 -> 399-401 MB (2 runs each).
//!
//! Older rows (load 3.2, one run each; version 11's index):
//!
//!        objects  analysis  1st sum. meta KiB  2nd sum. | dom. after  all x  1st dom. tree x
//!         10.00M    0.719s    1.146s      4.1   0.0112s |     3.918s  0.47x    1.568s  0.40x
//!       first look, the answer from the analysis: summary 0.949s (1.32x), top 0.638s (0.89x)
//!
//! On a real heap, a copy of dune's snapshot at 40 s (1.17M objects, a 58.6 MB snapshot with
//! OCaml names), two first looks each: peak 259 -> 227 MB (177 -> 149 B/object beyond the
//! snapshot), 0.93-0.95 s both. There the OCaml names and the typing take most of what the
//! summary adds (the trace: 114 MiB resident after the analysis, 222 after the answer). Since
//! then (5 in turn with the commit before, medians): 1.04 -> 0.92 s (min 0.84), peak 227 MB
//! both; the roots' labels' lists no longer search each slot's holders, and the unreachable
//! blocks of a heap mid-cycle are summed by a sweep, not a lookup each.

// What the heapsnap binary installs, so that the figures are its figures.
#[global_allocator]
static ALLOCATOR: heapsnap_analyze::SplitAllocator = heapsnap_analyze::SplitAllocator;

use heapsnap_analyze::{AnalysedHeap, Analysis, GroupBy, HeapFacts, PathQuery, Progress};
use heapsnap_index::store::{beside, load};
use heapsnap_index::Needs;
use std::path::PathBuf;
use std::time::Instant;

fn snapshot_for(millions: f64) -> PathBuf {
    heapsnap_testkit::bench::bench_large_heap(millions)
}

fn best_of(n: usize, mut f: impl FnMut()) -> f64 {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// The median of `runs` runs of `f`, in seconds.
fn median_of(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// The `--snapshot PATH` arguments (each may be given several times).
fn snapshot_args(args: &[String]) -> Vec<PathBuf> {
    args.windows(2).filter(|w| w[0] == "--snapshot").map(|w| PathBuf::from(&w[1])).collect()
}

/// Real snapshots (`--snapshot PATH`, a copy: the index is written beside it): the whole
/// index built, its size against the snapshot's and per section, then each report's second
/// look, median of 7, as a command runs it in-process (open the snapshot and the index, check
/// the sections the report reads, answer); with three snapshots or more, their diff from their
/// indexes too.
fn real_snapshots(paths: &[PathBuf]) {
    let quiet = Progress::hidden();
    println!(
        "{:>10} {:>9} {:>8} {:>6} | {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "snapshot", "MB", "index MB", "x", "summary", "top", "by type", "by root", "suspect", "domin.", "inspect", "path"
    );
    for path in paths {
        let _ = std::fs::remove_file(beside(path));
        assert!(load(path, Needs::All, &quiet).unwrap().built);
        let snapshot_bytes = std::fs::metadata(path).unwrap().len() as f64;
        let index_bytes = std::fs::metadata(beside(path)).unwrap().len() as f64;
        // The object that retains most below the roots' kinds.
        let biggest = {
            let ix = load(path, Needs::All, &quiet).unwrap();
            let v = ix.view(Needs::All).unwrap();
            let top = v.children_iter(0).flat_map(|k| v.children_iter(k).next()).max_by_key(|&n| v.retained(n)).unwrap();
            v.address(top).unwrap()
        };
        let report = |needs: Needs, f: &dyn Fn(&heapsnap_index::IndexView<'_>)| {
            median_of(7, || {
                let ix = load(path, needs, &quiet).unwrap();
                assert!(!ix.built);
                f(&ix.view(needs).unwrap());
            })
        };
        let top = |by: GroupBy| {
            report(Needs::Meta, &|v| {
                std::hint::black_box(heapsnap_analyze::top(v, by, 30).unwrap().groups.len());
            })
        };
        let summary = report(Needs::Meta, &|v| {
            std::hint::black_box((v.summary(10).objects, v.summary_suspects().suspects.len()));
        });
        let (by_kind, by_type, by_root) = (top(GroupBy::Kind), top(GroupBy::Type), top(GroupBy::Root));
        let suspects = report(Needs::All, &|v| {
            std::hint::black_box(heapsnap_analyze::suspects(v, heapsnap_analyze::SUMMARY_SUSPECTS_MIN_PERCENT, 10).suspects.len());
        });
        let dominators = report(Needs::Tree, &|v| {
            std::hint::black_box(heapsnap_analyze::dominator_report(v, 4, 1.0, 20).children.len());
        });
        let inspect = report(Needs::All, &|v| {
            std::hint::black_box(heapsnap_analyze::inspect(v, biggest, 64).unwrap().retained);
        });
        let paths = report(Needs::All, &|v| {
            std::hint::black_box(heapsnap_analyze::paths(v, &PathQuery::Address(biggest), 10, 10).unwrap().paths.len());
        });
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        println!(
            "{:>10} {:>9.1} {:>8.1} {:>5.2}x | {:>6.1}ms {:>6.1}ms {:>6.1}ms {:>6.1}ms {:>6.1}ms {:>6.1}ms {:>6.1}ms {:>6.1}ms",
            name,
            snapshot_bytes / 1e6,
            index_bytes / 1e6,
            index_bytes / snapshot_bytes,
            summary * 1e3,
            by_kind * 1e3,
            by_type * 1e3,
            by_root * 1e3,
            suspects * 1e3,
            dominators * 1e3,
            inspect * 1e3,
            paths * 1e3
        );
        // What each section takes (the largest ten).
        let ix = load(path, Needs::All, &quiet).unwrap();
        let mut sizes: Vec<(u32, usize)> = ix.index.sizes().collect();
        sizes.sort_by_key(|&(_, len)| std::cmp::Reverse(len));
        let listed: Vec<String> = sizes.iter().take(10).map(|(kind, len)| format!("{kind}: {:.2}", *len as f64 / 1e6)).collect();
        println!("           sections (kind: MB as stored): {}", listed.join(", "));
    }
    if paths.len() >= 3 {
        let diff = median_of(7, || {
            let loaded: Vec<_> = paths.iter().map(|p| load(p, Needs::Diff, &quiet).unwrap()).collect();
            let views: Vec<_> = loaded.iter().map(|ix| ix.view(Needs::Diff).unwrap()).collect();
            let inputs: Vec<_> = views
                .iter()
                .zip(paths)
                .map(|(v, p)| heapsnap_analyze::diff::Input {
                    name: p.display().to_string(),
                    snap: v.snap,
                    saved: v.diff_profile(heapsnap_analyze::GroupBy::Kind),
                })
                .collect();
            let report = heapsnap_analyze::diff::diff(&inputs, &Default::default(), &quiet).unwrap();
            std::hint::black_box(report.suspects.len());
        });
        println!("diff of the {} snapshots from their indexes: {:.1}ms", paths.len(), diff * 1e3);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let real = snapshot_args(&args);
    if !real.is_empty() {
        heapsnap_analyze::tune_allocator();
        real_snapshots(&real);
        return;
    }
    let sizes = heapsnap_testkit::bench::sizes(&args);
    heapsnap_analyze::tune_allocator();
    let quiet = Progress::hidden();
    println!(
        "{:>8} {:>9} {:>9} {:>8} {:>9} | {:>10} {:>6} {:>9} {:>6} | {:>8} {:>8} {:>8} {:>8} {:>8}",
        "objects",
        "analysis",
        "1st sum.",
        "meta KiB",
        "2nd sum.",
        "dom. after",
        "all x",
        "1st dom.",
        "tree x",
        "summary",
        "top",
        "domin.",
        "inspect",
        "path"
    );
    for millions in sizes {
        let path = snapshot_for(millions);
        let snapshot_bytes = std::fs::metadata(&path).unwrap().len() as f64;
        let index_bytes = || std::fs::metadata(beside(&path)).unwrap().len() as f64;
        let _ = std::fs::remove_file(beside(&path));
        // The analysis alone (no index), as heapsnap ran before the index existed.
        let analysis = best_of(1, || {
            let snap = heapsnap_format::Snapshot::open(&path).unwrap();
            let a = Analysis::new(&snap, &quiet).unwrap();
            std::hint::black_box(a.group_by(GroupBy::Kind).expect("kind groups").len());
        });
        // A first `summary` and a first `top` as the command runs them with the completion in
        // the background (its default): the answer from the analysis, no index written.
        let answer_summary = best_of(1, || {
            let snap = heapsnap_format::Snapshot::open(&path).unwrap();
            let a = Analysis::new(&snap, &quiet).unwrap();
            std::hint::black_box(heapsnap_analyze::summary_with_suspects(&a, 10).1.suspects.len());
        });
        let answer_top = best_of(1, || {
            let snap = heapsnap_format::Snapshot::open(&path).unwrap();
            let a = Analysis::new(&snap, &quiet).unwrap();
            std::hint::black_box(heapsnap_analyze::top(&a, GroupBy::Kind, 30).unwrap().groups.len());
        });
        let summary_of = |v: &heapsnap_index::IndexView<'_>| {
            std::hint::black_box((v.summary(10).objects, v.summary_suspects().suspects.len()));
        };
        let first = best_of(1, || {
            let ix = load(&path, Needs::Meta, &quiet).unwrap();
            assert!(ix.built);
            summary_of(&ix.view(Needs::Meta).unwrap());
        });
        let meta_kib = index_bytes() / 1024.0;
        let second = best_of(3, || {
            let ix = load(&path, Needs::Meta, &quiet).unwrap();
            assert!(!ix.built);
            summary_of(&ix.view(Needs::Meta).unwrap());
        });
        let dominators_of = |v: &heapsnap_index::IndexView<'_>| {
            std::hint::black_box(heapsnap_analyze::dominator_report(v, 4, 1.0, 20).children.len());
        };
        let after_summary = best_of(1, || {
            let ix = load(&path, Needs::Tree, &quiet).unwrap();
            assert!(ix.built && ix.index.level() == Some(Needs::All));
            dominators_of(&ix.view(Needs::Tree).unwrap());
        });
        let all_ratio = index_bytes() / snapshot_bytes;
        let _ = std::fs::remove_file(beside(&path));
        let first_tree = best_of(1, || {
            let ix = load(&path, Needs::Tree, &quiet).unwrap();
            assert!(ix.built && ix.index.level() == Some(Needs::Tree));
            dominators_of(&ix.view(Needs::Tree).unwrap());
        });
        let tree_ratio = index_bytes() / snapshot_bytes;
        // The biggest object below the roots: the hash table of the large-heap shape.
        let biggest = {
            let ix = load(&path, Needs::Tree, &quiet).unwrap();
            let v = ix.view(Needs::Tree).unwrap();
            let top = v.children_iter(0).flat_map(|k| v.children_iter(k).next()).max_by_key(|&n| v.retained(n)).unwrap();
            v.address(top).unwrap()
        };
        // The whole index again, for the reports below.
        assert!(load(&path, Needs::All, &quiet).unwrap().built);
        let report = |needs: Needs, f: &dyn Fn(&heapsnap_index::IndexView<'_>)| {
            best_of(3, || {
                let ix = load(&path, needs, &quiet).unwrap();
                assert!(!ix.built);
                f(&ix.view(needs).unwrap());
            })
        };
        let top = report(Needs::Meta, &|v| {
            std::hint::black_box(heapsnap_analyze::top(v, GroupBy::Kind, 30).unwrap().groups.len());
        });
        let dominators = report(Needs::Tree, &|v| {
            std::hint::black_box(heapsnap_analyze::dominator_report(v, 4, 1.0, 20).children.len());
        });
        let inspect = report(Needs::All, &|v| {
            std::hint::black_box(heapsnap_analyze::inspect(v, biggest, 64).unwrap().retained);
        });
        let paths = report(Needs::All, &|v| {
            std::hint::black_box(heapsnap_analyze::paths(v, &PathQuery::Address(biggest), 1, 10).unwrap().paths.len());
        });
        println!(
            "{:>7.2}M {:>8.3}s {:>8.3}s {:>8.1} {:>8.4}s | {:>9.3}s {:>5.2}x {:>8.3}s {:>5.2}x | {:>7.4}s {:>7.4}s {:>7.4}s {:>7.4}s {:>7.4}s",
            millions,
            analysis,
            first,
            meta_kib,
            second,
            after_summary,
            all_ratio,
            first_tree,
            tree_ratio,
            second,
            top,
            dominators,
            inspect,
            paths
        );
        println!("          first summary / analysis: {:.2}x (its index written: the completion in the background off)", first / analysis);
        println!(
            "          first look, the answer from the analysis (the completion in the background on): summary {:.3}s ({:.2}x), top {:.3}s ({:.2}x)",
            answer_summary,
            answer_summary / analysis,
            answer_top,
            answer_top / analysis
        );
    }
    println!("(analysis: open, graph, dominators, a top report, no index; 1st sum.: the first summary, its index written (meta KiB);");
    println!(" dom. after: the first dominators after it, which builds the whole index (all x: its size against the snapshot's);");
    println!(" 1st dom.: a dominators without an index, which writes the tree (tree x); then each report with the whole index, best of 3)");
}
