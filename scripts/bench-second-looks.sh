#!/usr/bin/env bash
# Second looks as a user has them (issue 27): each report as a whole `heapsnap` process on a
# snapshot whose index is complete, median and best of 7, side by side for two binaries when
# a second one is given (A/B, the runs alternating).
#
#   scripts/bench-second-looks.sh SNAP [OTHER_HEAPSNAP]
#
# The index is completed first (`dominators` with the completion in the foreground). HEAPSNAP
# names the heapsnap binary (default: this repository's target/release/heapsnap, built if
# missing). An OTHER_HEAPSNAP must read the same version of the index.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
snapshot="${1:?usage: bench-second-looks.sh SNAP [OTHER_HEAPSNAP]}"
heapsnap="${HEAPSNAP:-$repo/target/release/heapsnap}"
if [ -z "${HEAPSNAP:-}" ]; then (cd "$repo" && cargo build --release --quiet --bin heapsnap); fi
binaries=("$heapsnap")
if [ -n "${2:-}" ]; then binaries=("$2" "$heapsnap"); fi
flock -s "$snapshot" true
HEAPSNAP_INDEX_IN_BACKGROUND=0 "$heapsnap" dominators "$snapshot" >/dev/null
python3 - "$snapshot" "${binaries[@]}" <<'PY'
import subprocess, sys, time
snapshot, binaries = sys.argv[1], sys.argv[2:]
reports = [["summary"], ["top"], ["top", "--by", "type"], ["top", "--by", "root"], ["suspects"], ["dominators"]]
for report in reports:
    times = {b: [] for b in binaries}
    for _ in range(7):
        for b in binaries:
            started = time.perf_counter()
            subprocess.run([b, *report, snapshot], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[b].append(time.perf_counter() - started)
    for b in binaries:
        t = sorted(times[b])
        print(f"{' '.join(report):18} {b:40.40} median {t[3] * 1000:6.1f} ms  best {t[0] * 1000:6.1f} ms")
PY
