#!/usr/bin/env bash
# Times a cold CI run on this machine: a fresh clone of the repository's HEAD, every cache
# empty (HOME points at a new directory: the cargo registry, npm's and pip's caches, heapsnap's
# toolchains, .cmt readers, memlab, semgrep-core and cargo-fuzz all start from nothing), then
# CI's entry point with CI=true. The machine's own environment (its CA certificates for npm
# and pip, its proxy) is kept: it is the machine, not a cache.
#
#   scripts/cold-ci.sh [WORK_DIR]     # default: a new directory under $TMPDIR
#
# Prints the run's log path, and at the end its exit status and wall time.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
work="$(realpath "$work")"
rm -rf "$work/home" "$work/clone"
mkdir -p "$work/home"
git clone -q "$repo" "$work/clone"
# The sources the project's scripts read from ../shared (OCaml 5.2.0, trunk, memtrace) sit
# beside the repository on this machine, as beside CI's clone: the same beside this one.
if [ -d "$repo/../shared" ] && [ ! -e "$work/shared" ]; then ln -s "$(realpath "$repo/../shared")" "$work/shared"; fi
echo "cold-ci: clone of $(git -C "$repo" rev-parse --short HEAD) in $work/clone; log in $work/ci.log" >&2
rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
start=$SECONDS
status=0
(
  cd "$work/clone"
  # rustup's toolchains are the machine's; cargo's registry is a cache.
  HOME="$work/home" RUSTUP_HOME="$rustup_home" CARGO_HOME="$work/home/.cargo" CI=true .ci/run
) >"$work/ci.log" 2>&1 || status=$?
echo "cold-ci: exit status $status, wall $((SECONDS - start)) s ($work/ci.log)"
exit "$status"
