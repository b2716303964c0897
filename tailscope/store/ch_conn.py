"""A ClickHouse store seen through the few DuckDB connection methods the analysis functions use.

`tailscope.analysis.source.reading(store)` yields a `ClickHouseConnection` for a ClickHouseStore, so
a view runs the same Python on both engines; only the SQL differs (the view loads it with
`sql.load(name, dialect_of(conn))`, tailscope/sql/clickhouse/). `execute(statement, params)` runs at
once and returns the connection, holding the result for fetchone / fetchall / fetchnumpy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from tailscope.sql import Dialect
from tailscope.store.clickhouse import ClickHouseStore, rows_of
from tailscope.store.db import Result


class ClickHouseConnection:
    """execute / fetchone / fetchall / fetchnumpy / df / description over a ClickHouseStore."""

    dialect: Dialect = "clickhouse"

    def __init__(self, store: ClickHouseStore) -> None:
        self.store = store
        self._table: pa.Table | None = None
        self._result: Result | None = None
        self._seconds = 0.0

    def execute(
        self, statement: str, params: Sequence[Any] | Mapping[str, Any] | None = None
    ) -> ClickHouseConnection:
        started = time.perf_counter()
        self._table = self.store.query_arrow(statement, params)
        self._seconds = time.perf_counter() - started
        self._result = None  # rows are made when asked for: fetchnumpy reads the Arrow columns
        return self

    def cursor(self) -> ClickHouseConnection:
        """A connection of its own (results are held per object, statements run at once)."""
        return ClickHouseConnection(self.store)

    def _last(self) -> Result:
        if self._table is None:
            raise RuntimeError("no statement has run on this connection")
        if self._result is None:
            self._result = Result(list(self._table.column_names), rows_of(self._table), self._seconds)
        return self._result

    @property
    def description(self) -> list[tuple[str, ...]]:
        return [(name,) for name in self._last().columns]

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._last().first()

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._last().rows

    def df(self) -> pd.DataFrame:
        """The result as a DataFrame (DuckDB's `.df()`): Python values, timestamps naive UTC."""
        result = self._last()
        return pd.DataFrame(result.rows, columns=result.columns)

    def fetchnumpy(self) -> dict[str, np.ndarray]:
        """The columns as numpy arrays, straight from Arrow (no Python rows)."""
        if self._table is None:
            raise RuntimeError("no statement has run on this connection")
        return {
            name: column.to_numpy()
            for name, column in zip(self._table.column_names, self._table.columns, strict=True)
        }


def dialect_of(conn: object) -> Dialect:
    """The SQL dialect of a connection the analysis functions were handed."""
    return getattr(conn, "dialect", "duckdb")
