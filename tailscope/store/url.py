"""Store URLs: which engine a command uses and where its data lives.

    ./tailscope.duckdb, /abs/x.duckdb        a plain path: a DuckDB file
    duckdb:///abs/x.duckdb, duckdb://rel/x   a DuckDB file, absolute (three slashes) or relative
    chdb:///abs/dir, chdb://rel/dir          an in-process ClickHouse (chdb) data folder
    clickhouse://user:password@host:8123/db  a ClickHouse server over HTTP (clickhouse-connect)
    clickhouses://user:password@host/db      the same over HTTPS (also clickhouse://...?secure=1)

A ClickHouse URL's parts are optional: user `default`, no password, port 8123 (8443 when secure),
database `default`. User and password are percent-decoded (a `@` in a password is written %40).
The password never appears in a StoreLocation's repr or str, so a location can be logged or put in
an error message as it is.

Which store a command uses (`resolve_store`): --store, else $TAILSCOPE_STORE, else --db (a DuckDB
path), else $TAILSCOPE_DB, else ./tailscope.duckdb.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs, quote, unquote, urlsplit

Engine = Literal["duckdb", "chdb", "clickhouse"]
DEFAULT_DUCKDB = "tailscope.duckdb"
HTTP_PORT = 8123
HTTPS_PORT = 8443
_DATABASE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_SCHEMES = "duckdb://, chdb://, clickhouse:// or clickhouses://"
_KNOWN = ("duckdb", "chdb", "clickhouse", "clickhouses")


@dataclass(frozen=True)
class StoreLocation:
    """A parsed store URL. `path` for duckdb and chdb; host, port, user, password, database and
    secure for clickhouse."""

    engine: Engine
    path: Path | None = None
    host: str = ""
    port: int = 0
    user: str = ""
    password: str = field(default="", repr=False)
    database: str = ""
    secure: bool = False

    @property
    def url(self) -> str:
        """The location as a URL, password replaced by `***` (safe to print)."""
        if self.engine != "clickhouse":
            return (
                f"{self.engine}://{'/' if self.path and self.path.is_absolute() else ''}{self._path_text()}"
            )
        secret = ":***" if self.password else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "clickhouses" if self.secure else "clickhouse"
        return f"{scheme}://{quote(self.user, safe='')}{secret}@{host}:{self.port}/{self.database}"

    def _path_text(self) -> str:
        text = str(self.path)
        return text[1:] if text.startswith("/") else text

    def __str__(self) -> str:
        return self.url


def _fail(text: str, why: str) -> ValueError:
    return ValueError(f"store URL {_redact(text)!r}: {why}")


def _redact(text: str) -> str:
    """The URL as given, any password cut out (for error messages)."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*:)[^/@]*@", r"\1***@", text)


def _local(engine: Engine, text: str) -> StoreLocation:
    rest = text.split("://", 1)[1]
    if "?" in rest or "#" in rest:
        raise _fail(text, f"a {engine} URL takes no ?query or #fragment")
    if not rest or rest == "/":
        raise _fail(text, f"no path after {engine}://")
    return StoreLocation(engine=engine, path=Path(rest))


def _secure(text: str, query: str, scheme: str) -> bool:
    params = parse_qs(query, keep_blank_values=True, strict_parsing=False)
    unknown = sorted(set(params) - {"secure"})
    if unknown:
        raise _fail(text, f"unknown option {unknown[0]!r} (only ?secure=1 is understood)")
    secure = scheme == "clickhouses"
    for value in params.get("secure", []):
        if value.lower() in _TRUE:
            secure = True
        elif value.lower() in _FALSE:
            if scheme == "clickhouses":
                raise _fail(text, "clickhouses:// is always secure; ?secure=0 contradicts it")
            secure = False
        else:
            raise _fail(text, f"secure={value!r} is not 1/0 or true/false")
    return secure


def _clickhouse(text: str, scheme: str) -> StoreLocation:
    parts = urlsplit(text)
    if parts.fragment:
        raise _fail(text, "a clickhouse URL takes no #fragment")
    if not parts.hostname:
        raise _fail(text, "no host (clickhouse://user:password@host:8123/database)")
    try:
        port = parts.port
    except ValueError:
        raise _fail(text, "the port is not a number from 1 to 65535") from None
    if port == 0:
        raise _fail(text, "the port is not a number from 1 to 65535")
    database = parts.path.lstrip("/") or "default"
    if not _DATABASE.fullmatch(database):
        raise _fail(text, f"database {database!r} is not a plain name (letters, digits, _)")
    secure = _secure(text, parts.query, scheme)
    return StoreLocation(
        engine="clickhouse",
        host=parts.hostname,
        port=port or (HTTPS_PORT if secure else HTTP_PORT),
        user=unquote(parts.username) if parts.username else "default",
        password=unquote(parts.password) if parts.password else "",
        database=database,
        secure=secure,
    )


def default_db_path() -> Path:
    """`TAILSCOPE_DB` if set, else ./tailscope.duckdb."""
    return Path(os.environ.get("TAILSCOPE_DB") or DEFAULT_DUCKDB)


def parse_store_url(text: str) -> StoreLocation:
    """Parse a store URL or a plain DuckDB path; ValueError (one line, no password) otherwise."""
    if not text.strip():
        raise ValueError("store URL is empty")
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", text)
    scheme = match.group(1).lower() if match else ""
    if match is None or not text[match.end() :].startswith("//"):
        if scheme in _KNOWN:  # "chdb:/x", "clickhouse:host": a URL missing its //
            raise _fail(text, f"write {scheme}://...")
        return StoreLocation(engine="duckdb", path=Path(text))  # a path (":" is legal in file names)
    if scheme in ("duckdb", "chdb"):
        return _local(scheme, text)  # type: ignore[arg-type]
    if scheme in ("clickhouse", "clickhouses"):
        return _clickhouse(text, scheme)
    raise _fail(text, f"unknown engine {scheme!r}; use a path or {_SCHEMES}")


def resolve_store(
    store: str | None = None, db: str | None = None, environ: Mapping[str, str] | None = None
) -> StoreLocation:
    """The store a command uses: --store, else $TAILSCOPE_STORE, else --db, else $TAILSCOPE_DB,
    else ./tailscope.duckdb. --db and $TAILSCOPE_DB name a DuckDB file (a URL there is refused)."""
    env = os.environ if environ is None else environ
    if store:
        return parse_store_url(store)
    if env.get("TAILSCOPE_STORE"):
        return parse_store_url(env["TAILSCOPE_STORE"])
    for name, value in (("--db", db), ("TAILSCOPE_DB", env.get("TAILSCOPE_DB"))):
        if value:
            location = parse_store_url(value)
            if location.engine != "duckdb":
                raise ValueError(f"{name} names a DuckDB file; give {location.url!r} with --store instead")
            return location
    return StoreLocation(engine="duckdb", path=Path(DEFAULT_DUCKDB))
