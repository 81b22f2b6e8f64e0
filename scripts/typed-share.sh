#!/usr/bin/env bash
# How much of a running program's heap heapsnap types (issue 26): starts a command, dumps it at
# the given moments, adds the OCaml names and types from its .cmt files (`heapsnap annotate`),
# and prints `heapsnap info`'s typed share of reachable bytes for each snapshot.
#
#   scripts/typed-share.sh [--at SECONDS]... [--cmt DIR]... [--ocaml DIR] [--dir DIR] -- CMD ARGS...
#
# --at       a moment, in seconds after the start (decimals allowed; repeat it, or give
#            several separated by commas); default 5
# --cmt      where the program's .cmt files are (repeat it); passed to `heapsnap annotate`
# --ocaml    the program's OCaml toolchain (prefix), to read the .cmt files with
# --dir      where to keep the snapshots (default: a new directory under $TMPDIR, printed)
#
# CMD's output goes to DIR/command.log. CMD runs in a process group of its own, which is killed
# when the last dump is taken, or when this script exits in any way. A moment at which CMD has
# already exited is said, and no later dump is tried. HEAPSNAP names the heapsnap binary to use
# (default: this repository's target/release/heapsnap, built if missing).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

moments=() cmt_args=() ocaml_args=() dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --at) IFS=, read -r -a more <<<"$2"; moments+=("${more[@]}"); shift 2 ;;
    --cmt) cmt_args+=(--cmt "$2"); shift 2 ;;
    --ocaml) ocaml_args=(--ocaml "$2"); shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "typed-share: unknown argument $1 (usage: typed-share.sh [--at SECONDS]... [--cmt DIR]... [--ocaml DIR] [--dir DIR] -- CMD ARGS...)" >&2; exit 2 ;;
  esac
done
if [ $# -eq 0 ]; then echo "typed-share: no command given after --" >&2; exit 2; fi
for m in "${moments[@]}"; do
  if ! [[ "$m" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then echo "typed-share: --at $m is not a number of seconds" >&2; exit 2; fi
done
if [ ${#moments[@]} -eq 0 ]; then moments=(5); fi
mapfile -t moments < <(printf '%s\n' "${moments[@]}" | sort -g)

heapsnap="${HEAPSNAP:-$repo/target/release/heapsnap}"
if [ -z "${HEAPSNAP:-}" ] && [ ! -x "$heapsnap" ]; then (cd "$repo" && cargo build --release --quiet --bin heapsnap); fi
if [ -z "$dir" ]; then dir="$(mktemp -d "${TMPDIR:-/tmp}/typed-share.XXXXXX")"; fi
mkdir -p "$dir"
echo "typed-share: snapshots in $dir" >&2

pid=""
stop_command() {
  if [ -n "$pid" ]; then
    # The whole group: a build tool's children (compilers) too.
    kill -TERM -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
  fi
}
trap stop_command EXIT
trap 'exit 130' INT TERM

# setsid: CMD leads a process group of its own (this script is not a group leader's child
# under job control, so setsid execs CMD in place and $! is CMD's pid).
setsid "$@" >"$dir/command.log" 2>&1 &
pid=$!
start=$(date +%s.%N)

snapshots=()
for m in "${moments[@]}"; do
  wait_for=$(python3 -c "import sys; print(max(0.0, $start + $m - float(sys.argv[1])))" "$(date +%s.%N)")
  sleep "$wait_for"
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "typed-share: the command exited before ${m}s (see $dir/command.log)" >&2
    break
  fi
  snap="$dir/at-${m}s.heapsnap"
  if "$heapsnap" dump --pid "$pid" -o "$snap" >"$dir/at-${m}s.dump.txt" 2>&1; then
    snapshots+=("$snap")
  else
    echo "typed-share: the dump at ${m}s failed:" >&2
    cat "$dir/at-${m}s.dump.txt" >&2
  fi
done
stop_command

# One line per snapshot, from `info --json`'s "typed".
read -r -d '' print_share <<'EOF' || true
import json, sys
info, name = json.load(sys.stdin), sys.argv[1]
t = info.get("typed")
if t is None:
    why = info.get("ocaml_names_missing") or "the names give no types"
    print(f"{name}: no types ({why})")
else:
    mib = 1024 * 1024
    print(f"{name}: typed {t['percent_of_reachable_bytes']:.1f}% of reachable bytes "
          f"({t['bytes'] / mib:.1f} of {t['reachable_bytes'] / mib:.1f} MiB; {t['objects']} of {t['reachable_objects']} objects); "
          f"conflicts {t['conflicts']}, mismatches {t['mismatches']}")
EOF

for snap in "${snapshots[@]}"; do
  "$heapsnap" annotate "$snap" "${cmt_args[@]}" "${ocaml_args[@]}" >"${snap%.heapsnap}.annotate.txt" 2>&1 || {
    echo "typed-share: annotate $snap failed:" >&2
    cat "${snap%.heapsnap}.annotate.txt" >&2
    continue
  }
  "$heapsnap" info "$snap" --json | python3 -c "$print_share" "$(basename "$snap")"
done
