//! memlab's time on heapsnap's DevTools export against heapsnap's own analysis of the same
//! snapshot.
//!
//!     cargo bench -p heapsnap-export --bench devtools                  # 1M and 10M objects
//!     cargo bench -p heapsnap-export --bench devtools -- --sizes 1
//!     (`cargo test --all-targets` runs it on 50k objects without memlab, as a smoke test)
//!
//! Snapshots are the synthetic `large_heap` shape of `heapsnap-analyze`'s benchmark (cached in
//! `<target>/heapsnap-bench/`, shared with it). For each size: heapsnap's analysis (open,
//! graph, dominators and retained sizes, a `top` report; the median of three runs), the
//! export (`.heapsnapshot` written), then memlab loading the export (`getFullHeapFromFile`:
//! parse, then its own dominators and retained sizes), run by node with memlab as
//! export/scripts/install-memlab.sh installs it, with its peak memory. memlab's retained size of the root is checked against heapsnap's.
//!
//! Figures on the development machine (2 shared cores, loaded), memlab 2.0.5 on node 20:
//!
//!       objects   analysis     export   file MiB |     memlab  node wall   node MiB |   ratio
//!         1.00M     0.254s     1.633s       43.4 |     6.801s     9.314s        432 |   36.7x
//!        10.00M     2.620s    21.927s      448.3 |    69.679s    96.782s       2458 |   36.9x
//!
//! Since then the export names nodes on every core and finds blocks in one pass over their
//! regions (a log-time lookup per node and per pass was 43% of its time); the file is byte for
//! byte the same, so memlab's figures stand. At load average 6 to 8 (two other agents
//! building and testing):
//!
//!       objects   analysis     export   baseline   file MiB |     memlab  node wall   node MiB |   ratio
//!         1.00M     0.333s     0.914s          -       43.4 |     5.091s     7.799s        430 |   23.4x
//!         1.00M     0.158s     0.632s     2.211s       43.4 |
//!        10.00M     2.682s     8.499s    55.705s      448.3 |
//!
//! (10M before, same load: export 21.329s.) `baseline` is the export with `--baseline` the
//! snapshot itself, every object to match.
//!
//! With Chrome DevTools' own heap snapshot worker (export/scripts/install-devtools-worker.sh:
//! chrome-devtools-frontend 1.0.1705227's HeapSnapshotLoader and its second worker, in node)
//! and `first` (a first analysis as report commands run it: the analysis index built and
//! written), load about 1:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal.
//!         1.00M    0.143s    0.224s    0.381s    1.492s      43.4 |    2.818s    3.989s      457 |    1.258s    1.449s      403 |    5.6x    8.8x
//!        10.00M    0.761s    2.472s    2.843s   18.385s     448.3 |   31.487s   44.981s     2548 |   11.659s   11.958s     2192 |    4.7x   15.3x
//!
//! The first look now answers from the analysis and leaves the index to a completion in the
//! background (`first`: a first `summary`, its suspects' paths and holders found); load about
//! 1.6, one run:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    0.867s    1.111s    2.405s   19.824s     448.3 |   27.900s   37.981s     2982 |   11.076s   11.325s     2236 |   10.0x   12.8x   25.1x
//!
//! The first look then held less memory at once (73 -> 45 B/object beyond the snapshot,
//! index/benches/index.rs) and analysed a little faster; two runs at load 3 to 4 (another
//! engineer's tests), one run of each figure per row, the first (marked *) before the
//! shortest-path parents were kept compact:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!      *10.00M    1.509s    1.657s    4.360s   22.964s     448.3 |   30.607s   40.708s     2576 |   15.161s   15.455s     2106 |    9.1x   10.0x   18.5x
//!       10.00M    0.839s    1.427s    2.893s   22.998s     448.3 |   32.499s   42.250s     2986 |   13.492s   13.882s     2110 |    9.5x   16.1x   22.8x
//!
//! Short of the goals (15x the worker, 35x memlab): those need a first look of 0.90 s and 0.93 s
//! in the second run, 37% less than its 1.43 s. Single runs at this load vary by half (the
//! same first look took 0.95 s in index/benches/index.rs's run in between). Where it goes
//! (`HEAPSNAP_TRACE`): the graph about 0.35 s (blocks 0.05-0.09, edges 0.27-0.35), the
//! dominators about 0.25 s (their DFS 0.14-0.2), then the summary about 0.3 s (the roots'
//! labels 0.15, the groups 0.13-0.15, the suspects little), beside opening and checking the
//! snapshot.
//!
//! A first `top` answers in about 0.57-0.75 s there (index/benches/index.rs): 15-19x the
//! worker, 37-49x memlab.
//!
//! Since then `first` runs in a process of its own, as a command starts afresh (its memory new
//! to it: in the benchmark's process it reused what the analysis before had freed), median of
//! 3; and the benchmark takes real snapshots (`-- --snapshot PATH`, repeatable; the export is
//! written in `<target>/heapsnap-bench/`). After the first look stopped searching the whole heap
//! for its suspects' paths and walked the groups' subtrees on every core (issue 27), load about
//! 0.4-1.4, one run each:
//!
//!     cargo bench -p heapsnap-export --bench devtools -- --sizes 10
//!     cargo bench -p heapsnap-export --bench devtools -- --snapshot /tmp/dune/at-40s.heapsnap
//!     cargo bench -p heapsnap-export --bench devtools -- --snapshot /tmp/menhir/at-3s.heapsnap
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    0.936s    0.866s    2.664s   16.055s     448.3 |   26.262s   36.163s     2980 |   11.392s   11.669s     2245 |   13.2x   12.2x   30.3x
//!         1.17M    0.246s    0.866s    0.560s    0.818s      36.6 |    2.274s    3.146s      372 |    1.037s    1.181s      330 |    1.2x    4.2x    2.6x
//!         7.74M    1.272s    1.641s    1.896s    7.488s     350.1 |   24.024s   32.347s     2279 |    9.210s    9.459s     1890 |    5.6x    7.2x   14.6x
//!
//! (10M: the synthetic heap; 1.17M: dune at 40 s, `/work/real/snaps/dune/at-40s.heapsnap`
//! copied; 7.74M: menhir at 3 s, `/work/real/snaps/menhir/at-3s.heapsnap` copied; both with
//! OCaml names, see /work/real/NOTES.md for how they were dumped. The synthetic row's first look
//! took 1.43 s two commits before.) The goals, 15x the worker and 35x memlab, are met on none:
//! at 10M objects they need a first look of 0.76 s. On the real heaps the first look types
//! every block from its OCaml names, which the worker and memlab know nothing of (dune: parsing
//! the names 0.07 s, the typing 0.18 s, the roots' labels by module 0.2 s), and their graphs
//! are in an order the analysis reads more slowly than the synthetic heap's (menhir's analysis
//! alone is 7.2x the worker). On both, the export of a snapshot against itself as a baseline
//! leaves a few objects unmatched (dune 46 of 729,466; menhir 257 of 7,408,431): said on
//! stderr, asserted only on the synthetic heap.
//! On a new machine of the same kind (slower at first: the worker took 18.5 s on the synthetic
//! heap, 11.4 s above), with the real snapshots dumped again by scripts/real-snapshots.sh
//! (dune 3.17.2 at 40 s: 1.76M objects; menhir at 3 s: 5.03M) and the roots' labels
//! propagated in reverse postorder, their full lists walked up together, blocks found by node
//! faster (issue 27), load below 0.5, one run each:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    1.451s    1.515s    7.615s   31.497s     448.3 |   44.353s   61.147s     2980 |   18.492s   18.869s     2235 |   12.2x   12.7x   29.3x
//!         1.76M    0.672s    1.889s    1.514s    2.336s      60.5 |    7.299s    9.564s      449 |    2.946s    3.222s      516 |    1.6x    4.4x    3.9x
//!         5.03M    0.704s    1.239s    1.280s    3.630s     114.9 |   12.035s   17.494s     1136 |    5.384s    5.662s      774 |    4.3x    7.6x    9.7x
//!
//! On dune the first look is the analysis (0.6 s) and what it adds with the OCaml names: the
//! roots' labels (0.6 s before, 0.2 s now, beside parsing the names), the typing of closures
//! and the typed walk (0.7 s). Against itself as a baseline the export leaves 37 of dune's
//! 1,164,613 reachable blocks and 23 of menhir's 2,781,075 unmatched.
//!
//! The next day, on the same machine, with the regions' headers read from the file and the
//! weak-only ephemerons skipped (first looks otherwise unchanged), at load 1.2-1.4 and with runs
//! of the same binary 20-40% apart (the first look on the synthetic heap took 1.57-2.1 s in a
//! row: this machine's own noise), one run each:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    2.153s    1.783s    7.421s   39.940s     448.3 |   52.815s   70.722s     2978 |   18.883s   19.286s     2122 |   10.6x    8.8x   29.6x
//!         1.76M    0.667s    1.995s    1.651s    2.005s      60.5 |    6.162s    7.773s      453 |    2.628s    2.925s      515 |    1.3x    3.9x    3.1x
//!         5.03M    0.909s    1.394s    1.348s    3.876s     114.9 |   15.122s   21.606s     1137 |    5.845s    6.157s      774 |    4.2x    6.4x   10.8x
//!
//! `first` is a first `summary`. A first `dominators` now answers from the analysis too (it
//! built the whole index before): dune 3.16 -> 1.88 s, menhir 2.16 -> 0.98 s (5.5x the worker
//! there); a first `suspects` dune 3.68 -> 0.42 s (no suspect to type or path), menhir 3.30 ->
//! 1.21 s (`scripts/bench-first-look.sh` times a first `dominators` beside the workers).
//!
//! Later, with the OCaml names parsed beside the graph and the dominators, the types found
//! beside the roots' reach, closures found by sweeping the regions rather than looked up one
//! by one, the walk's types freed on a thread of their own and what a report read left to the
//! process's exit; same machine, load about 1, one run each:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    1.906s    1.689s    4.502s   28.464s     448.3 |   46.677s   70.263s     2986 |   18.244s   18.725s     2228 |   10.8x    9.6x   27.6x
//!         1.76M    0.597s    1.283s    1.298s    1.955s      60.5 |    6.115s    8.147s      451 |    2.591s    2.850s      402 |    2.0x    4.3x    4.8x
//!         5.03M    0.675s    1.297s    1.066s    3.497s     114.9 |   13.550s   18.617s     1136 |    5.096s    5.382s      790 |    3.9x    7.5x   10.4x
//!
//! The synthetic heap has no OCaml names, so nothing of this reaches it (its first look is the
//! analysis, the roots' reach, the groups and the suspects; 1.45-2.24 s in 5 runs of the base,
//! 1.54-1.67 s after). Dune's first `summary`, 7 runs each in turn (`rm -f X.hsidx; heapsnap
//! summary X`, waiting for each completion), medians: 2.25 s at the session's base (`ba9cd31`),
//! 1.49 s with the names and the types beside the rest, 1.36 s with the closures swept; menhir's
//! (5 runs) 1.28 -> 1.21 s.
//!
//! Then without transparent huge pages (`analyze/src/mem.rs` says why), one run each, load
//! about 1.2:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    1.164s    1.695s    4.299s   28.308s     448.3 |   53.356s   77.469s     2983 |   18.932s   19.312s     2226 |   11.2x   16.3x   31.5x
//!         1.76M    0.884s    1.510s    1.105s    2.047s      60.5 |    7.047s    9.366s      558 |    2.898s    3.194s      410 |    1.9x    3.3x    4.7x
//!         5.03M    0.812s    1.005s    1.343s    3.794s     114.9 |   12.484s   17.775s     1127 |    5.608s    5.907s      786 |    5.6x    6.9x   12.4x
//!
//! These first looks come back to back, each reusing memory the one before had just freed. A
//! user's first look comes after the machine idled, and this virtual machine's host takes
//! idle memory back: then a huge page took seven times as long to fault in as 4 KiB pages
//! (400 MiB: 1.4-2.1 s against 0.21-0.44 s). First `summary`s after 6 s idle, 5 runs each in
//! turn (`IDLE_SECONDS=6 scripts/bench-first-look-ab.sh`), medians, huge pages -> none:
//! synthetic 2.31 -> 1.84 s, dune 1.91 -> 1.66 s, menhir 1.48 -> 1.42 s; back to back
//! (7 runs) synthetic 1.99 -> 1.82 s, dune 1.75 -> 1.75 s.
//!
//! Then with small blocks on mimalloc's per-thread heaps (`heapsnap_analyze::SplitAllocator`:
//! the typing had waited on the one glibc arena's lock while the roots' reach allocated), one
//! run each, load below 1 (the synthetic row a run of its own, `-- --sizes 10`):
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    1.471s    1.882s    4.769s   26.554s     448.3 |   46.149s   66.835s     2981 |   17.932s   18.370s     2228 |    9.5x   12.2x   24.5x
//!         1.76M    0.681s    1.060s    1.259s    1.854s      60.5 |    5.621s    7.863s      449 |    2.330s    2.545s      517 |    2.2x    3.4x    5.3x
//!         5.03M    0.749s    1.139s    1.030s    3.554s     114.9 |   11.922s   15.742s     1136 |    5.553s    5.864s      777 |    4.9x    7.4x   10.5x
//!
//! The synthetic heap has no names, so the allocator changes nothing there: its first look
//! took 1.88 s here against 1.70 s above, and in turn with the build before (9 runs each,
//! `scripts/bench-first-look-ab.sh`) medians of 1.88 and 1.91 s. Dune's first `summary`, in
//! turn, medians: 1.53 -> 1.29 s (9 runs), 1.66 -> 1.24 s after 6 s idle (5 runs); menhir's
//! 1.35 -> 1.23 s (7 runs).
//!
//! Then with the suspects' big children found without ordering every child and their one path
//! without a search of every edge for referrers, the closures swept once, and the roots' lists
//! ordered by their names' ranks (`24dcbb8`, `951d5a4`, `bb9ce9e`), two runs of the synthetic
//! row (`-- --sizes 10`) and one of the real ones, load below 1:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    1.178s    1.742s    3.704s   24.995s     448.3 |   44.408s   63.115s     2987 |   16.814s   17.171s     2234 |    9.7x   14.3x   25.5x
//!        10.00M    0.913s    1.542s    3.046s   19.325s     448.3 |   49.348s   70.153s     2979 |   18.205s   18.603s     2238 |   11.8x   19.9x   32.0x
//!         1.76M    0.582s    0.992s    0.975s    1.924s      60.5 |    5.995s    7.863s      448 |    2.862s    3.145s      407 |    2.9x    4.9x    6.0x
//!         5.03M    0.614s    0.814s    1.096s    3.477s     114.9 |    9.814s   14.483s     1127 |    4.018s    4.243s      775 |    4.9x    6.5x   12.1x
//!
//! First `summary`s in turn with the build before (`660eb9a`), 9 runs each
//! (`scripts/bench-first-look-ab.sh`), medians: synthetic 2.09 -> 1.74 s and 1.95 -> 1.68 s (two
//! rounds), dune 1.33 -> 1.17 s and 1.15 -> 1.11 s, menhir 1.24 -> 1.09 s and 1.14 -> 1.02 s. The
//! synthetic first look's suspects took 0.16 s and take 0.04 s (`HEAPSNAP_TRACE`); its peak is
//! unchanged (694 MB, 39.3 B/object beyond the file). The analysis column moves by a third
//! between runs on this machine (0.91 to 1.47 s), and the ratio over it with it.
//!
//! Then with the roots' reach placing its subtree graph by a count of each top object's edges
//! rather than sorting 2.9 million pairs (`b4eaf01`: its step 0.26 -> 0.17 s, the first look's
//! peak 694 -> 686 MB, 39.3 -> 38.5 B/object beyond the file), three runs of the synthetic row
//! and two of the real ones, load below 1:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    1.289s    1.361s    3.993s   24.385s     448.3 |   47.393s   66.892s     2980 |   20.138s   20.574s     2231 |   14.8x   15.6x   34.8x
//!        10.00M    1.080s    1.384s    3.643s   23.110s     448.3 |   46.014s   66.911s     2863 |   17.563s   17.926s     2211 |   12.7x   16.3x   33.2x
//!        10.00M    1.282s    1.622s    4.325s   26.440s     448.3 |   46.539s   67.443s     2983 |   17.574s   17.947s     2237 |   10.8x   13.7x   28.7x
//!         1.76M    0.531s    1.221s    1.055s    2.339s      60.5 |    7.145s    9.520s      449 |    2.634s    2.901s      516 |    2.2x    5.0x    5.9x
//!         5.03M    0.684s    0.958s    1.253s    3.758s     114.9 |   11.643s   15.318s     1136 |    4.752s    5.012s      774 |    5.0x    6.9x   12.2x
//!         1.76M    0.612s    0.975s    1.120s    2.136s      60.5 |    6.463s    8.963s      476 |    2.674s    2.988s      512 |    2.7x    4.4x    6.6x
//!         5.03M    0.723s    1.125s    1.218s    4.089s     114.9 |   14.262s   19.652s     1126 |    4.580s    4.795s      773 |    4.1x    6.3x   12.7x
//!
//! The synthetic first look over the analysis: 1.06x, 1.28x, 1.27x. First `summary`s in turn
//! with the build before (`f007669`), 9 runs each, medians: synthetic 1.75 -> 1.72 s (fastest
//! 1.61 -> 1.51), dune 1.18 -> 1.12 s, menhir 1.10 -> 1.11 s (menhir's roots' reach is small;
//! dune's and menhir's first looks wait on the types).
//!
//! Then with the dominator tree's child lists faulted in on the other core while one fills
//! them (`99d7c90`: the kind groups' retained sizes 0.21 -> 0.16 s, medians of 4 traced runs;
//! first `summary` medians in turn, 9 runs each, 1.71 -> 1.67 s), two runs of the synthetic row
//! on a machine slower than above (the worker's and memlab's times up by a fifth):
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    1.033s    1.624s    4.824s   29.812s     448.3 |   56.348s   77.425s     2985 |   22.482s   22.903s     2226 |   13.8x   21.8x   34.7x
//!        10.00M    1.642s    1.491s    4.052s   27.857s     448.3 |   50.727s   72.377s     2981 |   19.325s   19.721s     2226 |   13.0x   11.8x   34.0x
//!
//! The analysis column alone went from 1.03 to 1.64 s between these two runs.
//!
//! A real heap the size of the synthetic one: menhir 14 s into its `--no-pager` construction
//! (scripts/real-snapshots.sh), 26.7M objects of which 9.2M reachable, 40.2M edges, an 804 MB
//! snapshot; the export, and so the workers, hold the reachable ones only. Before this session's
//! changes (`0e27c2d`'s tree, one run):
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        26.70M    3.214s    6.952s    5.400s   18.893s     401.6 |   52.124s   71.961s     2620 |   23.495s   23.900s     2274 |    3.4x    7.3x    7.5x
//!
//! Its first look spent 1.1 s on one core in the suspects: the objects only stack frames hold
//! are named by the frame on their shortest path, and the breadth-first search up to them went
//! through most of the heap, waiting on memory at every node. The search now loads each
//! level's edges ahead and compares parents with immediate dominators in preorder numbers a
//! batch at a time (`5f7225a`: the suspects 1.2 -> 0.6 s), the groups by type are made beside
//! the suspects (the pair 0.92-1.03 -> 0.63-0.76 s), and the kind groups count the unreachable
//! blocks in their own sweep (`b930fc5`: 0.1 s less). First `summary`s in turn, 7 runs each,
//! medians: 6.32 -> 5.35 s (`5f7225a`). Then, load about 1 (the machine slower than above:
//! the worker's and memlab's times up by a sixth on the synthetic row):
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        26.70M    3.624s    5.255s    7.846s   17.570s     401.6 |   55.390s   76.463s     2620 |   21.699s   22.118s     2283 |    4.1x    6.0x   10.5x
//!        26.70M    3.166s    5.986s    3.951s   16.336s     401.6 |   53.098s   73.059s     2619 |   23.651s   24.029s     2282 |    4.0x    7.5x    8.9x
//!        26.70M    3.436s    5.313s    3.782s   12.819s     401.6 |   54.299s   72.360s     2620 |   20.501s   20.993s     2285 |    3.9x    6.0x   10.2x
//!        10.00M    1.233s    1.348s    4.053s   29.003s     448.3 |   51.240s   73.856s     2980 |   23.123s   23.617s     2233 |   17.1x   18.8x   38.0x
//!        10.00M    1.392s    1.578s    4.236s   27.369s     448.3 |   51.246s   72.448s     2984 |   22.683s   23.092s     2227 |   14.4x   16.3x   32.5x
//!         1.76M    0.844s    1.185s    1.101s    2.233s      60.5 |    6.786s    9.042s      450 |    2.914s    3.234s      515 |    2.5x    3.5x    5.7x
//!         5.03M    0.791s    1.007s    1.222s    4.247s     114.9 |   13.731s   19.765s     1059 |    5.954s    6.286s      776 |    5.9x    7.5x   13.6x
//!
//! (The first 26.70M row is before `b930fc5`.) On this heap heapsnap analyses 2.9 times the
//! objects the workers load (the unreachable 17.5M too: a summary counts them, and the export
//! leaves them out): the analysis alone is 6-7.5x the worker, and the first look's work beyond
//! it (the types, the kinds, the roots' reach, the groups, the suspects: 1.7-2.8 s) is over
//! all 26.7M blocks, where the synthetic heap's is over 10M. The first look's peak is 35.7
//! B/object beyond the file (1,715,988 KB).
//!
//! The goal for first analyses, 50x the DevTools worker, would be 0.23 s at 10M objects
//! on this machine: less than building the graph alone takes (0.29 s on 2 cores). A report
//! through the index (index/benches/index.rs) takes 0.005 to 0.06 s: 200x to 2400x the worker.
//!
//! On a new machine (session 30, load about 1.6, the "analysis" now the median of three runs),
//! with the real snapshots dumped again by scripts/real-snapshots.sh (dune at 40 s: 1.79M
//! objects, 1.12M reachable; menhir at 3 s: 3.58M, nearly all reachable; menhir at 14 s: 20.4M,
//! 9.3M reachable), one run of each row:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!        10.00M    1.424s    2.047s    6.852s   43.732s     448.3 |   55.361s   81.286s     2979 |   20.054s   20.557s     2248 |    9.8x   14.1x   27.0x
//!         1.79M    0.721s    1.579s    1.442s    2.996s      59.2 |    9.660s   12.642s      525 |    3.872s    4.190s      507 |    2.5x    5.4x    6.1x
//!         3.58M    0.895s    1.310s    1.749s    6.177s     150.9 |   23.136s   32.403s     1173 |    9.068s    9.431s      996 |    6.9x   10.1x   17.7x
//!        20.41M    3.063s    5.516s    4.874s   19.687s     401.3 |   64.795s   90.219s     2619 |   24.405s   24.909s     2270 |    4.4x    8.0x   11.7x
//!
//! The workers' times are those of the machines before (the synthetic row's worker 20.1 s,
//! against 19.3-23.7 s); heapsnap's are not: its memory-bound phases on two cores are slower
//! here (the synthetic first look's edges 0.46 s, against 0.27-0.35 s), so the synthetic first
//! look is 9.8x the worker where it was 14.4-17.1x.
//!
//! Session 31, the same machine and snapshots, after the closures' sweep moved beside the
//! dominators (`ClosureSweep`), one run of each real row:
//!
//!       objects  analysis     first    export  baseline  file MiB |    memlab node wall node MiB |  devtools node wall node MiB | w/first w/anal. m/first
//!         1.79M    0.730s    1.223s    1.325s    2.295s      59.2 |    7.912s   11.045s      528 |    3.431s    3.743s      404 |    2.8x    4.7x    6.5x
//!         3.58M    0.914s    1.226s    1.715s    6.984s     150.9 |   23.132s   31.580s     1353 |    9.356s    9.778s      994 |    7.6x   10.2x   18.9x
//!        20.41M    2.734s    5.328s    4.388s   17.953s     401.3 |   64.564s   89.521s     2609 |   21.442s   21.922s     2276 |    4.0x    7.8x   12.1x
//!
//! On dune the analysis alone (0.73 s) is already more than the 15x goal allows the whole first
//! look (3.43 s / 15 = 0.23 s); on menhir at 14 s likewise (2.73 s against 1.43 s).

