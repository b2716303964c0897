"""The ClickHouse engine's client: the OTel Collector exporter's otel_traces read in place, on a server
or in chdb.

`ClickHouseClient` runs one statement at a time (`query(statement, params)` returning a Result, or
`query_arrow`). Statements are ClickHouse SQL from tailscope/sql/clickhouse/ with server-side
parameters `{name:Type}`; `params` is a dict by name, or a list bound to `{p1:...}`, `{p2:...}`, ...
in order. Two transports (tailscope.store.clickhouse.transport) differ only in how they send a
statement with its parameters: chdb in process, or a server over HTTP. Every query runs under
`max_execution_time`; every failure that means the store is unusable becomes a StoreError with one
line (tailscope.store.errors).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tailscope import sql
from tailscope.store.clickhouse.binding import named_params
from tailscope.store.clickhouse.schema import schema_problem
from tailscope.store.clickhouse.transport import ChdbTransport, HttpTransport, Transport
from tailscope.store.errors import (
    QueryTimeoutError,
    SchemaMismatchError,
    StoreError,
    StoreUnreachableError,
    TableMissingError,
    classify,
    first_line,
)
from tailscope.store.interface import Result
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


class ClickHouseClient:
    """A handle on a ClickHouse store (chdb folder or server) that runs statements.

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

    def query_steps(self, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> Result:
        """Run the statements in order; the last but one's rows (a span tree's answer: the last
        statement drops its temporary tables)."""
        results = [self.query(text, params) for text, params in statements]
        return results[-2]

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

    def data_version(self) -> tuple[Any, ...]:
        """Changes when the data does (as Store.data_version): counts of spans, runs, requests, rules."""
        return tuple(self.query(sql.load("data_version", dialect="clickhouse")).first() or ())

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
