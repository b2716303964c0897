"""Every real-world export in the shared corpus goes through the real CLI into a fresh store.

The table below restates SOURCES.md (shared/fixtures/real/): each file yields exactly that many spans
and traces; the one file with ids that are neither hex nor base64 is rejected whole. A second group
of tests checks field-level facts per format against the stored rows.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS

from ingest.zipkin import shared_server_id
from tailscope.cli.main import main

# file under shared/fixtures/real → (spans, traces), as SOURCES.md gives them.
# fmt: off
CORPUS_COUNTS: dict[str, tuple[int, int]] = {
    "otlp_json/opentelemetry-proto__examples__trace.json": (1, 1),
    "otlp_json/opentelemetry-rust__opentelemetry-otlp__tests__integration_test__expected__traces.json": (2, 1),  # noqa: E501
    "otlp_json/opentelemetry-rust__opentelemetry-otlp__tests__integration_test__expected__serialized_traces.json": (2, 1),  # noqa: E501
    "otlp_json/jaeger__internal__storage__v2__memory__fixtures__otel_traces_01.json": (4, 2),
    "otlp_json/jaeger__internal__storage__integration__fixtures__traces__example_trace.json": (5, 1),
    "otlp_json/jaeger-ui__packages__jaeger-ui__src__utils__fixtures__otlp2jaeger-in-error.json": (1, 1),
    "protojson_variants/otlp2parquet__testdata__traces.jsonl": (19, 19),
    "otlp_protobuf/otlp2parquet__testdata__traces.pb": (19, 19),
    "jaeger_ui_json/jaeger__internal__uimodel__converter__v1__json__fixtures__ui_01.json": (5, 1),
    "jaeger_ui_json/jaeger-ui__packages__jaeger-ui__src__components__TracePage__TraceTimelineViewer__genaiTestTrace.json": (57, 1),  # noqa: E501
    "zipkin_v2_json/zipkin__zipkin-lens__testdata__yelp.json": (16, 1),
    "zipkin_v2_json/zipkin__zipkin-lens__testdata__messaging.json": (4, 1),
    "zipkin_v2_json/zipkin__zipkin-lens__testdata__skew.json": (4, 1),
    "zipkin_v2_json/opentelemetry-collector__translator__trace__zipkinv2__testdata__zipkin_v2_notimestamp.json": (1, 1),  # noqa: E501
    "otlp_jsonl/opentelemetry-specification__specification__protocol__file-exporter.md__traces-example.jsonl": (8, 1),  # noqa: E501
}
# fmt: on
# ml_serving/ (a real TorchServe benchmark's logs) is in SOURCES.md but not in manifest.json: the one
# trace-shaped log, and the two logs that are not traces (refused whole, one line, nothing stored).
ML_SERVING_COUNTS: dict[str, tuple[int, int]] = {
    "ml_serving/pytorch__serve__logs__model_metrics.log": (1100, 1100),
}
NOT_TRACES = (
    "ml_serving/pytorch__serve__logs__ts_metrics.log",
    "ml_serving/pytorch__serve__logs__access_log.log",
)
INVALID_IDS = "protojson_variants/otlp2parquet__testdata__invalid__trace_mixed_encoding.json"
GOOD_FILE = "otlp_protobuf/otlp2parquet__testdata__traces.pb"

UI_01 = "jaeger_ui_json/jaeger__internal__uimodel__converter__v1__json__fixtures__ui_01.json"
GENAI = next(name for name in CORPUS_COUNTS if "genaiTestTrace" in name)
SKEW = "zipkin_v2_json/zipkin__zipkin-lens__testdata__skew.json"
NO_TIMESTAMP = next(name for name in CORPUS_COUNTS if "notimestamp" in name)


@dataclass
class Ingested:
    """One corpus file loaded by `tailscope ingest --json` into a store of its own."""

    code: int
    summary: dict[str, Any] | None
    stderr: str
    db: Path

    def rows(self, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        return rows(self.db, query, params)

    def spans(self) -> list[dict[str, Any]]:
        """Every stored span as a dict; attributes, events and links parsed from their JSON text."""
        with duckdb.connect(str(self.db), read_only=True) as conn:
            cursor = conn.execute("SELECT * FROM otel_traces ORDER BY Timestamp, SpanId")
            names = [d[0] for d in cursor.description]
            spans = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        for span in spans:
            for name in ("ResourceAttributes", "SpanAttributes", "Events", "Links"):
                span[name] = json.loads(span[name])
        return spans


def run_cli(*args: str) -> tuple[int, dict[str, Any] | None, str]:
    """Run `tailscope ingest ... --json` in-process; (exit code, parsed summary, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["ingest", *args, "--json"])
    text = out.getvalue()
    return code, (json.loads(text) if text.strip() else None), err.getvalue()


