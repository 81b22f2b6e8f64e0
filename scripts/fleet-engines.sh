#!/usr/bin/env bash
# Installs the engines the fleet tests (tests/analysis/fleet.rs) compare `heapsnap fleet` with:
# DuckDB and PySpark (Spark in local mode, on the machine's Java) from PyPI, pinned, in a
# virtual environment under target/ (kept between runs). Prints the environment's python. Any
# failure to install is a failure (exit status 1).
set -euo pipefail
exec "$(dirname "$0")/pinned-venv.sh" fleet-venv "duckdb==2.0.1" "pyspark==4.3.0"
