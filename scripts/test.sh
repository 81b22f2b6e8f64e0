#!/usr/bin/env bash
# Runs heapsnap's tests on a fresh machine, in lanes; each lane says what it covered.
#
#   scripts/test.sh                  # every lane, in this order
#   scripts/test.sh rust tests       # only the lanes named
#   FUZZ_SECONDS=0 scripts/test.sh   # the fuzz lane runs no cargo-fuzz (the stable-Rust fuzz test still runs)
#   CARGO_TEST_SELECTION="-p heapsnap-memtrace" scripts/test.sh tests
#                                    # the tests lane on part of the suite (default: --workspace)
#
# Lanes:
#   rust              formatting, clippy -D warnings, rustdoc -D warnings, no import circle between
#                     the files of any crate (scripts/check-import-cycles.py), and the minimum
#                     Rust version every crate declares (scripts/check-msrv.py); needs no OCaml
#   ocaml-TOOLCHAIN   one per OCaml toolchain of releases.tsv (scripts/releases.sh toolchains): builds it
#                     (cached outside the repo) and the sample programs with it
#   tests             the Rust test suite: unit, property and end-to-end tests on every toolchain
#                     built, and on semgrep-core from PyPI (OCaml 5.4, scripts/semgrep-core.sh);
#                     then, per toolchain, how many tests ran programs built with it
#   fuzz              bounded fuzzing of the snapshot reader
#
# Anything a lane cannot cover on this machine (a toolchain whose source is absent, a check a
# test could not run) is said as NOT COVERED; with CI=true that fails the run, so a green CI
# means everything ran. A failing step does not end the run: the lanes go on, and the summary
# (covered, NOT COVERED, FAILED, then `tests: N passed, M failed`, the line CI reads) is
# printed however the run ends; the exit status is non-zero when anything failed.
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
for lane in "${lanes[@]}"; do
  case "$lane" in
    rust | tests | fuzz) ;;
    ocaml-*)
      printf '%s\n' "${all_toolchains[@]}" | grep -qxF "${lane#ocaml-}" ||
        { echo "test.sh: unknown lane $lane (toolchains: ${all_toolchains[*]})" >&2; exit 2; }
      ;;
    *) echo "test.sh: unknown lane '$lane' (rust, ocaml-TOOLCHAIN, tests, fuzz)" >&2; exit 2 ;;
  esac
done

not_covered=()
covered=()
failures=()
passed=0
failed=0
mkdir -p target

# Counts a failed step and goes on: `failing WHAT STATUS`.
failing() {
  failures+=("$1 (exit status $2)")
  failed=$((failed + 1))
}

# Runs a step, counting its failure: `check WHAT COMMAND...`.
check() {
  local what=$1 status=0
  shift
  "$@" || status=$?
  [ "$status" -eq 0 ] || failing "$what" "$status"
  return "$status"
}

summary_printed=0
summary() {
  summary_printed=1
  step "what the lanes covered (the whole run: ${SECONDS}s)"
  local c n f
  for c in "${covered[@]}"; do echo "covered: $c"; done
  for n in "${not_covered[@]}"; do echo "NOT COVERED: $n"; done
  for f in "${failures[@]}"; do echo "FAILED: $f"; done
  if [ "${CI:-}" = true ] && [ ${#not_covered[@]} -gt 0 ]; then
    echo "test.sh: CI=true and ${#not_covered[@]} things were not covered: failing the run"
    failed=$((failed + 1))
  fi
  echo "tests: $passed passed, $failed failed"
}
# A run that stops before its end (an error of this script, an interrupt) still says what it
# covered, with the stop counted as a failure.
on_exit() {
  local status=$1
  if [ "$summary_printed" -eq 0 ]; then
    failing "test.sh stopped before its end" "$status"
    summary
    [ "$status" -ne 0 ] || exit 1
  fi
}
trap 'on_exit $?' EXIT
# The end-to-end tests write, per toolchain, the name of every test that ran a program built
# with it (heapsnap_testkit::samples: `toolchain_samples`, `toolchain_prefix`).
export HEAPSNAP_TOOLCHAIN_COVERAGE="$PWD/target/toolchain-coverage"
# Every test that cannot run a check appends `TEST<tab>WHAT` here
# (heapsnap_testkit::samples::not_covered): a passing test's stderr is never shown.
export HEAPSNAP_NOT_COVERED_FILE="$PWD/target/not-covered"
# A first report leaves a process that completes the snapshot's index: not in the middle of the
# suite, where temporary snapshots come and go (the one test of it turns it back on).
export HEAPSNAP_INDEX_IN_BACKGROUND=0

step "system packages"
scripts/install-deps.sh

lane_rust() {
  step "lane rust: formatting, lints, docs, minimum Rust versions"
  local status=0
  check "rust: cargo fmt --all --check" cargo fmt --all --check || status=1
  check "rust: cargo clippy -D warnings" cargo clippy --workspace --all-targets --release -q -- -D warnings || status=1
  check "rust: cargo doc, rustdoc -D warnings" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --release -q || status=1
  check "rust: scripts/check-msrv.py" python3 scripts/check-msrv.py || status=1
  check "rust: scripts/check-import-cycles.py" python3 scripts/check-import-cycles.py || status=1
  [ "$status" -eq 0 ] || return 0
  covered+=("rust: fmt, clippy -D warnings, rustdoc -D warnings, no import circle between any crate's files, declared rust-version of $(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workspace_members"]))') crates")
}