def rows(db: Path, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute(query, params or []).fetchall()


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Ingested]:
    """Each corpus file ingested once per module (the CLI costs ~0.5 s a file), on first use."""
    if not CORPUS.is_dir():
        pytest.skip(f"real-world corpus not found at {CORPUS}")
    done: dict[str, Ingested] = {}

    def get(name: str) -> Ingested:
        if name not in done:
            db = tmp_path_factory.mktemp("corpus") / "store.duckdb"
            code, summary, err = run_cli(str(CORPUS / name), "--db", str(db), "--run", "corpus")
            done[name] = Ingested(code, summary, err, db)
        return done[name]

    return get


def test_the_table_covers_every_file_in_the_corpus(corpus_dir: Path) -> None:
    on_disk = {
        str(p.relative_to(corpus_dir))
        for p in corpus_dir.rglob("*")
        if p.is_file() and p.suffix not in (".md",)
    } - {"manifest.json"}
    assert on_disk == set(CORPUS_COUNTS) | set(ML_SERVING_COUNTS) | set(NOT_TRACES) | {INVALID_IDS}
    manifest = {
        entry["file"]: (entry["spans"], entry["traces"])
        for entry in json.loads((corpus_dir / "manifest.json").read_text())
    }
    assert {k: v for k, v in manifest.items() if k != INVALID_IDS} == CORPUS_COUNTS


@pytest.mark.parametrize(
    ("name", "counts"), sorted({**CORPUS_COUNTS, **ML_SERVING_COUNTS}.items()), ids=lambda v: str(v)[:60]
)
def test_each_file_yields_the_documented_span_and_trace_counts(
    name: str, counts: tuple[int, int], ingested: Callable[[str], Ingested]
) -> None:
    result = ingested(name)
    assert result.code == 0, result.stderr
    assert result.summary is not None
    assert (result.summary["spans"], result.summary["traces"], result.summary["rejected"]) == (*counts, 0)
    assert result.rows("SELECT count(*), count(DISTINCT TraceId) FROM otel_traces") == [counts]
    assert result.rows("SELECT SpanCount, TraceCount FROM runs WHERE RunLabel = 'corpus'") == [counts]
    malformed_ids = result.rows(
        "SELECT count(*) FROM otel_traces WHERE NOT regexp_full_match(TraceId, '[0-9a-f]{32}') "
        "OR NOT regexp_full_match(SpanId, '[0-9a-f]{16}') "
        "OR NOT regexp_full_match(ParentSpanId, '([0-9a-f]{16})?')"
    )
    assert malformed_ids == [(0,)], "ids must be lowercase hex, padded to 32 / 16"


def test_ingesting_a_file_twice_adds_nothing(ingested: Callable[[str], Ingested]) -> None:
    first = ingested(UI_01)
    code, summary, _ = run_cli(str(CORPUS / UI_01), "--db", str(first.db), "--run", "corpus")
    assert code == 0
    assert summary is not None and summary["spans"] == 0 and summary["duplicates"] == 5
    assert first.rows("SELECT count(*) FROM otel_traces") == [(5,)]


def test_the_file_with_invalid_ids_is_rejected_and_the_store_is_unchanged(
    corpus_dir: Path, db_path: Path
) -> None:
    code, _, _ = run_cli(str(corpus_dir / GOOD_FILE), "--db", str(db_path), "--run", "good")
    assert code == 0
    checksum = "SELECT count(*), sum(hash(SpanId, Timestamp, SpanAttributes::VARCHAR)) FROM otel_traces"
    before, runs_before = rows(db_path, checksum), rows(db_path, "SELECT * FROM runs")

    code, summary, err = run_cli(str(corpus_dir / INVALID_IDS), "--db", str(db_path), "--run", "bad")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(str(corpus_dir / INVALID_IDS) + ": ")
    assert "'zzz'" in lines[0]
    assert summary is not None and summary["files_failed"] == 1 and summary["spans"] == 0
    assert rows(db_path, checksum) == before
    assert rows(db_path, "SELECT * FROM runs") == runs_before


