#!/usr/bin/env bash
# Runs heapsnap's tests on a fresh machine, in lanes; each lane says what it covered.
#
#   scripts/test.sh                  # every lane, in this order
#   scripts/test.sh rust tests       # only the lanes named
#   FUZZ_SECONDS=0 scripts/test.sh   # the fuzz lane runs no cargo-fuzz (the stable-Rust fuzz test still runs)
#
# Lanes:
#   rust              formatting, clippy -D warnings, rustdoc -D warnings, no import circle between
#                     the files of any crate (scripts/check-import-cycles.py), and the minimum
#                     Rust version every crate declares (scripts/check-msrv.py); needs no OCaml
#   ocaml-TOOLCHAIN   one per OCaml toolchain of releases.tsv (scripts/releases.sh toolchains): builds it
#                     (cached outside the repo) and the sample programs with it
#   tests             the Rust test suite: unit, property and end-to-end tests on every toolchain
#                     built; then, per toolchain, how many tests ran programs built with it
#   fuzz              bounded fuzzing of the snapshot reader
#
# Anything a lane cannot cover on this machine (a toolchain whose source is absent) is said as
# NOT COVERED; with CI=true that fails the run, so a green CI means everything ran.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says how long the run has taken so far (lanes' costs on a cold machine).
step() { printf '\n== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

mapfile -t all_toolchains < <(scripts/releases.sh toolchains)
lanes=("$@")
if [ ${#lanes[@]} -eq 0 ]; then
  lanes=(rust)
  for tc in "${all_toolchains[@]}"; do lanes+=("ocaml-$tc"); done
  lanes+=(tests fuzz)
fi

not_covered=()
covered=()
passed=0
failed=0
mkdir -p target
# The end-to-end tests write, per toolchain, the name of every test that ran a program built
# with it (tests/dump_support: `toolchain_samples`, `toolchain_prefix`).
export HEAPSNAP_TOOLCHAIN_COVERAGE="$PWD/target/toolchain-coverage"
# A first report leaves a process that completes the snapshot's index: not in the middle of the
# suite, where temporary snapshots come and go (the one test of it turns it back on).
export HEAPSNAP_INDEX_IN_BACKGROUND=0

step "system packages"
scripts/install-deps.sh

lane_rust() {
  step "lane rust: formatting, lints, docs, minimum Rust versions"
  cargo fmt --all --check
  cargo clippy --workspace --all-targets --release -q -- -D warnings
  RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --release -q
  python3 scripts/check-msrv.py
  python3 scripts/check-import-cycles.py
  covered+=("rust: fmt, clippy -D warnings, rustdoc -D warnings, no import circle between any crate's files, declared rust-version of $(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workspace_members"]))') crates")
}

lane_ocaml() {
  local tc=$1 status=0
  step "lane ocaml-$tc: toolchain (cached in ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}) and samples"
  scripts/ocaml-toolchain.sh "$tc" >/dev/null || status=$?
  case "$status" in
    0) ;;
    3) not_covered+=("OCaml $tc: its source is not on this machine (see scripts/ocaml-toolchain.sh)"); return ;;
    *) exit "$status" ;;
  esac
  local out
  out=$(samples/build.sh "$tc")
  covered+=("ocaml-$tc: toolchain built, $(find "$out" -maxdepth 1 -type f -perm -u+x | wc -l) sample executables")
}

lane_tests() {
  step "lane tests: memtrace and the programs traced with it (tests/analysis/sites.rs, memtrace/tests)"
  local status=0
  memtrace/scripts/build-ocaml-programs.sh >/dev/null || status=$?
  case "$status" in
    0) ;;
    3) not_covered+=("memtrace: its source is not in ../shared/sources") ;;
    *) exit "$status" ;;
  esac

  step "lane tests: the MCP client of tests/analysis/mcp.rs (the official Python SDK, in target/mcp-venv)"
  scripts/mcp-client.sh >/dev/null

  step "lane tests: the Rust test suite"
  rm -rf "$HEAPSNAP_TOOLCHAIN_COVERAGE"
  local log=target/test-output.log
  cargo test --workspace --release 2>&1 | tee "$log"
  local p f
  p=$(grep -oE 'test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
  f=$(grep -oE '; [0-9]+ failed' "$log" | awk '{s += $2} END {print s + 0}')
  passed=$((passed + p))
  failed=$((failed + f))
  while IFS= read -r line; do not_covered+=("${line#*NOT COVERED: }"); done < <(grep -o 'NOT COVERED: .*' "$log" | sort -u)
  covered+=("tests: $p passed, $f failed")
  for tc in "${all_toolchains[@]}"; do
    local file="$HEAPSNAP_TOOLCHAIN_COVERAGE/$tc"
    if [ -s "$file" ]; then
      covered+=("tests on OCaml $tc: $(sort -u "$file" | wc -l) tests ran programs built with it")
    else
      not_covered+=("OCaml $tc: no test ran a program built with it")
    fi
  done
}

lane_fuzz() {
  local seconds=${FUZZ_SECONDS:-60}
  if [ "$seconds" -le 0 ]; then
    not_covered+=("fuzz: cargo-fuzz skipped (FUZZ_SECONDS=0)")
    return
  fi
  step "lane fuzz: bounded fuzzing of the snapshot reader (${seconds}s; log in target/fuzz-output.log)"
  if format/fuzz/run.sh "$seconds" >target/fuzz-output.log 2>&1; then
    grep -E '^Done|stat::(number_of_executed_units|new_units_added|peak_rss_mb)' target/fuzz-output.log
    passed=$((passed + 1))
    covered+=("fuzz: $(grep -oE '^Done [0-9]+ runs' target/fuzz-output.log | head -1 || true) of the snapshot reader in ${seconds}s, no crash")
  else
    tail -n 60 target/fuzz-output.log
    failed=$((failed + 1))
    covered+=("fuzz: FAILED (see above)")
  fi
}

for lane in "${lanes[@]}"; do
  case "$lane" in
    rust) lane_rust ;;
    ocaml-*)
      tc=${lane#ocaml-}
      printf '%s\n' "${all_toolchains[@]}" | grep -qxF "$tc" || { echo "test.sh: unknown lane $lane (toolchains: ${all_toolchains[*]})" >&2; exit 2; }
      lane_ocaml "$tc"
      ;;
    tests) lane_tests ;;
    fuzz) lane_fuzz ;;
    *) echo "test.sh: unknown lane '$lane' (rust, ocaml-TOOLCHAIN, tests, fuzz)" >&2; exit 2 ;;
  esac
done

step "what the lanes covered (the whole run: ${SECONDS}s)"
for c in "${covered[@]}"; do echo "covered: $c"; done
for n in "${not_covered[@]}"; do echo "NOT COVERED: $n"; done
if [ "${CI:-}" = true ] && [ ${#not_covered[@]} -gt 0 ]; then
  echo "test.sh: CI=true and ${#not_covered[@]} things were not covered: failing the run"
  failed=$((failed + 1))
fi
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
