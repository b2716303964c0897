"""What the analysis functions read from: a Store (tailscope.store.interface), which gives a Reader
for one unit of work, or a Reader already open (a view that calls another shares its read)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Union

from tailscope.store.interface import Reader, Store

Source = Union[Store, Reader]  # noqa: UP007 (a runtime alias)


def reading(source: Source) -> AbstractContextManager[Reader]:
    """A Reader for one unit of work: the store's (DuckDB: a short-lived read-only connection), or
    the reader given."""
    return source.reading()
