"""Open the DuckDB store: one writer at a time, readers that open briefly and retry while it writes.

DuckDB lets one process hold a database file for writing, and while it does no other process can
open the file at all. tailscope therefore never keeps a connection open longer than one unit of work:
a writer holds the file for one transaction (one input file, or one batch of OTLP requests), a reader
for one query. Both wait politely (bounded retries with backoff) while the other side holds the lock,
so the dashboard shows a short delay instead of a lock error. See ARCHITECTURE.md, "Reads while writing".
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import duckdb

from tailscope import sql
from tailscope.store.duckdb import histogram, span_histogram
from tailscope.store.duckdb.migrate import (
    CURRENT_VERSION,
    migrate,
    newer_store_message,
    old_store_message,
    stored_version,
)
from tailscope.store.duckdb.threads import fit_threads
from tailscope.store.errors import StoreBusyError, StoreVersionError, disk_full_cause, store_full
from tailscope.store.interface import Migration
from tailscope.store.url import default_db_path

SCHEMA_VERSION = CURRENT_VERSION
LOCK_WAIT_SECONDS = 60.0

# DuckDB's own default takes 80 % of the machine's memory for its buffers: a store of 100 M spans
# grew one process to 18 GB (issue 29). Every connection gets a cap instead
# (TAILSCOPE_DUCKDB_MEMORY_LIMIT overrides it, in DuckDB's size syntax, e.g. "4GB"); what does not
# fit spills to DuckDB's temporary directory beside the store (<db>.tmp). Ingest lowers it further
# for a file's transaction (ingest_writer_memory.sql). Chosen by measurement, bench/bench_scale.py.
DEFAULT_MEMORY_LIMIT = "1GB"


def connection_config() -> dict[str, str]:
    """DuckDB settings for every store connection (see DEFAULT_MEMORY_LIMIT)."""
    return {"memory_limit": os.environ.get("TAILSCOPE_DUCKDB_MEMORY_LIMIT") or DEFAULT_MEMORY_LIMIT}


def _is_lock_conflict(error: duckdb.Error) -> bool:
    text = str(error)
    return "Could not set lock" in text or "Conflicting lock" in text


# Taking turns. DuckDB's file lock is taken with a non-blocking fcntl call, so whoever waits only
# gets in by polling into a gap: overlapping dashboard readers could starve a writer, and a writer
# going from one file (or flush) straight to the next could starve the readers. So whoever finds the
# file busy leaves a marker beside the store ("<db>.waiting-writer.<pid>-<thread>", or
# "waiting-reader") until it is in, and:
#   - a reader about to open holds back while a live writer is marked waiting (at most
#     READER_DEFER_SECONDS): a waiting writer goes next;
#   - a writer about to open holds back while a reader is marked waiting (at most
#     WRITER_COURTESY_SECONDS), once, before its first try: the readers a writer kept out get in
#     between two of its transactions. Once that writer has itself failed to get in and is marked,
#     it no longer holds back, so the two rules cannot wait on each other.
# Markers of processes that are gone are removed by whoever finds them.
READER_DEFER_SECONDS = 5.0
WRITER_COURTESY_SECONDS = 1.0
_MARKER = ".waiting-"


def _marker_path(path: Path, role: str) -> Path:
    return path.with_name(f"{path.name}{_MARKER}{role}.{os.getpid()}-{threading.get_ident()}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def waiting(path: Path, role: str) -> bool:
    """True while a live `role` ('writer' or 'reader') is waiting for this store's lock."""
    prefix = f"{path.name}{_MARKER}{role}."
    try:
        names = [name for name in os.listdir(path.parent) if name.startswith(prefix)]
    except FileNotFoundError:
        return False
    for name in names:
        try:
            pid = int(name[len(prefix) :].split("-", 1)[0])
        except ValueError:
            continue
        if _pid_alive(pid):
            return True
        with suppress(OSError):
            (path.parent / name).unlink()
    return False


