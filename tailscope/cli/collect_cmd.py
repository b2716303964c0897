"""Receive OTLP/HTTP traces (POST /v1/traces) straight into the store.

Point an OpenTelemetry exporter at http://127.0.0.1:4318/v1/traces (protobuf or JSON, gzip or not).
A request is answered 200 once it is queued for the writer (or, with --ack committed, once its spans
are committed); when the queue is full the answer is 429 with Retry-After, which the OTel SDK
exporters honour. Spans are written in short transactions so the dashboard can read the same store
meanwhile. Ctrl-C, SIGTERM or SIGHUP stops taking requests, stores everything already accepted, and
ends the process by that signal (exit status 128 + its number; 1 if accepted spans could not be stored).
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from datetime import UTC, datetime


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tailscope.cli.store_arg import add_store_arguments

    add_store_arguments(parser)
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=4318, help="port (default 4318; 0: any free port)")
    parser.add_argument(
        "--run", metavar="LABEL", help="run label for everything received (default: collect-<UTC time>)"
    )
    parser.add_argument(
        "--max-request-bytes",
        type=_positive,
        default=16 * 1024 * 1024,
        metavar="N",
        help="largest request body, before and after decompression (default 16 MiB; larger: 413)",
    )
    parser.add_argument(
        "--queue-requests",
        type=_positive,
        default=64,
        metavar="N",
        help="accepted requests waiting to be written, at most (default 64; beyond: 429 + Retry-After)",
    )
    parser.add_argument(
        "--flush-interval-ms",
        type=_positive,
        default=200,
        metavar="N",
        help="least time between two write transactions (default 200; the store is free in between)",
    )
    parser.add_argument(
        "--ack",
        choices=("queued", "committed"),
        default="queued",
        help="answer 200 once a request is queued (default; flushed on shutdown) or once it is "
        "committed (survives kill -9, but each exporter then waits for the write)",
    )
    parser.add_argument(
        "--stats-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often to print counters on stderr (default 10)",
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    from ingest.receiver.limits import Limits
    from ingest.receiver.server import ReceiverConfig, serve
    from tailscope.cli.store_arg import open_from

    store = open_from(args, "collect", writing=True)
    if store is None:
        return 2
    label = args.run or f"collect-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    if not _is_loopback(args.host):
        print(
            f"collect: warning: listening on {args.host}: anyone who can reach this port can write "
            "to the store (there is no authentication)",
            file=sys.stderr,
        )
    limits = Limits(
        max_request_bytes=args.max_request_bytes,
        queue_requests=args.queue_requests,
        flush_interval_ms=args.flush_interval_ms,
    )
    config = ReceiverConfig(
        store=store,
        run_label=label,
        host=args.host,
        port=args.port,
        limits=limits,
        stats_interval_s=args.stats_interval,
        ack=args.ack,
    )
    code, stop_signal = serve(config)
    if code == 0 and stop_signal is not None:
        from tailscope.cli.signals import Stopped

        raise Stopped(stop_signal)  # everything accepted is stored: end by the signal, as expected
    return code
