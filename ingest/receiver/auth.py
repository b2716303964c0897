"""Bearer-token authentication for the receiver: `Authorization: Bearer <token>` on every request.

An ASGI middleware in front of the app: a request without the token, or with another one, is
answered 401 with `WWW-Authenticate: Bearer` before its body is read. The token is compared in
constant time (hmac.compare_digest), so the answer's timing says nothing about how much of a
guess was right. OpenTelemetry exporters send it with
`OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer <token>"` (or the exporter's `headers=`).
"""

from __future__ import annotations

import hmac
from typing import Any

from ingest.receiver import protocol

Scope = dict[str, Any]


def presented_token(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The token of the request's `Authorization: Bearer ...` header (None without one)."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return token.strip()
            return None
    return None


def token_matches(presented: bytes | None, expected: bytes) -> bool:
    """Constant-time comparison (for a given length) of the presented token with the expected one."""
    return presented is not None and hmac.compare_digest(presented, expected)


class BearerTokenAuth:
    """Wraps an ASGI app: HTTP requests without the right bearer token get 401; lifespan passes."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or token_matches(
            presented_token(scope.get("headers", [])), self._expected
        ):
            await self.app(scope, receive, send)
            return
        content_type = dict(scope.get("headers", [])).get(b"content-type", b"").decode("latin-1")
        media = protocol.media_type(content_type) or protocol.JSON
        body = protocol.status_body(media, protocol.UNAUTHENTICATED, "missing or wrong bearer token")
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", media.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="tailscope collect"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
