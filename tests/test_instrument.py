"""tailscope.instrument: stage spans, GC pause events, lock and queue waits, on a provider of the
application's own, in sync, async and threaded code; nothing at all while tracing is off."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tailscope import instrument as ts
from tailscope.instrument import gc_pauses


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The application's provider (not the global one), with an exporter the test reads."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ts.use(provider)
    yield exporter
    ts.use(None)
    ts.uninstall()


def by_name(exporter: InMemorySpanExporter) -> dict[str, object]:
    return {s.name: s for s in exporter.get_finished_spans()}


def test_a_stage_is_a_labelled_child_of_the_current_span(spans) -> None:
    tracer = trace.get_tracer("app", tracer_provider=ts._tracer._chosen)
    with (
        tracer.start_as_current_span("POST /predict", kind=SpanKind.SERVER) as root,
        ts.stage("feature_hydration", "features.get", cache_hit=False, db_system="redis"),
        ts.stage("downstream", "store.get", kind=SpanKind.CLIENT),
    ):
        pass
    got = by_name(spans)
    hydrate, store = got["features.get"], got["store.get"]
    assert hydrate.attributes == {"tailscope.stage": "feature_hydration", "cache.hit": False,
                                  "db.system.name": "redis"}  # fmt: skip
    assert hydrate.parent.span_id == root.get_span_context().span_id
    assert store.parent.span_id == hydrate.context.span_id and store.kind == SpanKind.CLIENT


def test_unknown_stage_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="unknown stage 'model'"):
        ts.stage("model")


def test_decorator_makes_a_span_per_call_sync_and_async(spans) -> None:
    @ts.stage("preprocessing", "tokenize")
    def tokenize(text: str) -> list[str]:
        return text.split()

    @ts.stage("model_forward")
    async def forward(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    assert tokenize("a b") == ["a", "b"] and tokenize.__name__ == "tokenize"

    async def main() -> list[int]:
        return await asyncio.gather(*(forward(i) for i in range(5)))

    assert asyncio.run(main()) == [0, 2, 4, 6, 8]
    names = [s.name for s in spans.get_finished_spans()]
    assert names.count("tokenize") == 1 and names.count("model_forward") == 5


def test_concurrent_tasks_and_threads_keep_their_own_parents(spans) -> None:
    provider = ts._tracer._chosen
    tracer = trace.get_tracer("app", tracer_provider=provider)

    async def request(i: int) -> None:
        with tracer.start_as_current_span(f"req{i}"):
            async with ts.stage("feature_hydration", f"hydrate{i}"):
                await asyncio.sleep(0.001 * (5 - i))

    async def all_requests() -> None:
        await asyncio.gather(*(request(i) for i in range(5)))

    asyncio.run(all_requests())

    def worker(i: int) -> None:
        with tracer.start_as_current_span(f"t{i}"), ts.stage("postprocessing", f"post{i}"):
            time.sleep(0.001)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = by_name(spans)
    for prefix, parent in (("hydrate", "req"), ("post", "t")):
        for i in range(4):
            assert got[f"{prefix}{i}"].parent.span_id == got[f"{parent}{i}"].context.span_id


def test_an_escaping_exception_is_recorded_and_propagates(spans) -> None:
    with pytest.raises(KeyError), ts.stage("feature_hydration"):
        raise KeyError("entity 7")
    span = spans.get_finished_spans()[0]
    assert span.status.status_code == StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


def test_gc_pauses_become_events_on_the_stage_and_its_parent(spans) -> None:
    ts.install(min_young_ns=0)
    tracer = trace.get_tracer("app", tracer_provider=ts._tracer._chosen)
    with tracer.start_as_current_span("POST /predict"):
        with ts.stage("preprocessing", "first"):
            gc.collect()
        with ts.stage("model_forward", "second"):
            gc.collect()
    got = by_name(spans)
    for name in ("first", "second"):
        events = [e for e in got[name].events if e.name == ts.GC_EVENT]
        assert len(events) >= 1 and events[0].attributes["gc.generation"] == 2
        assert events[0].attributes["gc.duration_ns"] > 0
    root_pauses = [e.timestamp for e in got["POST /predict"].events if e.name == ts.GC_EVENT]
    assert len(root_pauses) >= 2 and len(root_pauses) == len(set(root_pauses))  # each pause once


def test_young_collections_under_a_millisecond_are_not_kept() -> None:
    log = gc_pauses.GcPauseLog()
    log._callback("start", {})
    log._callback("stop", {"generation": 0, "collected": 3})
    assert log.pauses == [] and log.total_ns[0] >= 0


def test_a_lock_wait_is_a_span_written_after_release(spans) -> None:
    lock = ts.traced_lock(threading.Lock(), "scores")
    assert isinstance(lock, ts.TracedLock)
    held = threading.Event()

    def holder() -> None:
        with lock:
            held.set()
            time.sleep(0.05)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait()
    with lock:
        pass
    thread.join()
    waits = sorted(
        (s for s in spans.get_finished_spans() if s.name == ts.LOCK_WAIT), key=lambda s: s.end_time
    )
    assert len(waits) == 2 and all(s.attributes["lock.name"] == "scores" for s in waits)
    assert (waits[-1].end_time - waits[-1].start_time) / 1e6 > 30  # it waited for the holder


def test_an_asyncio_lock_wait_is_traced_too(spans) -> None:
    async def main() -> None:
        lock = ts.traced_lock(asyncio.Lock(), "pool", stage="queue")
        assert isinstance(lock, ts.AsyncTracedLock)

        async def use(hold: float) -> None:
            async with lock:
                await asyncio.sleep(hold)

        await asyncio.gather(use(0.03), use(0.0))

    asyncio.run(main())
    waits = [s for s in spans.get_finished_spans() if s.name == ts.LOCK_WAIT]
    assert len(waits) == 2 and {s.attributes["tailscope.stage"] for s in waits} == {"queue"}
    assert max(s.end_time - s.start_time for s in waits) / 1e6 > 20


def test_queue_wait_uses_the_batchers_timestamps(spans) -> None:
    enqueued = time.time_ns()
    ts.record_queue_wait(enqueued, enqueued + 7_000_000, batch_size=8, queue_depth=3)
    span = spans.get_finished_spans()[0]
    assert span.attributes == {"tailscope.stage": "queue", "batch.size": 8, "batch.queue_depth": 3}
    assert span.end_time - span.start_time == 7_000_000


def test_tracing_off_makes_no_spans_and_costs_no_setup() -> None:
    """No SDK provider anywhere (a fresh interpreter): every helper is a no-op."""
    code = (
        "import threading, asyncio\n"
        "from tailscope import instrument as ts\n"
        "with ts.stage('model_forward') as span: pass\n"
        "assert not span.is_recording()\n"
        "with ts.traced_lock(threading.Lock(), 'x'): pass\n"
        "ts.record_queue_wait(1, 2)\n"
        "import sys\n"
        "heavy = ['streamlit', 'duckdb', 'pandas', 'numpy', 'torch', 'pyarrow', 'opentelemetry.sdk']\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "assert heavy == [], heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_global_provider_is_picked_up_when_set_later() -> None:
    """A service that sets its provider after importing us is traced from then on."""
    code = (
        "from tailscope import instrument as ts\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "with ts.stage('parsing'): pass\n"
        "exporter = InMemorySpanExporter(); provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(exporter)); trace.set_tracer_provider(provider)\n"
        "with ts.stage('parsing'): pass\n"
        "assert [s.name for s in exporter.get_finished_spans()] == ['parsing']\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_leaf_stage_does_not_become_current_and_errors_are_described(spans) -> None:
    tracer = trace.get_tracer("app", tracer_provider=ts._tracer._chosen)
    with tracer.start_as_current_span("root") as root:
        with ts.stage("parsing", "leaf", current=False):
            assert trace.get_current_span() is root
        with ts.stage("feature_hydration", "outer") as outer:
            assert trace.get_current_span() is outer
        assert trace.get_current_span() is root
        with pytest.raises(ValueError), ts.stage("parsing", "failing"):
            raise ValueError("bad input")
    got = by_name(spans)
    assert got["leaf"].parent.span_id == got["root"].context.span_id
    assert got["failing"].status.description == "ValueError: bad input"
