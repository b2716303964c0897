"""What the analysis functions read from: a Store (opens a short-lived reader) or an open connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Union

import duckdb

from tailscope.store.db import Store

Source = Union[Store, duckdb.DuckDBPyConnection]  # noqa: UP007 (a runtime alias)


@contextmanager
def reading(source: Source) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection for one unit of work: the Store's short-lived reader, or the connection given."""
    if isinstance(source, Store):
        with source.reader() as conn:
            yield conn
    else:
        yield source
