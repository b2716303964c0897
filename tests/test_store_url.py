"""Store URLs (tailscope.store.url): every accepted form, the refusals, the password never shown,
and which of --store / $TAILSCOPE_STORE / --db / $TAILSCOPE_DB / the default wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.store.url import StoreLocation, parse_store_url, resolve_store


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("tailscope.duckdb", "tailscope.duckdb"),
        ("./runs/a.duckdb", "runs/a.duckdb"),
        ("/abs/a.duckdb", "/abs/a.duckdb"),
        ("odd:name.duckdb", "odd:name.duckdb"),  # ':' is legal in a file name
        ("duckdb:///abs/a.duckdb", "/abs/a.duckdb"),
        ("duckdb://rel/a.duckdb", "rel/a.duckdb"),
    ],
)
def test_duckdb_forms(text: str, path: str) -> None:
    location = parse_store_url(text)
    assert location.engine == "duckdb"
    assert location.path == Path(path)


def test_chdb_forms() -> None:
    assert parse_store_url("chdb:///var/lib/ts") == StoreLocation(engine="chdb", path=Path("/var/lib/ts"))
    assert parse_store_url("chdb://data/ts").path == Path("data/ts")
    assert parse_store_url("chdb:///var/lib/ts").url == "chdb:///var/lib/ts"
    assert parse_store_url("chdb://data/ts").url == "chdb://data/ts"


def test_clickhouse_full() -> None:
    location = parse_store_url("clickhouse://alice:s3cret@ch.example:9000/otel")
    assert (location.engine, location.host, location.port) == ("clickhouse", "ch.example", 9000)
    assert (location.user, location.password, location.database, location.secure) == (
        "alice",
        "s3cret",
        "otel",
        False,
    )


def test_clickhouse_defaults() -> None:
    location = parse_store_url("clickhouse://ch.example")
    assert (location.user, location.password, location.port, location.database) == (
        "default",
        "",
        8123,
        "default",
    )
    assert parse_store_url("clickhouse://ch.example/").database == "default"


@pytest.mark.parametrize(
    ("text", "port"),
    [
        ("clickhouses://u:p@ch.example/otel", 8443),
        ("clickhouse://u:p@ch.example/otel?secure=1", 8443),
        ("clickhouse://u:p@ch.example/otel?secure=true", 8443),
        ("clickhouses://u:p@ch.example:9440/otel", 9440),
    ],
)
def test_clickhouse_secure(text: str, port: int) -> None:
    location = parse_store_url(text)
    assert location.secure is True
    assert location.port == port
    assert location.url.startswith("clickhouses://")


def test_clickhouse_secure_off_and_percent_decoding() -> None:
    location = parse_store_url("clickhouse://us%40er:p%40ss%3Aword@[::1]:8123/otel?secure=0")
    assert (location.user, location.password, location.host, location.secure) == (
        "us@er",
        "p@ss:word",
        "::1",
        False,
    )
    assert location.url == "clickhouse://us%40er:***@[::1]:8123/otel"


def test_password_never_shown() -> None:
    location = parse_store_url("clickhouse://alice:hunter2@ch.example/otel")
    for shown in (repr(location), str(location), location.url, f"{location}"):
        assert "hunter2" not in shown
    assert str(location) == "clickhouse://alice:***@ch.example:8123/otel"
    assert (
        parse_store_url("clickhouse://alice@ch.example/otel").url == "clickhouse://alice@ch.example:8123/otel"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("postgres://u:p@h/db", "unknown engine 'postgres'"),
        ("chdb:/var/lib/ts", "write chdb://"),
        ("clickhouse:ch.example", "write clickhouse://"),
        ("duckdb://", "no path"),
        ("chdb:///", "no path"),
        ("chdb:///x?threads=2", "no ?query"),
        ("clickhouse:///otel", "no host"),
        ("clickhouse://h:99999/otel", "port"),
        ("clickhouse://h:0/otel", "port"),
        ("clickhouse://h:abc/otel", "port"),
        ("clickhouse://h/otel/extra", "not a plain name"),
        ("clickhouse://h/otel;drop", "not a plain name"),
        ("clickhouse://h/otel?compress=1", "unknown option 'compress'"),
        ("clickhouse://h/otel?secure=maybe", "secure='maybe'"),
        ("clickhouses://h/otel?secure=0", "contradicts"),
        ("clickhouse://h/otel#x", "#fragment"),
    ],
)
def test_refusals_are_one_line(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_store_url(text)
    message = str(caught.value)
    assert fragment in message
    assert "\n" not in message


def test_refusal_hides_the_password() -> None:
    with pytest.raises(ValueError) as caught:
        parse_store_url("clickhouse://alice:hunter2@h:70000/otel")
    assert "hunter2" not in str(caught.value)
    assert "alice:***@h" in str(caught.value)


def test_resolution_order() -> None:
    env = {"TAILSCOPE_STORE": "chdb:///env/store", "TAILSCOPE_DB": "env.duckdb"}
    assert resolve_store("clickhouse://h/otel", "flag.duckdb", env).engine == "clickhouse"
    assert resolve_store(None, "flag.duckdb", env) == StoreLocation(engine="chdb", path=Path("/env/store"))
    assert resolve_store(None, "flag.duckdb", {"TAILSCOPE_DB": "env.duckdb"}).path == Path("flag.duckdb")
    assert resolve_store(None, None, {"TAILSCOPE_DB": "env.duckdb"}).path == Path("env.duckdb")
    assert resolve_store(None, None, {}) == StoreLocation(engine="duckdb", path=Path("tailscope.duckdb"))
    assert resolve_store("", "", {"TAILSCOPE_STORE": ""}).path == Path("tailscope.duckdb")


def test_resolution_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILSCOPE_STORE", "chdb:///from/env")
    assert resolve_store().path == Path("/from/env")
    monkeypatch.delenv("TAILSCOPE_STORE")
    monkeypatch.delenv("TAILSCOPE_DB", raising=False)
    assert resolve_store().path == Path("tailscope.duckdb")


def test_db_flag_takes_only_duckdb() -> None:
    assert resolve_store(None, "duckdb:///abs/x.duckdb", {}).path == Path("/abs/x.duckdb")
    with pytest.raises(ValueError, match="--db names a DuckDB file; give 'chdb:///x' with --store"):
        resolve_store(None, "chdb:///x", {})
    with pytest.raises(ValueError, match="TAILSCOPE_DB names a DuckDB file") as caught:
        resolve_store(None, None, {"TAILSCOPE_DB": "clickhouse://u:hunter2@h/otel"})
    assert "hunter2" not in str(caught.value)
