"""The store seam: a store URL (or a plain DuckDB path) in, a store with `query(statement, params)` out.

    open_store("runs/a.duckdb")               Store (DuckDB, tailscope.store.db)
    open_store("chdb:///var/lib/tailscope")   ClickHouseStore on chdb, in-process
    open_store("clickhouse://u:p@host/db")    ClickHouseStore on a server, over HTTP

Both kinds answer `query(statement, params) -> Result` and say which SQL dialect they take
(`dialect_of`), so callers load a statement with `sql.load(name, dialect_of(store))`. Which URL a
command uses is tailscope.store.url.resolve_store (--store > $TAILSCOPE_STORE > --db > ...).
"""

from __future__ import annotations

from typing import Union

from tailscope.sql import Dialect
from tailscope.store.clickhouse import DEFAULT_TIME_LIMIT_S, ClickHouseStore
from tailscope.store.db import Store
from tailscope.store.url import StoreLocation, parse_store_url

AnyStore = Union[Store, ClickHouseStore]  # noqa: UP007 (a runtime alias)


def open_store(where: str | StoreLocation, time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> AnyStore:
    """The store a URL, a path or a parsed StoreLocation names. Nothing is opened yet: a DuckDB Store
    opens a short-lived connection per query, a ClickHouseStore its transport on first use."""
    location = parse_store_url(where) if isinstance(where, str) else where
    if location.engine == "duckdb":
        return Store(location.path)
    return ClickHouseStore(location, time_limit_s=time_limit_s)


def dialect_of(store: AnyStore) -> Dialect:
    """The SQL dialect a store takes."""
    return "clickhouse" if isinstance(store, ClickHouseStore) else "duckdb"
