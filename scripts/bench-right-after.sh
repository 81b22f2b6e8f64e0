#!/usr/bin/env bash
# A second command right after a first look, as a user has it (issue 56): on a fresh copy of
# SNAP (no index), a first `top`, then at once each report, as whole `heapsnap` processes;
# median of ROUNDS (default 3) of each pair, the second's time as a share of the first's, and
# how the second was answered (by the process holding the first look's analysis, from a saved
# level of the index, or by analysing again). Each round waits for the completion to end.
#
#   scripts/bench-right-after.sh SNAP
#
# HEAPSNAP names the heapsnap binary (default: this repository's target/release/heapsnap,
# built if missing). The copies go to a temporary directory beside SNAP's (the same disk).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
snapshot="${1:?usage: bench-right-after.sh SNAP}"
heapsnap="${HEAPSNAP:-$repo/target/release/heapsnap}"
if [ -z "${HEAPSNAP:-}" ]; then (cd "$repo" && cargo build --release --quiet --bin heapsnap); fi
work="$(mktemp -d "$(dirname "$(realpath "$snapshot")")/right-after.XXXXXX")"
trap 'rm -rf "$work"' EXIT
python3 - "$snapshot" "$heapsnap" "$work" "${ROUNDS:-3}" <<'PY'
import os, shutil, subprocess, sys, time
snapshot, heapsnap, work, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
reports = [["top"], ["top", "--by", "type"], ["top", "--by", "root"], ["summary"], ["suspects"],
           ["dominators", "--depth", "4"], ["path", "--kind", "string", "--limit", "3"]]
env = dict(os.environ, HEAPSNAP_TRACE="1")
env.pop("HEAPSNAP_INDEX_IN_BACKGROUND", None)
def timed(args):
    started = time.perf_counter()
    done = subprocess.run([heapsnap, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=True)
    return time.perf_counter() - started, done.stderr.decode()
for report in reports:
    firsts, seconds, how = [], [], set()
    for _ in range(rounds):
        copy = os.path.join(work, "s.heapsnap")
        for stale in os.listdir(work):
            os.remove(os.path.join(work, stale))
        shutil.copyfile(snapshot, copy)
        first, _ = timed(["top", copy])
        second, trace = timed([*report, copy])
        firsts.append(first); seconds.append(second)
        if "from the process holding the analysis" in trace: how.add("holder")
        elif "the answer, from the analysis" in trace or "analysing instead of waiting" in trace: how.add("analysed")
        else: how.add("index")
        # The completion holds the copy's lock until it ends.
        subprocess.run(["flock", "-s", copy, "true"], check=True)
    f, s = sorted(firsts)[rounds // 2], sorted(seconds)[rounds // 2]
    print(f"{' '.join(report):32} first {f:6.2f} s  right after {s:6.2f} s  ({100 * s / f:4.0f}%)  answered by: {','.join(sorted(how))}")
PY