# ------------------------------------------------------------------------------ field-level facts


def test_otlp_uppercase_hex_ids_are_lowered(ingested: Callable[[str], Ingested]) -> None:
    (span,) = ingested("otlp_json/opentelemetry-proto__examples__trace.json").spans()
    assert (span["TraceId"], span["SpanId"], span["ParentSpanId"]) == (
        "5b8efff798038103d269b633813fc60c",
        "eee19b7ec3c1b174",
        "eee19b7ec3c1b173",
    )
    assert (span["ServiceName"], span["SpanKind"], span["ScopeName"], span["ScopeVersion"]) == (
        "my.service",
        "Server",
        "my.library",
        "1.0.0",
    )
    assert span["Duration"] == 1_000_000_000


def test_otlp_links_trace_state_and_error_status(ingested: Callable[[str], Ingested]) -> None:
    spans = ingested("otlp_json/jaeger__internal__storage__v2__memory__fixtures__otel_traces_01.json").spans()
    assert "Error" in {s["StatusCode"] for s in spans}
    link_types = [dict(link["Attributes"]).get("opentracing.ref_type") for s in spans for link in s["Links"]]
    assert "follows_from" in link_types
    assert any(s["TraceState"] for s in spans)


def test_otlp_file_exporter_example_keeps_status_message_and_events(
    ingested: Callable[[str], Ingested],
) -> None:
    spans = ingested(next(n for n in CORPUS_COUNTS if n.startswith("otlp_jsonl/"))).spans()
    errored = [s for s in spans if s["StatusCode"] == "Error"]
    assert errored and all(s["StatusMessage"] == "status-cancelled" for s in errored)
    assert "event-with-attr" in {event["Name"] for s in spans for event in s["Events"]}
    assert len({s["SpanId"] for s in spans}) == 8, "empty span ids get distinct synthetic ids"


def test_jaeger_ids_times_parents_links_and_status(ingested: Callable[[str], Ingested]) -> None:
    result = ingested(UI_01)
    spans = result.spans()
    by_name = {s["SpanName"]: s for s in spans}
    assert {s["TraceId"] for s in spans} == {"00000000000000000000000000000001"}, "64-bit ids padded to 32"
    assert result.rows("SELECT DISTINCT epoch_ns(Timestamp) FROM otel_traces") == [
        (1_485_467_191_639_875_000,)
    ]
    assert by_name["preserveParentID-test"]["Duration"] == 4_000, "µs → ns"
    assert by_name["preserveParentID-test"]["ParentSpanId"] == "0000000000000004"
    reference = by_name["reference-test"]
    assert reference["ParentSpanId"] == "0000000000000002", "the CHILD_OF reference in the same trace"
    assert [(link["SpanId"], dict(link["Attributes"])) for link in reference["Links"]] == [
        ("00000000000000ff", {"opentracing.ref_type": "child_of"}),
        ("0000000000000002", {"opentracing.ref_type": "follows_from"}),
    ]
    assert [e["Name"] for e in by_name["test-general-conversion"]["Events"]] == ["some-event", "log"]
    (errored,) = [s for s in spans if s["StatusCode"] == "Error"]
    assert (errored["ServiceName"], errored["SpanId"]) == ("service-x", "0000000000000002")
    attributes = dict(errored["SpanAttributes"])
    assert attributes["javascript_limit"] == "9223372036854775222", "int64 > 2^53 arrives as a string"
    assert (attributes["temperature"], attributes["blob"], attributes["peer.ipv4"]) == (
        "72.5",
        "AAAwOQ==",
        "23456",
    )
    assert {s["ServiceName"] for s in spans} == {"service-x", "service-y"}


