"""A stand-in ClickHouse HTTP server for tests: clickhouse-connect's requests answered by chdb.

A real ClickHouse server cannot run on these machines, but the HTTP path (tailscope's HttpTransport
through clickhouse-connect) can still be driven end to end: this server takes what clickhouse-connect
sends (the statement in the body or the `query` parameter, `param_<name>` values for server-side
parameters, settings as URL parameters, an insert's rows in the body; the statement and its
parameters as multipart/form-data fields when they would make the URL too long, as clickhouse-connect
sends large parameter values) and runs it on one chdb
session, answering as a server does (the statement's FORMAT, TabSeparated by default; errors as
HTTP 500 with `Code: N. DB::Exception: ...`). It serves one request at a time.
"""

from __future__ import annotations

import email.parser
import email.policy
import http.server
import re
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# URL parameters that are the protocol's, not ClickHouse settings
_NOT_SETTINGS = {
    "query",
    "query_id",
    "database",
    "session_id",
    "default_format",
    "wait_end_of_query",
    "enable_http_compression",
    "user",
    "password",
    "session_timeout",
    "session_check",
}
_FORMAT = re.compile(r"\sFORMAT\s+(\w+)\s*$", re.IGNORECASE)


def _form_fields(body: bytes, content_type: str) -> dict[str, str]:
    """A multipart/form-data body's fields by name (what a server reads as URL parameters)."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    return {
        part.get_param("name", header="content-disposition"): part.get_payload(decode=True).decode()
        for part in message.iter_parts()
    }


def _decompress(body: bytes, encoding: str | None) -> bytes:
    if encoding == "lz4":
        import lz4.frame

        return lz4.frame.decompress(body)
    if encoding == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    if encoding == "gzip":
        import gzip

        return gzip.decompress(body)
    return body


class _Handler(http.server.BaseHTTPRequestHandler):
    session: Any = None  # the class made by chdb_http_server sets these three
    lock: Any = None
    settings: Any = None

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = _decompress(self.rfile.read(length), self.headers.get("Content-Encoding"))
        self._answer(body)

    def _answer(self, body: bytes) -> None:
        url = urllib.parse.urlsplit(self.path)
        args = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        content_type = self.headers.get("Content-Type") or ""
        if content_type.startswith("multipart/form-data"):
            args.update(_form_fields(body, content_type))
            body = b""
        params = {k[len("param_") :]: v for k, v in args.items() if k.startswith("param_")}
        settings = {k: v for k, v in args.items() if k not in _NOT_SETTINGS and not k.startswith("param_")}
        try:
            with self.lock:
                out = self._run(args.get("query"), body, params, settings)
        except Exception as error:  # chdb's error: a server's 500 with the same text
            message = str(error)
            code = re.search(r"Code: (\d+)\.", message)
            self.send_response(500)
            self.send_header("X-ClickHouse-Exception-Code", code.group(1) if code else "1")
            self.end_headers()
            self.wfile.write(message.encode())
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def _run(self, query: str | None, body: bytes, params: dict[str, str], settings: dict[str, str]) -> bytes:
        for name, value in settings.items():
            if self.settings.get(name) != value:
                self.session.query(
                    f"SET {name} = '{value}'"
                    if not value.replace(".", "").isdigit()
                    else f"SET {name} = {value}"
                )
                self.settings[name] = value
        if query is not None and body and query.lstrip().upper().startswith("INSERT"):
            match = _FORMAT.search(query)
            assert match, query
            with self.session.send_insert(query[: match.start()], match.group(1)) as inserter:
                inserter.append(body)
                inserter.finish()
            return b""
        statement = (query or "") + ("\n" if query and body else "") + body.decode()
        match = _FORMAT.search(statement)
        fmt = match.group(1) if match else "TabSeparated"
        if match:
            statement = statement[: match.start()]
        try:
            result = self.session.query(statement, fmt, params=params)
        except Exception:
            self.session.query("SELECT 1", "TabSeparated")  # chdb keeps a failed query's output
            raise
        return result.bytes()


@contextmanager
def chdb_http_server(folder: Path) -> Iterator[int]:
    """Serve a chdb session on `folder` over HTTP on a free loopback port (yields the port)."""
    from chdb import session as chs

    session = chs.Session(str(folder))
    handler = type("Handler", (_Handler,), {"session": session, "settings": {}, "lock": threading.Lock()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        session.close()