// What the heapsnap binary installs, so that the figures are its figures.
#[global_allocator]
static ALLOCATOR: heapsnap_analyze::SplitAllocator = heapsnap_analyze::SplitAllocator;

use heapsnap_analyze::{Analysis, GroupBy, Progress};
use heapsnap_export::devtools::{export, export_with, Baseline, Extras, Limits};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn snapshot_for(millions: f64) -> PathBuf {
    heapsnap_testkit::bench::bench_large_heap(millions)
}

/// Runs an install script of `export/scripts/` and returns the path it prints.
fn install(script: &str) -> PathBuf {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let out = Command::new("bash").arg(scripts.join(script)).output().expect("run an install script");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// `node SCRIPT ARGS` (which prints `{"seconds", "root_retained"}`): seconds inside node, wall
/// seconds, peak MiB, and the root's retained size.
fn node(script: &Path, args: &[&std::ffi::OsStr], node_path: Option<&Path>) -> (f64, f64, f64, u64) {
    let t = Instant::now();
    let mut cmd = Command::new("/usr/bin/time");
    cmd.args(["-f", "%M", "node", "--max-old-space-size=16384"]).arg(script).args(args);
    if let Some(p) = node_path {
        cmd.env("NODE_PATH", p);
    }
    let out = cmd.output().expect("run node under /usr/bin/time");
    let wall = t.elapsed().as_secs_f64();
    assert!(out.status.success(), "{}: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let kib: f64 = String::from_utf8_lossy(&out.stderr).lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or(0.0);
    (v["seconds"].as_f64().unwrap(), wall, kib / 1024.0, v["root_retained"].as_u64().unwrap())
}

/// memlab on `file`.
fn memlab(file: &Path) -> (f64, f64, f64, u64) {
    let dir = install("install-memlab.sh");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/memlab-retained.js");
    node(&script, &[file.as_os_str(), "1".as_ref()], Some(&dir.join("node_modules")))
}

/// Chrome DevTools' own heap snapshot worker on `file` (export/scripts/install-devtools-worker.sh).
fn devtools_worker(file: &Path) -> (f64, f64, f64, u64) {
    node(&install("install-devtools-worker.sh"), &[file.as_os_str()], None)
}

/// A first look as `heapsnap summary` answers on a snapshot without an index (the completion
/// in the background on, its default): open and check the snapshot, analyse, the summary and
/// its leak suspects (their paths and the roots that hold them) from the analysis; seconds.
/// In a process of its own (this benchmark run again with `--first-look-child`), as a command
/// starts afresh: the memory it fills is new to it.
fn first_look(path: &Path) -> f64 {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let mut runs: Vec<f64> = (0..3)
        .map(|_| {
            let out = Command::new(&exe).arg("--first-look-child").arg(path).output().expect("run the first look");
            assert!(out.status.success(), "first look: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).trim().parse().expect("seconds")
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[1]
}

/// The first look itself, in this process: prints its seconds.
fn first_look_here(path: &Path) {
    heapsnap_analyze::tune_allocator();
    let t = Instant::now();
    let snap = heapsnap_format::Snapshot::open(path).expect("open");
    let a = Analysis::new(&snap, &Progress::hidden()).expect("first analysis");
    std::hint::black_box(heapsnap_analyze::summary_with_suspects(&a, 10).1.suspects.len());
    println!("{}", t.elapsed().as_secs_f64());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    if let Some(path) = value("--first-look-child") {
        first_look_here(Path::new(&path));
        return;
    }
    let bench = args.iter().any(|a| a == "--bench");
    let default_sizes = if bench { "1,10" } else { "0.05" };
    // Real snapshots (`--snapshot PATH`, repeatable) in place of the synthetic sizes.
    let real: Vec<PathBuf> = args.windows(2).filter(|w| w[0] == "--snapshot").map(|w| PathBuf::from(&w[1])).collect();
    let sizes: Vec<f64> = if real.is_empty() {
        value("--sizes").unwrap_or_else(|| default_sizes.into()).split(',').filter_map(|s| s.trim().parse().ok()).collect()
    } else {
        Vec::new()
    };
    let inputs: Vec<(PathBuf, bool)> = sizes.iter().map(|&m| (snapshot_for(m), true)).chain(real.into_iter().map(|p| (p, false))).collect();
    heapsnap_analyze::tune_allocator();
    let quiet = Progress::hidden();
    println!(
        "{:>9} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>8} | {:>9} {:>9} {:>8} | {:>7} {:>7} {:>7}",
        "objects",
        "analysis",
        "first",
        "export",
        "baseline",
        "file MiB",
        "memlab",
        "node wall",
        "node MiB",
        "devtools",
        "node wall",
        "node MiB",
        "w/first",
        "w/anal.",
        "m/first"
    );
    for (path, synthetic) in inputs {
        // Written beside the snapshot's copy in the target directory (a real snapshot's
        // directory may not be this benchmark's to write in).
        let out =
            heapsnap_testkit::bench::bench_dir().join(format!("{}.heapsnapshot", path.file_stem().unwrap_or_default().to_string_lossy()));
        let snap = heapsnap_format::Snapshot::open(&path).unwrap();
        // The median of three analyses (one run varied by a half on a loaded machine); the
        // last is kept for the export.
        let mut analyses = Vec::with_capacity(3);
        let mut analysed = None;
        for _ in 0..3 {
            drop(analysed.take());
            let t = Instant::now();
            let a = Analysis::new(&snap, &quiet).unwrap();
            std::hint::black_box(a.group_by(GroupBy::Kind).expect("kind groups").len());
            analyses.push(t.elapsed().as_secs_f64());
            analysed = Some(a);
        }
        analyses.sort_by(f64::total_cmp);
        let (analysis, a) = (analyses[1], analysed.expect("three analyses"));
        let millions = f64::from(a.graph.blocks.node_count - a.graph.blocks.first_block_node) / 1e6;
        let t = Instant::now();
        let report = export(&a, &out, &Limits::default(), &quiet).unwrap();
        let exported = t.elapsed().as_secs_f64();
        // With a baseline: the snapshot against itself (every object to match).
        let t = Instant::now();
        let baseline = Baseline { analysis: &a, name: "itself".into() };
        let followed = export_with(&a, &Extras { sites: None, baseline: Some(&baseline) }, &out, &Limits::default(), &quiet).unwrap();
        let with_baseline = t.elapsed().as_secs_f64();
        if synthetic {
            assert_eq!(followed.ids.new, Some(0), "against itself, every object keeps its id: {:?}", followed.ids);
        } else if followed.ids.new != Some(0) {
            // Not a figure of this benchmark's: said, so that it is seen.
            eprintln!("{}: against itself, {}", path.display(), followed.ids.note);
        }
        let reachable = a.reachable_bytes();
        drop(a);
        let file_mib = report.bytes as f64 / (1 << 20) as f64;
        let first = first_look(&path);
        if !bench {
            println!(
                "{:>8.2}M {:>8.3}s {:>8.3}s {:>8.3}s {:>8.3}s {:>9.1} | (memlab and the DevTools worker run with --bench)",
                millions, analysis, first, exported, with_baseline, file_mib
            );
            let _ = std::fs::remove_file(&out);
            continue;
        }
        let (inside, wall, mib, root) = memlab(&out);
        assert_eq!(root, reachable, "memlab's root retains what heapsnap finds reachable");
        let (worker, worker_wall, worker_mib, worker_root) = devtools_worker(&out);
        assert_eq!(worker_root, reachable, "the DevTools worker's root retains what heapsnap finds reachable");
        println!(
            "{:>8.2}M {:>8.3}s {:>8.3}s {:>8.3}s {:>8.3}s {:>9.1} | {:>8.3}s {:>8.3}s {:>8.0} | {:>8.3}s {:>8.3}s {:>8.0} | {:>6.1}x {:>6.1}x {:>6.1}x",
            millions,
            analysis,
            first,
            exported,
            with_baseline,
            file_mib,
            inside,
            wall,
            mib,
            worker,
            worker_wall,
            worker_mib,
            worker / first,
            worker / analysis,
            inside / first
        );
        let _ = std::fs::remove_file(&out);
    }
    println!("(analysis: heapsnap's open, graph, dominators, top; first: a first look as `summary` answers without an index");
    println!(" (the analysis, the summary and its suspects; the index left to the completion); export: the .heapsnapshot written;");
    println!(" baseline: the export with --baseline the same snapshot, its objects matched, analysis of the baseline not counted;");
    println!(" memlab: getFullHeapFromFile of the export inside node, and node's wall time and peak memory; devtools: Chrome");
    println!(" DevTools' heap snapshot worker loading the export (parse, retainers, dominators, retained sizes);");
    println!(" w/first, w/anal.: the worker's time over heapsnap's first look and over the analysis alone; m/first: memlab's over the first look)");
}
