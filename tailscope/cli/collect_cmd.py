"""Receive OTLP/HTTP traces (POST /v1/traces) straight into the store.

Point an OpenTelemetry exporter at http://127.0.0.1:4318/v1/traces (protobuf or JSON, gzip or not).
Beyond this machine: --token-file (every request must carry `Authorization: Bearer <token>`, sent by
the exporters with OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer <token>"; 401 otherwise) and
--tls-cert/--tls-key (HTTPS). Listening on a non-loopback address without a token is refused
unless --insecure is given.
A request is answered 200 once it is queued for the writer (or, with --ack committed, once its spans
are committed); when the queue is full the answer is 429 with Retry-After, which the OTel SDK
exporters honour. Spans are written in short transactions so the dashboard can read the same store
meanwhile. Ctrl-C, SIGTERM or SIGHUP stops taking requests, stores everything already accepted, and
ends the process by that signal (exit status 128 + its number; 1 if accepted spans could not be stored).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path


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
        "--token-file",
        metavar="FILE",
        help="file holding the bearer token every request must carry (first line, 16+ characters)",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="certificate (chain) to serve HTTPS with")
    parser.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="listen beyond loopback without a token (anyone who reaches the port can write)",
    )
    parser.add_argument(
        "--stats-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often to print counters on stderr (default 10)",
    )


def access_settings(args: argparse.Namespace) -> tuple[str | None, Path | None, Path | None]:
    """(token, TLS certificate, TLS key) from the arguments; ValueError with one line when they
    cannot be used or when they leave a non-loopback port open to anyone."""
    import ssl

    from tailscope.access import is_loopback, read_secret_file

    token = read_secret_file(args.token_file, "bearer token") if args.token_file else None
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    cert = Path(args.tls_cert) if args.tls_cert else None
    key = Path(args.tls_key) if args.tls_key else None
    if cert is not None and key is not None:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as error:
            reason = getattr(error, "strerror", None) or getattr(error, "reason", None) or str(error)
            raise ValueError(f"--tls-cert {cert} / --tls-key {key}: cannot be used: {reason}") from error
    if not is_loopback(args.host) and token is None and not args.insecure:
        raise ValueError(
            f"refusing to listen on {args.host} without --token-file: anyone who can reach the port "
            "could write to the store (--insecure to do it anyway)"
        )
    return token, cert, key


def run(args: argparse.Namespace) -> int:
    from ingest.receiver.limits import Limits
    from ingest.receiver.server import ReceiverConfig, serve
    from tailscope.cli.store_arg import open_from

    try:
        token, cert, key = access_settings(args)
    except ValueError as error:
        print(f"tailscope collect: {error}", file=sys.stderr)
        return 2
    store = open_from(args, "collect", writing=True)
    if store is None:
        return 2
    label = args.run or f"collect-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    from tailscope.access import is_loopback

    if not is_loopback(args.host) and token is None:
        print(
            f"collect: warning: listening on {args.host}: anyone who can reach this port can write "
            "to the store (--insecure, no --token-file)",
            file=sys.stderr,
        )
    elif not is_loopback(args.host) and cert is None:
        print(
            f"collect: warning: listening on {args.host} over plain HTTP: the bearer token crosses the "
            "network readable (--tls-cert/--tls-key, or a TLS proxy in front)",
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
        token=token,
        tls_cert=cert,
        tls_key=key,
    )
    code, stop_signal = serve(config)
    if code == 0 and stop_signal is not None:
        from tailscope.cli.signals import Stopped

        raise Stopped(stop_signal)  # everything accepted is stored: end by the signal, as expected
    return code
