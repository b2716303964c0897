"""Malformed and hostile inputs through the real CLI, strict mode: one line, exit 2, store unchanged.

Each case (tests/hostile_inputs.py builds them in memory) is ingested into a copy of a store that
already holds a good file. A rejected case must print exactly one line on stderr naming the file and
a position, exit with 2, raise nothing, finish within a time bound and leave every table of the
store as it was (row counts and a checksum over otel_traces and runs). Valid-but-odd cases load the
documented number of spans instead.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hostile_inputs import HOSTILE_CASES, Case, jaeger_span, otlp_jsonl, zipkin_span

from tailscope.cli.main import main

TIME_BOUND_S = 20.0
POSITION = re.compile(r"\b(line|byte|message|span|trace|record|document|resourceSpans|resource_spans)\b")
GOOD_SPANS = 8

TRACES_CHECKSUM = """
SELECT count(*), coalesce(sum(hash(TraceId, SpanId, ParentSpanId, Timestamp, Duration, SpanName, ServiceName,
       RunLabel, SpanAttributes::VARCHAR, ResourceAttributes::VARCHAR, Events::VARCHAR, Links::VARCHAR)), 0)
FROM otel_traces
"""
RUNS_CHECKSUM = """
SELECT count(*), coalesce(sum(hash(RunLabel, SourceFiles::VARCHAR, LoadedAt, SpanCount, TraceCount,
       SetupAttributes::VARCHAR)), 0)
FROM runs
"""


def cases(stored: bool) -> list[Any]:
    return [pytest.param(c, id=c.name) for c in HOSTILE_CASES if (c.stored is not None) == stored]


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["ingest", *args])
    return code, out.getvalue(), err.getvalue()


def snapshot(db: Path) -> dict[str, Any]:
    """Row counts of every table, plus checksums over otel_traces and runs."""
    with duckdb.connect(str(db), read_only=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
        state: dict[str, Any] = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone() for t in tables}
        state["otel_traces checksum"] = conn.execute(TRACES_CHECKSUM).fetchone()
        state["runs checksum"] = conn.execute(RUNS_CHECKSUM).fetchone()
    return state


@pytest.fixture(scope="module")
def template_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding one good file (8 spans), copied for every case."""
    folder = tmp_path_factory.mktemp("template")
    good = folder / "good.jsonl"
    good.write_bytes(otlp_jsonl(4, 2))
    db = folder / "store.duckdb"
    code, _, err = run_cli(str(good), "--db", str(db), "--run", "good")
    assert code == 0, err
    assert snapshot(db)["otel_traces checksum"][0] == GOOD_SPANS
    return db


@pytest.fixture(scope="module")
def template_snapshot(template_store: Path) -> dict[str, Any]:
    """The template's snapshot, taken once: each case's store is a byte copy of it, so this is the
    state that store starts in (a snapshot costs ~0.1 s, its read-only open most of it)."""
    return snapshot(template_store)


@pytest.fixture
def store(template_store: Path, tmp_path: Path) -> Path:
    db = tmp_path / "store.duckdb"
    shutil.copy(template_store, db)
    return db


def test_there_are_at_least_thirty_generated_hostile_inputs() -> None:
    rejected = [case for case in HOSTILE_CASES if case.stored is None]
    assert len(rejected) >= 30
    assert len({case.name for case in HOSTILE_CASES}) == len(HOSTILE_CASES)


@pytest.mark.parametrize("case", cases(stored=False))
def test_strict_mode_rejects_with_one_line_and_leaves_the_store_unchanged(
    case: Case, store: Path, tmp_path: Path, template_snapshot: dict[str, Any]
) -> None:
    path = tmp_path / f"{case.name}.dat"
    path.write_bytes(case.make())
    before = template_snapshot  # the store is a byte copy of the template

    started = time.monotonic()
    code, _, err = run_cli(str(path), "--db", str(store), "--run", "hostile")
    elapsed = time.monotonic() - started

    assert code == 2, f"exit {code}, stderr: {err!r}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    (line,) = lines
    assert line.startswith(f"{path}: "), line
    assert POSITION.search(line.removeprefix(f"{path}: ")), f"no position in: {line}"
    assert "Traceback" not in err
    assert len(line) < 1000, "the error line stays short whatever the input"
    assert case.says.lower() in line.lower(), line
    assert elapsed < TIME_BOUND_S
    assert snapshot(store) == before


