#!/usr/bin/env bash
# Installs the system tools heapsnap's build and tests need, when they are missing
# (Debian/Ubuntu; needs root or passwordless sudo for apt-get).
set -euo pipefail
need=()
command -v cc >/dev/null || need+=(gcc)
command -v make >/dev/null || need+=(make)
command -v npm >/dev/null || need+=(npm)
command -v flock >/dev/null || need+=(util-linux)
command -v strip >/dev/null || need+=(binutils)
command -v gdb >/dev/null || need+=(gdb)
# The web UI's browser test (tests/web_ui.rs) drives a headless Chromium through chromedriver.
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
# The MCP test (tests/mcp.rs) drives `heapsnap mcp` with the official Python SDK, in a venv.
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >&2
fi
command -v cargo >/dev/null || { echo "install-deps: cargo is required (https://rustup.rs)" >&2; exit 1; }
