#!/usr/bin/env bash
# The first look at a snapshot as a user has it (issue #27), on any snapshot (a real program's
# dump): each figure is a whole `heapsnap` process on a fresh copy of the snapshot, side by side
# in one run with Chrome DevTools' heap snapshot worker and memlab loading heapsnap's DevTools
# export of the same snapshot.
#
#   scripts/bench-first-look.sh SNAP            # e.g. a dump of dune or of the compiler
#
# Prints, with wall seconds and peak memory (RSS, the mapped snapshot included):
#   top        a first `heapsnap top` (no index: the analysis and its kind groups)
#   summary    a first `heapsnap summary` (no index: the analysis, the summary, its suspects)
#   dominators a first `heapsnap dominators` (no index: the analysis and the tree's top levels)
#   second     a second `summary` (the index the first one's completion wrote)
#   index      the completed index's size against the snapshot's
#   devtools   the DevTools worker loading the export (parse, retainers, dominators, retained)
#   memlab     memlab's getFullHeapFromFile of the export (its own dominators, retained sizes)
# and the ratios of the workers' times over the first summary's and the first top's.
# HEAPSNAP names the heapsnap binary (default: this repository's target/release/heapsnap,
# built if missing); the workers are installed as the export benchmark installs them.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
snapshot="${1:?usage: bench-first-look.sh SNAP}"
heapsnap="${HEAPSNAP:-$repo/target/release/heapsnap}"
if [ -z "${HEAPSNAP:-}" ]; then (cd "$repo" && cargo build --release --quiet --bin heapsnap); fi
worker="$(bash "$repo/export/scripts/install-devtools-worker.sh")"
memlab="$(bash "$repo/export/scripts/install-memlab.sh")"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
copy="$work/snap.heapsnap"

# Seconds and peak MiB of a command: "S MIB".
timed() { /usr/bin/time -f "%e %M" "$@" 2>"$work/time" >/dev/null || { cat "$work/time" >&2; exit 1; }; tail -1 "$work/time" | awk '{printf "%s %.0f", $1, $2/1024}'; }
# Waits for the completion the first look left (it holds a lock on the snapshot file until
# it ends), then checks that it wrote the index.
completed() {
  flock -s "$copy" true
  [ -e "$copy.hsidx" ] || { echo "bench-first-look: the index was not completed" >&2; exit 1; }
}

fresh() { rm -f "$copy" "$copy.hsidx"; cp "$snapshot" "$copy"; cat "$copy" >/dev/null; }

fresh; read -r top_s top_mib <<<"$(timed "$heapsnap" top "$copy")"; completed
fresh; read -r dom_s dom_mib <<<"$(timed "$heapsnap" dominators "$copy")"; completed
fresh; read -r sum_s sum_mib <<<"$(timed "$heapsnap" summary "$copy")"; completed
read -r second_s second_mib <<<"$(timed "$heapsnap" summary "$copy")"
index_x="$(awk -v i="$(stat -c %s "$copy.hsidx")" -v s="$(stat -c %s "$copy")" 'BEGIN{printf "%.2f", i/s}')"
HEAPSNAP_INDEX_IN_BACKGROUND=0 "$heapsnap" export "$copy" --format devtools -o "$work/snap.heapsnapshot" >/dev/null 2>&1
rm -f "$copy"
read -r dev_s dev_mib <<<"$(timed node --max-old-space-size=16384 "$worker" "$work/snap.heapsnapshot")"
read -r mem_s mem_mib <<<"$(NODE_PATH="$memlab/node_modules" timed node --max-old-space-size=16384 "$repo/export/scripts/memlab-retained.js" "$work/snap.heapsnapshot" 1)"

printf '%-10s %8s %8s\n' "" seconds "peak MiB"
printf '%-10s %8s %8s\n' top "$top_s" "$top_mib" summary "$sum_s" "$sum_mib" dominators "$dom_s" "$dom_mib" second "$second_s" "$second_mib" devtools "$dev_s" "$dev_mib" memlab "$mem_s" "$mem_mib"
printf 'index: %sx the snapshot\n' "$index_x"
awk -v d="$dev_s" -v m="$mem_s" -v s="$sum_s" -v t="$top_s" -v o="$dom_s" 'BEGIN{printf "devtools / first summary %.1fx, / first top %.1fx, / first dominators %.1fx; memlab / first summary %.1fx, / first top %.1fx, / first dominators %.1fx\n", d/s, d/t, d/o, m/s, m/t, m/o}'
