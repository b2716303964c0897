"""Open the dashboard on the store: `streamlit run app/main.py`, bound to 127.0.0.1, headless.

The dashboard runs in a child process (this interpreter's `python -m streamlit`), with a DuckDB
store's path in the environment (TAILSCOPE_DB) and after `--` on its command line; a ClickHouse
store's URL (chdb:///dir, clickhouse://user:password@host:8123/db) in the environment only
(TAILSCOPE_STORE: a password stays off the command line). Ctrl-C, SIGTERM or SIGHUP
stop it and then this process (exit status 128 + the signal's number).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from tailscope.cli import signals

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8501
# Mirrors .streamlit/config.toml, which Streamlit only reads from the working directory.
MAX_UPLOAD_MB = 400
STOP_WAIT_SECONDS = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", metavar="FILE", help="store file (default: $TAILSCOPE_DB or ./tailscope.duckdb)"
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        help="store URL: duckdb:///path, chdb:///dir or clickhouse://user:password@host:8123/db "
        "(default: $TAILSCOPE_STORE, else --db)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}: this machine only)"
    )


def app_script() -> Path:
    """The dashboard's entrypoint, app/main.py, wherever the `app` package is installed."""
    spec = importlib.util.find_spec("app.main")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the dashboard (package `app`, app/main.py) is not installed")
    return Path(spec.origin)


def resolve_db(db: str | None) -> Path:
    return Path(db or os.environ.get("TAILSCOPE_DB") or "tailscope.duckdb").resolve()


def streamlit_command(db_path: Path | None, host: str, port: int) -> list[str]:
    """The `python -m streamlit run ...` command line that serves the dashboard on `db_path` (None: on
    the store $TAILSCOPE_STORE names)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app_script()),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--server.maxUploadSize",
        str(MAX_UPLOAD_MB),
        "--browser.gatherUsageStats",
        "false",
        "--theme.base",
        "light",
        "--client.toolbarMode",
        "minimal",
        *(["--", "--db", str(db_path)] if db_path is not None else []),
    ]


def serve(
    db_path: Path | None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, store: str | None = None
) -> int:
    """Run the dashboard in the foreground until it exits; returns its exit code. On the DuckDB file
    `db_path`, or (db_path None) on the ClickHouse store whose URL is `store`.

    Ctrl-C, SIGTERM or SIGHUP (a KeyboardInterrupt here, see tailscope.cli.signals) stop the
    dashboard first and are then raised again for the entry point to exit by."""
    if db_path is not None:
        env, shown = dict(os.environ, TAILSCOPE_DB=str(db_path)), str(db_path)
    else:
        from tailscope.store.url import parse_store_url

        assert store is not None
        env, shown = dict(os.environ, TAILSCOPE_STORE=store), parse_store_url(store).url  # no password
        env.pop("TAILSCOPE_DB", None)
    command = streamlit_command(db_path, host, port)
    print(f"tailscope: dashboard on {shown} at http://{host}:{port}  (Ctrl-C stops it)", flush=True)
    child: subprocess.Popen[bytes] | None = None
    try:
        child = subprocess.Popen(command, env=env, preexec_fn=signals.die_with_parent)
        return child.wait()
    except KeyboardInterrupt as interrupt:
        if child is not None:
            stop_child(child, signals.child_signal(signals.signal_of(interrupt)))
        print("tailscope: dashboard stopped", file=sys.stderr)
        raise


def stop_child(child: subprocess.Popen[bytes], signum: int) -> None:
    """Send `signum` (if the child still runs), then wait; SIGTERM, then SIGKILL, if it lingers."""
    if child.poll() is None:
        child.send_signal(signum)
    try:
        child.wait(timeout=STOP_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        child.terminate()
        try:
            child.wait(timeout=STOP_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        print(f"tailscope serve: --port {args.port}: not a port number (1-65535)", file=sys.stderr)
        return 2
    try:
        app_script()
    except FileNotFoundError as error:
        print(f"tailscope serve: {error}", file=sys.stderr)
        return 1
    store = getattr(args, "store", None) or os.environ.get("TAILSCOPE_STORE")
    if store:
        from tailscope.store.url import parse_store_url

        try:
            location = parse_store_url(store)
        except ValueError as error:
            print(f"tailscope serve: {error}", file=sys.stderr)
            return 2
        if location.engine != "duckdb":
            return serve(None, args.host, args.port, store=store)
        args.db = str(location.path)
    db = resolve_db(args.db)
    if not db.parent.is_dir():
        print(f"tailscope serve: --db {db}: folder {db.parent} does not exist", file=sys.stderr)
        return 2
    return serve(db, args.host, args.port)
