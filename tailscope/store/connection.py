"""What code outside the store asks of an open connection, whichever engine answers it.

DuckDB's connection and ClickHouse's adapter (tailscope.store.ch_conn.ClickHouseConnection) both
provide `Connection`; the analysis and ingest modules type their connections with it and catch the
error tuples below, so only tailscope.store imports an engine's driver.
"""

from __future__ import annotations

from typing import Any, Protocol

import duckdb

from tailscope.store.errors import StoreError, TableMissingError


class Connection(Protocol):
    """The DB-API subset the shared code uses: execute (with bound parameters), then fetch."""

    def execute(self, query: str, parameters: Any = None) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


# a table the store does not have (an older store opened read-only, a table not created yet)
MISSING_TABLE_ERRORS: tuple[type[BaseException], ...] = (duckdb.CatalogException, TableMissingError)
# the engine refused a statement (bad regex, constraint, conversion), as opposed to a bug of ours
QUERY_ERRORS: tuple[type[BaseException], ...] = (duckdb.Error, StoreError)


class WriterConnection(Connection, Protocol):
    """DuckDB's writer as the DuckDB write path (ingest.loader, analysis.derive, the rule tables)
    uses it: a transaction, Arrow tables registered as views, many rows at once. ClickHouse's write
    path is tailscope.store.ch_write."""

    def begin(self) -> Any: ...

    def commit(self) -> Any: ...

    def rollback(self) -> Any: ...

    def register(self, name: str, python_object: Any) -> Any: ...

    def unregister(self, name: str) -> Any: ...

    def executemany(self, query: str, parameters: Any = None) -> Any: ...

    def from_arrow(self, arrow_object: Any) -> Any: ...
