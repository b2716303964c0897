"""kill -9 during `tailscope ingest`: the file being loaded is wholly there or wholly absent.

A real `tailscope ingest` process loads a generated file large enough to take several batches (and,
for JSON lines over 16 MiB, the parallel decoder's worker processes). It is killed with SIGKILL as
soon as it reports progress on stderr, i.e. after its first batch and before its commit, or after a
fixed delay. Reopening the store (DuckDB replays its WAL) must show that file's spans all or none,
the files committed before it untouched, and loading the file again must give the full count.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from hostile_inputs import otlp_jsonl, zipkin_span

from tailscope.cli.main import main

CLI = [sys.executable, "-c", "from tailscope.cli.main import entrypoint; entrypoint()"]
START = 1_700_000_000_000_000_000
CHECKSUM = (
    "SELECT count(*), coalesce(sum(hash(TraceId, SpanId, Timestamp, Duration, SpanName)), 0) FROM otel_traces"
)


def big_jsonl(path: Path, lines: int = 200, per_line: int = 100) -> int:
    """An OTLP JSON lines file of lines × per_line spans, each with a 800-byte attribute, so that the
    file is over the CLI's 16 MiB progress threshold (and the parallel decoder's) with few spans."""
    padding = "x" * 800
    template = (
        '{{"traceId":"{trace}","spanId":"{span:016x}","parentSpanId":"","name":"op-{i}","kind":2,'
        '"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}",'
        '"attributes":[{{"key":"payload","value":{{"stringValue":"{i}-' + padding + '"}}}}]}}'
    )
    with path.open("w") as out:
        for line in range(lines):
            spans = ",".join(
                template.format(
                    trace=f"{line + 1:032x}", span=i + 1, i=i, start=START + i, end=START + 500_000 + i
                )
                for i in range(line * per_line, (line + 1) * per_line)
            )
            out.write(
                '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":'
                '{"stringValue":"crash"}}]},"scopeSpans":[{"scope":{"name":"t"},"spans":['
                + spans
                + "]}]}]}\n"
            )
    return lines * per_line


def big_zipkin(path: Path, count: int = 20_000) -> int:
    spans = [zipkin_span(i, traceId=f"{i // 10 + 1:032x}") for i in range(count)]
    path.write_text(json.dumps(spans))
    return count


def state(db: Path, run: str) -> tuple[tuple[int, int], int, list[tuple[int]]]:
    """(checksum of the whole table, spans of `run`, runs rows for `run`) on a freshly opened store."""
    with duckdb.connect(str(db)) as conn:
        return (
            conn.execute(CHECKSUM).fetchone(),
            conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = ?", [run]).fetchone()[0],
            conn.execute("SELECT SpanCount FROM runs WHERE RunLabel = ?", [run]).fetchall(),
        )


def kill_mid_file(args: list[str], until: Callable[[str], bool], timeout: float = 30.0) -> tuple[int, str]:
    """Start `tailscope ingest ARGS`; SIGKILL its process group (the CLI and its decoder workers,
    nothing else) as soon as `until(stderr so far)` holds. Returns (exit status, stderr)."""
    process = subprocess.Popen(
        [*CLI, "ingest", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    printed = b""
    while time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stderr], [], [], 0.01)
        if ready:
            printed += os.read(process.stderr.fileno(), 4096)
        if until(printed.decode(errors="replace")):
            break
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    process.stderr.close()
    return process.returncode, printed.decode(errors="replace")


@pytest.fixture
def store_with_an_earlier_file(tmp_path: Path) -> Path:
    db = tmp_path / "store.duckdb"
    early = tmp_path / "early.jsonl"
    early.write_bytes(otlp_jsonl(3, 2, trace="ee" * 16))
    assert main(["ingest", str(early), "--db", str(db), "--run", "early"]) == 0
    return db


@pytest.mark.slow
def test_kill_at_first_progress_leaves_the_file_wholly_absent(
    store_with_an_earlier_file: Path, tmp_path: Path
) -> None:
    db = store_with_an_earlier_file
    big = tmp_path / "big.jsonl"
    full = big_jsonl(big)
    before, early_spans, _ = state(db, "early")

    # Its first progress line comes after its first batch is decoded, long before its commit.
    code, printed = kill_mid_file(
        [str(big), "--db", str(db), "--run", "big"], until=lambda err: "spans/s" in err
    )

    assert code == -signal.SIGKILL, f"the ingest ended by itself before it could be killed: {printed!r}"
    assert "spans/s" in printed
    after, big_spans, big_runs = state(db, "big")
    assert (big_spans, big_runs) == (0, []), "killed before its commit: nothing of the file is stored"
    assert after == before
    assert state(db, "early")[1] == early_spans == 6

    assert main(["ingest", str(big), "--db", str(db), "--run", "big"]) == 0
    _, big_spans, big_runs = state(db, "big")
    assert (big_spans, big_runs) == (full, [(full,)])
    assert state(db, "early")[1] == 6


@pytest.mark.slow
def test_kill_while_it_writes_leaves_the_file_all_or_nothing(
    store_with_an_earlier_file: Path, tmp_path: Path
) -> None:
    db = store_with_an_earlier_file
    big = tmp_path / "big.json"
    full = big_zipkin(big)
    before, _, _ = state(db, "early")
    wal = db.with_name(db.name + ".wal")
    assert not wal.exists(), "the earlier load was checkpointed"

    # Killed the moment DuckDB starts its write-ahead log for this file, i.e. inside its commit.
    kill_mid_file([str(big), "--db", str(db), "--run", "big"], until=lambda _: wal.exists())

    after, big_spans, big_runs = state(db, "big")
    assert (big_spans, big_runs) in [(0, []), (full, [(full,)])]
    if big_spans == 0:
        assert after == before
    assert state(db, "early")[1] == 6

    assert main(["ingest", str(big), "--db", str(db), "--run", "big"]) == 0
    assert state(db, "big")[1:] == (full, [(full,)])
