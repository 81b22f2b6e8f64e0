#!/usr/bin/env bash
# The analyser benchmark on real dumps instead of synthetic snapshots: of samples/large_heap.ml
# (sizes in millions of objects) and of the OCaml compiler itself (`ocamlopt`).
#
#   scripts/bench-real-heaps.sh                      # 1M and 10M objects
#   scripts/bench-real-heaps.sh 1 10 50 -- --repeat 5   # sizes (millions), then bench options
#   scripts/bench-real-heaps.sh 10 ocamlopt          # and the compiler, mid-compilation
#
# The synthetic snapshots lay each item's blocks out in allocation order, which makes the DFS
# and BFS baselines unusually cheap; in a real heap the minor collector promotes blocks in its
# own order. Each size's dump is taken once (the sample paused after its Gc.compact) and cached
# in target/heapsnap-bench/real/; delete a file to take it again. `ocamlopt` is a real program's
# heap, shared and cyclic as samples are not: ocamlopt.opt compiling a generated 2.7 MB source
# file, dumped 12 s in (about 27M objects, 19M of them reachable). Builds the OCaml toolchain
# (cached in ~/.cache/heapsnap), the samples and heapsnap as needed.
set -euo pipefail
cd "$(dirname "$0")/.."

sizes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sizes+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#sizes[@]} -gt 0 ] || sizes=(1 10)

toolchain="$(scripts/ocaml-toolchain.sh)"
samples_dir="$(samples/build.sh 5.3.0)"
cargo build --release --quiet --bin heapsnap
out=target/heapsnap-bench/real
mkdir -p "$out"

pid=""
cleanup() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -f "$out/stdin" "$out/ready"; }
trap cleanup EXIT

# The compiler mid-compilation of a generated file (as tests/dump/dump_ocamlopt.rs, larger).
dump_ocamlopt() {
  local snap="$1" work="$out/ocamlopt-work"
  rm -rf "$work" && mkdir -p "$work"
  scripts/gen-big-source.py 8000 "$work/big.ml"
  echo "bench-real-heaps: dumping ocamlopt.opt 12 s into compiling a 2.7 MB file" >&2
  (cd "$work" && exec "$toolchain/bin/ocamlopt.opt" -g big.ml -o big) &
  pid=$!
  sleep 12
  kill -0 "$pid" 2>/dev/null || { echo "bench-real-heaps: ocamlopt finished before the dump" >&2; exit 1; }
  target/release/heapsnap dump --pid "$pid" -o "$snap.part"
  mv "$snap.part" "$snap"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
  rm -rf "$work"
}

snapshots=()
for m in "${sizes[@]}"; do
  if [ "$m" = ocamlopt ]; then
    snap="$out/ocamlopt.heapsnap"
    [ -s "$snap" ] || dump_ocamlopt "$snap"
    snapshots+=("$PWD/$snap")
    continue
  fi
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
