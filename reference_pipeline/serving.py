"""Process plumbing shared by the service and the downstream: bind a free loopback port, serve on it."""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Callable
from typing import NoReturn

import uvicorn

from tailscope.cli import signals


def bind_free_port(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket (port 0: the kernel picks a free one, so there is no race to lose).

    TCP_NODELAY is set on it (accepted connections inherit it on Linux) and the protocol is named:
    asyncio disables Nagle only on sockets whose `proto` is IPPROTO_TCP, and a socket made with proto
    0 is skipped. Without it a response written in two pieces waits for the peer's delayed ACK,
    ~40 ms on every call (measured: 44 ms → 1.9 ms median per loopback POST with httpx).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def bind_port_group(host: str = "127.0.0.1", port: int = 0, count: int = 1) -> list[socket.socket]:
    """`count` listening sockets on one port, each for one front-end process, with SO_REUSEPORT: the
    kernel then spreads new connections over them by a hash of each connection's addresses. One
    socket shared by every front end left the balance to whichever accept loop woke first: on the
    16-core H100 box one front end ran at a full core while the service used 5.8 of its 16 cores
    (bench/RESULTS.md, "Reference pipeline (GPU)"). nginx's `reuseport` and gunicorn's
    `--reuse-port` do the same. Where the platform lacks SO_REUSEPORT: one socket, shared."""
    if count <= 1 or not hasattr(socket, "SO_REUSEPORT"):
        return [bind_free_port(host, port)] * max(count, 1)
    if port:  # a port someone listens on stays refused (another service with SO_REUSEPORT would
        bind_free_port(host, port).close()  # otherwise share it silently)
    group: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            group.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((host, port))
            sock.listen(1024)
            port = sock.getsockname()[1]  # the first one's (port 0: the kernel's pick) for the rest
    except OSError:
        for sock in group:
            sock.close()
        raise
    return group


# Idle keep-alive connections stay open longer than any client here keeps them in its pool (httpx:
# 5 s). At equal timeouts (uvicorn's default is also 5 s) the server may close a connection just as
# the client reuses it, and that request fails with ReadError: seen once in a real 20 s run.
KEEP_ALIVE_S = 30


def serve(app, sock: socket.socket, announce: str = "") -> None:
    """Serve on an already-bound socket until SIGTERM/SIGINT; announce the port on stdout first
    (`LISTENING <port>`, then `announce`: space-separated key=value facts for the runner)."""
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", timeout_keep_alive=KEEP_ALIVE_S
    )
    server = uvicorn.Server(config)
    # SIGTERM asks the server to exit, from here on: one that arrives before uvicorn installs its own
    # handlers (the runner stops a child as soon as it announces its port) ends the server right after
    # its start-up instead of being lost; the child would otherwise be killed 30 s later and leave its
    # temporary folder. uvicorn re-raises the signal that stopped it once it has shut down, which this
    # handler, restored by then, also absorbs, so the caller still flushes its spans before ending.
    signal.signal(signal.SIGTERM, server.handle_exit)
    print(f"LISTENING {sock.getsockname()[1]} {announce}".rstrip(), flush=True)
    server.run(sockets=[sock])


def run_until_stopped(main: Callable[[], int]) -> NoReturn:
    """A child's entry point: SIGTERM or SIGHUP before the server is up (while the model loads) unwinds
    `main` like Ctrl-C, so its temporary files and span exporters are cleaned up, then the process
    ends by that signal, as the runner expects of a stopped child."""
    signals.install()
    try:
        code = main()
    except KeyboardInterrupt as stop:
        signals.exit_by_signal(signals.signal_of(stop))
    sys.exit(code)
