"""Name a selection of a ClickHouse store's otel_traces as a run, and derive its requests.

Spans the OpenTelemetry Collector's ClickHouse exporter wrote are read where they are: a run is a
time range plus resource-attribute filters (service.name, deployment.environment, host.name, ...),
kept in tailscope_runs; its per-request rows are computed inside ClickHouse (tailscope_requests).
Without --since/--until the run covers every span its filters match. Selecting an existing label
again redefines it. Exit 2 when the selection holds no spans or the store is a DuckDB file (there a
run is what `tailscope ingest` loaded).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tailscope.cli.store_arg import add_store_arguments

    parser.add_argument("run", metavar="LABEL", help="the run's label")
    add_store_arguments(parser)
    parser.add_argument(
        "--since", metavar="TIME", help="first span start, ISO 8601 (UTC unless a zone is given)"
    )
    parser.add_argument("--until", metavar="TIME", help="last span start, ISO 8601")
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a resource attribute the spans must have, e.g. service.name=ranker (repeatable)",
    )


def parse_time(text: str) -> int:
    """An ISO 8601 time as ns since the epoch (naive times are UTC)."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp()) * 10**9 + moment.microsecond * 1000


def parse_filters(pairs: list[str]) -> dict[str, str]:
    """KEY=VALUE pairs as a dict; ValueError naming the first that is not one."""
    filters: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--where {pair!r} is not KEY=VALUE")
        filters[key] = value
    return filters


def run(args: argparse.Namespace) -> int:
    from tailscope.cli.store_arg import open_from
    from tailscope.store.errors import UnsupportedError

    try:
        filters = parse_filters(args.where)
        start = parse_time(args.since) if args.since else None
        end = parse_time(args.until) if args.until else None
    except ValueError as error:
        print(f"tailscope select: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    store = open_from(args, "select")
    if store is None:
        return EXIT_BAD_INPUT
    try:
        spans, requests = store.select_run(args.run, start, end, filters)
    except (UnsupportedError, LookupError) as error:
        print(f"tailscope select: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"run {args.run}: {spans:,} spans, {requests:,} requests ({store.name})")
    return EXIT_OK
