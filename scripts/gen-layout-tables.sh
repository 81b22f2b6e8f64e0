#!/usr/bin/env bash
# Regenerates heapsnap's layout tables (dump/src/ocaml5/versions/tables/VERSION.json), used for
# executables without debug info, from the DWARF of a sample built by each release's toolchain
# (the OCaml 5 toolchains of releases.tsv without extra configure flags).
# The test `layout_tables_match_the_dwarf_of_every_toolchain` fails when they are out of date.
#
#   scripts/gen-layout-tables.sh [VERSION...]      (default: every release)
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  for tc in $(scripts/releases.sh toolchains ocaml5); do
    [ "$(scripts/releases.sh get "$tc" configure)" = - ] && versions+=("$tc")
  done
fi
cargo build -q --release -p heapsnap-dump --example layout-tables
for v in "${versions[@]}"; do
  samples="$(samples/build.sh "$v")"
  out="dump/src/ocaml5/versions/tables/$v.json"
  target/release/examples/layout-tables "$v" "$samples/systhread_stack" >"$out.tmp"
  mv "$out.tmp" "$out"
  echo "gen-layout-tables: $out" >&2
done
