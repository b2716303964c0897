"""The ClickHouse store: the OTel Collector exporter's otel_traces read in place, on a server or in chdb.

One class, `ClickHouseStore`, with the DuckDB Store's query interface (`query(statement, params)`
returning a Result). Statements are ClickHouse SQL from tailscope/sql/clickhouse/ with server-side
parameters `{name:Type}`; `params` is a dict by name, or a list bound to `{p1:...}`, `{p2:...}`, ...
in order. Two transports differ only in how they send a statement with its parameters:

    ChdbTransport  in-process (chdb.session.Session on a data folder); values are written in
                   ClickHouse's parameter text form by `bind_value` and parsed by the engine
    HttpTransport  a server over HTTP(S) through clickhouse-connect, which binds the same
                   `{name:Type}` parameters server-side

Both return Arrow (ArrowStream / query_arrow), so rows come back with the same Python types.
Every query runs under `max_execution_time`; every failure that means the store is unusable becomes
a StoreError with one line (tailscope.store.errors).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from tailscope import sql
from tailscope.store import ch_durations
from tailscope.store.ch_binding import bind_value, insert_statement, named_params
from tailscope.store.ch_schema import schema_problem
from tailscope.store.db import Result
from tailscope.store.errors import (
    QueryTimeoutError,
    SchemaMismatchError,
    StoreError,
    StoreLockedError,
    StoreUnreachableError,
    TableMissingError,
    classify,
    first_line,
)
from tailscope.store.url import StoreLocation

DEFAULT_TIME_LIMIT_S = 60.0
# A writer's statements (moving a staged file, deriving a window) may run longer than a view's.
WRITE_TIME_LIMIT_S = 3600.0
_EPOCH = datetime(1970, 1, 1)
# What create_tables applies, in order (tailscope/sql/clickhouse/): the exporter's tables, then ours.
EXPORTER_DDL = ("otel_traces_ddl", "otel_traces_trace_id_ts_ddl", "otel_traces_trace_id_ts_mv_ddl")
TAILSCOPE_DDL = (
    "tailscope_runs_ddl",
    "tailscope_stage_rules_ddl",
    "tailscope_phase_rules_ddl",
    "tailscope_requests_ddl",
)


class Transport(Protocol):
    """How statements reach ClickHouse: the only part that differs between chdb and a server."""

    def query_arrow(self, statement: str, params: dict[str, Any], settings: dict[str, Any]) -> pa.Table: ...

    def insert_arrow(self, table: str, data: pa.Table) -> None: ...

    def close(self) -> None: ...


class _Session:
    """One chdb session on a folder, shared by every ChdbTransport of this process on that folder
    (chdb holds one folder per process; a second session on it would meet our own lock)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.settings: dict[str, Any] = {}
        self.users = 0
        self.lock = threading.RLock()  # one statement at a time (the dashboard reads from threads)


_SESSIONS: dict[Path, _Session] = {}


