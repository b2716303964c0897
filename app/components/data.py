"""Data access for the views: one cached Store handle, analysis results cached per store version.

Every number a view shows comes from a pure function of `tailscope.analysis`; this module only
caches them. Results are keyed by the function, its arguments (filters included) and
`Store.data_version()`, so a new ingest or a rule change shows up on the next rerun.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import streamlit as st

from tailscope.store.db import Store, default_db_path

T = TypeVar("T")


def db_path_from_argv(argv: list[str]) -> Path | None:
    """`--db FILE` after `streamlit run app/main.py --` (what `tailscope serve` passes)."""
    for i, arg in enumerate(argv):
        if arg == "--db" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--db="):
            return Path(arg.split("=", 1)[1])
    return None


def db_path() -> Path:
    return (db_path_from_argv(sys.argv[1:]) or default_db_path()).resolve()


@st.cache_resource(show_spinner=False)
def _store(path: str) -> Store:
    return Store(path)


def store() -> Store:
    """The Store handle for this server's database (it holds no open file, so it is safe to share)."""
    return _store(str(db_path()))


@st.cache_data(show_spinner=False, max_entries=256, ttl=3600)
def _cached(_fn: Callable[..., Any], name: str, path: str, version: Any, args: tuple, kwargs: tuple) -> Any:
    del name, version  # part of the cache key only
    return _fn(_store(path), *args, **dict(kwargs))


def get(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(store, *args, **kwargs)`, cached until the store changes."""
    handle = store()
    code = getattr(fn, "__code__", None)
    name = f"{fn.__module__}.{fn.__qualname__}@{code.co_filename if code else ''}"
    return _cached(fn, name, str(handle.path), handle.data_version(), args, tuple(sorted(kwargs.items())))


def clear() -> None:
    """Drop cached results (after this process wrote to the store)."""
    _cached.clear()
