#!/usr/bin/env bash
# Runs every heapsnap test on a fresh machine: installs what is missing, builds the OCaml 5.3.0
# toolchains (cached outside the repo) and the sample programs, then runs the Rust test suite
# and a bounded fuzzing run of the snapshot reader.
#
#   scripts/test.sh            # everything
#   FUZZ_SECONDS=0 scripts/test.sh   # skip the cargo-fuzz run (the stable-Rust fuzz test still runs)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*" >&2; }

step "system packages"
scripts/install-deps.sh

step "OCaml 5.3.0 toolchains (cached in ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap})"
scripts/ocaml-toolchain.sh std
scripts/ocaml-toolchain.sh rhb16

step "sample programs"
samples/build.sh std
samples/build.sh rhb16

step "Rust tests"
cargo test --workspace --release 2>&1

step "bounded fuzzing of the snapshot reader"
if [ "${FUZZ_SECONDS:-60}" -gt 0 ]; then
  format/fuzz/run.sh "${FUZZ_SECONDS:-60}"
fi
