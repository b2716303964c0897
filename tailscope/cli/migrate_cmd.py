"""Convert a store written by an older tailscope to this version's schema, in place.

One transaction: if it is interrupted or fails, the store is left exactly as it was. Nothing stored
is lost: spans, runs, stage rules and derived rows all stay. `tailscope ingest` and `collect` do the
same on their first write; the dashboard and the reports only read, so they ask for this instead.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", metavar="FILE", help="store file (default: $TAILSCOPE_DB or ./tailscope.duckdb)"
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict
    from pathlib import Path

    from tailscope.store.engine import open_store
    from tailscope.store.errors import StoreError, StoreFullError
    from tailscope.store.url import default_db_path

    path = Path(args.db) if args.db else default_db_path()
    if not path.exists():
        print(f"tailscope: {path}: no such store", file=sys.stderr)
        return 2
    try:
        outcome = open_store(path).migrate()
    except StoreFullError as error:  # rolled back as well: one line, and exit 2 as for bad input
        print(f"tailscope: {error}", file=sys.stderr)
        return 2
    except StoreError as error:  # the transaction rolled back: the store is as it was
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"tailscope: {path}: migration failed, store unchanged: {first_line}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(outcome)) if args.json else outcome.describe())
    return 0
