#!/usr/bin/env bash
# First looks side by side (issue 27): a first `heapsnap summary` of each binary in turn, ROUNDS
# times, on one snapshot, its index removed before each run; medians, fastest and every time.
#
#   scripts/bench-first-look-ab.sh SNAP ROUNDS BIN...    # e.g. an older build and target/release/heapsnap
#   IDLE_SECONDS=6 scripts/bench-first-look-ab.sh ...     # each look after the machine idled
#
# Each run waits for the completion it left in the background (it holds the snapshot's lock,
# and running beside it slows the next look), and says how long after the command's exit the
# whole index was saved. Back to back, each look reuses the
# memory the one before just freed; a user's first look comes after the machine idled, and on
# a virtual machine whose host takes free memory back, fresh memory is much slower to fault
# in: IDLE_SECONDS waits that long before each look.
set -euo pipefail
snapshot="${1:?usage: bench-first-look-ab.sh SNAP ROUNDS BIN...}"
rounds="${2:?usage: bench-first-look-ab.sh SNAP ROUNDS BIN...}"
shift 2
[ $# -gt 0 ] || { echo "usage: bench-first-look-ab.sh SNAP ROUNDS BIN..." >&2; exit 2; }
python3 - "$snapshot" "$rounds" "$@" <<'PY'
import os, statistics, subprocess, sys, time
snapshot, rounds, binaries = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
idle = float(os.environ.get("IDLE_SECONDS", "0"))
index = snapshot + ".hsidx"
times = {b: [] for b in binaries}
completed = {b: [] for b in binaries}
for _ in range(rounds):
    for b in binaries:
        subprocess.run(["flock", snapshot, "true"], check=True)
        if os.path.exists(index):
            os.remove(index)
        time.sleep(idle)
        started = time.perf_counter()
        subprocess.run([b, "summary", snapshot], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        answered = time.perf_counter()
        times[b].append(answered - started)
        # The completion holds the snapshot's lock until the whole index is saved.
        subprocess.run(["flock", snapshot, "true"], check=True)
        completed[b].append(time.perf_counter() - answered)
for b, t in times.items():
    print(f"{b:45} median {statistics.median(t):6.3f} s  fastest {min(t):6.3f} s  all {' '.join(f'{x:.2f}' for x in sorted(t))}")
    c = completed[b]
    print(f"{'  the index complete after the command, median':45} {statistics.median(c):6.3f} s  all {' '.join(f'{x:.2f}' for x in sorted(c))}")
PY
