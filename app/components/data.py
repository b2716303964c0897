"""Data access for the views: one cached store handle, analysis results cached per store version.

The store is the DuckDB file after `--db` (what `tailscope serve` passes), else the store URL in
$TAILSCOPE_STORE (`serve --store chdb:///dir` or `clickhouse://...`: a ClickHouse store), else the
default DuckDB file. Every number a view shows comes from a pure function of `tailscope.analysis`;
this module only caches them. Results are keyed by the function, its arguments (filters included)
and the store's `data_version()`, so a new ingest or a rule change shows up on the next rerun.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import streamlit as st

from tailscope.store.engine import open_store
from tailscope.store.interface import Store
from tailscope.store.url import default_db_path

T = TypeVar("T")


def db_path_from_argv(argv: list[str]) -> Path | None:
    """`--db FILE` after `streamlit run app/main.py --` (what `tailscope serve` passes)."""
    for i, arg in enumerate(argv):
        if arg == "--db" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--db="):
            return Path(arg.split("=", 1)[1])
    return None


def _key() -> str:
    """The store's URL, or a DuckDB file's full path: `--db FILE`, else $TAILSCOPE_STORE where it is
    not one file (a ClickHouse store), else $TAILSCOPE_DB or ./tailscope.duckdb."""
    db = db_path_from_argv(sys.argv[1:])
    url = os.environ.get("TAILSCOPE_STORE")
    if db is None and url and open_store(url).file is None:
        return url
    return str((db or default_db_path()).resolve())


def where() -> str:
    """The store, for the sidebar: a DuckDB file's path or a ClickHouse URL (no password)."""
    return store().name


def short_name() -> str:
    """The store in a few words: a DuckDB file's name, or a ClickHouse URL (no password)."""
    file = store().file
    return file.name if file is not None else store().name


@st.cache_resource(show_spinner=False)
def _store(key: str) -> Store:
    return open_store(key)


def store() -> Store:
    """The store handle for this server (a DuckDB Store holds no open file; a ClickHouse store one
    chdb session or HTTP pool for the process), safe to share."""
    return _store(_key())


@st.cache_data(show_spinner=False, max_entries=256, ttl=3600)
def _cached(_fn: Callable[..., Any], name: str, key: str, version: Any, args: tuple, kwargs: tuple) -> Any:
    del name, version  # part of the cache key only
    return _fn(_store(key), *args, **dict(kwargs))


def get(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(store, *args, **kwargs)`, cached until the store changes."""
    handle = store()
    code = getattr(fn, "__code__", None)
    name = f"{fn.__module__}.{fn.__qualname__}@{code.co_filename if code else ''}"
    return _cached(fn, name, _key(), handle.data_version(), args, tuple(sorted(kwargs.items())))


def clear() -> None:
    """Drop cached results (after this process wrote to the store)."""
    _cached.clear()
