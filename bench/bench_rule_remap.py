"""What a rule edit would cost if the derive kept each request's attributed time per span path (issue 29).

    .venv/bin/python bench/bench_rule_remap.py STORE [--run day-a] [--scratch /tmp/remap.duckdb]

A measurement of a design, not a feature: a stage-rule edit changes which stage each span maps to,
not the span tree (effective intervals, exclusive and attributed times are rule-independent). If the
derive wrote, per request, the attributed time summed per *path signature* (the chain of span name,
kind, tailscope.stage attribute, rule and tier-root flag from the request root down to the span), a
rule edit could recompute each path's stage once (a few thousand paths) and re-sum every request's
stage columns from those rows, without reading a span or walking a tree.

For one run of a derived store (bench/bench_scale.py's), this prints, as wall / CPU ms:
  derive       span_tree.sql with the derive's per-request output (what a rule edit runs now, per part)
  paths        the same walk carrying a path signature, output one row per (request, path)
  stored       those rows written to a scratch DuckDB file (request key RLE, dense path id): its size
  re-map       every request's nine stage sums from the rows and a path -> stage table
  check        requests whose re-mapped stage sums differ (> 1 ns) from the derive's: must be 0

The path -> stage table here is the derive's own (same rules), so `re-map` is the cost of the
aggregation, not a re-mapping under other rules (that is a walk over the distinct paths: small).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

from tailscope.store.duckdb.rules import phase_rules_in_force, rules_in_force  # noqa: E402
from tailscope.store.duckdb.statements import span_tree_query  # noqa: E402
from tailscope.vocabulary import ALL_STAGES  # noqa: E402

STAGES = [s for s in ALL_STAGES if s != "unattributed"]


def with_paths(text: str) -> str:
    """span_tree.sql (requests output) carrying a path signature down the walk, ending in one row per
    (request, path) instead of one per request."""
    edits = [
        ("tree(TK, SK, PK, EffStart, EffEnd, PStart, Depth, Stage, RuleNo) AS (",
         "tree(TK, SK, PK, EffStart, EffEnd, PStart, Depth, Stage, RuleNo, Sig) AS ("),
        ("CASE WHEN s.AttrStage IS NOT NULL THEN -1 ELSE 0 END\n",
         "CASE WHEN s.AttrStage IS NOT NULL THEN -1 ELSE 0 END, hash(s.SpanName, s.SpanKind, s.AttrStage)\n"),
        ("ELSE 10000 END\n    FROM tree AS t",
         "ELSE 10000 END, hash(t.Sig, c.SpanName, c.SpanKind, c.AttrStage, c.RuleNo, tr.SK IS NOT NULL)\n"
         "    FROM tree AS t"),
        ("w.RuleNo, w.ExclusiveNs,", "w.RuleNo, w.Sig, w.ExclusiveNs,"),
    ]
    for old, new in edits:
        if text.count(old) != 1:
            raise SystemExit(f"span_tree.sql changed: {old!r} not found once; update bench_rule_remap.py")
        text = text.replace(old, new)
    head = text[: text.index("SELECT s.TraceId, s.SpanId, r.ClientDuration")]
    return (
        head + "SELECT TK, Sig, any_value(CASE WHEN Depth = 0 OR RuleNo = 10002 THEN 'own' ELSE Stage END) "
        "AS Stage, sum(AttributedNs) AS Ns FROM span_rows GROUP BY TK, Sig"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("store", type=Path)
    parser.add_argument("--run", default="day-a")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/bench_rule_remap.duckdb"))
    args = parser.parse_args(argv)
    for path in (args.scratch, Path(f"{args.scratch}.wal")):
        path.unlink(missing_ok=True)
    conn = duckdb.connect(str(args.scratch))
    conn.execute("SET memory_limit = '1GB'")
    conn.execute(f"ATTACH '{args.store}' AS src (READ_ONLY)")
    conn.execute("USE src")
    spans = conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = ?", [args.run]).fetchone()[0]
    text, params = span_tree_query(
        rules_in_force(conn), "run", args.run, output="requests", phase_rules=phase_rules_in_force(conn)
    )

    def timed(label: str, statement: str, bound: list | None = None) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        conn.execute(statement, bound or []).fetchall()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        per_span = cpu / spans * 1e6
        print(f"{label:8s} {wall * 1e3:8,.0f} / {cpu * 1e3:8,.0f} ms  ({per_span:.2f} µs CPU per span)")

    print(f"run {args.run!r}: {spans:,} spans, load {os.getloadavg()[0]:.1f}")
    timed("derive", f"CREATE OR REPLACE TEMP TABLE derived AS {text}", params)
    timed("paths", f"CREATE OR REPLACE TEMP TABLE paths AS {with_paths(text)}", params[:-1])
    rows, distinct = conn.execute("SELECT count(*), count(DISTINCT Sig) FROM temp.paths").fetchone()
    conn.execute("USE " + args.scratch.stem)
    timed("stored", "CREATE TABLE request_paths AS SELECT TK, dense_rank() OVER (ORDER BY Sig)::INTEGER "
          "AS PathId, Ns FROM temp.paths ORDER BY TK")
    conn.execute("CHECKPOINT")
    size = args.scratch.stat().st_size
    print(f"         {rows:,} rows ({rows / spans:.2f} per span), {distinct:,} distinct paths, "
          f"{size / 2**20:.1f} MiB on disk ({size / spans:.1f} bytes per span)")
    conn.execute(
        "CREATE TEMP TABLE path_stage AS SELECT dense_rank() OVER (ORDER BY Sig)::INTEGER AS PathId, "
        "any_value(Stage) AS Stage FROM temp.paths GROUP BY Sig"
    )
    sums = ", ".join(f"coalesce(sum(p.Ns) FILTER (WHERE m.Stage = '{s}'), 0) AS {s}_ns" for s in STAGES)
    timed("re-map", f"CREATE TEMP TABLE remapped AS SELECT p.TK, {sums} FROM request_paths AS p "
          "JOIN temp.path_stage AS m USING (PathId) GROUP BY p.TK")
    differ = " OR ".join(f"abs(r.{s}_ns - d.{s}_ns) > 1" for s in STAGES)
    bad, total = conn.execute(
        f"SELECT count(*) FILTER (WHERE {differ}), count(*) FROM temp.remapped AS r "
        "JOIN temp.derived AS d ON hash(d.TraceId) = r.TK"
    ).fetchone()
    print(f"check    {bad:,} of {total:,} requests differ")
    conn.close()
    args.scratch.unlink(missing_ok=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