def _hold_back(path: Path, role: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while waiting(path, role) and time.monotonic() < deadline:
        time.sleep(0.005)


def _open(path: Path, read_only: bool, wait_seconds: float) -> duckdb.DuckDBPyConnection:
    """Connect, retrying while another process holds the lock, taking turns as described above."""
    deadline = time.monotonic() + wait_seconds
    delay = 0.005
    marker: Path | None = None
    if not read_only:
        _hold_back(path, "reader", WRITER_COURTESY_SECONDS)
    try:
        while True:
            if read_only:
                _hold_back(path, "writer", READER_DEFER_SECONDS)
            try:
                conn = duckdb.connect(str(path), read_only=read_only, config=connection_config())
                conn.execute(sql.load("duckdb_no_progress_bar"))
                fit_threads(conn)  # no more threads than the memory cap feeds
                return conn
            except duckdb.IOException as error:
                if not _is_lock_conflict(error):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreBusyError(
                        f"{path}: still locked by another tailscope process after {wait_seconds:.0f} s"
                    ) from error
            if marker is None:
                marker = _marker_path(path, "reader" if read_only else "writer")
                with suppress(OSError):
                    marker.touch()
            time.sleep(delay)
            delay = min(delay * 1.5, 0.02)
    finally:
        if marker is not None:
            with suppress(OSError):
                marker.unlink()


def _apply(conn: duckdb.DuckDBPyConnection, name: str) -> None:
    """Run a DDL file statement by statement (its comment lines left out)."""
    for statement in sql.load(name).split(";"):
        body = "\n".join(line for line in statement.splitlines() if not line.strip().startswith("--"))
        if body.strip():
            conn.execute(body)


def ensure_schema(conn: duckdb.DuckDBPyConnection, path: str | Path = "store") -> None:
    """Create the tables if missing; migrate an older store in place (one transaction); refuse a
    store written by a newer tailscope."""
    version = stored_version(conn)
    if version is not None and version > SCHEMA_VERSION:
        raise StoreVersionError(newer_store_message(path, version))
    if version is not None and version < SCHEMA_VERSION:
        migrate(conn, path)
    for name in ("schema", "histogram_schema"):
        _apply(conn, name)
    if stored_version(conn) is None:
        conn.execute("INSERT INTO schema_version VALUES (?)", [SCHEMA_VERSION])


def check_version(conn: duckdb.DuckDBPyConnection, path: str | Path) -> None:
    """A reader's check: a store of another schema version gets a clear message, not SQL errors."""
    version = stored_version(conn)
    if version is None:
        raise StoreVersionError(f"{path}: not a tailscope store (it has no schema_version table)")
    if version < SCHEMA_VERSION:
        raise StoreVersionError(old_store_message(path, version))
    if version > SCHEMA_VERSION:
        raise StoreVersionError(newer_store_message(path, version))


@contextmanager
def _full_disk_as_store_error(db_path: Path, doing: str = "writing") -> Iterator[None]:
    """A full disk met inside (DuckDB's IOException or FatalException, an OSError) becomes one
    StoreFullError naming the store; everything else passes unchanged."""
    try:
        yield
    except (duckdb.Error, OSError) as error:
        cause = disk_full_cause(error)
        if cause is None:
            raise
        raise store_full(str(db_path), cause, doing) from error


def _close(conn: duckdb.DuckDBPyConnection, failing: bool) -> None:
    """Close; a database invalidated by a fatal error (a full disk) may refuse, which is moot then."""
    try:
        conn.close()
    except duckdb.Error:
        if not failing:
            raise


@contextmanager
def connect_writer(
    path: str | Path | None = None, wait_seconds: float = LOCK_WAIT_SECONDS
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection with the schema in place, closed on exit. A full disk met while it
    is open raises StoreFullError (the transaction is rolled back by DuckDB)."""
    db_path = Path(path) if path is not None else default_db_path()
    with _full_disk_as_store_error(db_path):
        conn = _open(db_path, read_only=False, wait_seconds=wait_seconds)
        failing = True
        try:
            ensure_schema(conn, db_path)
            yield conn
            failing = False
        finally:
            _close(conn, failing)


def migrate_store(path: str | Path | None = None, wait_seconds: float = LOCK_WAIT_SECONDS) -> Migration:
    """`tailscope migrate`: take an existing store to the current schema (see migrate.py), and build
    the pre-aggregates of runs derived before they existed (histogram.build_missing) and the span
    counts of runs written before they were kept (span_histogram.build_missing)."""
    db_path = Path(path) if path is not None else default_db_path()
    with _full_disk_as_store_error(db_path, "migrating it"):
        conn = _open(db_path, read_only=False, wait_seconds=wait_seconds)
        failing = True
        try:
            outcome = migrate(conn, db_path)
            built: list[str] = []
            if stored_version(conn) is not None:  # not an empty file: the pre-aggregates' tables
                _apply(conn, "histogram_schema")
                built = histogram.build_missing(conn)
                built += [run for run in span_histogram.build_missing(conn) if run not in built]
            failing = False
            return dataclasses.replace(outcome, aggregated=tuple(built)) if built else outcome
        finally:
            _close(conn, failing)


@contextmanager
def connect_reader(
    path: str | Path | None = None, wait_seconds: float = LOCK_WAIT_SECONDS
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection, closed on exit. A missing file gets an empty store created first."""
    db_path = Path(path) if path is not None else default_db_path()
    if not db_path.exists():
        with connect_writer(db_path, wait_seconds):
            pass
    conn = _open(db_path, read_only=True, wait_seconds=wait_seconds)
    try:
        check_version(conn, db_path)
        yield conn
    finally:
        conn.close()
