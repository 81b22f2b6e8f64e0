#!/usr/bin/env bash
# Makes semgrep-core available, a real OCaml 5.4 program (its publisher built it with
# "OCaml 5.4.0+semgrep-fork", unstripped, with DWARF), and prints its path on stdout. It comes
# from PyPI's `semgrep` wheel for manylinux x86-64, pinned by version and checksum, with the
# shared libraries the wheel bundles beside it (semgrep-core finds them through its RUNPATH,
# $ORIGIN/libs). tests/dump/dump_semgrep.rs dumps it mid-scan.
#
#   scripts/semgrep-core.sh
#
# Exit status 3 means it cannot be had on this machine (not Linux x86-64, no pip, PyPI
# unreachable); callers say plainly that it was not covered. A wheel or binary that is not the
# one pinned is a failure (exit status 1).
#
# It is fetched once and cached outside the repository, in
# ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/semgrep-core-VERSION (about 290 MB). Every fetch
# holds an exclusive flock on its lock file, so two concurrent runs fetch it once; the copy
# only counts once the `.heapsnap-complete` stamp is written, after every check.
set -euo pipefail

version=1.185.0
# The wheel's sha256, as PyPI lists it (pip checks it too, with --require-hashes).
wheel_sha256=0eb6aaadad5b957af96d1300487e10af1dc8016e8ef53072effb48cd4906c02b
# The executable's, inside that wheel.
core_sha256=38fd08794fa488263b4a324f1b71eb6c0817f0ddaff372d46fe3629b3f78672d

cache="${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}"
dir="$cache/semgrep-core-$version"
stamp="$dir/.heapsnap-complete"

if [ -f "$stamp" ]; then echo "$dir/semgrep-core"; exit 0; fi

if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "semgrep-core: PyPI's semgrep-core wheel is for Linux x86-64, not $(uname -s) $(uname -m)" >&2
  exit 3
fi
python=$(command -v python3 || true)
if [ -z "$python" ] || ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "semgrep-core: python3 with pip is needed to fetch semgrep==$version from PyPI" >&2
  exit 3
fi

mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
# Another run may have finished while we waited for the lock.
if [ -f "$stamp" ]; then echo "$dir/semgrep-core"; exit 0; fi

rm -rf "$dir"
work="$(mktemp -d "$cache/fetch-semgrep.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "semgrep-core: fetching semgrep==$version from PyPI (a 72 MB wheel) into $dir" >&2
printf 'semgrep==%s --hash=sha256:%s\n' "$version" "$wheel_sha256" >"$work/requirements.txt"
# The manylinux x86-64 wheel whatever this Python is: semgrep-core does not use it.
if ! "$python" -m pip download -q --no-deps --require-hashes --only-binary=:all: \
  --platform manylinux_2_34_x86_64 --python-version 3.11 --implementation cp \
  -r "$work/requirements.txt" -d "$work/wheel" >"$work/pip.log" 2>&1; then
  if grep -qi 'hash' "$work/pip.log"; then
    cat "$work/pip.log" >&2
    echo "semgrep-core: the semgrep==$version wheel is not the one pinned" >&2
    exit 1
  fi
  echo "semgrep-core: cannot fetch semgrep==$version from PyPI: $(tail -n 1 "$work/pip.log")" >&2
  exit 3
fi
wheel=("$work"/wheel/semgrep-"$version"-*manylinux*x86_64.whl)
echo "$wheel_sha256  ${wheel[0]}" | sha256sum -c --quiet - >&2 ||
  { echo "semgrep-core: ${wheel[0]} is not the wheel pinned" >&2; exit 1; }

# The executable and its bundled libraries, nothing else (zipfile: unzip may be absent).
"$python" - "${wheel[0]}" "$work/out" <<'EOF'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
prefix = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("/semgrep/bin/semgrep-core"))[: -len("semgrep-core")]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        rest = name[len(prefix):]
        if name.startswith(prefix) and (rest == "semgrep-core" or rest.startswith("libs/")) and not name.endswith("/"):
            target = os.path.join(out, rest)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            os.chmod(target, 0o755)
EOF
echo "$core_sha256  $work/out/semgrep-core" | sha256sum -c --quiet - >&2 ||
  { echo "semgrep-core: the semgrep-core in the wheel is not the one pinned" >&2; exit 1; }
"$work/out/semgrep-core" -version >/dev/null ||
  { echo "semgrep-core: the fetched semgrep-core does not run" >&2; exit 1; }
mv "$work/out" "$dir"
touch "$stamp"
echo "$dir/semgrep-core"
