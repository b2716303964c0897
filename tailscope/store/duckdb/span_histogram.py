"""Each run's span counts per (span name, duration bucket) on DuckDB (`span_histogram`,
histogram_schema.sql), what the Gantt ranks a span against in a large run (tailscope.store.span_ranks).

Kept by the writes, in their transaction: each appended batch's spans are counted into the write's
delta (`add_batch`, one GROUP BY over the batch's Arrow relation), dedupe's copies are taken away
before they are deleted (`take_copies`), and `finish` merges the delta into the run's touched
(name, bucket) rows: its cost follows the write and the run's distinct buckets, not its spans. A run
whose rows did not count its spans before the write (written before the table existed, or by a
writer that did not keep it) is built whole from its spans instead, once. `tailscope migrate` builds
every such run (`build_missing`); until then the Gantt ranks its spans exactly (`ranks` says None).
"""

from __future__ import annotations

from typing import Any

import duckdb

from tailscope import sql
from tailscope.store import span_ranks
from tailscope.store.duckdb.histogram import rebuild_runs

WriterConnection = Any  # a DuckDB connection inside the writer's transaction


def _statements(name: str) -> list[str]:
    text = sql.load_expanded(name)
    bodies = [
        "\n".join(x for x in part.splitlines() if not x.strip().startswith("--")) for part in text.split(";")
    ]
    return [body for body in bodies if body.strip()]


def _delta(conn: WriterConnection, fresh: bool) -> None:
    text = sql.load("span_histogram_delta")
    text = text.replace("{or_replace}", "OR REPLACE" if fresh else "")
    conn.execute(text.replace("{if_not_exists}", "" if fresh else "IF NOT EXISTS"))


def start(conn: WriterConnection) -> None:
    """An empty delta for this write."""
    _delta(conn, fresh=True)


def add_batch(batch: Any) -> None:
    """Count one appended batch (its relation, as writer.append_batch inserts it) into the delta."""
    batch.query("ingest_batch", sql.load_expanded("span_histogram_batch"))


def ensure_delta(conn: WriterConnection) -> None:
    """The delta, created if missing (an append outside store_batches)."""
    _delta(conn, fresh=False)


def take_copies(conn: WriterConnection) -> None:
    """Dedupe's copies (temp._ts_copies, ingest_dedupe_copies.sql) taken away from the delta."""
    conn.execute(sql.load_expanded("span_histogram_copies"))


def total(conn: WriterConnection, run_label: str) -> int:
    return int(conn.execute(sql.load("span_histogram_total"), [run_label]).fetchall()[0][0])


def rebuild(conn: WriterConnection, run_label: str) -> None:
    """The run's rows built again from all its spans."""
    for statement in _statements("span_histogram_rebuild"):
        conn.execute(statement, {"run": run_label})


def finish(conn: WriterConnection, run_label: str, counted: bool) -> None:
    """Merge the write's delta into the run's rows (`counted`: they counted the run's spans before
    the write), else build the run's rows whole; the delta dropped."""
    if counted:
        for statement in _statements("span_histogram_merge"):
            conn.execute(statement, {"run": run_label} if "$run" in statement else {})
    else:
        rebuild(conn, run_label)
    conn.execute("DROP TABLE IF EXISTS temp._ts_span_delta")


def build_missing(conn: WriterConnection) -> list[str]:
    """Build the rows of every run they do not count (`tailscope migrate`), in one transaction."""
    return rebuild_runs(conn, "span_histogram_missing_runs", rebuild)


def ranks(
    conn: Any, run: str, names: list[str], durations: list[int], min_spans: int | None = None
) -> dict[int, float] | None:
    """Each span's bucketed rank (gantt_rank_buckets.sql) by 1-based position, or None where the
    exact rank is read instead: a run of fewer than `min_spans` (span_ranks.MIN_SPANS) spans, or
    one whose rows do not count its spans (a store not migrated, a write that did not keep them)."""
    try:
        spans, counted = conn.execute(sql.load("span_histogram_ready"), {"run": run}).fetchall()[0]
    except duckdb.CatalogException:  # a store no writer of this version has opened yet
        return None
    least = span_ranks.MIN_SPANS if min_spans is None else min_spans
    if spans is None or spans < least or counted != spans:
        return None
    text = sql.load_expanded("gantt_rank_buckets")
    rows = conn.execute(text, [names, durations, durations, run]).fetchall()
    return {int(i): float(rank) for i, rank in rows}
