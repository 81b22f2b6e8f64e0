#!/usr/bin/env bash
# Installs the client tests/mcp.rs drives `heapsnap mcp` with: the official MCP Python SDK
# (`mcp` on PyPI), pinned, in a virtual environment under target/ (kept between runs). Prints
# the environment's python. Any failure to install is a failure (exit status 1).
set -euo pipefail
version=1.9.4
# mcp 1.9.4 imports a pydantic internal that later pydantic releases removed.
pydantic=2.11.7
exec "$(dirname "$0")/pinned-venv.sh" mcp-venv "mcp==$version" "pydantic==$pydantic"