class ChdbTransport:
    """chdb in-process on a data folder. One process per folder (chdb locks `<folder>/status`)."""

    def __init__(self, path: Path) -> None:
        from chdb import session as chs

        self._path = path.resolve()
        shared = _SESSIONS.get(self._path)
        if shared is None:
            path.mkdir(parents=True, exist_ok=True)
            if _locked_elsewhere(path / "status"):
                raise StoreLockedError(
                    f"chdb://{path}: the folder is in use by another process (chdb allows one)"
                )
            try:
                shared = _Session(chs.Session(str(path)))
            except RuntimeError as error:
                raise StoreLockedError(f"chdb://{path}: cannot open it ({first_line(str(error))})") from None
            _SESSIONS[self._path] = shared
        shared.users += 1
        self._shared = shared
        self._session = shared.session
        self._settings = shared.settings

    def query_arrow(self, statement: str, params: dict[str, Any], settings: dict[str, Any]) -> pa.Table:
        with self._shared.lock:
            return self._query_arrow(statement, params, settings)

    def _query_arrow(self, statement: str, params: dict[str, Any], settings: dict[str, Any]) -> pa.Table:
        # Settings are session state in chdb (a trailing SETTINGS clause cannot follow VALUES).
        for name, value in settings.items():
            if self._settings.get(name) != value:
                # the value as a bound parameter, the name quoted (settings come from our code)
                setting = f"SET {sql.quote_identifier(name)} = {{value:String}}"
                self._session.query(setting, "TabSeparated", params={"value": bind_value(value)})
                self._settings[name] = value
        bound = {k: bind_value(v) for k, v in params.items()}
        try:
            result = self._session.query(statement, "ArrowStream", params=bound)
        except Exception:
            # chdb keeps what a failed query had written (a timeout's Arrow header) and hands it out
            # at the front of the next result: a throwaway query takes it
            self._session.query("SELECT 1", "TabSeparated")
            raise
        raw = result.bytes()
        if not raw:
            return pa.table({})
        return pa.ipc.open_stream(pa.py_buffer(raw)).read_all()

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        if any(pa.types.is_dictionary(field.type) for field in data.schema):
            # Python() misreads a chunked dictionary column (its chunks' dictionaries differ)
            self._insert_stream(insert_statement(table, data.column_names), data)
            return
        # chdb reads the Arrow table in place through its Python() table function, which finds it
        # by name in the calling frames (1 M decoded spans: ~0.5 s, against ~2 s to write and parse
        # an Arrow stream); a NULL becomes its column's default, as in the stream (insert_null_as_default)
        _tailscope_insert_rows = data  # read by name in the statement
        with self._shared.lock:
            self._session.query(
                insert_statement(table, data.column_names, "Python(_tailscope_insert_rows)"), "TabSeparated"
            )

    def _insert_stream(self, statement: str, data: pa.Table) -> None:
        """`INSERT INTO table (columns)` with the rows as Arrow stream bytes."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, data.schema) as writer:
            writer.write_table(data)
        with self._shared.lock, self._session.send_insert(statement, "ArrowStream") as inserter:
            inserter.append(sink.getvalue().to_pybytes())
            inserter.finish()

    def close(self) -> None:
        self._shared.users -= 1
        if self._shared.users == 0:
            if _SESSIONS.get(self._path) is self._shared:
                _SESSIONS.pop(self._path)
            self._session.close()

    def second_session(self) -> ChdbTransport:
        """Another session on this folder, in this process, not shared: its own temporary tables
        and settings, its statements beside this one's (store.ch_overlap). Close it after use."""
        from chdb import session as chs

        other = object.__new__(ChdbTransport)
        other._path = self._path
        other._shared = _Session(chs.Session(str(self._path)))
        other._shared.users = 1
        other._session = other._shared.session
        other._settings = other._shared.settings
        return other


