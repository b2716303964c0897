"""What the analysis functions read from: a Store (opens a short-lived reader), a ClickHouseStore
(read through tailscope.store.ch_conn.ClickHouseConnection) or an open connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Union

from tailscope.store.clickhouse import ClickHouseStore
from tailscope.store.connection import Connection
from tailscope.store.db import Store

Source = Union[Store, ClickHouseStore, Connection]  # noqa: UP007 (a runtime alias)


@contextmanager
def reading(source: Source) -> Iterator[Any]:
    """A connection for one unit of work: the Store's short-lived reader, a ClickHouse store's
    connection view, or the connection given."""
    if isinstance(source, Store):
        with source.reader() as conn:
            yield conn
    elif isinstance(source, ClickHouseStore):
        from tailscope.store.ch_conn import ClickHouseConnection

        yield ClickHouseConnection(source)
    else:
        yield source
