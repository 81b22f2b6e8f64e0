#!/usr/bin/env bash
# Installs the client tests/mcp.rs drives `heapsnap mcp` with: the official MCP Python SDK
# (`mcp` on PyPI), pinned, in a virtual environment under target/ (kept between runs). Prints
# the environment's python. Any failure to install is a failure (exit status 1).
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.9.4
# mcp 1.9.4 imports a pydantic internal that later pydantic releases removed.
pydantic=2.11.7
venv=target/mcp-venv
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$version' or m.version('pydantic') != '$pydantic')" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv" || { echo "mcp-client: cannot make a venv (install python3-venv)" >&2; exit 1; }
  "$venv/bin/pip" install -q "mcp==$version" "pydantic==$pydantic" >&2 || { echo "mcp-client: pip install mcp==$version failed" >&2; exit 1; }
fi
echo "$PWD/$venv/bin/python"
