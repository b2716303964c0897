"""chdb probe (issue 13 groundwork): the exporter's otel_traces in a chdb session on disk vs our DuckDB store.

    .venv/bin/python bench/bench_chdb_probe.py [--spans 1000000] [--work /tmp/chdb_probe]

Same spans for both: bench/data/otlp_<spans>.jsonl (bench/gen_otlp.py) decoded once by the ingest fast
path into Arrow (attributes/events/links as JSON text, as the decoders produce them; not timed). Then:
- insert: DuckDB (ingest.loader.append_batch, 100 k-row chunks, one transaction) against each way of
  getting the same Arrow chunks into the exporter's Map/Nested table in chdb (bench_chdb_insert.py);
- queries on the derived per-request table (DuckDB's refresh_run result copied to chdb): per-stage
  percentiles, the waterfall's quantiles, a group-by on one SpanAttributes key over the spans;
- quantiles: DuckDB quantile_cont against the ClickHouse candidates on the real stage columns;
- two processes on one chdb path (writer + reader).
Prints one line per figure (best of 3 after a warm-up, wall seconds). Keep it modest: 2 shared cores.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
from bench_chdb_insert import INSERTS, create_tables
from chdb import session as chs

from ingest.loader import FileResult, decode_file
from tailscope.store.duckdb.connection import ensure_schema
from tailscope.store.duckdb.derive import refresh_run
from tailscope.store.duckdb.writer import INSERT_ROWS, append_batch
from tailscope.vocabulary import ALL_STAGES

HERE = Path(__file__).resolve().parent
QS = [0.5, 0.95, 0.99, 0.999]
STAGE_COLS = [f"{s}_ns" for s in ALL_STAGES]


def best_of(fn: Callable[[], object], runs: int = 3) -> tuple[float, object]:
    """Best wall time of `runs` after a warm-up (chdb and DuckDB both run in this process)."""
    result = fn()  # warm-up
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), result


class Timer:
    """Wall and process CPU seconds (CPU counts both engines' threads: steadier on a shared box)."""

    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu

    def text(self, rows: int) -> str:
        return f"{self.wall:.2f} s wall, {self.cpu:.2f} s CPU ({rows / self.wall:,.0f} spans/s)"


def decode(spans: int) -> pa.Table:
    path = HERE / "data" / f"otlp_{spans}.jsonl"
    if not path.exists():
        subprocess.run([sys.executable, str(HERE / "gen_otlp.py"), "--spans", str(spans)], check=True)
    tables = []
    with open(path, "rb") as raw:
        for batch in decode_file(raw, str(path), FileResult(str(path)), None):
            tables.append(batch.to_arrow())
    return pa.concat_tables(tables, promote_options="permissive")


def chunks(table: pa.Table) -> list[pa.Table]:
    # unify_dictionaries: chdb's Python() rejects a dictionary with repeated values ("Expected
    # Dictionary size 13, real Dictionary size is 5"), which combining unequal dictionaries makes
    table = table.unify_dictionaries()
    return [table.slice(i, INSERT_ROWS).combine_chunks() for i in range(0, table.num_rows, INSERT_ROWS)]


def duckdb_store(table: pa.Table, path: Path) -> tuple[Timer, Timer]:
    path.unlink(missing_ok=True)
    conn = duckdb.connect(str(path))
    ensure_schema(conn, path)
    parts = chunks(table)
    with Timer() as insert:
        conn.execute("BEGIN")
        for chunk in parts:
            append_batch(conn, "probe", chunk)
        conn.execute("COMMIT")
    with Timer() as derive:
        conn.execute("BEGIN")
        refresh_run(conn, "probe", None, table.num_rows)
        conn.execute("COMMIT")
    conn.close()
    return insert, derive


def duck_queries(conn: duckdb.DuckDBPyConnection) -> dict[str, tuple[float, object]]:
    cols = ", ".join(f"quantile_cont({c}, {QS})" for c in STAGE_COLS)
    return {
        "stage percentiles (10 stages x 4 q)": best_of(
            lambda: conn.execute(f"SELECT {cols} FROM requests").fetchall()
        ),
        "waterfall quantiles (e2e 4 q + count)": best_of(
            lambda: conn.execute(
                "SELECT quantile_cont(Duration, [0.45, 0.55, 0.9, 0.99]), count(*) FROM requests"
            ).fetchall()
        ),
        "group by SpanAttributes key (spans)": best_of(
            lambda: conn.execute(
                "SELECT SpanAttributes->>'tailscope.stage' AS k, count(*), avg(Duration)"
                " FROM otel_traces GROUP BY k ORDER BY k"
            ).fetchall()
        ),
    }


def ch_queries(sess: chs.Session) -> dict[str, tuple[float, object]]:
    levels = ", ".join(map(str, QS))
    cols = ", ".join(f"quantilesExactInclusive({levels})({c})" for c in STAGE_COLS)

    def q(text: str) -> Callable[[], object]:
        return lambda: sess.query(text, "ArrowTable").to_pylist()

    return {
        "stage percentiles (10 stages x 4 q)": best_of(q(f"SELECT {cols} FROM requests")),
        "waterfall quantiles (e2e 4 q + count)": best_of(
            q("SELECT quantilesExactInclusive(0.45, 0.55, 0.9, 0.99)(Duration), count() FROM requests")
        ),
        "group by SpanAttributes key (spans)": best_of(
            q(
                "SELECT SpanAttributes['tailscope.stage'] AS k, count(), avg(Duration)"
                " FROM otel_traces GROUP BY k ORDER BY k"
            )
        ),
    }


def quantile_parity(conn: duckdb.DuckDBPyConnection, sess: chs.Session) -> None:
    """DuckDB quantile_cont vs ClickHouse candidates on every stage column + Duration, and the
    portable form (lo + (hi - lo) * frac over the sorted column, the same arithmetic in both)."""
    cols = [*STAGE_COLS, "Duration"]
    levels = [0.1, 0.45, 0.5, 0.55, 0.9, 0.95, 0.99, 0.999]
    want = conn.execute(
        "SELECT " + ", ".join(f"quantile_cont({c}, {levels})" for c in cols) + " FROM requests"
    ).fetchone()
    lv = ", ".join(map(str, levels))
    for fn in ("quantilesExactInclusive", "quantilesExact", "quantiles", "quantilesExactHigh"):
        got = sess.query(
            "SELECT " + ", ".join(f"{fn}({lv})(toInt64({c}))" for c in cols) + " FROM requests", "ArrowTable"
        )
        pairs = [
            (w, g) for i in range(len(cols)) for w, g in zip(want[i], got.column(i)[0].as_py(), strict=True)
        ]
        diff = [abs(w - g) / max(abs(w), 1.0) for w, g in pairs if w != g]
        print(
            f"quantile {fn:<26} differs from DuckDB quantile_cont in {len(diff)}/{len(pairs)}"
            f" values, max relative {max(diff, default=0):.2e}"
        )
    # portable: position = (n - 1) * q, lo/hi the sorted values at floor/ceil, lo + (hi - lo) * frac
    duck_sql = (
        "WITH s AS (SELECT list_sort(list({c})) AS a, count(*) AS n FROM requests), "
        "p AS (SELECT a, unnest({qs}::DOUBLE[]) AS q, (n - 1) * unnest({qs}::DOUBLE[]) AS pos FROM s) "
        "SELECT list(a[CAST(floor(pos) AS BIGINT) + 1] + (a[CAST(ceil(pos) AS BIGINT) + 1] - "
        "a[CAST(floor(pos) AS BIGINT) + 1]) * (pos - floor(pos)) ORDER BY q) FROM p"
    )
    ch_sql = (
        "WITH arraySort(groupArray(toInt64({c}))) AS a, count() AS n "
        "SELECT arrayMap(q -> a[toInt64(floor((n - 1) * q)) + 1] + (a[toInt64(ceil((n - 1) * q)) + 1] - "
        "a[toInt64(floor((n - 1) * q)) + 1]) * ((n - 1) * q - floor((n - 1) * q)), {qs}) FROM requests"
    )
    same = total = 0
    for c in cols:
        d = conn.execute(duck_sql.format(c=c, qs=levels)).fetchone()[0]
        h = sess.query(ch_sql.format(c=c, qs=levels), "ArrowTable").column(0)[0].as_py()
        same += sum(1 for x, y in zip(d, h, strict=True) if float(x) == float(y))
        total += len(d)
    print(f"quantile portable sorted-array form: DuckDB == chdb in {same}/{total} values")
    allcols_d = ", ".join(f"(SELECT list_sort(list({c})) FROM requests)" for c in STAGE_COLS[:1])
    t_d, _ = best_of(lambda: conn.execute(f"SELECT {allcols_d}").fetchall(), 2)
    cols_h = ", ".join(f"arraySort(groupArray(toInt64({c})))[1]" for c in STAGE_COLS)
    t_h, _ = best_of(lambda: sess.query(f"SELECT {cols_h} FROM requests", "CSV"), 2)
    t_d10, _ = best_of(
        lambda: conn.execute(
            "SELECT " + ", ".join(f"list_sort(list({c}))[1]" for c in STAGE_COLS) + " FROM requests"
        ).fetchall(),
        2,
    )
    print(
        f"sort cost, 10 stage columns: DuckDB list_sort(list()) {t_d10:.3f} s,"
        f" chdb arraySort(groupArray()) {t_h:.3f} s"
        f" (DuckDB one column incl. transfer {t_d:.3f} s)"
    )


def two_processes(path: Path) -> None:
    """A second process opening the same chdb path while this one holds a session on it."""
    code = (
        "import sys, chdb.session as s\n"
        "try:\n"
        f"    x = s.Session({str(path)!r})\n"
        "    n = x.query('SELECT count() FROM otel_traces', 'CSV').bytes().decode().strip()\n"
        "    print('opened; rows', n)\n"
        "except Exception as e:\n    print('refused:', str(e).splitlines()[0][:200])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    print(
        "second process on the same chdb path while a session is open:",
        (out.stdout + out.stderr).strip()[:400],
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/chdb_probe"))
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    table = decode(args.spans)
    print(f"spans decoded: {table.num_rows}  command: {' '.join(sys.argv)}")
    duck_path = args.work / "probe.duckdb"
    insert, derive = duckdb_store(table, duck_path)
    print(
        f"insert DuckDB append_batch (JSON text attrs): {insert.text(table.num_rows)};"
        f" refresh_run {derive.wall:.2f} s"
    )
    sess = chs.Session(str(args.work / "chdb"))
    parts = chunks(table)
    for name, fill in INSERTS.items():
        create_tables(sess)
        with Timer() as took:
            fill(sess, parts, args.work)
        n, size = (
            sess.query(
                "SELECT sum(rows), sum(bytes_on_disk) FROM system.parts"
                " WHERE active AND table = 'otel_traces'"
                " AND database = currentDatabase()",
                "CSV",
            )
            .bytes()
            .decode()
            .strip()
            .split(",")
        )
        print(f"insert chdb {name}: {took.text(table.num_rows)}, rows {n}, {int(size) / 1e6:.1f} MB on disk")
    conn = duckdb.connect(str(duck_path), read_only=True)
    requests = conn.sql("SELECT * FROM requests").to_arrow_table()
    sess.query("DROP TABLE IF EXISTS requests")
    sess.query(
        "CREATE TABLE requests ENGINE = MergeTree ORDER BY (RunLabel, Timestamp) AS SELECT * REPLACE "
        "(assumeNotNull(RunLabel) AS RunLabel, assumeNotNull(Timestamp) AS Timestamp) FROM Python(requests)"
    )
    print(f"requests rows: {requests.num_rows}")
    duck, ch = duck_queries(conn), ch_queries(sess)
    for key in duck:
        print(f"query {key}: DuckDB {duck[key][0]:.3f} s, chdb {ch[key][0]:.3f} s")
    groups_d = [(k, n) for k, n, _ in duck["group by SpanAttributes key (spans)"][1]]
    groups_h = [(r["k"], r["count()"]) for r in ch["group by SpanAttributes key (spans)"][1]]
    print("group-by counts equal (DuckDB vs chdb, last insert variant):", groups_d == groups_h)
    quantile_parity(conn, sess)
    two_processes(args.work / "chdb")
    print(f"DuckDB file (spans + derived): {duck_path.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
