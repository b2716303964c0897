"""docs/examples/fastapi_service.py, run as a user would: uvicorn serving it, its spans exported over
OTLP/HTTP to a real `tailscope collect`, then the store's stages, cache flag and lock waits read back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from browser_support import free_port, installed
from receiver_support import REPO_ROOT, STOPPED, Collector

from tailscope.analysis import Filter, stage_mapping, waterfall
from tailscope.store.duckdb.connection import connect_reader
from tailscope.store.duckdb.store import DuckDBStore as Store

# the service runs in uvicorn's process: this one needs these installed, not imported
NEEDED = ("fastapi", "opentelemetry.instrumentation.fastapi", "opentelemetry.exporter.otlp.proto.http")
MISSING = [module for module in NEEDED if not installed(module)]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"not installed: {', '.join(MISSING)}")

EXAMPLE = REPO_ROOT / "docs" / "examples"
REQUESTS = 120


def start_service(port: int, traces_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces_url,
        "OTEL_SERVICE_NAME": "scorer",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    with log.open("wb") as out:
        service = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(EXAMPLE), "fastapi_service:app",
             "--port", str(port), "--log-level", "warning"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert service.poll() is None, log.read_text()
        try:
            httpx.get(f"http://127.0.0.1:{port}/docs", timeout=1)
            return service
        except httpx.TransportError:
            time.sleep(0.2)
    service.kill()
    raise AssertionError(f"the example did not start: {log.read_text()}")


def send_load(port: int) -> list[int]:
    def one(i: int) -> int:
        body = {"entity_id": f"e{i % 40}", "text": " ".join(["good", "slow", "fast", "review"][: 1 + i % 4])}
        return httpx.post(f"http://127.0.0.1:{port}/predict", json=body, timeout=10).status_code

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(REQUESTS)))


def test_the_fastapi_example_is_traced_into_tailscope_collect(tmp_path: Path) -> None:
    collector = Collector(tmp_path / "live.duckdb", "live")
    port = free_port()
    service = start_service(port, collector.url, tmp_path / "service.log")
    try:
        assert send_load(port) == [200] * REQUESTS
    finally:
        service.send_signal(signal.SIGTERM)  # uvicorn's shutdown flushes the spans (lifespan)
        service.wait(timeout=60)
    assert collector.stop() == STOPPED, collector.output()

    store = Store(collector.db_path)
    band = waterfall(store, Filter(run="live", route="/predict"), "p50")
    stages = {s.stage: s.mean_ms for s in band.stages}
    for stage in ("parsing", "feature_hydration", "preprocessing", "model_forward", "postprocessing"):
        assert stages[stage] > 0, (stage, stages)
    mapping = stage_mapping(store, "live")
    assert {"features.get", "tokenize", "model.forward", "lock.wait"} <= set(mapping.span_name)
    with connect_reader(collector.db_path) as conn:
        requests = conn.execute(
            "SELECT count(*) FROM requests WHERE RunLabel = 'live' AND Route = '/predict'"
        ).fetchone()[0]
        roots = conn.execute(
            "SELECT DISTINCT SpanName FROM otel_traces WHERE SpanKind = 'Server' AND ServiceName = 'scorer'"
        ).fetchall()
        hits = conn.execute(
            "SELECT SpanAttributes->>'cache.hit', count(*) FROM otel_traces WHERE SpanName = 'features.get' "
            "GROUP BY 1 ORDER BY 1"
        ).fetchall()
    assert requests == REQUESTS and ("POST /predict",) in roots  # the readiness polls are GET /docs
    assert hits == [("false", 40), ("true", REQUESTS - 40)]  # the first request of each entity misses
