"""What tailscope.instrument costs per span, against the plain OpenTelemetry SDK doing the same spans.

    python bench/bench_instrument.py

Every variant makes the same span (same name, attributes, parent) under one request span, through a
TracerProvider with a synchronous processor whose exporter drops what it gets (CPU time of the
process, `time.process_time`; the variants take turns, 9 rounds of 5,000 calls, medians). Variants:
- sdk: `tracer.start_as_current_span(name, attributes=...)`, the plain SDK way;
- stage: `with ts.stage(stage, name)` (current span inside, GC pause log installed);
- stage leaf: `current=False`, for spans without children;
- stage, tracing off: no SDK provider at all (what a service pays with tracing disabled);
- lock wait: `with ts.traced_lock(threading.Lock(), ...)` uncontended, against a bare lock.
Targets (issue 15): ≤ 5 µs of CPU per stage span over the SDK, and a request of 10 stages ≤ 2 % of a
10 ms request's CPU.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from bench.machine_info import machine
from tailscope import instrument as ts

SPANS = 5_000
TRIALS = 9


class DropExporter(SpanExporter):
    def export(self, spans: Sequence[object]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def cpu_us_per_call(body: Callable[[], None], calls: int = SPANS) -> float:
    """CPU µs per call of `body`, over `calls` calls (after 1,000 to warm up)."""
    for _ in range(1000):
        body()
    started = time.process_time()
    for _ in range(calls):
        body()
    return (time.process_time() - started) / calls * 1e6


def interleaved(variants: dict[str, Callable[[], None]]) -> dict[str, float]:
    """Median CPU µs per call of each variant over TRIALS rounds, the variants taking turns within each
    round, so a slow spell of the machine (a 2-core VM shares its host) weighs on all of them alike."""
    rounds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(TRIALS):
        for name, body in variants.items():
            rounds[name].append(cpu_us_per_call(body))
    return {name: statistics.median(values) for name, values in rounds.items()}


def main() -> None:
    print(f"machine: {machine()}")
    print(f"date:    {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: python {' '.join(sys.argv)}\n")
    attrs = {"tailscope.stage": "preprocessing"}
    off = interleaved({"ts.stage, tracing off": lambda: ts.stage("preprocessing", "tokenize").__enter__()})
    provider = TracerProvider()
    # a synchronous processor whose exporter drops the span: the span's whole life on the calling
    # thread, without a batch processor's worker thread adding noise of its own to both sides
    provider.add_span_processor(SimpleSpanProcessor(DropExporter()))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("bench")
    ts.install()

    def sdk() -> None:
        with tracer.start_as_current_span("tokenize", attributes=attrs):
            pass

    def stage() -> None:
        with ts.stage("preprocessing", "tokenize"):
            pass

    def leaf() -> None:
        with ts.stage("preprocessing", "tokenize", current=False):
            pass

    bare, traced = threading.Lock(), ts.traced_lock(threading.Lock(), "bench")

    def bare_lock() -> None:
        with bare:
            pass

    def traced_lock() -> None:
        with traced:
            pass

    with tracer.start_as_current_span("request"):
        figures = interleaved(
            {
                "sdk start_as_current_span": sdk,
                "ts.stage": stage,
                "ts.stage current=False": leaf,
                "bare threading.Lock": bare_lock,
                "ts.traced_lock (uncontended)": traced_lock,
            }
        )
    figures |= off
    provider.shutdown()
    width = max(map(len, figures))
    for name, us in figures.items():
        print(f"  {name:<{width}}  {us:6.2f} µs CPU per call")
    over = figures["ts.stage"] - figures["sdk start_as_current_span"]
    print(f"\n  stage over the plain SDK: {over:+.2f} µs per span (target ≤ 5 µs)")
    per_request = 10 * figures["ts.stage"]
    share = per_request / 10_000
    print(f"  a request of 10 stages: {per_request:.0f} µs CPU = {share:.2%} of 10 ms (target ≤ 2 %)")
    lock_over = figures["ts.traced_lock (uncontended)"] - figures["bare threading.Lock"]
    print(f"  a traced lock over a bare one: {lock_over:+.2f} µs per acquisition (its wait span)")


if __name__ == "__main__":
    main()
