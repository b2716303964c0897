"""The ClickHouse side of the store seam (tailscope.store.clickhouse, .engine, .errors): parameter
binding, URL -> engine, and one clear StoreError for each way a ClickHouse store can be wrong.

A real ClickHouse server cannot run here: the HTTP path is tested against a closed port
(unreachable), a small HTTP server that answers as ClickHouse does when it refuses a password, and a
recording stand-in for clickhouse-connect's client (what is sent). chdb runs for real."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tailscope import sql
from tailscope.store.clickhouse.binding import bind_value, named_params
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.clickhouse.schema import schema_problem
from tailscope.store.duckdb.store import DuckDBStore as Store
from tailscope.store.engine import open_store
from tailscope.store.errors import (
    QueryTimeoutError,
    SchemaMismatchError,
    StoreAuthError,
    StoreUnreachableError,
    TableMissingError,
    classify,
)
from tailscope.store.url import parse_store_url

HOSTILE = "x'); DROP TABLE otel_traces; --\t\\n\n"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "\\N"),
        (True, "true"),
        (False, "false"),
        (42, "42"),
        (-7, "-7"),
        (0.1, "0.1"),
        (float("inf"), "inf"),
        ("plain", "plain"),
        ("tab\there", "tab\\there"),
        ("back\\slash", "back\\\\slash"),
        ("line\nbreak", "line\\nbreak"),
        ("it's", "it's"),  # top level: no quotes, so a quote needs no escape
        (["a", "b'c"], "['a','b\\'c']"),
        ([1, 2, None], "[1,2,NULL]"),
        ({"k": "v"}, "{'k':'v'}"),
        (datetime(2024, 1, 2, 3, 4, 5, 678901), "2024-01-02 03:04:05.678901000"),
    ],
)
def test_bind_value_writes_clickhouse_parameter_text(value: Any, text: str) -> None:
    assert bind_value(value) == text


def test_bind_value_refuses_what_it_cannot_write() -> None:
    with pytest.raises(TypeError, match="cannot bind a object"):
        bind_value(object())


def test_list_params_bind_to_numbered_names() -> None:
    assert named_params(["a", 2]) == {"p1": "a", "p2": 2}
    assert named_params({"run": "a"}) == {"run": "a"}
    assert named_params(None) == {}


@pytest.mark.parametrize(
    ("url", "engine", "kind"),
    [
        ("runs/a.duckdb", "duckdb", Store),
        ("duckdb:///tmp/a.duckdb", "duckdb", Store),
        ("chdb:///tmp/folder", "chdb", ClickHouseStore),
        ("clickhouse://u:p@example.org:8123/traces", "clickhouse", ClickHouseStore),
        ("clickhouses://example.org/traces", "clickhouse", ClickHouseStore),
    ],
)
def test_url_chooses_the_engine(url: str, engine: str, kind: type) -> None:
    store = open_store(url)  # opens nothing
    assert isinstance(store, kind)
    if isinstance(store, ClickHouseStore):
        assert store.location.engine == engine


def test_sql_load_picks_the_dialects_file_and_falls_back() -> None:
    assert "system.columns" in sql.load("otel_traces_columns", dialect="clickhouse")
    # no ClickHouse file (a DuckDB store migration): the DuckDB text
    assert sql.load("migrate_v1_to_v2", dialect="clickhouse") == sql.load("migrate_v1_to_v2")
    with pytest.raises(ValueError, match="unknown SQL dialect"):
        sql.load("run_setup", dialect="sqlite")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (
            "Code: 159. DB::Exception: Timeout exceeded: elapsed 1002 ms. (TIMEOUT_EXCEEDED)",
            QueryTimeoutError,
        ),
        ("Code: 516. DB::Exception: default: Authentication failed", StoreAuthError),
        ("Code: 60. DB::Exception: Unknown table expression identifier 'otel_traces'", TableMissingError),
        ("Failed to establish a new connection: [Errno 111] Connection refused", StoreUnreachableError),
        ("Code: 62. DB::Exception: Syntax error", None),
    ],
)
def test_classify_maps_clickhouse_codes(message: str, kind: type | None) -> None:
    assert classify(message) is kind


EXPORTER = {
    "Timestamp": "DateTime64(9)",
    "TraceId": "String",
    "SpanId": "String",
    "ParentSpanId": "String",
    "SpanName": "LowCardinality(String)",
    "SpanKind": "LowCardinality(String)",
    "ServiceName": "LowCardinality(String)",
    "ResourceAttributes": "Map(LowCardinality(String), String)",
    "SpanAttributes": "Map(LowCardinality(String), String)",
    "Duration": "UInt64",
    "StatusCode": "LowCardinality(String)",
    "StatusMessage": "String",
    "Events.Timestamp": "Array(DateTime64(9))",
    "Events.Name": "Array(LowCardinality(String))",
    "Events.Attributes": "Array(Map(LowCardinality(String), String))",
}


def test_schema_problem_names_the_first_wrong_column() -> None:
    assert schema_problem(EXPORTER) is None
    assert schema_problem({**EXPORTER, "SpanAttributes": "String"}) == (
        "column SpanAttributes is String, expected Map(LowCardinality(String), String) or Map(String, String)"
    )
    missing = {k: v for k, v in EXPORTER.items() if k != "Duration"}
    assert schema_problem(missing) == "column Duration is missing"
    # the exporter's JSON-typed attributes (its newer `json` option) are another schema tailscope
    # does not read yet: said so by name, not met with SQL errors later
    assert schema_problem({**EXPORTER, "ResourceAttributes": "JSON"}) == (
        "column ResourceAttributes is JSON, expected "
        "Map(LowCardinality(String), String) or Map(String, String)"
    )
    assert schema_problem({**EXPORTER, "Timestamp": "DateTime64(6)"}) == (
        "column Timestamp is DateTime64(6), expected DateTime64(9)"
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the with ends: nothing listens there


def test_unreachable_server_is_one_line() -> None:
    pytest.importorskip("clickhouse_connect", reason="clickhouse-connect not installed ([clickhouse] extra)")
    port = _closed_port()
    store = open_store(f"clickhouse://default:secret@127.0.0.1:{port}/default")
    with pytest.raises(StoreUnreachableError) as caught:
        store.query("SELECT 1")
    text = str(caught.value)
    assert "\n" not in text and "secret" not in text
    assert text.startswith(f"clickhouse://default:***@127.0.0.1:{port}/default: no ClickHouse server answers")


@pytest.fixture
def refusing_server() -> Iterator[int]:
    """An HTTP server answering every request as ClickHouse does a wrong password."""

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(403)
            self.send_header("X-ClickHouse-Exception-Code", "516")
            self.end_headers()
            self.wfile.write(
                b"Code: 516. DB::Exception: alice: Authentication failed: password is incorrect, or there "
                b"is no user with such name. (AUTHENTICATION_FAILED) (version 24.8.1.1)"
            )

        do_GET = do_POST

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port
    server.shutdown()
    server.server_close()


def test_auth_refused_is_one_line(refusing_server: int) -> None:
    pytest.importorskip("clickhouse_connect", reason="clickhouse-connect not installed ([clickhouse] extra)")
    store = open_store(f"clickhouse://alice:wrong@127.0.0.1:{refusing_server}/default")
    with pytest.raises(StoreAuthError, match="Authentication failed") as caught:
        store.query("SELECT 1")
    assert "\n" not in str(caught.value) and "wrong" not in str(caught.value)


class RecordingTransport:
    """Stands in for a server: records what the store sends, answers with a canned error or table."""

    def __init__(self, error: Exception | None = None) -> None:
        self.sent: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.error = error

    def query_arrow(self, statement: str, params: dict[str, Any], settings: dict[str, Any]) -> Any:
        import pyarrow as pa

        self.sent.append((statement, params, settings))
        if self.error is not None:
            raise self.error
        return pa.table({"n": [1]})

    def insert_arrow(self, table: str, data: Any) -> None:
        raise AssertionError("not used")

    def close(self) -> None:
        pass


def test_http_store_sends_parameters_by_name_under_the_time_limit() -> None:
    transport = RecordingTransport()
    store = ClickHouseStore(parse_store_url("clickhouse://h/db"), time_limit_s=7, transport=transport)
    result = store.query("SELECT {p1:String} = {p2:String}", [HOSTILE, "b"])
    assert result.rows == [(1,)]
    statement, params, settings = transport.sent[0]
    assert statement == "SELECT {p1:String} = {p2:String}"  # the value never enters the text
    assert params == {"p1": HOSTILE, "p2": "b"}
    assert settings == {"max_execution_time": 7}


def test_http_timeout_is_one_line() -> None:
    from clickhouse_connect.driver.exceptions import DatabaseError

    error = DatabaseError(
        "Received ClickHouse exception, code: 159, server response: Code: 159. DB::Exception: Timeout "
        "exceeded: elapsed 2.0 s, maximum: 2 s. (TIMEOUT_EXCEEDED) (version 24.8.1.1)"
    )
    store = ClickHouseStore(
        parse_store_url("clickhouse://h/db"), time_limit_s=2, transport=RecordingTransport(error)
    )
    with pytest.raises(QueryTimeoutError, match=r"over the time limit of 2 s \(max_execution_time\)"):
        store.query("SELECT 1")


# chdb, for real (one data folder per process at a time: each test closes its store)

chdb = pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")


@pytest.fixture
def chdb_store(tmp_path: Path) -> Iterator[ClickHouseStore]:
    store = open_store(f"chdb://{tmp_path / 'ch'}", time_limit_s=30)
    assert isinstance(store, ClickHouseStore)
    yield store
    store.close()


@pytest.mark.parametrize(
    ("clickhouse_type", "value"),
    [
        ("String", HOSTILE),
        ("String", "üñí 'quoted' \\"),
        ("Array(String)", ["a", "b'c", "d\\e", HOSTILE]),
        ("Int64", -(2**62)),
        ("Float64", 0.1),
        ("Nullable(String)", None),
        ("Bool", True),
        ("DateTime64(9)", datetime(2024, 1, 2, 3, 4, 5, 678901)),
    ],
)
def test_chdb_binds_values_as_clickhouse_connect_does(
    chdb_store: ClickHouseStore, clickhouse_type: str, value: Any
) -> None:
    got = chdb_store.query(f"SELECT {{v:{clickhouse_type}}} AS v", {"v": value}).single_value()
    assert got == value  # timestamps come back as naive UTC datetimes, as DuckDB gives them
    binding = pytest.importorskip("clickhouse_connect.driver.binding")
    if not isinstance(value, datetime):  # clickhouse-connect writes datetimes in the server's zone
        _, theirs = binding.bind_query(f"SELECT {{v:{clickhouse_type}}}", {"v": value})
        session = chdb_store.transport._session  # type: ignore[attr-defined]
        text = f"SELECT {{v:{clickhouse_type}}} AS v"
        parsed_theirs = session.query(text, "CSV", params={"v": theirs["param_v"]}).data()
        parsed_ours = session.query(text, "CSV", params={"v": bind_value(value)}).data()
        assert parsed_ours == parsed_theirs


def test_chdb_missing_table_then_wrong_schema(chdb_store: ClickHouseStore) -> None:
    with pytest.raises(TableMissingError, match="no table otel_traces"):
        chdb_store.check()
    chdb_store.query("CREATE TABLE otel_traces (Timestamp DateTime64(9), TraceId String) ENGINE = Memory")
    with pytest.raises(SchemaMismatchError, match="column SpanId is missing"):
        chdb_store.check()
    chdb_store.query("DROP TABLE otel_traces")
    chdb_store.create_tables()
    chdb_store.check()  # the exporter's table as tailscope creates it passes


def test_chdb_query_over_its_time_limit(tmp_path: Path) -> None:
    store = open_store(f"chdb://{tmp_path / 'ch'}", time_limit_s=0.3)
    try:
        with pytest.raises(QueryTimeoutError, match=r"time limit of 0.3 s"):
            store.query("SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) = 0")
        # chdb hands a failed query's partial output to the next query unless it is taken first
        assert store.query("SELECT 42 AS answer").rows == [(42,)]
    finally:
        store.close()


def test_chdb_folder_locked_by_another_process(chdb_store: ClickHouseStore, tmp_path: Path) -> None:
    chdb_store.query("SELECT 1")  # this process now holds the folder
    url = f"chdb://{tmp_path / 'ch'}"
    code = (
        "import sys\n"
        "from tailscope.store.engine import open_store\n"
        "from tailscope.store.errors import StoreLockedError\n"
        "try:\n"
        f"    open_store({url!r}).query('SELECT 1')\n"
        "except StoreLockedError as error:\n"
        "    print(error)\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == f"{url}: the folder is in use by another process (chdb allows one)"


def test_clickhouse_filter_and_rules_carry_values_only_as_parameters() -> None:
    from tailscope.analysis.types import Filter, StageRule
    from tailscope.store.clickhouse.statements import filter_where as filter_where_clickhouse
    from tailscope.store.clickhouse.statements import filtered, stage_case

    where, params = filter_where_clickhouse(Filter(run=HOSTILE, service="s", start=datetime(2024, 1, 1)))
    assert where == (
        "RunLabel = {f_run:String} AND ServiceName = {f_service:String} "
        "AND Timestamp >= {f_start:DateTime64(9, 'UTC')}"
    )
    assert params == {"f_run": HOSTILE, "f_service": "s", "f_start": datetime(2024, 1, 1)}
    text, params = filtered("waterfall", Filter(run=HOSTILE), 1.0, 2.0, 3.0, 4.0, True)
    assert HOSTILE not in text and params["f_run"] == HOSTILE and params["p5"] is True
    rules = [
        StageRule(position=1, stage="queue", span_kind="Server", name_regex=HOSTILE, attribute_regex=None),
        StageRule(position=2, stage="downstream", span_kind=None, name_regex=None, attribute_regex="^db\\."),
    ]
    names, case, rule_params = stage_case(rules)
    assert names == ", match(SpanName, concat('(?i)', {nr1:String})) AS nh1"
    assert case == (
        "CASE WHEN SpanKind = {rk1:String} AND t.nh1 THEN 1 "
        "WHEN match(AttrLines, concat('(?mi)', {ra2:String})) THEN 2 END"
    )
    assert rule_params == {"rk1": "Server", "nr1": HOSTILE, "ra2": "^db\\."}


def test_insert_statements_quote_their_identifiers_and_refuse_odd_ones() -> None:
    from tailscope.store.clickhouse.binding import insert_statement

    assert insert_statement("otel_traces", ["Timestamp", "Events.Name"]) == (
        "INSERT INTO `otel_traces` (`Timestamp`, `Events.Name`)"
    )
    in_place = insert_statement("t", ["a"], "Python(rows)")
    assert in_place == "INSERT INTO `t` (`a`) SELECT `a` FROM Python(rows)"
    for odd in ("a`; DROP TABLE t; --", "a\\`", ""):
        with pytest.raises(ValueError, match="not a plain identifier"):
            insert_statement("t", [odd])
