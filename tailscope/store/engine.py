"""Where an engine is chosen: a store URL (or a plain DuckDB path) in, a Store out.

    open_store("runs/a.duckdb")               DuckDB file (tailscope.store.duckdb)
    open_store("chdb:///var/lib/tailscope")   ClickHouse in process (tailscope.store.clickhouse, chdb)
    open_store("clickhouse://u:p@host/db")    ClickHouse server over HTTP (clickhouse-connect)

The only module outside the engine packages that names them. Which URL a command uses is
tailscope.store.url.resolve_store (--store > $TAILSCOPE_STORE > --db > ...).
"""

from __future__ import annotations

from pathlib import Path

from tailscope.store.interface import Store
from tailscope.store.url import StoreLocation, parse_store_url


def open_store(where: str | Path | StoreLocation, time_limit_s: float | None = None) -> Store:
    """The store a URL, a path or a parsed StoreLocation names. Nothing is opened yet: a DuckDB
    store opens a short-lived connection per unit of work, a ClickHouse store its transport on first
    use. `time_limit_s`: a ClickHouse store's limit per query (its default otherwise)."""
    location = where if isinstance(where, StoreLocation) else parse_store_url(str(where))
    if location.engine == "duckdb":
        from tailscope.store.duckdb.store import DuckDBStore

        return DuckDBStore(location.path)
    from tailscope.store.clickhouse.engine import ClickHouseStore

    if time_limit_s is None:
        return ClickHouseStore(location)
    return ClickHouseStore(location, time_limit_s=time_limit_s)
