"""Run `tailscope collect` as a real process on a free loopback port, for the receiver's tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

REPO_ROOT = Path(__file__).resolve().parents[1]
_LISTENING = re.compile(r"listening on (https?://\S+/v1/traces)")
# How a collector ends after SIGTERM once everything accepted is stored: by that signal.
STOPPED = -signal.SIGTERM
# How long a collector may take to listen: over 30 s at load 17-20 (bench/RESULTS.md, suite20)
START_SECONDS = 120


class Collector:
    """A `tailscope collect --port 0` subprocess; `url` once it listens, `stop()` sends SIGTERM."""

    def __init__(self, db_path: Path, run: str = "live", *extra: str, env: dict[str, str] | None = None):
        self.db_path = db_path
        self.run = run
        command = [
            sys.executable,
            "-c",
            "from tailscope.cli.main import entrypoint; entrypoint()",
            "collect",
            "--db",
            str(db_path),
            "--port",
            "0",
            "--run",
            run,
            "--stats-interval",
            "0.5",
            *extra,
        ]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        self.url = ""
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(START_SECONDS) or not self.url:
            self.process.kill()
            raise RuntimeError("collect did not start:\n" + "\n".join(self.lines))

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            match = _LISTENING.search(line)
            if match:
                self.url = match.group(1)
                self._ready.set()
        self._ready.set()

    @property
    def pid(self) -> int:
        return self.process.pid

    def post(self, body: bytes, content_type: str, **headers: str) -> httpx.Response:
        return httpx.post(
            self.url, content=body, headers={"content-type": content_type, **headers}, timeout=30
        )

    def post_until_accepted(self, body: bytes, content_type: str, attempts: int = 20) -> httpx.Response:
        """POST, and on 429/503 wait Retry-After and again, as the OTel exporters do."""
        for _ in range(attempts):
            response = self.post(body, content_type)
            if response.status_code not in (429, 503):
                return response
            time.sleep(float(response.headers.get("retry-after", "1")))
        return response

    def peak_rss_bytes(self) -> int:
        """The collector's peak resident memory (VmHWM) so far."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self, timeout: float = 60, signum: int = signal.SIGTERM) -> int:
        """Send `signum` (SIGTERM), then wait for the exit code (-signum: ended by that signal)."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            return self.process.wait(timeout)
        finally:
            time.sleep(0.05)  # let the reader thread collect the last lines

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def output(self) -> str:
        return "\n".join(self.lines)


# -- requests by hand ---------------------------------------------------------------------------------


def json_request(
    service: str, spans: list[tuple[str, str, str, int, int]], attrs: dict | None = None
) -> bytes:
    """An OTLP/JSON body; spans as (trace_id, span_id, name, start_ns, end_ns)."""
    attributes = [{"key": k, "value": {"stringValue": v}} for k, v in (attrs or {}).items()]
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                    "scopeSpans": [
                        {
                            "scope": {"name": "by-hand"},
                            "spans": [
                                {
                                    "traceId": t,
                                    "spanId": s,
                                    "name": n,
                                    "startTimeUnixNano": str(a),
                                    "endTimeUnixNano": str(b),
                                    "attributes": attributes,
                                }
                                for t, s, n, a, b in spans
                            ],
                        }
                    ],
                }
            ]
        }
    ).encode()


def proto_request(service: str, spans: list[tuple[str, str, str, int, int]]) -> bytes:
    request = trace_service_pb2.ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.CopyFrom(
        resource_pb2.Resource(
            attributes=[
                common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value=service))
            ]
        )
    )
    ss = rs.scope_spans.add()
    for t, s, n, a, b in spans:
        ss.spans.append(
            trace_pb2.Span(
                trace_id=bytes.fromhex(t),
                span_id=bytes.fromhex(s),
                name=n,
                start_time_unix_nano=a,
                end_time_unix_nano=b,
            )
        )
    return request.SerializeToString()


def spans_of(
    trace: int, count: int, start: int = 1_700_000_000_000_000_000
) -> list[tuple[str, str, str, int, int]]:
    return [
        (f"{trace:032x}", f"{trace:08x}{i + 1:08x}", f"op{i}", start + i, start + i + 1000)
        for i in range(count)
    ]


# -- a reader process, as the dashboard would be ------------------------------------------------------

CONSISTENCY_QUERY = """
SELECT (SELECT count(*) FROM otel_traces) AS spans,
       (SELECT coalesce(sum(SpanRows), 0) FROM derive_state) AS derived_spans,
       (SELECT count(*) FROM (SELECT RunLabel FROM otel_traces GROUP BY RunLabel HAVING count(*) % ? <> 0))
           AS partial_runs,
       (SELECT count(*) FROM runs) AS runs
"""


MIN_READS = 5
# How long a reader keeps reading for its turns at most: a loaded machine stretches the processes' start
# and every write (at load 15-20 a 3 s window saw 2 reads of one count), and a broken turn-taking leaves
# it waiting (or reading one count) until then.
READ_CAP_SECONDS = 120.0


def turns(samples: list[list[float]]) -> int:
    """How many different whole writes the reads saw after the first: each read with a span count above
    zero read between two of the writer's transactions, and two such counts that differ mean the reader
    got in between two writes (and again after another)."""
    return len({spans for _wait, spans, *_ in samples if spans > 0})


def read_loop(db_path: str, seconds: float, unit: int, out_path: str) -> None:
    """Query the store every 10 ms for `seconds`, and on until MIN_READS reads are in and two of them
    saw different whole writes (`turns`), up to READ_CAP_SECONDS: the test asks of the turn-taking
    that the reader gets in between the writes, not that it does within a wall time. Writes each
    query's latency and counts as JSON (the writer's processes stop once the file is there)."""
    from tailscope.store.duckdb.store import DuckDBStore as Store

    store = Store(db_path)
    samples: list[list[float]] = []
    errors: list[str] = []
    started_at = time.monotonic()
    end, last = started_at + seconds, started_at + READ_CAP_SECONDS
    while (now := time.monotonic()) < end or (
        (len(samples) < MIN_READS or turns(samples) < 2) and now < last
    ):
        started = time.perf_counter()
        try:
            row = store.query(CONSISTENCY_QUERY, [unit]).first()
            assert row is not None
            samples.append([time.perf_counter() - started, *row])
        except Exception as error:  # recorded, and the test fails on any
            errors.append(repr(error))
        time.sleep(0.01)
    Path(out_path).write_text(json.dumps({"samples": samples, "errors": errors}))


def start_reader(db_path: Path, seconds: float, unit: int, out_path: Path) -> subprocess.Popen:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from receiver_support import read_loop; "
        "read_loop(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5])"
    )
    args = [str(Path(__file__).parent), str(db_path), str(seconds), str(unit), str(out_path)]
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO_ROOT)
