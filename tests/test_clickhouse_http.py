"""The HTTP path end to end: tailscope's HttpTransport through clickhouse-connect against a stand-in
server (tests/chdb_http_server.py: clickhouse-connect's requests answered by chdb). The same commands
give the same answers as on DuckDB; server-side parameters, temporary tables (the derive's, the
ingest's staging) and inserts travel as they would to a real server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tailscope import sql
from tailscope.cli.main import main
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.engine import open_store
from tailscope.store.errors import QueryTimeoutError
from tailscope.store.url import parse_store_url

pytest.importorskip("chdb", reason="chdb not installed (the [clickhouse] extra)")
pytest.importorskip("clickhouse_connect", reason="clickhouse-connect not installed (the [clickhouse] extra)")
simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
from chdb_http_server import chdb_http_server  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("http")
    with chdb_http_server(folder / "chdb") as port:
        yield f"clickhouse://default@127.0.0.1:{port}/default"


@pytest.fixture(scope="module")
def loaded(server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("http-traces")
    trace_file = folder / "run.jsonl"
    simulate_api.simulate_to_file(trace_file, "slow-downstream", 400, 3)
    urls = {"duckdb": str(folder / "s.duckdb"), "http": server}
    for url in urls.values():
        assert main(["ingest", str(trace_file), "--store", url, "--run", "r", "--json"]) == 0
    return urls


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_waterfall_over_http_is_the_same(loaded: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    results = {
        k: _json(capsys, ["waterfall", "--store", u, "--run", "r", "--json"]) for k, u in loaded.items()
    }
    duck, http = results["duckdb"], results["http"]
    assert http["requests_total"] == duck["requests_total"] == 400
    assert (http["band_low_ms"], http["band_high_ms"]) == (duck["band_low_ms"], duck["band_high_ms"])
    for got, expected in zip(http["stages"], duck["stages"], strict=True):
        assert (got["p50_ms"], got["p99_ms"], got["p999_ms"]) == (
            expected["p50_ms"],
            expected["p99_ms"],
            expected["p999_ms"],
        )


def test_diagnose_and_select_over_http(loaded: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    found = {k: _json(capsys, ["diagnose", "--store", u, "--run", "r", "--json"]) for k, u in loaded.items()}
    assert [f["pattern"] for f in found["http"]["findings"]] == [
        f["pattern"] for f in found["duckdb"]["findings"]
    ]
    capsys.readouterr()
    assert main(["select", "again", "--store", loaded["http"], "--where", "tailscope.run=r"]) == 0
    assert capsys.readouterr().out.startswith("run again: 5,200 spans, 400 requests (clickhouse://default@")


def test_time_limit_over_http(server: str) -> None:
    store = open_store(server, time_limit_s=0.3)
    with pytest.raises(QueryTimeoutError, match=r"over the time limit of 0.3 s"):
        store.query("SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) = 0")
    store.close()


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("Array(String)", ["a", "b'c", "d\\e"]),
        ("String", "x'); DROP TABLE otel_traces; --\t\\n"),
    ],
)
def test_parameters_round_trip_over_http(server: str, kind: str, value: object) -> None:
    store = open_store(server)
    got = store.query(f"SELECT {{v:{kind}}} AS v", {"v": value}).single_value()
    store.close()
    assert got == value


def test_maps_travel_as_two_arrays(server: str) -> None:
    # clickhouse-connect writes a dict parameter as JSON, which a server does not read as a Map
    store = open_store(server)
    with pytest.raises(TypeError, match="bind a map as two arrays"):
        store.query("SELECT {m:Map(String, String)}", {"m": {"a": "b"}})
    filters = {"service.name": "it's", "k\\": "v\t"}
    got = store.query(
        "SELECT mapFromArrays({k:Array(String)}, {v:Array(String)})",
        {"k": list(filters), "v": list(filters.values())},
    ).single_value()
    store.close()
    assert dict(got) == filters


class FakeClient:
    """Stands in for clickhouse-connect's client: records which call each statement took."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []

    def query_arrow(self, statement: str, parameters: Any, settings: Any, use_strings: bool) -> Any:
        import pyarrow as pa

        assert use_strings  # String columns as Arrow strings, as chdb gives them
        self.calls.append(("query_arrow", statement, parameters, settings))
        return pa.table({"x": ["a"]})

    def command(self, statement: str, parameters: Any, settings: Any) -> None:
        self.calls.append(("command", statement, parameters, settings))

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("overview", "query_arrow"),  # WITH ... SELECT
        ("run_selection", "query_arrow"),
        ("otel_traces_ddl", "command"),
        ("tailscope_requests_ddl", "command"),
        ("run_define", "command"),  # INSERT ... VALUES
        ("derive_delete_window", "command"),
        ("span_tree_1_spans", "command"),  # CREATE TEMPORARY TABLE ... AS WITH ... SELECT
        ("ingest_stage_move", "command"),  # INSERT ... SELECT
    ],
)
def test_http_sends_row_queries_for_arrow_and_the_rest_as_commands(name: str, call: str) -> None:
    from tailscope.store.clickhouse.transport import HttpTransport

    client = FakeClient()
    location = parse_store_url("clickhouse://h/db")
    store = ClickHouseStore(location, time_limit_s=5, transport=HttpTransport(location, client=client))
    store.query(sql.load(name, dialect="clickhouse"), {"run": "r"})
    assert [c[0] for c in client.calls] == [call]
    assert client.calls[0][2] == {"run": "r"} and client.calls[0][3] == {"max_execution_time": 5}
