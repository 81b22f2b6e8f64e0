#!/usr/bin/env bash
# Runs every heapsnap test on a fresh machine: installs what is missing, builds the OCaml
# toolchains of every supported release (cached outside the repo) and the sample programs, then
# checks formatting and lints, runs the Rust test suite and a bounded fuzzing run of the
# snapshot reader.
#
#   scripts/test.sh            # everything
#   FUZZ_SECONDS=0 scripts/test.sh   # skip the cargo-fuzz run (the stable-Rust fuzz test still runs)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*" >&2; }

step "system packages"
scripts/install-deps.sh

step "OCaml toolchains (cached in ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap})"
not_covered=()
toolchains=()
for tc in $(scripts/releases.sh toolchains); do
  status=0
  scripts/ocaml-toolchain.sh "$tc" >/dev/null || status=$?
  case "$status" in
    0) toolchains+=("$tc") ;;
    3) not_covered+=("OCaml $tc") ;;
    *) exit "$status" ;;
  esac
done

step "sample programs"
for tc in "${toolchains[@]}"; do samples/build.sh "$tc" >/dev/null; done

step "memtrace and the programs traced with it (tests/sites.rs, memtrace/tests)"
status=0
memtrace/scripts/build-ocaml-programs.sh >/dev/null || status=$?
case "$status" in
  0) ;;
  3) not_covered+=("memtrace (its source is not in ../shared/sources)") ;;
  *) exit "$status" ;;
esac

step "formatting and lints"
cargo fmt --all --check
cargo clippy --workspace --all-targets --release -q -- -D warnings

step "Rust tests"
mkdir -p target
log=target/test-output.log
cargo test --workspace --release 2>&1 | tee "$log"
passed=$(grep -oE 'test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -oE '; [0-9]+ failed' "$log" | awk '{s += $2} END {print s + 0}')

if [ "${FUZZ_SECONDS:-60}" -gt 0 ]; then
  step "bounded fuzzing of the snapshot reader (${FUZZ_SECONDS:-60}s; log in target/fuzz-output.log)"
  if format/fuzz/run.sh "${FUZZ_SECONDS:-60}" >target/fuzz-output.log 2>&1; then
    grep -E '^Done|stat::(number_of_executed_units|new_units_added|peak_rss_mb)' target/fuzz-output.log
    passed=$((passed + 1))
  else
    tail -n 60 target/fuzz-output.log
    failed=$((failed + 1))
  fi
fi

for tc in "${not_covered[@]}"; do
  echo "test.sh: $tc was NOT COVERED: its source is not on this machine (see scripts/ocaml-toolchain.sh, memtrace/scripts/build-ocaml-programs.sh)"
done
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
