#!/usr/bin/env bash
# First looks side by side (issue 27): a first `heapsnap summary` of each binary in turn, ROUNDS
# times, on one snapshot, its index removed before each run; medians, fastest and every time.
#
#   scripts/bench-first-look-ab.sh SNAP ROUNDS BIN...    # e.g. an older build and target/release/heapsnap
#   IDLE_SECONDS=6 scripts/bench-first-look-ab.sh ...     # each look after the machine idled
#
# Each run waits for the completion the run before left in the background (it holds the
# snapshot's lock, and running beside it slows the look). Back to back, each look reuses the
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
for _ in range(rounds):
    for b in binaries:
        subprocess.run(["flock", snapshot, "true"], check=True)
        if os.path.exists(index):
            os.remove(index)
        time.sleep(idle)
        started = time.perf_counter()
        subprocess.run([b, "summary", snapshot], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times[b].append(time.perf_counter() - started)
for b, t in times.items():
    print(f"{b:45} median {statistics.median(t):6.3f} s  fastest {min(t):6.3f} s  all {' '.join(f'{x:.2f}' for x in sorted(t))}")
subprocess.run(["flock", snapshot, "true"], check=True)
PY
