"""A short overload of `tailscope collect` by several real OTel SDK exporters at once.

Four exporters stream spans while a long reader holds the store (as a slow dashboard query would)
until the writer has stalled, the small queue has filled and the receiver has answered 429 with
Retry-After a few times. The exporters' own retries must get everything in: spans created = spans stored, no
export failed, and the collector's memory stays bounded.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from receiver_support import STOPPED, Collector

from tailscope.store.duckdb.connection import connect_reader

EXPORTERS = 4
SECONDS = 4.0
SPANS_PER_SECOND_EACH = 400
PEAK_RSS_LIMIT = 600 * 1024 * 1024


@pytest.mark.slow
def test_overload_is_throttled_and_retries_get_everything_in(tmp_path: Path) -> None:
    import requests
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    options = ("--queue-requests", "8", "--flush-interval-ms", "100")
    collector = Collector(tmp_path / "store.duckdb", "load", *options)
    statuses: Counter[int] = Counter()
    results: Counter[str] = Counter()
    created = [0] * EXPORTERS
    lock = threading.Lock()

    class Recording(OTLPSpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            result = super().export(spans)
            with lock:
                results["ok" if result is SpanExportResult.SUCCESS else "failed"] += 1
            return result

    def count_status(response, *args, **kwargs):  # type: ignore[no-untyped-def]
        with lock:
            statuses[response.status_code] += 1

    def produce(index: int, provider: TracerProvider) -> None:
        tracer = provider.get_tracer("load")
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < SECONDS:
            target = int(elapsed * SPANS_PER_SECOND_EACH)
            while created[index] < target:
                with (
                    tracer.start_as_current_span("request", attributes={"exporter": index}),
                    tracer.start_as_current_span("stage"),
                ):
                    pass
                created[index] += 2
            time.sleep(0.005)

    providers = []
    try:
        for index in range(EXPORTERS):
            session = requests.Session()
            session.hooks["response"].append(count_status)
            provider = TracerProvider(resource=Resource.create({"service.name": f"load-{index}"}))
            exporter = Recording(endpoint=collector.url, timeout=30, session=session)
            provider.add_span_processor(
                BatchSpanProcessor(
                    exporter, max_queue_size=100_000, max_export_batch_size=256, schedule_delay_millis=50
                )
            )
            providers.append(provider)
        threads = [threading.Thread(target=produce, args=(i, p)) for i, p in enumerate(providers)]
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        # A long dashboard query: the writer waits until the exporters have been refused a while.
        with connect_reader(collector.db_path):
            deadline = time.monotonic() + 15
            while statuses[429] + statuses[503] < EXPORTERS and time.monotonic() < deadline:
                time.sleep(0.05)
        for thread in threads:
            thread.join(30)
        for provider in providers:
            assert provider.force_flush(60_000)
        peak_rss = collector.peak_rss_bytes()
    finally:
        for provider in providers:
            provider.shutdown()
        code = collector.stop()
    assert code == STOPPED, collector.output()
    with connect_reader(collector.db_path) as conn:
        stored = conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = 'load'").fetchone()[0]
    assert statuses[429] + statuses[503] > 0, statuses
    assert results["failed"] == 0, (results, statuses)
    assert stored == sum(created), (stored, sum(created), statuses)
    assert sum(created) >= 3_000  # (the rate is the producers' aim; a busy machine gets fewer)
    assert peak_rss < PEAK_RSS_LIMIT, peak_rss
