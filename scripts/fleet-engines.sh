#!/usr/bin/env bash
# Installs the engines the fleet tests (tests/analysis/fleet.rs) compare `heapsnap fleet` with:
# DuckDB and PySpark (Spark in local mode, on the machine's Java 17) from PyPI, pinned, in a
# virtual environment under target/ (kept between runs). Prints the environment's python. Any
# failure to install is a failure (exit status 1).
set -euo pipefail
cd "$(dirname "$0")/.."
duckdb=2.0.1
pyspark=4.3.0
venv=target/fleet-venv
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('duckdb') != '$duckdb' or m.version('pyspark') != '$pyspark')" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv" || { echo "fleet-engines: cannot make a venv (install python3-venv)" >&2; exit 1; }
  "$venv/bin/pip" install -q "duckdb==$duckdb" "pyspark==$pyspark" >&2 || { echo "fleet-engines: pip install duckdb==$duckdb pyspark==$pyspark failed" >&2; exit 1; }
fi
echo "$PWD/$venv/bin/python"
