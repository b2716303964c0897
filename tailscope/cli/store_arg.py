"""--store / --db for the commands: which store they use, through the store seam.

--store URL (or $TAILSCOPE_STORE) names any engine: a DuckDB path or duckdb://, chdb:///folder,
clickhouse://user:password@host:8123/database. --db FILE (or $TAILSCOPE_DB) still names a DuckDB file;
--store wins (tailscope.store.url.resolve_store).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

STORE_HELP = (
    "store URL: a DuckDB file (path or duckdb:///path), chdb:///folder (ClickHouse in-process) or "
    "clickhouse://user:password@host:8123/database (default: $TAILSCOPE_STORE, else --db)"
)
DB_HELP = "DuckDB store file (default: $TAILSCOPE_DB or ./tailscope.duckdb)"


_OPENED: list[Any] = []  # stores the running command opened, closed by close_opened()


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", metavar="URL", help=STORE_HELP)
    parser.add_argument("--db", metavar="FILE", help=DB_HELP)


def open_from(args: argparse.Namespace, command: str, writing: bool = False) -> Any | None:
    """The store the arguments name, or None after a one-line message (a URL that does not parse),
    prepared for the command (a ClickHouse store: server reachable, otel_traces the exporter's,
    tailscope's own tables; `writing` also creates otel_traces when the database has none)."""
    from tailscope.store.engine import open_store
    from tailscope.store.url import resolve_store

    try:
        location = resolve_store(getattr(args, "store", None), args.db)
    except ValueError as error:
        print(f"tailscope {command}: {error}", file=sys.stderr)
        return None
    store = open_store(location)
    _OPENED.append(store)
    store.prepare(writing=writing)
    return store


def close_opened() -> None:
    """Close what the command opened (a chdb session holds its folder until closed)."""
    while _OPENED:
        _OPENED.pop().close()


def print_unknown_run(command: str, store: Any, error: Any) -> None:
    """Say on stderr why an UnknownRunError's run could not be picked: several runs (listed), none
    loaded yet, or a label the store lacks."""
    if error.run is None and error.available:
        print(
            f"tailscope {command}: the store has several runs, pick one with --run: "
            f"{', '.join(error.available)}",
            file=sys.stderr,
        )
    elif error.run is None:
        print(
            f"tailscope {command}: {store.name} has no runs; load traces with `tailscope ingest`",
            file=sys.stderr,
        )
    else:
        print(f"tailscope {command}: {error}", file=sys.stderr)
