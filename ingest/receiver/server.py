"""Run the receiver: uvicorn on a loopback port, a status line, counters, graceful shutdown.

SIGINT, SIGTERM or SIGHUP: uvicorn stops accepting connections and lets in-flight requests finish,
then the app's lifespan has the writer store everything queued (every acknowledged request, in
either ack mode) and stop, and the process ends by that signal (`tailscope collect` re-raises it: a
shell sees 128 + its number). If the store stays locked past SHUTDOWN_FLUSH_SECONDS, the exit code
is 1 and the number of accepted spans not stored is printed. A second SIGINT stops waiting
for in-flight requests; those were not answered yet, so their exporters still hold them.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import uvicorn

from ingest.receiver.app import ACK_COMMITTED, SHUTDOWN_FLUSH_SECONDS, create_app
from ingest.receiver.limits import Limits
from ingest.receiver.writer import BatchWriter
from tailscope.store.interface import Store

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class ReceiverConfig:
    store: Store  # where the spans go (its span_sink)
    run_label: str
    host: str = "127.0.0.1"
    port: int = 4318
    limits: Limits = field(default_factory=Limits)
    ack: str = "queued"
    stats_interval_s: float = 10.0
    token: str | None = None  # the bearer token every request must carry (None: no authentication)
    tls_cert: Path | None = None  # PEM certificate (chain) and key: serve HTTPS
    tls_key: Path | None = None


class _Server(uvicorn.Server):
    """uvicorn's server, stopping gracefully on SIGHUP too and remembering the first stop signal
    (instead of re-raising it after shutdown: the caller decides how to exit), plus a callback once
    the socket is bound (port 0 gets its real number there)."""

    on_started: Callable[[int], None] = staticmethod(lambda port: None)
    stop_signal: int | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
            self.on_started(port)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.stop_signal is None:
            self.stop_signal = sig
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


def _format_status(writer: BatchWriter, previous: tuple[float, int]) -> tuple[str, tuple[float, int]]:
    now, stored = time.monotonic(), writer.counters.spans_stored
    rate = (stored - previous[1]) / max(now - previous[0], 1e-9)
    c = writer.counters
    line = (
        f"collect: {stored:,} spans stored ({rate:,.0f}/s), {c.requests:,} requests, "
        f"{c.throttled:,} throttled, queue {writer.queued_requests}/{writer.limits.queue_requests}, "
        f"last commit {c.last_tx_seconds * 1000:.0f} ms"
    )
    return line, (now, stored)


def _report_periodically(writer: BatchWriter, every: float, stop: threading.Event, out: TextIO) -> None:
    mark = (time.monotonic(), 0)
    last_seen = (0, 0)
    while not stop.wait(every):
        seen = (writer.counters.requests, writer.counters.throttled)
        line, mark = _format_status(writer, mark)
        if seen != last_seen:
            print(line, file=out, flush=True)
        last_seen = seen


def serve(config: ReceiverConfig, out: TextIO = sys.stderr) -> tuple[int, int | None]:
    """Run until SIGINT, SIGTERM or SIGHUP; (0 after a clean flush or 1 if the writer could not
    finish, the signal that stopped it)."""
    sink = config.store.span_sink(config.run_label, _source(config))
    writer = BatchWriter(sink, config.limits, log=out, ack_waits=config.ack == ACK_COMMITTED)
    where = sink.where
    app: Any = create_app(writer, config.ack)
    if config.token is not None:
        from ingest.receiver.auth import BearerTokenAuth

        app = BearerTokenAuth(app, config.token)
    limits = config.limits
    uv_config = uvicorn.Config(
        app,
        ssl_certfile=config.tls_cert,
        ssl_keyfile=config.tls_key,
        host=config.host,
        port=config.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        # Connections beyond this get uvicorn's own 503 (retryable) before any body is read.
        limit_concurrency=limits.queue_requests * 2 + 16,
        timeout_graceful_shutdown=60,
    )
    server = _Server(uv_config)
    stop = threading.Event()
    reporter = threading.Thread(
        target=_report_periodically, args=(writer, config.stats_interval_s, stop, out), daemon=True
    )

    def started(port: int) -> None:
        host = f"[{config.host}]" if ":" in config.host else config.host
        scheme = "https" if config.tls_cert is not None else "http"
        auth = "bearer token" if config.token is not None else "none"
        print(
            f"collect: listening on {scheme}://{host}:{port}/v1/traces  {where}  "
            f"run={config.run_label}  ack={config.ack}  auth={auth}  (Ctrl-C to stop)",
            file=out,
            flush=True,
        )
        reporter.start()

    server.on_started = started  # type: ignore[method-assign]
    try:
        server.run()
    finally:
        stop.set()
    clean = writer.close(timeout=0 if server.started else SHUTDOWN_FLUSH_SECONDS)
    c = writer.counters
    elapsed = time.monotonic() - c.started
    print(
        f"collect: stopped; {c.spans_stored:,} spans stored in {c.transactions:,} transactions "
        f"({c.spans_stored / max(elapsed, 1e-9):,.0f}/s over {elapsed:.0f} s), {c.requests:,} requests, "
        f"{c.throttled:,} throttled, {c.failed_transactions:,} failed transactions, "
        f"longest commit {c.max_tx_seconds * 1000:.0f} ms",
        file=out,
        flush=True,
    )
    unstored = writer.unstored_spans()
    if unstored:
        print(f"collect: {unstored:,} accepted spans could not be stored", file=out, flush=True)
    if not server.started:
        return 1, server.stop_signal
    return (0 if clean and not unstored else 1), server.stop_signal


def _source(config: ReceiverConfig) -> str:
    return f"otlp-http{'s' if config.tls_cert is not None else ''}://{config.host}:{config.port}/v1/traces"
