#!/usr/bin/env bash
# A virtual environment under target/ holding the PyPI packages given, at exactly their pinned
# versions (kept between runs, made again when one differs or is missing). Prints its python.
# Any failure to install is a failure (exit status 1). The test scripts that need a Python
# client or engine (mcp-client.sh, fleet-engines.sh) call it.
#
#   scripts/pinned-venv.sh NAME PACKAGE==VERSION...
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:?usage: pinned-venv.sh NAME PACKAGE==VERSION...}"
shift
venv="target/$name"
pinned='import importlib.metadata as m, sys
sys.exit(any(m.version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))'
if ! "$venv/bin/python" -c "$pinned" "$@" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv" || { echo "$name: cannot make a venv (install python3-venv)" >&2; exit 1; }
  "$venv/bin/pip" install -q "$@" >&2 || { echo "$name: pip install $* failed" >&2; exit 1; }
fi
echo "$PWD/$venv/bin/python"
