"""Runs heapsnap fleet's standard questions on DuckDB or Spark, over the same Parquet files.

    python engines.py duckdb|spark DIR... < questions.json > answers.json

Reads `[{"name": ..., "sql": ...}, ...]` on stdin (the queries as `heapsnap fleet --json` ran
them, unchanged) and prints `{name: {"columns": [...], "rows": [{column: value}]}}`. Each engine
sees the exported tables under their names, over every DIR, as `heapsnap fleet` does; the one
dialect note: DuckDB has no `unix_micros` (Spark's, which the embedded engine registers), so it
is defined here as a macro of DuckDB's `epoch_us`.
"""
import decimal
import glob
import json
import os
import sys

TABLES = ["snapshots", "groups", "suspects", "dominator_paths"]


def files_of(dirs, table):
    return sorted(f for d in dirs for f in glob.glob(os.path.join(d, table, "*.parquet")))


def plain(value):
    # A DECIMAL would be a query that is not the same on every engine: said, not hidden.
    if isinstance(value, decimal.Decimal):
        raise SystemExit(f"a DECIMAL in an answer ({value}): cast it in the query")
    return value


def duckdb_answers(dirs, questions):
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    con.execute("CREATE MACRO unix_micros(t) AS epoch_us(t)")
    for table in TABLES:
        files = files_of(dirs, table)
        if files:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({files!r}, union_by_name = true)")
    answers = {}
    for q in questions:
        cursor = con.execute(q["sql"])
        columns = [c[0] for c in cursor.description]
        rows = [{c: plain(v) for c, v in zip(columns, row)} for row in cursor.fetchall()]
        answers[q["name"]] = {"columns": columns, "rows": rows}
    return answers


def spark_answers(dirs, questions):
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("heapsnap-fleet-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for table in TABLES:
            paths = [os.path.join(d, table) for d in dirs if files_of([d], table)]
            if paths:
                spark.read.option("mergeSchema", "true").parquet(*paths).createOrReplaceTempView(table)
        answers = {}
        for q in questions:
            df = spark.sql(q["sql"])
            columns = df.columns
            rows = [{c: plain(row[c]) for c in columns} for row in df.collect()]
            answers[q["name"]] = {"columns": columns, "rows": rows}
        return answers
    finally:
        spark.stop()


def main():
    engine, dirs = sys.argv[1], sys.argv[2:]
    questions = json.load(sys.stdin)
    answers = {"duckdb": duckdb_answers, "spark": spark_answers}[engine](dirs, questions)
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()
