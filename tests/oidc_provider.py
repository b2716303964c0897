"""A stand-in OpenID Connect identity provider for the dashboard's --oidc tests.

Discovery document, an authorize endpoint that logs the visitor in at once (it redirects back with
a code and records the request), a token endpoint answering an RS256-signed id_token for that code
(the nonce the authorize request carried, the audience the client id), and the signing key's JWKS:
all that Streamlit's st.login (through Authlib) asks of a real provider. The key is made here.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

EMAIL = "alice@example.com"


class _Provider(BaseHTTPRequestHandler):
    key: Any = None  # set by provider(): the signing key (a private joserfc RSAKey)
    authorized: list[dict[str, list[str]]]
    codes: dict[str, dict[str, str]]

    def _base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def _answer(self, status: int, body: dict[str, Any] | None = None, location: str | None = None) -> None:
        data = json.dumps(body or {}).encode()
        self.send_response(status)
        if location:
            self.send_header("location", location)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        base = self._base()
        if url.path == "/.well-known/openid-configuration":
            self._answer(
                200,
                {
                    "issuer": base,
                    "authorization_endpoint": f"{base}/authorize",
                    "token_endpoint": f"{base}/token",
                    "jwks_uri": f"{base}/jwks",
                    "response_types_supported": ["code"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["RS256"],
                    "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                },
            )
        elif url.path == "/jwks":
            self._answer(200, {"keys": [self.key.as_dict(private=False)]})
        elif url.path == "/authorize":
            self.authorized.append(query)
            code = secrets.token_urlsafe(16)
            self.codes[code] = {"nonce": query["nonce"][0], "client_id": query["client_id"][0]}
            back = {"code": code, "state": query["state"][0]}
            self._answer(302, location=f"{query['redirect_uri'][0]}?{urlencode(back)}")
        else:
            self._answer(404)

    def do_POST(self) -> None:
        from joserfc import jwt

        form = parse_qs(self.rfile.read(int(self.headers.get("content-length", 0))).decode())
        grant = self.codes.pop(form.get("code", [""])[0], None)
        if urlparse(self.path).path != "/token" or grant is None:
            self._answer(400, {"error": "invalid_grant"})
            return
        now = int(time.time())
        claims = {
            "iss": self._base(), "sub": "alice", "aud": grant["client_id"], "iat": now, "exp": now + 600,
            "nonce": grant["nonce"], "email": EMAIL, "email_verified": True, "name": "Alice",
        }  # fmt: skip
        id_token = jwt.encode({"alg": "RS256", "kid": self.key.kid}, claims, self.key)
        self._answer(
            200, {"access_token": "at", "token_type": "Bearer", "expires_in": 600, "id_token": id_token}
        )

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def provider() -> Iterator[tuple[str, list[dict[str, list[str]]]]]:
    """(the provider's base URL, the authorize requests it got) while it runs."""
    from joserfc.jwk import RSAKey  # (Authlib's own JOSE library)

    key = RSAKey.generate_key(2048, parameters={"kid": "test-key"}, private=True)
    handler = type("Provider", (_Provider,), {"key": key, "authorized": [], "codes": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler.authorized
    finally:
        server.shutdown()
        server.server_close()
