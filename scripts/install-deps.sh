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
# tests/dump/dump_errors.rs holds a sample under another tracer, strace.
command -v strace >/dev/null || need+=(strace)
# The web UI's browser test (tests/analysis/web_ui.rs) drives a headless Chromium through chromedriver.
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
# The MCP test (tests/mcp.rs) drives `heapsnap mcp` with the official Python SDK, in a venv.
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# The fleet test (tests/analysis/fleet.rs) runs Spark in local mode (PySpark 4: Java 17 or later,
# which Debian's default JRE is from Debian 12 on).
java -version >/dev/null 2>&1 || need+=(default-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  # apt and dpkg talk a lot: their output goes to a log, shown only when they fail.
  log="$(mktemp "${TMPDIR:-/tmp}/heapsnap-install-deps.XXXXXX")"
  echo "install-deps: installing ${need[*]} (log in $log)" >&2
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "install-deps: apt-get failed (whole log in $log)" >&2
    exit 1
  fi
fi
command -v cargo >/dev/null || { echo "install-deps: cargo is required (https://rustup.rs)" >&2; exit 1; }
