"""Bring a store written by an older tailscope to the current schema, in place and all or nothing.

Version 1 kept attributes as MAP columns and events/links as lists of structs; version 2 keeps them
as JSON text (schema.sql says why). Version 3 adds `requests.Weight` (a head-sampled run's weight per
request), read from the stored root spans so a sampled run's derived rows keep their weights.
Version 4 adds `requests.SpanTimes` (each request's attributed time per stage and span name, what the
stage breakdown sums), NULL in the rows derived before it: nothing is recomputed; those runs' next
derive fills it, and the breakdown reads their spans until then.
Version 5 adds the kept path rows a stage-rule edit re-maps (span_paths, request_paths,
derive_state.PathsKept), empty: the next rule edit derives every run from its spans and fills them.
`migrate(conn)` runs every step from the store's version to the current one inside one
transaction: an interrupted or failed migration leaves the store exactly as it was. Writers call it
when they open a store (tailscope.store.duckdb.connection.ensure_schema); `tailscope migrate` calls
it on demand; readers never do, they say what to run instead.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from tailscope import sql
from tailscope.store.duckdb.threads import fit_threads
from tailscope.store.errors import StoreVersionError
from tailscope.store.interface import Migration

CURRENT_VERSION = 5
# version -> the SQL file that takes a store from it to the next version
STEPS: dict[int, str] = {
    1: "migrate_v1_to_v2",
    2: "migrate_v2_to_v3",
    3: "migrate_v3_to_v4",
    4: "migrate_v4_to_v5",
}


def stored_version(conn: duckdb.DuckDBPyConnection) -> int | None:
    """The store's schema version; None for an empty store (no version written yet)."""
    # A plain read, not an information_schema lookup (8 ms: every reader opens through here).
    # fetchall, not fetchone: DuckDB 2 keeps a half-read result open and refuses other work on it.
    try:
        rows = conn.execute("SELECT max(version) FROM schema_version").fetchall()
    except duckdb.CatalogException:
        return None
    return rows[0][0] if rows else None


def old_store_message(path: str | Path, version: int) -> str:
    return (
        f"{path}: the store has schema version {version}, this tailscope reads version "
        f"{CURRENT_VERSION}. Run `tailscope migrate --db {path}` once to convert it in place "
        "(nothing stored is lost; `tailscope ingest` and `collect` also convert it when they first write)"
    )


def newer_store_message(path: str | Path, version: int) -> str:
    return (
        f"{path}: the store has schema version {version}, written by a newer tailscope; "
        f"this one knows versions up to {CURRENT_VERSION}. Upgrade tailscope to read it"
    )


def _statements(name: str) -> list[str]:
    bodies = []
    for statement in sql.load(name).split(";"):
        body = "\n".join(line for line in statement.splitlines() if not line.strip().startswith("--"))
        if body.strip():
            bodies.append(body)
    return bodies


def migrate(conn: duckdb.DuckDBPyConnection, path: str | Path = "store") -> Migration:
    """Take the store to CURRENT_VERSION in one transaction (no-op when it is there already)."""
    version = stored_version(conn)
    if version is None or version == CURRENT_VERSION:
        return Migration(str(path), version or CURRENT_VERSION, CURRENT_VERSION, 0, 0.0)
    if version > CURRENT_VERSION or version not in STEPS:
        raise StoreVersionError(newer_store_message(path, version))
    started = time.perf_counter()
    spans = conn.execute("SELECT count(*) FROM otel_traces").fetchall()[0][0]
    # the writers' cap: the conversion spills to the file instead of growing with the store
    # (measured: 4 M spans in 8.3 s at 407 MiB peak RSS, bench/RESULTS.md)
    conn.execute(sql.load("ingest_writer_memory"))
    fit_threads(conn)
    conn.execute("BEGIN TRANSACTION")
    try:
        step = version
        while step < CURRENT_VERSION:
            for statement in _statements(STEPS[step]):
                conn.execute(statement)
            step += 1
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return Migration(str(path), version, CURRENT_VERSION, spans, time.perf_counter() - started)
