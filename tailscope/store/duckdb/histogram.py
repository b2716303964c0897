"""Per-run pre-aggregates of `requests` on DuckDB, kept in step with every derive.

`request_histogram` (per run × e2e bucket: counts, error weight, weighted sums of Duration and of
each stage), `stage_histogram` (per run × stage × bucket: counts and weights) and `heatmap_histogram`
(per run × stage × second × bucket × heatmap cell: counts and weights), histogram_schema.sql. The
unfiltered views of a large run read them (tailscope.analysis.histogram, .heatmap_histogram)
instead of every request.

A whole-run derive rebuilds the run's rows from its requests (its cost is the derive's, which read
the run already). A refresh of the traces a write touched takes away the histogram rows of their
old requests before they are deleted and adds those of their new ones (`around_refresh`), merged
into the touched buckets only: its cost follows the write, not the run. A store derived before the
tables existed gets a run's rows built whole at that run's next derive; until then, and wherever a
run's histogram does not count its requests, the views take the exact path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tailscope import sql

WriterConnection = Any  # a DuckDB connection inside the writer's transaction

# table -> (its rows' statement, its key after RunLabel, the temp table a refresh's delta goes to)
TABLES: dict[str, tuple[str, str, str]] = {
    "request_histogram": ("histogram_e2e_rows", "Bucket", "_ts_histogram_e2e_delta"),
    "stage_histogram": ("histogram_stage_rows", "Stage, Bucket", "_ts_histogram_stage_delta"),
    "heatmap_histogram": (
        "histogram_heatmap_rows",
        "Stage, Second, Bucket, Cell",
        "_ts_histogram_heatmap_delta",
    ),
}

# A refresh's merge reads these tables' rows only within its window's seconds (histogram_merge.sql's
# {bound}: the rows are written in Second order, so the row groups of other seconds are skipped and
# the merge's cost follows the write, not the run's length); the others are a few thousand rows a run.
BOUNDS: dict[str, str] = {"heatmap_histogram": "AND Second BETWEEN $low_s AND $high_s"}

# Which `requests` rows a histogram statement reads ({requests}; fixed SQL, values are parameters).
RELATIONS: dict[str, str] = {
    "run": "(SELECT * FROM requests WHERE RunLabel = $run)",
    # the requests of the traces a refresh derives, copied once before the delete and once after
    # the derive (histogram_scope_rows.sql): both tables' rows then aggregate a few hundred rows
    "scope": "(SELECT * FROM temp._ts_histogram_rows)",
}


def _rows(table: str, relation: str) -> str:
    return sql.load(TABLES[table][0]).replace("{requests}", RELATIONS[relation])


def _statements(text: str) -> list[str]:
    """The statements of a file, without their comment lines."""
    bodies = [
        "\n".join(x for x in part.splitlines() if not x.strip().startswith("--")) for part in text.split(";")
    ]
    return [body for body in bodies if body.strip()]


def forget(conn: WriterConnection, run_label: str | None) -> None:
    """Drop a run's histogram rows (None: every run's)."""
    for table in TABLES:
        conn.execute(sql.load("histogram_forget").replace("{table}", table), [run_label])


def has_rows(conn: WriterConnection, run_label: str) -> bool:
    """Whether the run's e2e and heatmap histograms have rows (built: a run with requests always has
    some in both; a store derived before heatmap_histogram existed has none there)."""
    return bool(conn.execute(sql.load("histogram_has_run"), {"run": run_label}).fetchall()[0][0])


def rebuild(conn: WriterConnection, run_label: str) -> None:
    """The run's histogram rows built again from all its requests."""
    forget(conn, run_label)
    for table in TABLES:
        text = sql.load("histogram_insert").replace("{table}", table).replace("{rows}", _rows(table, "run"))
        conn.execute(text, {"run": run_label, "sign": 1})


def build_missing(conn: WriterConnection) -> list[str]:
    """Build the histograms of every run that has requests but none (a store derived before they
    existed: `tailscope migrate`), in one transaction; the runs built."""
    return rebuild_runs(conn, "histogram_missing_runs", rebuild)


def rebuild_runs(
    conn: WriterConnection, missing_sql: str, rebuild_run: Callable[[Any, str], None]
) -> list[str]:
    """`rebuild_run` for every run the statement `missing_sql` lists, in one transaction (all or
    none); the runs built."""
    runs = [row[0] for row in conn.execute(sql.load(missing_sql)).fetchall()]
    if runs:
        conn.execute("BEGIN TRANSACTION")
        try:
            for run in runs:
                rebuild_run(conn, run)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return runs


def around_refresh(
    conn: WriterConnection, run_label: str, window: tuple[int, int], replace: Callable[[], None]
) -> None:
    """Run `replace` (a refresh's delete and derive of the traces in _ts_scope whose roots start in
    `window`) with the run's histogram kept in step: the old rows' buckets taken away before, the
    new rows' added after. A run without histogram rows (a store derived before they existed) is
    built whole afterwards instead."""
    built = has_rows(conn, run_label)
    scope = {"run": run_label, "low": window[0], "high": window[1]}
    if built:
        conn.execute(sql.load("histogram_scope"))
        conn.execute(sql.load("histogram_scope_rows"), scope)
        for table, (_, _, delta) in TABLES.items():
            text = sql.load("histogram_delta_create").replace("{delta}", delta)
            conn.execute(text.replace("{rows}", _rows(table, "scope")), {"sign": -1})
    replace()
    if not built:
        rebuild(conn, run_label)
        return
    conn.execute(sql.load("histogram_scope_rows"), scope)
    named = {"run": run_label, "low_s": window[0] // 1_000_000_000, "high_s": window[1] // 1_000_000_000}
    for table, (_, key, delta) in TABLES.items():
        text = sql.load("histogram_delta_insert").replace("{delta}", delta)
        conn.execute(text.replace("{rows}", _rows(table, "scope")), {"sign": 1})
        merge = sql.load("histogram_merge").replace("{table}", table).replace("{key}", key)
        merge = merge.replace("{bound}", BOUNDS.get(table, "")).replace("{delta}", delta)
        for statement in _statements(merge):
            conn.execute(statement, {k: v for k, v in named.items() if f"${k}" in statement})
    for statement in _statements(sql.load("histogram_scope_drop")):
        conn.execute(statement)