lane_ocaml() {
  local tc=$1 status=0
  step "lane ocaml-$tc: toolchain (cached in ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}) and samples"
  scripts/ocaml-toolchain.sh "$tc" >/dev/null || status=$?
  case "$status" in
    0) ;;
    3) not_covered+=("OCaml $tc: its source is not on this machine (see scripts/ocaml-toolchain.sh)"); return ;;
    *) failing "ocaml-$tc: scripts/ocaml-toolchain.sh $tc" "$status"; return ;;
  esac
  local out
  out=$(samples/build.sh "$tc") || { failing "ocaml-$tc: samples/build.sh $tc" "$?"; return; }
  covered+=("ocaml-$tc: toolchain built, $(find "$out" -maxdepth 1 -type f -perm -u+x | wc -l) sample executables")
}

lane_tests() {
  step "lane tests: memtrace and the programs traced with it (tests/analysis/sites.rs, memtrace/tests)"
  local status=0
  memtrace/scripts/build-ocaml-programs.sh >/dev/null || status=$?
  case "$status" in
    0) ;;
    3) not_covered+=("memtrace: its source is not in ../shared/sources") ;;
    *) failing "tests: memtrace/scripts/build-ocaml-programs.sh" "$status" ;;
  esac

  step "lane tests: the MCP client of tests/analysis/mcp.rs (the official Python SDK, in target/mcp-venv)"
  check "tests: scripts/mcp-client.sh" scripts/mcp-client.sh >/dev/null || true

  step "lane tests: DuckDB and Spark, the engines tests/analysis/fleet.rs compares heapsnap fleet with (PyPI, in target/fleet-venv)"
  check "tests: scripts/fleet-engines.sh" scripts/fleet-engines.sh >/dev/null || true

  step "lane tests: semgrep-core, a real OCaml 5.4 program (PyPI's semgrep wheel, scripts/semgrep-core.sh)"
  status=0
  scripts/semgrep-core.sh >/dev/null || status=$?
  # Exit status 3 (not to be had here): tests/dump/dump_semgrep.rs says NOT COVERED itself.
  [ "$status" -eq 0 ] || [ "$status" -eq 3 ] || failing "tests: scripts/semgrep-core.sh" "$status"

  step "lane tests: the Rust test suite"
  # The preload library is a cdylib that `cargo test` does not build, and the end-to-end tests
  # load the one beside the heapsnap binary: brought up to date here, never left from an older build.
  check "tests: cargo build -p heapsnap-preload" cargo build --release -q -p heapsnap-preload || true
  rm -rf "$HEAPSNAP_TOOLCHAIN_COVERAGE" "$HEAPSNAP_NOT_COVERED_FILE"
  local log=target/test-output.log
  # --no-fail-fast: a failing test binary does not keep the others from running. A failure
  # does not end this script either: its counts and the summary below are what it is for.
  status=0
  local selection
  read -r -a selection <<<"${CARGO_TEST_SELECTION:---workspace}"
  cargo test --release --no-fail-fast "${selection[@]}" 2>&1 | tee "$log" || status=$?
  local p f
  # (`|| true`: a log with no tally, after a build error, sums to 0.)
  p=$({ grep -oE 'test result: [a-zA-Z]+\. [0-9]+ passed' "$log" || true; } | awk '{s += $4} END {print s + 0}')
  f=$({ grep -oE '; [0-9]+ failed' "$log" || true; } | awk '{s += $2} END {print s + 0}')
  passed=$((passed + p))
  failed=$((failed + f))
  # A test binary that died (a signal, an abort) before its tally is a target cargo says failed
  # with no FAILED tally of its own; a build error fails cargo with no tally at all.
  local failed_targets tallied died
  failed_targets=$({ grep -oE '^error: [0-9]+ targets? failed' "$log" || true; } | awk '{s += $2} END {print s + 0}')
  tallied=$({ grep -E '^test result: FAILED\.' "$log" || true; } | wc -l)
  died=$((failed_targets - tallied))
  if [ "$died" -gt 0 ]; then
    failing "tests: $died test binaries died before their tally (see $log)" "$status"
  elif [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
    failing "tests: cargo test failed with no failed test counted (a build error? see $log)" "$status"
  fi
  # Each distinct reason once, with how many tests it kept from their check.
  if [ -s "$HEAPSNAP_NOT_COVERED_FILE" ]; then
    while IFS= read -r line; do not_covered+=("$line"); done < <(
      cut -f2- "$HEAPSNAP_NOT_COVERED_FILE" | sort | uniq -c | sort -rn |
        awk '{n = $1; sub(/^ *[0-9]+ /, ""); print $0 " (" n (n == 1 ? " test" : " tests") ", named in target/not-covered)"}'
    )
  fi
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
    ocaml-*) lane_ocaml "${lane#ocaml-}" ;;
    tests) lane_tests ;;
    fuzz) lane_fuzz ;;
  esac
done

summary
[ "$failed" -eq 0 ]
