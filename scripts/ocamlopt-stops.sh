#!/usr/bin/env bash
# Dumps the OCaml compiler mid-compilation again and again, until a dump needed more than one
# stop (the first stop caught a thread between safe points, so the dumper resumed it and
# stopped again), and checks every snapshot with `heapsnap verify`: a snapshot of a busy real
# program must verify whatever the number of stops.
#
#   scripts/ocamlopt-stops.sh [MAX_RUNS]     (default 20)
#
# ocamlopt.opt (OCaml 5.3.0) compiles a generated 51,000-line module and is dumped 6 s in. Each
# run prints the stops its dump took and verify's verdict; the last line says how many runs it
# took to see a dump of several stops, and how many snapshots failed to verify.
set -euo pipefail
cd "$(dirname "$0")/.."
max_runs=${1:-20}
toolchain="$(scripts/ocaml-toolchain.sh 5.3.0)"
cargo build --release --quiet --bin heapsnap
work="$(mktemp -d "${TMPDIR:-/tmp}/heapsnap-ocamlopt-stops.XXXXXX")"
pid=""
cleanup() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$work"; }
trap cleanup EXIT

scripts/gen-big-source.py 8500 "$work/big.ml"
echo "ocamlopt-stops: $(wc -l <"$work/big.ml") lines to compile" >&2

multi_stop_at="" failed_verify=0
for run in $(seq 1 "$max_runs"); do
  (cd "$work" && exec "$toolchain/bin/ocamlopt.opt" -g big.ml -o big) &
  pid=$!
  sleep 6
  if ! kill -0 "$pid" 2>/dev/null; then echo "run $run: ocamlopt finished before the dump" >&2; pid=""; continue; fi
  report="$(target/release/heapsnap dump --pid "$pid" -o "$work/snap.heapsnap" --json)"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
  stops="$(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["attempts"], "consistent" if r["consistent"] else "inconsistent")' <<<"$report")"
  if target/release/heapsnap verify "$work/snap.heapsnap" >"$work/verify.txt" 2>&1; then verdict=OK; else verdict=FAILED; failed_verify=$((failed_verify + 1)); cat "$work/verify.txt"; fi
  echo "run $run: stops ${stops}, verify $verdict"
  rm -f "$work/snap.heapsnap" "$work/snap.heapsnap.hsidx"
  if [ "${stops%% *}" -gt 1 ] && [ -z "$multi_stop_at" ]; then multi_stop_at=$run; break; fi
done
if [ -n "$multi_stop_at" ]; then seen="at run $multi_stop_at"; else seen="in none of $max_runs runs"; fi
echo "ocamlopt-stops: a dump of several stops $seen; $failed_verify snapshots failed verify"