def _locked_elsewhere(status: Path) -> bool:
    """True when another process holds chdb's lock on the folder's status file."""
    if not status.exists():
        return False
    fd = os.open(status, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


# Statements that answer with rows; the others (DDL, INSERT, DELETE, SET) go as HTTP commands: a
# FORMAT clause, which a query for Arrow rows appends, is not valid after them.
_ROW_STATEMENTS = ("SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS")


def returns_rows(statement: str) -> bool:
    """True when a statement answers with rows (its first word, after comments, says so)."""
    lines = [line for line in statement.splitlines() if not line.lstrip().startswith("--")]
    words = " ".join(lines).split()
    return bool(words) and words[0].upper().lstrip("(") in _ROW_STATEMENTS


class HttpTransport:
    """A ClickHouse server over HTTP(S) through clickhouse-connect (server-side parameter binding;
    its session keeps the temporary tables of a derive or a staged ingest)."""

    def __init__(self, location: StoreLocation, connect_timeout: float = 5.0, client: Any = None) -> None:
        if client is None:
            import clickhouse_connect

            client = clickhouse_connect.get_client(
                host=location.host,
                port=location.port,
                username=location.user,
                password=location.password,
                database=location.database,
                secure=location.secure,
                connect_timeout=connect_timeout,
            )
        self._client = client

    def query_arrow(self, statement: str, params: dict[str, Any], settings: dict[str, Any]) -> pa.Table:
        for name, value in params.items():
            if isinstance(value, Mapping):  # clickhouse-connect writes it as JSON, not a Map literal
                raise TypeError(f"parameter {name!r}: bind a map as two arrays (keys, values)")
        if returns_rows(statement):
            return self._client.query_arrow(statement, parameters=params, settings=settings, use_strings=True)
        self._client.command(statement, parameters=params, settings=settings)
        return pa.table({})

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        self._client.insert_arrow(table, data)

    def close(self) -> None:
        self._client.close()


def _datetime(ticks: int, per_second: int) -> datetime:
    """A naive UTC datetime from ticks since the epoch, cut to microseconds (floor, as DuckDB does)."""
    return _EPOCH + timedelta(microseconds=ticks * 10**6 // per_second)


def rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows as Python values, timestamps as naive UTC datetimes (microseconds), as DuckDB gives them."""
    columns = []
    for column in table.columns:
        if pa.types.is_timestamp(column.type):
            ticks = pc.cast(pc.cast(column, pa.timestamp(column.type.unit)), pa.int64()).to_pylist()
            per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[column.type.unit]
            columns.append([None if v is None else _datetime(v, per_second) for v in ticks])
        else:
            columns.append(column.to_pylist())
    return list(zip(*columns, strict=True)) if columns else []


class ClickHouseStore:
    """A handle on a ClickHouse store (chdb folder or server) with the DuckDB Store's query interface.

    The transport opens on first use and stays open (a chdb session holds its folder's lock for the
    life of the process; an HTTP client is a connection pool). `check()` verifies otel_traces."""

    dialect = "clickhouse"
    write_limit_s = WRITE_TIME_LIMIT_S  # a writer's statements' time limit (the module's constant)

    def __init__(
        self,
        location: StoreLocation,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        transport: Transport | None = None,
    ) -> None:
        if location.engine not in ("chdb", "clickhouse"):
            raise ValueError(f"{location.url} is not a ClickHouse store")
        self.location = location
        self.time_limit_s = time_limit_s
        self._transport = transport

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            try:
                if self.location.engine == "chdb":
                    assert self.location.path is not None
                    self._transport = ChdbTransport(self.location.path)
                else:
                    self._transport = HttpTransport(self.location)
            except StoreError:
                raise
            except Exception as error:
                raise self._store_error(error) from None
        return self._transport

    def _store_error(self, error: Exception, limit_s: float | None = None) -> Exception:
        message = str(error)
        kind = classify(message)
        where = self.location.url
        if kind is StoreUnreachableError:
            return kind(f"{where}: no ClickHouse server answers there ({first_line(message)})")
        if kind is QueryTimeoutError:
            return kind(
                f"{where}: a query ran over the time limit of {limit_s or self.time_limit_s:g} s "
                "(max_execution_time)"
            )
        if kind is not None:
            return kind(f"{where}: {first_line(message)}")
        return error

    def query(
        self,
        statement: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        time_limit_s: float | None = None,
    ) -> Result:
        """Run one statement with bound parameters under the time limit (the store's, or
        `time_limit_s`: a writer's longer one), and time it."""
        started = time.perf_counter()
        table = self.query_arrow(statement, params, time_limit_s)
        return Result(list(table.column_names), rows_of(table), time.perf_counter() - started)

    def query_arrow(
        self,
        statement: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        time_limit_s: float | None = None,
    ) -> pa.Table:
        """As `query`, the rows as an Arrow table (for numpy: the diagnosis' span reads)."""
        settings = {"max_execution_time": time_limit_s or self.time_limit_s}
        try:
            return self.transport.query_arrow(statement, named_params(params), settings)
        except StoreError:
            raise
        except Exception as error:
            raise self._store_error(error, time_limit_s) from None

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        try:
            self.transport.insert_arrow(table, data)
        except Exception as error:
            raise self._store_error(error) from None

    def check(self) -> None:
        """Raise TableMissingError / SchemaMismatchError unless otel_traces is the exporter's table."""
        columns = dict(self.query(sql.load("otel_traces_columns", dialect="clickhouse")).rows)
        if not columns:
            raise TableMissingError(
                f"{self.location.url}: no table otel_traces (start the Collector's ClickHouse exporter, "
                "or `tailscope ingest --store ...` to create it)"
            )
        problem = schema_problem(columns)
        if problem:
            raise SchemaMismatchError(
                f"{self.location.url}: otel_traces is not the exporter's schema tailscope reads ({problem})"
            )

    def create_tables(self) -> None:
        """The exporter's otel_traces (and its trace-id lookup) when missing, then tailscope's tables."""
        for name in (*EXPORTER_DDL, *TAILSCOPE_DDL):
            self.query(sql.load(name, dialect="clickhouse"))
        ch_durations.ensure(self)

    def prepare(self, create_exporter_table: bool = False) -> None:
        """Before a command: otel_traces checked (created first when `create_exporter_table` and
        missing: a writer), tailscope's own tables created when missing."""
        if create_exporter_table:
            for name in EXPORTER_DDL:
                self.query(sql.load(name, dialect="clickhouse"))
        self.check()
        for name in TAILSCOPE_DDL:
            self.query(sql.load(name, dialect="clickhouse"))
        ch_durations.ensure(self)

    def data_version(self) -> tuple[Any, ...]:
        """Changes when the data does (as Store.data_version): counts of spans, runs, requests, rules."""
        return tuple(self.query(sql.load("data_version", dialect="clickhouse")).first() or ())

    @contextmanager
    def reader(self) -> Iterator[ClickHouseStore]:
        yield self

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
