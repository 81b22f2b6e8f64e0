#!/usr/bin/env bash
# The analyser benchmark on real dumps of samples/large_heap.ml instead of synthetic snapshots.
#
#   scripts/bench-real-heaps.sh                      # 1M and 10M objects
#   scripts/bench-real-heaps.sh 1 10 50 -- --repeat 5   # sizes (millions), then bench options
#
# The synthetic snapshots lay each item's blocks out in allocation order, which makes the DFS
# and BFS baselines unusually cheap; in a real heap the minor collector promotes blocks in its
# own order. Each size's dump is taken once (the sample paused after its Gc.compact) and cached
# in target/heapsnap-bench/real/; delete a file to take it again. Builds the OCaml toolchain
# (cached in ~/.cache/heapsnap), the samples and heapsnap as needed.
set -euo pipefail
cd "$(dirname "$0")/.."

sizes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sizes+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#sizes[@]} -gt 0 ] || sizes=(1 10)

scripts/ocaml-toolchain.sh >/dev/null
samples_dir="$(samples/build.sh std)"
cargo build --release --quiet --bin heapsnap
out=target/heapsnap-bench/real
mkdir -p "$out"

pid=""
cleanup() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -f "$out/stdin" "$out/ready"; }
trap cleanup EXIT

snapshots=()
for m in "${sizes[@]}"; do
  snap="$out/large_heap_${m}M.heapsnap"
  if [ ! -s "$snap" ]; then
    echo "bench-real-heaps: building a ${m}M-object heap in samples/large_heap" >&2
    rm -f "$out/stdin" "$out/ready" && mkfifo "$out/stdin"
    "$samples_dir/large_heap" --pause "$m" <"$out/stdin" >"$out/ready" &
    pid=$!
    exec 3>"$out/stdin" # holds the sample's stdin open: it stays paused until we close it
    until grep -q '^READY' "$out/ready"; do
      kill -0 "$pid" 2>/dev/null || { echo "bench-real-heaps: large_heap exited early" >&2; exit 1; }
      sleep 0.2
    done
    target/release/heapsnap dump --pid "$pid" -o "$snap.part"
    mv "$snap.part" "$snap"
    exec 3>&-
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
  fi
  snapshots+=("$PWD/$snap")
done

list="$(IFS=,; echo "${snapshots[*]}")"
cargo bench -p heapsnap-analyze --bench analyze -- --snapshots "$list" "$@"
