#!/usr/bin/env bash
# A second command issued right after the first (issue 56): each pair of reports as a user or a
# script runs them back to back on a fresh snapshot (no index), the first's time, the second's,
# and the second's over the first's, median of ROUNDS (default 3), for one binary or two side by
# side (A/B, the runs alternating).
#
#   scripts/bench-second-after-first.sh SNAP [OTHER_HEAPSNAP]
#   ROUNDS=5 PAIRS='summary:top --by type;top:dominators' scripts/bench-second-after-first.sh SNAP
#
# PAIRS: `FIRST:SECOND` pairs separated by `;`, each report's arguments before the snapshot's
# path (default: summary then top --by closure, top then top --by root, top then dominators,
# top then suspects; `top --by type` needs a snapshot with OCaml names). Before each pair the index is removed once the completion the last pair left has ended (it holds the
# snapshot's lock); the second's time includes any wait for that completion. HEAPSNAP names the
# heapsnap binary (default: this repository's target/release/heapsnap, built if missing).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
snapshot="${1:?usage: bench-second-after-first.sh SNAP [OTHER_HEAPSNAP]}"
heapsnap="${HEAPSNAP:-$repo/target/release/heapsnap}"
if [ -z "${HEAPSNAP:-}" ]; then (cd "$repo" && cargo build --release --quiet --bin heapsnap); fi
binaries=("$heapsnap")
if [ -n "${2:-}" ]; then binaries=("$2" "$heapsnap"); fi
python3 - "$snapshot" "${ROUNDS:-3}" "${PAIRS:-summary:top --by closure;top:top --by root;top:dominators;top:suspects}" "${binaries[@]}" <<'PY'
import os, statistics, subprocess, sys, time
snapshot, rounds, pairs, binaries = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
pairs = [tuple(p.split(":", 1)) for p in pairs.split(";") if p.strip()]
index = snapshot + ".hsidx"

def run(b, report):
    started = time.perf_counter()
    subprocess.run([b, *report.split(), snapshot], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started

for first, second in pairs:
    firsts = {b: [] for b in binaries}
    seconds = {b: [] for b in binaries}
    for _ in range(rounds):
        for b in binaries:
            # The completion the last pair left holds the snapshot's lock until it ends.
            subprocess.run(["flock", snapshot, "true"], check=True)
            if os.path.exists(index):
                os.remove(index)
            firsts[b].append(run(b, first))
            seconds[b].append(run(b, second))
    subprocess.run(["flock", snapshot, "true"], check=True)
    for b in binaries:
        f, s = statistics.median(firsts[b]), statistics.median(seconds[b])
        ratios = sorted(y / x for x, y in zip(firsts[b], seconds[b]))
        print(f"{first:>12} -> {second:18} {b:40.40} first {f:6.2f} s  second {s:6.2f} s  "
              f"second/first {statistics.median(ratios) * 100:5.0f}% (all {' '.join(f'{r * 100:.0f}%' for r in ratios)})")
PY