def test_jaeger_genai_trace_services_and_kinds(ingested: Callable[[str], Ingested]) -> None:
    spans = ingested(GENAI).spans()
    assert len({s["ServiceName"] for s in spans}) == 10
    roots = [s for s in spans if s["ParentSpanId"] == ""]
    assert [(r["SpanName"], r["SpanKind"]) for r in roots] == [("POST /api/graphql", "Server")]
    assert {s["TraceId"] for s in spans} == {"4a1b2c3d4e5f60718293a4b5c6d7e8f9"}
    assert all("span.kind" not in dict(s["SpanAttributes"]) for s in spans)


def test_zipkin_shared_server_half_is_its_own_span(ingested: Callable[[str], Ingested]) -> None:
    by_id = {s["SpanId"]: s for s in ingested(SKEW).spans()}
    server_id = shared_server_id("00000000000000001e223ff1f80f1c69", "74280ae0c10d8062")
    client = by_id["74280ae0c10d8062"]
    server = by_id[server_id]
    assert (client["SpanKind"], client["ServiceName"], client["ParentSpanId"]) == (
        "Client",
        "servicea",
        "bf396325699c84bf",
    )
    assert (server["SpanKind"], server["ServiceName"], server["ParentSpanId"]) == (
        "Server",
        "serviceb",
        "74280ae0c10d8062",
    )
    assert by_id["43210ae0c10d1234"]["ParentSpanId"] == server_id, (
        "serviceb's child hangs under the server half"
    )
    assert by_id["bf396325699c84bf"]["ParentSpanId"] == ""
    assert by_id["bf396325699c84bf"]["Duration"] == 99_411_000


def test_zipkin_span_without_timestamp_takes_its_extent_from_annotations(
    ingested: Callable[[str], Ingested],
) -> None:
    result = ingested(NO_TIMESTAMP)
    (span,) = result.spans()
    assert span["TraceId"] == "000000000000000013c3518297c3b59f"
    assert result.rows("SELECT epoch_ns(Timestamp) FROM otel_traces") == [(1_615_821_510_040_000_000,)]
    assert span["Duration"] == 1_000_000
    assert (span["ServiceName"], span["SpanKind"]) == ("baz", "Server")
    assert [e["Name"] for e in span["Events"]] == ["sr", "ss"]


def test_zipkin_messaging_kinds_and_128_bit_trace_id(ingested: Callable[[str], Ingested]) -> None:
    spans = ingested("zipkin_v2_json/zipkin__zipkin-lens__testdata__messaging.json").spans()
    assert {s["TraceId"] for s in spans} == {"5aab74dbb904746bb33447baae403ed6"}
    assert sorted(s["SpanKind"] for s in spans) == ["Consumer", "Producer", "Server", "Unspecified"]
    assert {s["ServiceName"] for s in spans} == {"frontend", "backend"}
    consumer = next(s for s in spans if s["SpanKind"] == "Consumer")
    assert dict(consumer["SpanAttributes"])["peer.service"] == "rabbitmq"


def test_zipkin_yelp_services_are_kept_as_given(ingested: Callable[[str], Ingested]) -> None:
    spans = ingested("zipkin_v2_json/zipkin__zipkin-lens__testdata__yelp.json").spans()
    assert "mobile_api" in {s["ServiceName"] for s in spans}
    assert {s["TraceId"] for s in spans} == {"0000000000000000a03ee8fff1dcd9b9"}


@pytest.mark.parametrize("name", NOT_TRACES)
def test_torchserve_logs_that_are_not_traces_are_refused_in_one_line(
    name: str, corpus_dir: Path, db_path: Path
) -> None:
    code, _, _ = run_cli(str(corpus_dir / GOOD_FILE), "--db", str(db_path), "--run", "good")
    assert code == 0
    before = rows(db_path, "SELECT count(*) FROM otel_traces")

    code, summary, err = run_cli(str(corpus_dir / name), "--db", str(db_path), "--run", "logs")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(str(corpus_dir / name) + ": "), err
    assert "not a recognised trace format: a TorchServe metrics or access log" in lines[0]
    assert summary is not None and summary["files_failed"] == 1 and summary["spans"] == 0
    assert rows(db_path, "SELECT count(*) FROM otel_traces") == before
    assert rows(db_path, "SELECT count(*) FROM runs WHERE RunLabel = 'logs'") == [(0,)]
