#!/usr/bin/env bash
# heapsnap's main job on its embedded default: run a leaking OCaml program under heapsnap,
# take a snapshot after each of its Gc.compact calls while it grows, and show who keeps its
# memory alive.
#
#   scripts/demo.sh                # the default: samples/cache_leak.ml, an unbounded Hashtbl cache
#   scripts/demo.sh closure_list   # any sample of samples/manifest.json
#
# Installs what it needs (see scripts/install-deps.sh), builds OCaml 5.3.0 once (cached in
# ~/.cache/heapsnap), the samples and heapsnap itself. Snapshots go to $HEAPSNAP_DEMO_DIR
# (default: target/demo). The samples keep their .cmt files apart (samples/README.md), and the
# demo gives them to `heapsnap run --cmt`, so every report speaks OCaml: globals by name
# (`Cache_leak.cache`), blocks by type (`Cache_leak.entry`), fields by label (`.payload`).
set -euo pipefail
cd "$(dirname "$0")/.."
sample="${1:-cache_leak}"
steps=3

step() { printf '\n== %s\n' "$*" >&2; }

step "setting up (system packages, OCaml toolchain, samples, heapsnap)"
scripts/install-deps.sh
scripts/ocaml-toolchain.sh >/dev/null
samples_dir="$(samples/build.sh 5.3.0)"
cmt_dir="$(dirname "$samples_dir")/.build/5.3.0/cmt"
program="$samples_dir/$sample"
[ -x "$program" ] || { echo "demo: no sample named '$sample' in $samples_dir" >&2; exit 2; }
cargo build --release --workspace --quiet
heapsnap="$PWD/target/release/heapsnap"

out="${HEAPSNAP_DEMO_DIR:-target/demo}/$sample"
rm -rf "$out" && mkdir -p "$out"
step "running $sample under 'heapsnap run --on-compaction' ($steps steps)"
# The sample pauses after each step (after its Gc.compact) until it reads a line; answer once
# the step's snapshot is on disk, so each snapshot shows one step.
feed() {
  for i in $(seq 1 "$steps"); do
    while [ "$(find "$out" -name '*.heapsnap' | wc -l)" -lt "$i" ]; do sleep 0.05; done
    echo
  done
}
args=()
[ "$sample" = large_heap ] && args=(1)
feed | "$heapsnap" run --on-compaction --cmt "$cmt_dir" --ocaml "$(scripts/ocaml-toolchain.sh 5.3.0)" --dir "$out" -- "$program" --steps "$steps" --pause "${args[@]}"

mapfile -t snaps < <(find "$out" -name '*.heapsnap' | sort)
last="${snaps[-1]}"

step "heapsnap summary (last snapshot)"
"$heapsnap" summary "$last"
step "heapsnap top --by root: what each root keeps alive"
"$heapsnap" top "$last" --by root --limit 8
step "heapsnap top --by type: what the memory is, by OCaml type"
"$heapsnap" top "$last" --by type --limit 8
step "heapsnap dominators: where the retained memory sits"
"$heapsnap" dominators "$last" --depth 5 --min-percent 5
step "heapsnap path: why the largest objects are alive"
biggest_kind="$("$heapsnap" top "$last" --by kind --json | python3 -c 'import json,sys; r=json.load(sys.stdin); g=max(r["groups"], key=lambda g: g["shallow"]); print(g["name"])')"
"$heapsnap" path "$last" --kind "$biggest_kind" --limit 3
step "heapsnap diff: what grew between the $steps snapshots, and the leak suspects"
"$heapsnap" diff "${snaps[@]}" --by type --limit 5
step "heapsnap verify --strict: every live block reached from the recorded roots"
"$heapsnap" verify --strict "$last"
