"""The DuckDB engine's Store: one DuckDB file, opened for one unit of work at a time (a reader per
read, a writer per transaction; see connection.py for how they take turns)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import duckdb

from tailscope import sql
from tailscope.rules import PhaseRule, StageRule
from tailscope.store.duckdb import derive, rule_remap
from tailscope.store.duckdb.connection import LOCK_WAIT_SECONDS, connect_reader, connect_writer, migrate_store
from tailscope.store.duckdb.reader import DuckDBReader
from tailscope.store.duckdb.writer import DuckDBRunWriter, DuckDBSink, run_writer
from tailscope.store.errors import MigrationError, UnsupportedError
from tailscope.store.interface import Migration, Result
from tailscope.store.url import StoreLocation, default_db_path


class DuckDBStore:
    """A handle on one store file that opens a short-lived connection per unit of work.

    Safe to cache for the life of a process (e.g. `st.cache_resource`): it holds no open file.
    """

    def __init__(self, path: str | Path | None = None, wait_seconds: float = LOCK_WAIT_SECONDS) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.wait_seconds = wait_seconds
        self.location = StoreLocation(engine="duckdb", path=self.path)

    @property
    def name(self) -> str:
        return str(self.path)

    @property
    def file(self) -> Path:
        return self.path

    def delete(self) -> None:
        for stale in (self.path, self.path.with_name(self.path.name + ".wal")):
            stale.unlink(missing_ok=True)

    def reader(self) -> Any:
        """A read-only DuckDB connection (closed on exit)."""
        return connect_reader(self.path, self.wait_seconds)

    def writer(self) -> Any:
        """A DuckDB writer connection with the schema in place (closed on exit)."""
        return connect_writer(self.path, self.wait_seconds)

    @contextmanager
    def reading(self) -> Iterator[DuckDBReader]:
        with self.reader() as conn:
            reader = DuckDBReader(conn, read_ahead=True)
            try:
                yield reader
            finally:
                reader.settle()  # reads started ahead end before their connection closes

    def query(self, statement: str, params: list[Any] | None = None) -> Result:
        """One statement's rows (SQL text: for tests and benchmarks of this engine)."""
        with self.reader() as conn:
            return run_query(conn, statement, params)

    def data_version(self) -> tuple[float, int]:
        """Changes whenever a writer commits: use it as a cache key for query results."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return (0.0, 0)
        wal = self.path.with_name(self.path.name + ".wal")
        wal_mtime = wal.stat().st_mtime if wal.exists() else 0.0
        return (max(stat.st_mtime, wal_mtime), stat.st_size)

    def prepare(self, writing: bool = False) -> None:
        """Nothing: a DuckDB file is created, checked and migrated when a connection opens it."""

    def close(self) -> None:
        """Nothing: no connection outlives its unit of work."""

    def _replace(self, replace: Any, rules: list[Any], progress: derive.Progress | None) -> list[str]:
        with self.writer() as conn:
            replace(conn, rules, progress)
            return [row[0] for row in conn.execute(sql.load("span_runs")).fetchall()]

    def replace_stage_rules(
        self, rules: list[StageRule], progress: derive.Progress | None = None
    ) -> list[str]:
        return self._replace(rule_remap.replace_rules, rules, progress)

    def replace_phase_rules(
        self, rules: list[PhaseRule], progress: derive.Progress | None = None
    ) -> list[str]:
        return self._replace(derive.replace_phase_rules, rules, progress)

    def run_writer(self, run: str, files: int = 1) -> AbstractContextManager[DuckDBRunWriter]:
        return run_writer(self.path, run)

    def span_sink(self, run: str, source: str) -> DuckDBSink:
        return DuckDBSink(self.path, run, source)

    def select_run(
        self, run: str, start_ns: int | None, end_ns: int | None, filters: dict[str, str]
    ) -> tuple[int, int]:
        raise UnsupportedError(
            "runs are selections only on a ClickHouse store (--store chdb:///... or clickhouse://...); "
            "a DuckDB store's runs are what `tailscope ingest` loaded"
        )

    def migrate(self) -> Migration:
        try:
            return migrate_store(self.path, self.wait_seconds)
        except duckdb.Error as error:  # the transaction rolled back: the store is as it was
            raise MigrationError(str(error)) from error


def run_query(conn: Any, statement: str, params: list[Any] | None = None) -> Result:
    """Execute one statement with bound parameters and time it."""
    started = time.perf_counter()
    cursor = conn.execute(statement, params or [])
    columns = [d[0] for d in cursor.description] if cursor.description else []
    rows = cursor.fetchall() if cursor.description else []
    return Result(columns, rows, time.perf_counter() - started)
