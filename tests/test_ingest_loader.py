"""Loading files into the store: transactions, dedupe, the runs row, strict and --skip-bad, the CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest

from ingest import loader, parallel
from tailscope.cli.main import main
from tests.test_ingest_json import PARENT, SPAN, TRACE, request, span

SETUP = [
    {"key": "service.name", "value": {"stringValue": "api"}},
    {"key": "host.name", "value": {"stringValue": "gpu-1"}},
    {"key": "tailscope.dtype", "value": {"stringValue": "float16"}},
    {"key": "process.pid", "value": {"intValue": "12"}},
]


def write_lines(path: Path, *requests: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return path


def spans_in(db_path: Path, run: str) -> list[tuple]:
    with duckdb.connect(str(db_path), read_only=True) as conn:
        return conn.execute(
            "SELECT TraceId, SpanId, SpanName FROM otel_traces WHERE RunLabel = ? ORDER BY SpanId", [run]
        ).fetchall()


def run_row(db_path: Path, run: str) -> tuple:
    with duckdb.connect(str(db_path), read_only=True) as conn:
        return conn.execute(
            "SELECT SourceFiles, SpanCount, TraceCount, SetupAttributes FROM runs WHERE RunLabel = ?", [run]
        ).fetchall()[0]


def test_load_records_spans_and_the_run(tmp_path: Path, db_path: Path) -> None:
    path = write_lines(
        tmp_path / "a.jsonl", request(span(), span(spanId=PARENT, parentSpanId=""), resource=SETUP)
    )
    summary = loader.load_paths([path], db_path, "r1")
    assert (summary.spans, summary.traces, summary.rejected, summary.failed) == (2, 1, 0, [])
    assert spans_in(db_path, "r1") == [(TRACE, PARENT, "model.forward"), (TRACE, SPAN, "model.forward")]
    files, span_count, trace_count, setup = run_row(db_path, "r1")
    assert (files, span_count, trace_count) == ([str(path)], 2, 1)
    assert setup == {"host.name": "gpu-1", "tailscope.dtype": "float16"}


def test_reingesting_adds_nothing_and_duplicates_in_a_file_are_dropped(tmp_path: Path, db_path: Path) -> None:
    path = write_lines(tmp_path / "a.jsonl", request(span()), request(span(), span(spanId=PARENT)))
    first = loader.load_paths([path], db_path, "r")
    again = loader.load_paths([path], db_path, "r")
    assert (first.spans, first.files[0].duplicates) == (2, 1)
    assert (again.spans, again.files[0].duplicates) == (0, 3)
    assert len(spans_in(db_path, "r")) == 2 and run_row(db_path, "r")[1] == 2
    assert loader.load_paths([path], db_path, "other").spans == 2  # dedupe is per run


def test_strict_mode_rejects_the_whole_file_and_leaves_the_store_unchanged(
    tmp_path: Path, db_path: Path
) -> None:
    good = write_lines(tmp_path / "1.jsonl", request(span()))
    bad = write_lines(tmp_path / "2.jsonl", request(span(spanId=PARENT)), request(span(traceId="zzz")))
    summary = loader.load_paths([good, bad], db_path, "r")
    assert summary.spans == 1 and [f.path for f in summary.failed] == [str(bad)]
    assert summary.failed[0].error == f"{bad}: line 2: resourceSpans[0].scopeSpans[0].spans[0]: " + (
        "traceId 'zzz' is neither 32-char hex nor base64 of 16 bytes"
    )
    assert spans_in(db_path, "r") == [(TRACE, SPAN, "model.forward")]
    assert run_row(db_path, "r")[0] == [str(good)]


def test_skip_bad_loads_good_records_and_groups_reasons(tmp_path: Path, db_path: Path) -> None:
    path = write_lines(
        tmp_path / "a.jsonl",
        request(span(), span(spanId=PARENT, endTimeUnixNano="1")),
        request(span(spanId="1111111111111111", endTimeUnixNano="2")),
    )
    with path.open("a") as f:
        f.write("{broken\n")
    summary = loader.load_paths([path], db_path, "r", skip_bad=True)
    assert (summary.spans, summary.rejected) == (1, 3)
    reasons = summary.reasons
    assert sum(reasons.values()) == 3 and len(reasons) == 2
    assert any("ends before it starts" in reason for reason in reasons)


def test_folders_expand_sorted_recursive_and_formats_mix(tmp_path: Path, db_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    write_lines(tmp_path / "d" / "b.json", request(span()))
    data = json.dumps(request(span(spanId=PARENT))).encode()
    (tmp_path / "d" / "sub" / "a.gz").write_bytes(gzip.compress(data))
    (tmp_path / "d" / ".hidden").write_text("ignored")
    summary = loader.load_paths([tmp_path / "d"], db_path, None)
    assert summary.run_label == "d"
    assert [Path(f.path).name for f in summary.files] == ["b.json", "a.gz"]
    assert summary.files[1].compression == "gzip" and summary.spans == 2


@pytest.mark.parametrize(
    ("name", "label"), [("prod.jsonl", "prod"), ("x.jsonl.gz", "x"), ("traces.pb.zst", "traces")]
)
def test_default_run_label_is_the_file_stem(name: str, label: str) -> None:
    assert loader.default_run_label([name]) == label


def _spy(method, calls: list):
    def spy(self, fmt, *args):
        calls.append(fmt)
        return method(self, fmt, *args)

    return spy


def test_decode_pool_gives_the_same_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    requests = [
        request(*(span(spanId=f"{i:08x}{j:08x}", traceId=f"{i:032x}") for j in range(20))) for i in range(60)
    ]
    requests.append(request(span(spanId="ABCDEF0123456789")))  # goes through the reference decoder
    path = write_lines(tmp_path / "big.jsonl", *requests)
    serial = loader.load_paths([path], tmp_path / "serial.duckdb", "r")
    monkeypatch.setattr(loader, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(parallel.otlp_fast, "BLOCK_BYTES", 4096)
    used = []
    monkeypatch.setattr(parallel.DecodePool, "decode", _spy(parallel.DecodePool.decode, used))
    pooled = loader.load_paths([path], tmp_path / "pooled.duckdb", "r")
    assert used == ["otlp_json"], "the worker pool was not used"
    assert serial.spans == pooled.spans == 1201
    assert spans_in(tmp_path / "serial.duckdb", "r") == spans_in(tmp_path / "pooled.duckdb", "r")


def test_decode_pool_strict_error_rolls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_path: Path
) -> None:
    requests = [request(span(spanId=f"{i:016x}")) for i in range(200)] + [request(span(endTimeUnixNano="0"))]
    path = write_lines(tmp_path / "big.jsonl", *requests)
    monkeypatch.setattr(loader, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(parallel.otlp_fast, "BLOCK_BYTES", 2048)
    summary = loader.load_paths([path], db_path, "r")
    assert summary.failed and "line 201" in summary.failed[0].error and spans_in(db_path, "r") == []
    assert loader.load_paths([path], db_path, "r", skip_bad=True).spans == 200


def test_cli_strict_exit_code_and_one_line_error(
    tmp_path: Path, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write_lines(tmp_path / "bad.jsonl", request(span()), request(span(endTimeUnixNano="0")))
    assert main(["ingest", str(bad), "--db", str(db_path), "--run", "r"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"{bad}: line 2: resourceSpans[0].scopeSpans[0].spans[0]: "
        "span 'model.forward' ends before it starts (0 < 1544712660000000000)"
    ]


def test_cli_json_summary_and_default_label(
    tmp_path: Path, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_lines(tmp_path / "steady.jsonl", request(span()), request(span(traceId="", spanId="")))
    assert main(["ingest", str(path), "--db", str(db_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["run"], summary["files"], summary["spans"], summary["traces"]) == ("steady", 1, 2, 2)
    assert main(["ingest", str(path), "--db", str(db_path), "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run label: steady") and "0 spans" in out


def test_cli_missing_file_is_bad_input(
    tmp_path: Path, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ingest", str(tmp_path / "nope.jsonl"), "--db", str(db_path), "--run", "r"]) == 2
    assert "nope.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("folder", "spans", "traces"),
    [("otlp_json", 13, 6), ("otlp_jsonl", 8, 1), ("otlp_protobuf", 19, 19)],
)
def test_real_corpus_counts(corpus_dir: Path, db_path: Path, folder: str, spans: int, traces: int) -> None:
    summary = loader.load_paths([corpus_dir / folder], db_path, "real")
    assert (summary.spans, summary.traces, summary.failed) == (spans, traces, [])


def test_decode_pool_protobuf_matches_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_ingest_proto import message, prefixed

    payloads = [message(*(span(spanId=f"{i:08x}{j:08x}") for j in range(10))) for i in range(50)]
    path = tmp_path / "big.pb"
    path.write_bytes(prefixed(*payloads))
    serial = loader.load_paths([path], tmp_path / "serial.duckdb", "r")
    monkeypatch.setattr(loader, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(parallel.otlp_proto_fast, "BLOCK_BYTES", 2048)
    pooled = loader.load_paths([path], tmp_path / "pooled.duckdb", "r")
    assert serial.spans == pooled.spans == 500
    assert spans_in(tmp_path / "serial.duckdb", "r") == spans_in(tmp_path / "pooled.duckdb", "r")


@pytest.mark.parametrize("content", [b"", b"  \n\n", b"\xef\xbb\xbf"])
def test_empty_files_are_rejected_and_leave_no_run(tmp_path: Path, db_path: Path, content: bytes) -> None:
    path = tmp_path / "empty.json"
    path.write_bytes(content)
    summary = loader.load_paths([path], db_path, "r")
    assert summary.failed and "no trace data" in summary.failed[0].error
    with duckdb.connect(str(db_path), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]


def test_byte_order_mark_is_accepted(tmp_path: Path, db_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(request(span())).encode() + b"\n")
    assert loader.load_paths([path], db_path, "r").spans == 1


def test_every_insert_but_the_last_appends_whole_row_groups(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an INSERT that ends inside a row group leaves a partial group the commit rewrites
    from tailscope.store.duckdb import writer  # the DuckDB engine's writer does the INSERTs

    monkeypatch.setattr(writer, "INSERT_ROWS", 4)
    inserts: list[int] = []
    append = writer.append_batch
    monkeypatch.setattr(
        writer,
        "append_batch",
        lambda conn, run, table: inserts.append(table.num_rows) or append(conn, run, table),
    )
    path = write_lines(
        tmp_path / "t.jsonl",
        *(request(*(span(spanId=f"{i:08x}{j:08x}", name=f"s{j}") for j in range(3))) for i in range(1, 6)),
    )
    loader.load_paths([path], db_path, "r")
    assert sum(inserts) == 15 == len(spans_in(db_path, "r"))
    assert all(rows % 4 == 0 for rows in inserts[:-1]) and inserts[-1] <= 4
