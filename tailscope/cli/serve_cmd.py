"""Open the dashboard on the store: `streamlit run app/main.py`, bound to 127.0.0.1, headless.

The dashboard runs in a child process (this interpreter's `python -m streamlit`), with a DuckDB
store's path in the environment (TAILSCOPE_DB) and after `--` on its command line; a ClickHouse
store's URL (chdb:///dir, clickhouse://user:password@host:8123/db) in the environment only
(TAILSCOPE_STORE: a password stays off the command line). Ctrl-C, SIGTERM or SIGHUP
stop it and then this process (exit status 128 + the signal's number).

Access (see app/components/access.py, and README "Sharing tailscope with a team"): writes (Upload,
the rule editors) are on by default on loopback and off on any other address unless
--allow-writes; --password-file asks every visitor for a shared password, --oidc for a login with
the identity provider configured in .streamlit/secrets.toml (Streamlit's st.login). Binding beyond
loopback with writes on and no login is refused unless --insecure is given.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
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
    writes = parser.add_mutually_exclusive_group()
    writes.add_argument(
        "--allow-writes",
        action="store_true",
        help="let visitors upload and edit rules (default on loopback only)",
    )
    writes.add_argument(
        "--read-only", action="store_true", help="no Upload, rules read-only (default off loopback)"
    )
    login = parser.add_mutually_exclusive_group()
    login.add_argument(
        "--password-file",
        metavar="FILE",
        help="ask every visitor for the shared password on this file's first line",
    )
    login.add_argument(
        "--oidc",
        action="store_true",
        help="log visitors in with the identity provider of .streamlit/secrets.toml's [auth] (st.login)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="allow writes beyond loopback without a login (anyone reaching the port can change the store)",
    )


def app_script() -> Path:
    """The dashboard's entrypoint, app/main.py, wherever the `app` package is installed."""
    spec = importlib.util.find_spec("app.main")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the dashboard (package `app`, app/main.py) is not installed")
    return Path(spec.origin)


def resolve_db(db: str | None) -> Path:
    return Path(db or os.environ.get("TAILSCOPE_DB") or "tailscope.duckdb").resolve()


@dataclass(frozen=True)
class Access:
    """Who may do what on the dashboard: passed to it in its environment."""

    writes: bool = True
    login: str = "none"  # "none", "password" or "oidc"
    password_file: Path | None = None

    def environment(self) -> dict[str, str]:
        env = {"TAILSCOPE_WRITES": "1" if self.writes else "0", "TAILSCOPE_LOGIN": self.login}
        if self.password_file is not None:
            env["TAILSCOPE_PASSWORD_FILE"] = str(self.password_file)
        return env

    def describe(self) -> str:
        return f"{'writes allowed' if self.writes else 'read-only'}, login: {self.login}"


OIDC_KEYS = ("redirect_uri", "cookie_secret")


def oidc_problem(folder: Path) -> str | None:
    """Why Streamlit's st.login cannot work for a dashboard started in `folder`, or None: it reads
    [auth] from .streamlit/secrets.toml there or in the home folder, and needs Authlib."""
    import tomllib

    files = [folder / ".streamlit" / "secrets.toml", Path.home() / ".streamlit" / "secrets.toml"]
    sections = []
    for path in files:
        try:
            sections.append(tomllib.loads(path.read_text(encoding="utf-8")).get("auth"))
        except FileNotFoundError:
            continue
        except (OSError, tomllib.TOMLDecodeError) as error:
            return f"{path}: cannot be read: {error}"
    auth = next((section for section in sections if isinstance(section, dict)), None)
    if auth is None:
        return f"no [auth] section in {files[0]} or {files[1]} (see README, 'Sharing tailscope with a team')"
    missing = [key for key in OIDC_KEYS if key not in auth]
    providers = [key for key, value in auth.items() if isinstance(value, dict)]
    if "client_id" not in auth and not providers:
        missing.append("client_id (or a provider section such as [auth.google])")
    if missing:
        return "[auth] in secrets.toml lacks " + ", ".join(missing)
    if importlib.util.find_spec("authlib") is None:
        return "Streamlit's login needs Authlib: pip install 'tailscope[oidc]' (or Authlib>=1.3.2)"
    return None


def access_from(args: argparse.Namespace) -> Access:
    """The access the arguments ask for; ValueError with one line when they cannot be honoured or
    would let anyone beyond this machine change the store."""
    from tailscope.access import is_loopback, read_secret_file

    option = {
        name: getattr(args, name, None) for name in ("allow_writes", "read_only", "password_file", "oidc")
    }
    local = is_loopback(args.host)
    writes = bool(option["allow_writes"] or (local and not option["read_only"]))
    if option["password_file"]:
        read_secret_file(option["password_file"], "dashboard password")  # checked now, read by the dashboard
        access = Access(writes, "password", Path(option["password_file"]).resolve())
    elif option["oidc"]:
        problem = oidc_problem(Path.cwd())
        if problem is not None:
            raise ValueError(f"--oidc: {problem}")
        access = Access(writes, "oidc")
    else:
        access = Access(writes)
    if not local and writes and access.login == "none" and not getattr(args, "insecure", False):
        raise ValueError(
            f"refusing to serve on {args.host} with writes allowed and no login: anyone who reaches the "
            "port could upload and change the rules (--password-file or --oidc; or --read-only; "
            "or --insecure to do it anyway)"
        )
    return access


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
    db_path: Path | None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    store: str | None = None,
    access: Access | None = None,
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
    access = access or Access()
    env.update(access.environment())
    command = streamlit_command(db_path, host, port)
    print(
        f"tailscope: dashboard on {shown} at http://{host}:{port}  ({access.describe()}; Ctrl-C stops it)",
        flush=True,
    )
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
    from tailscope.access import SecretFileError

    try:
        access = access_from(args)
    except (ValueError, SecretFileError) as error:
        print(f"tailscope serve: {error}", file=sys.stderr)
        return 2
    store = getattr(args, "store", None) or os.environ.get("TAILSCOPE_STORE")
    if store:
        from tailscope.store.engine import open_store
        from tailscope.store.url import parse_store_url

        try:
            file = open_store(parse_store_url(store)).file  # (opens nothing)
        except ValueError as error:
            print(f"tailscope serve: {error}", file=sys.stderr)
            return 2
        if file is None:
            return serve(None, args.host, args.port, store=store, access=access)
        args.db = str(file)
    db = resolve_db(args.db)
    if not db.parent.is_dir():
        print(f"tailscope serve: --db {db}: folder {db.parent} does not exist", file=sys.stderr)
        return 2
    return serve(db, args.host, args.port, access=access)
