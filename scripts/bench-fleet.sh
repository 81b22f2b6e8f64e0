#!/usr/bin/env bash
# `heapsnap fleet growth` over 1,000 exported snapshots (issue 57's goal: under 2 s here).
#
#   scripts/bench-fleet.sh EXPORT_DIR [N]
#
# EXPORT_DIR holds real exports (`heapsnap export SNAP --format parquet -o EXPORT_DIR`, one or
# more snapshots). N (default 1000) copies are made of them, 50 hosts of N/50 snapshots ten
# minutes apart, each copy with its own snapshot_id, host and time, and every retained and
# reachable size grown by a rate of its host (so that the questions have growth to find); the
# tables are otherwise the real ones. The copies are written by DuckDB (target/fleet-venv,
# scripts/fleet-engines.sh) into target/bench-fleet/N, once. Then each question runs as a whole
# `heapsnap` process, median and best of 7. HEAPSNAP names the binary (default: this
# repository's target/release/heapsnap, built if missing).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
source_dir="$(cd "${1:?usage: bench-fleet.sh EXPORT_DIR [N]}" && pwd)"
count="${2:-1000}"
heapsnap="${HEAPSNAP:-$repo/target/release/heapsnap}"
if [ -z "${HEAPSNAP:-}" ]; then (cd "$repo" && cargo build --release --quiet --bin heapsnap); fi
python="$("$repo/scripts/fleet-engines.sh")"
out="$repo/target/bench-fleet/$count"
if [ ! -s "$out/done" ]; then
  rm -rf "$out"
  mkdir -p "$out"
  "$python" - "$source_dir" "$out" "$count" <<'PY'
import duckdb, glob, os, sys
source, out, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
hosts = 50
per_host = max(1, count // hosts)
con = duckdb.connect()
tables = ["snapshots", "groups", "suspects", "dominator_paths", "sites"]
for table in tables:
    files = sorted(glob.glob(os.path.join(source, table, "*.parquet")))
    if files:
        con.execute(f"CREATE TABLE src_{table} AS SELECT * FROM read_parquet({files!r}) WHERE snapshot_id = (SELECT MIN(snapshot_id) FROM read_parquet({files!r}))")
        os.makedirs(os.path.join(out, table), exist_ok=True)
made = 0
for h in range(hosts):
    for i in range(per_host):
        if made == count:
            break
        made += 1
        sid = f"{(h * 1_000_003 + i * 7919 + 0x5eed) & 0xffffffffffffffff:016x}"
        host = f"host-{h:02d}"
        # Host h grows by h/10 percent a snapshot; host 37 by 5 percent, the leaking one.
        grow = f"(1.0 + {i} * {0.05 if h == 37 else h / 1000.0})"
        for table in tables:
            if not con.execute(f"SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'src_{table}'").fetchone()[0]:
                continue
            replace = [f"'{sid}' AS snapshot_id"]
            if table == "snapshots":
                replace += [f"'{host}' AS host",
                            f"TIMESTAMPTZ '2026-11-01 00:00:00+00' + INTERVAL {h} SECOND + INTERVAL {10 * i} MINUTE AS captured_at",
                            f"CAST(reachable_bytes * {grow} AS BIGINT) AS reachable_bytes"]
            else:
                replace += [f"CAST(retained_bytes * {grow} AS BIGINT) AS retained_bytes"]
            con.execute(f"COPY (SELECT * REPLACE ({', '.join(replace)}) FROM src_{table}) TO '{out}/{table}/{sid}.parquet' (FORMAT parquet)")
open(os.path.join(out, "done"), "w").write(f"{made}\n")
PY
fi
echo "fleet: $(cat "$out/done") snapshots in $out ($(du -sh "$out" | cut -f1))"
"$python" - "$heapsnap" "$out" <<'PY'
import subprocess, sys, time
heapsnap, out = sys.argv[1], sys.argv[2]
for question in [["growth", "--by", "type"], ["growth", "--by", "path"], ["diverge"], ["suspects"]]:
    times = []
    for _ in range(7):
        started = time.perf_counter()
        subprocess.run([heapsnap, "fleet", *question, out], stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    t = sorted(times)
    print(f"heapsnap fleet {' '.join(question):20} median {t[3] * 1000:7.1f} ms  best {t[0] * 1000:7.1f} ms")
PY
