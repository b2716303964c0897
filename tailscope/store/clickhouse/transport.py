"""How statements reach ClickHouse: the only part that differs between chdb and a server.

    ChdbTransport  in-process (chdb.session.Session on a data folder); values are written in
                   ClickHouse's parameter text form by `bind_value` and parsed by the engine
    HttpTransport  a server over HTTP(S) through clickhouse-connect, which binds the same
                   `{name:Type}` parameters server-side

Both return Arrow (ArrowStream / query_arrow), so rows come back with the same Python types.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from tailscope import sql
from tailscope.store.clickhouse.binding import bind_value, insert_statement
from tailscope.store.errors import StoreLockedError, first_line
from tailscope.store.url import StoreLocation


class Transport(Protocol):
    """How statements reach ClickHouse: the only part that differs between chdb and a server."""

    def query_arrow(self, statement: str, params: dict[str, Any], settings: dict[str, Any]) -> pa.Table: ...

    def insert_arrow(self, table: str, data: pa.Table) -> None: ...

    def close(self) -> None: ...


class _Session:
    """One chdb session on a folder, shared by every ChdbTransport of this process on that folder
    (chdb holds one folder per process; a second session on it would meet our own lock)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.settings: dict[str, Any] = {}
        self.users = 0
        self.lock = threading.RLock()  # one statement at a time (the dashboard reads from threads)


_SESSIONS: dict[Path, _Session] = {}


class ChdbTransport:
    """chdb in-process on a data folder. One process per folder (chdb locks `<folder>/status`)."""

    def __init__(self, path: Path) -> None:
        from chdb import session as chs

        self._path = path.resolve()
        shared = _SESSIONS.get(self._path)
        if shared is None:
            path.mkdir(parents=True, exist_ok=True)
            if _locked_elsewhere(path / "status"):
                raise StoreLockedError(
                    f"chdb://{path}: the folder is in use by another process (chdb allows one)"
                )
            try:
                shared = _Session(chs.Session(str(path)))
            except RuntimeError as error:
                raise StoreLockedError(f"chdb://{path}: cannot open it ({first_line(str(error))})") from None
            _SESSIONS[self._path] = shared
        shared.users += 1
        self._shared = shared
        self._session = shared.session
        self._settings = shared.settings

    def query_arrow(self, statement: str, params: dict[str, Any], settings: dict[str, Any]) -> pa.Table:
        with self._shared.lock:
            return self._query_arrow(statement, params, settings)

    def _query_arrow(self, statement: str, params: dict[str, Any], settings: dict[str, Any]) -> pa.Table:
        # Settings are session state in chdb (a trailing SETTINGS clause cannot follow VALUES).
        for name, value in settings.items():
            if self._settings.get(name) != value:
                # the value as a bound parameter, the name quoted (settings come from our code)
                setting = f"SET {sql.quote_identifier(name)} = {{value:String}}"
                self._session.query(setting, "TabSeparated", params={"value": bind_value(value)})
                self._settings[name] = value
        bound = {k: bind_value(v) for k, v in params.items()}
        try:
            result = self._session.query(statement, "ArrowStream", params=bound)
        except Exception:
            # chdb keeps what a failed query had written (a timeout's Arrow header) and hands it out
            # at the front of the next result: a throwaway query takes it
            self._session.query("SELECT 1", "TabSeparated")
            raise
        raw = result.bytes()
        if not raw:
            return pa.table({})
        return pa.ipc.open_stream(pa.py_buffer(raw)).read_all()

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        if any(pa.types.is_dictionary(field.type) for field in data.schema):
            # Python() misreads a chunked dictionary column (its chunks' dictionaries differ)
            self._insert_stream(insert_statement(table, data.column_names), data)
            return
        # chdb reads the Arrow table in place through its Python() table function, which finds it
        # by name in the calling frames (1 M decoded spans: ~0.5 s, against ~2 s to write and parse
        # an Arrow stream); a NULL becomes its column's default, as in the stream (insert_null_as_default)
        _tailscope_insert_rows = data  # read by name in the statement
        with self._shared.lock:
            self._session.query(
                insert_statement(table, data.column_names, "Python(_tailscope_insert_rows)"), "TabSeparated"
            )

    def _insert_stream(self, statement: str, data: pa.Table) -> None:
        """`INSERT INTO table (columns)` with the rows as Arrow stream bytes."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, data.schema) as writer:
            writer.write_table(data)
        with self._shared.lock, self._session.send_insert(statement, "ArrowStream") as inserter:
            inserter.append(sink.getvalue().to_pybytes())
            inserter.finish()

    def close(self) -> None:
        self._shared.users -= 1
        if self._shared.users == 0:
            if _SESSIONS.get(self._path) is self._shared:
                _SESSIONS.pop(self._path)
            self._session.close()

    def second_session(self) -> ChdbTransport:
        """Another session on this folder, in this process, not shared: its own temporary tables
        and settings, its statements beside this one's (store.overlap). Close it after use."""
        from chdb import session as chs

        other = object.__new__(ChdbTransport)
        other._path = self._path
        other._shared = _Session(chs.Session(str(self._path)))
        other._shared.users = 1
        other._session = other._shared.session
        other._settings = other._shared.settings
        return other


def _locked_elsewhere(status: Path) -> bool:
    """True when another process holds chdb's lock on the folder's status file."""
    if not status.exists():
        return False
    fd = os.open(status, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


# Statements that answer with rows; the others (DDL, INSERT, DELETE, SET) go as HTTP commands: a
# FORMAT clause, which a query for Arrow rows appends, is not valid after them.
_ROW_STATEMENTS = ("SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS")


def returns_rows(statement: str) -> bool:
    """True when a statement answers with rows (its first word, after comments, says so)."""
    lines = [line for line in statement.splitlines() if not line.lstrip().startswith("--")]
    words = " ".join(lines).split()
    return bool(words) and words[0].upper().lstrip("(") in _ROW_STATEMENTS


class HttpTransport:
    """A ClickHouse server over HTTP(S) through clickhouse-connect (server-side parameter binding;
    its session keeps the temporary tables of a derive or a staged ingest)."""

    def __init__(self, location: StoreLocation, connect_timeout: float = 5.0, client: Any = None) -> None:
        if client is None:
            import clickhouse_connect

            client = clickhouse_connect.get_client(
                host=location.host,
                port=location.port,
                username=location.user,
                password=location.password,
                database=location.database,
                secure=location.secure,
                connect_timeout=connect_timeout,
            )
        self._client = client

    def query_arrow(self, statement: str, params: dict[str, Any], settings: dict[str, Any]) -> pa.Table:
        for name, value in params.items():
            if isinstance(value, Mapping):  # clickhouse-connect writes it as JSON, not a Map literal
                raise TypeError(f"parameter {name!r}: bind a map as two arrays (keys, values)")
        if returns_rows(statement):
            return self._client.query_arrow(statement, parameters=params, settings=settings, use_strings=True)
        self._client.command(statement, parameters=params, settings=settings)
        return pa.table({})

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        self._client.insert_arrow(table, data)

    def close(self) -> None:
        self._client.close()
