"""`tailscope collect` beyond loopback: bearer token (--token-file), TLS (--tls-cert/--tls-key), and
the refusal to listen on a non-loopback address without a token (issue 30)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
from receiver_support import Collector, json_request, proto_request, spans_of

from ingest.receiver import auth
from tailscope.cli.main import main
from tailscope.store.duckdb.connection import connect_reader

TOKEN = "s3cret-token-for-the-tests-0123456789"


def stored(db: Path, run: str) -> int:
    with connect_reader(db) as conn:
        return conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = ?", [run]).fetchone()[0]


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, made here with the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (needed to make a test certificate)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, token_file: Path, certificate: tuple[Path, Path]
) -> Collector:
    """One collector with a token and TLS, listening on every address (allowed: it has a token)."""
    db = tmp_path_factory.mktemp("secured") / "store.duckdb"
    collector = Collector(
        db, "live", "--host", "0.0.0.0", "--token-file", str(token_file),
        "--tls-cert", str(certificate[0]), "--tls-key", str(certificate[1]),
    )  # fmt: skip
    yield collector
    collector.stop()


def https(secured: Collector, certificate: tuple[Path, Path]) -> str:
    return secured.url.replace("0.0.0.0", "127.0.0.1")


def client(certificate: tuple[Path, Path]) -> httpx.Client:
    return httpx.Client(verify=ssl.create_default_context(cafile=str(certificate[0])), timeout=30)


def test_requests_without_the_token_get_401_and_store_nothing_over_tls(
    secured: Collector, certificate: tuple[Path, Path]
) -> None:
    body = json_request("svc", spans_of(1, 3))
    url = https(secured, certificate)
    assert url.startswith("https://")
    with client(certificate) as http:
        for headers in ({}, {"authorization": "Bearer wrong-token"}, {"authorization": f"Basic {TOKEN}"}):
            response = http.post(url, content=body, headers={"content-type": "application/json", **headers})
            assert response.status_code == 401, headers
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert "bearer token" in response.json()["message"]
        answer = http.post(
            url,
            content=body,
            headers={"content-type": "application/json", "authorization": f"bearer {TOKEN}"},
        )
        assert answer.status_code == 200
    with pytest.raises(httpx.HTTPError):  # plain HTTP to the TLS port gets no answer
        httpx.post(url.replace("https://", "http://"), content=body, timeout=10).raise_for_status()
    assert secured.stop() == -15
    assert stored(secured.db_path, "live") == 3


def test_the_otel_exporter_sends_the_token_from_otel_exporter_otlp_headers(
    tmp_path: Path, token_file: Path, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):  # (requests lets these win over the exporter's)
        monkeypatch.delenv(name, raising=False)
    db = tmp_path / "store.duckdb"
    collector = Collector(
        db,
        "sdk",
        "--token-file",
        str(token_file),
        "--tls-cert",
        str(certificate[0]),
        "--tls-key",
        str(certificate[1]),
    )
    try:
        for headers in ("", f"authorization=Bearer {TOKEN}"):  # as a user would export it
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", headers)
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(certificate[0]))
            exporter = OTLPSpanExporter(endpoint=collector.url, timeout=10)
            provider = TracerProvider(resource=Resource.create({"service.name": "authed"}))
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            with provider.get_tracer("t").start_as_current_span(f"with-{bool(headers)}"):
                pass
            provider.shutdown()
        assert collector.stop() == -15
    finally:
        collector.kill()
    with connect_reader(db) as conn:
        names = [row[0] for row in conn.execute("SELECT SpanName FROM otel_traces").fetchall()]
    assert names == ["with-True"], "only the exporter that sent the token may store spans"


def test_a_token_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = auth.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert auth.token_matches(b"abc", b"abc") and not auth.token_matches(b"abd", b"abc")
    assert calls == [(b"abc", b"abc"), (b"abd", b"abc")]
    assert not auth.token_matches(None, b"abc")
    assert auth.presented_token([(b"Authorization", b"Bearer  xyz ")]) == b"xyz"
    assert auth.presented_token([(b"authorization", b"Basic xyz")]) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--host", "0.0.0.0"], "refusing to listen on 0.0.0.0 without --token-file"),
        (["--host", "::"], "refusing to listen on :: without --token-file"),
        (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
        (["--token-file", "short"], "must be at least 16 characters"),
        (["--token-file", "missing"], "cannot read the bearer token"),
        (["--tls-cert", "short", "--tls-key", "short"], "cannot be used"),
    ],
)
def test_unsafe_or_unusable_settings_are_refused_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "short").write_text("abc\n")
    db = tmp_path / "store.duckdb"
    assert main(["collect", "--db", str(db), "--port", "0", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not db.exists(), "nothing is opened before the settings are checked"


def test_insecure_listens_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    collector = Collector(tmp_path / "store.duckdb", "open", "--host", "0.0.0.0", "--insecure")
    try:
        url = collector.url.replace("0.0.0.0", "127.0.0.1")
        body = proto_request("svc", spans_of(2, 2))
        response = httpx.post(
            url, content=body, headers={"content-type": "application/x-protobuf"}, timeout=30
        )
        assert response.status_code == 200
        assert "anyone who can reach this port can write" in collector.output()
        assert collector.stop() == -15
    finally:
        collector.kill()