@pytest.mark.parametrize("case", cases(stored=True))
def test_valid_but_odd_inputs_load_the_documented_spans(case: Case, store: Path, tmp_path: Path) -> None:
    path = tmp_path / f"{case.name}.dat"
    path.write_bytes(case.make())
    code, out, err = run_cli(str(path), "--db", str(store), "--run", "odd", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["spans"] == case.stored
    with duckdb.connect(str(store), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = 'odd'").fetchone() == (
            case.stored,
        )
        assert conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = 'good'").fetchone() == (
            GOOD_SPANS,
        )


def test_a_megabyte_attribute_value_is_stored_intact(store: Path, tmp_path: Path) -> None:
    case = next(c for c in HOSTILE_CASES if c.name == "megabyte_attribute_value")
    path = tmp_path / "big.json"
    path.write_bytes(case.make())
    assert run_cli(str(path), "--db", str(store), "--run", "big")[0] == 0
    with duckdb.connect(str(store), read_only=True) as conn:
        (length,) = conn.execute(
            "SELECT max(length(SpanAttributes->>'payload')) FROM otel_traces WHERE RunLabel = 'big'"
        ).fetchone()
    assert length == 1 << 20


def test_skip_bad_loads_the_good_records_and_counts_the_rest(store: Path, tmp_path: Path) -> None:
    spans = [zipkin_span(i) for i in range(10)]
    spans[2]["id"] = "not-hex"
    spans[5]["duration"] = -3
    del spans[7]["traceId"]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(spans))

    code, out, err = run_cli(str(path), "--db", str(store), "--run", "mixed", "--skip-bad", "--json")

    assert code == 0, err
    summary = json.loads(out)
    assert (summary["spans"], summary["rejected"], summary["files_failed"]) == (7, 3, 0)
    assert sum(summary["rejected_reasons"].values()) == 3
    assert summary["per_file"][0]["rejected"] == 3
    with duckdb.connect(str(store), read_only=True) as conn:
        assert conn.execute("SELECT SpanCount FROM runs WHERE RunLabel = 'mixed'").fetchone() == (7,)


def test_skip_bad_on_json_lines_skips_only_the_broken_lines(store: Path, tmp_path: Path) -> None:
    lines = otlp_jsonl(5, 2).splitlines(keepends=True)
    lines[1] = b'{"resourceSpans": [\n'
    lines[3] = b"\xff\xfe garbage\n"
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"".join(lines))
    code, out, _ = run_cli(str(path), "--db", str(store), "--run", "mixed", "--skip-bad", "--json")
    summary = json.loads(out)
    assert code == 0
    assert (summary["spans"], summary["rejected"]) == (6, 2)


def test_skip_bad_on_jaeger_counts_bad_spans_and_bad_traces(store: Path, tmp_path: Path) -> None:
    good = {
        "traceID": "a1",
        "spans": [jaeger_span(0), jaeger_span(1)],
        "processes": {"p1": {"serviceName": "s"}},
    }
    bad_span = {"traceID": "a2", "spans": [jaeger_span(2), jaeger_span(3, duration=-1)], "processes": {}}
    path = tmp_path / "mixed-jaeger.json"
    path.write_text(json.dumps({"data": [good, "not a trace", bad_span]}))
    code, out, _ = run_cli(str(path), "--db", str(store), "--run", "mixed", "--skip-bad", "--json")
    summary = json.loads(out)
    assert code == 0
    assert (summary["spans"], summary["rejected"]) == (2, 3), "2 good spans; 1 bad trace and 2 bad spans"


def test_in_strict_mode_the_same_mixed_file_is_rejected_whole(store: Path, tmp_path: Path) -> None:
    spans = [zipkin_span(i) for i in range(10)]
    spans[5]["duration"] = -3
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(spans))
    before = snapshot(store)
    code, _, err = run_cli(str(path), "--db", str(store), "--run", "mixed")
    assert code == 2
    assert err.strip() == f"{path}: span 6: duration -3 is negative"
    assert snapshot(store) == before


def test_a_real_process_prints_one_line_per_bad_file_and_no_traceback(store: Path, tmp_path: Path) -> None:
    names = ["random_bytes", "deeply_nested_json_array", "jaeger_missing_processes"]
    paths = []
    for name in names:
        case = next(c for c in HOSTILE_CASES if c.name == name)
        paths.append(tmp_path / f"{name}.dat")
        paths[-1].write_bytes(case.make())
    good = tmp_path / "good.jsonl"
    good.write_bytes(otlp_jsonl(2, 2, trace="ab" * 16))

    done = subprocess.run(
        [sys.executable, "-c", "from tailscope.cli.main import entrypoint; entrypoint()", "ingest",
         *map(str, paths), str(good), "--db", str(store), "--run", "several"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == [str(p) for p in paths]
    with duckdb.connect(str(store), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = 'several'").fetchone() == (4,)
