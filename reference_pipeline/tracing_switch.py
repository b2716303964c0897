"""Tracing on and off inside one running service, to measure what tracing costs (A/B in one process).

Two separate service processes, one traced and one not, differ by more than the tracer on a shared
2-core VM: identical untraced runs moved between ~55 and ~80 req/s from one process to the next. Here
one process alternates: the first SIGUSR1 starts the books, every later one swaps the pipeline's
tracer between the SDK tracer and a no-op tracer, SIGUSR2 closes the books; in between, wall time,
process CPU time and completed requests are booked to the mode that was on. Only the
tracing-overhead benchmark sends these signals (`RunOptions.tracing_ab_period_s`); the report is
written as JSON when the service stops. Requests in flight across a swap count in the mode in which
they complete, and their traces are partial (such a run's trace file is not for analysis).

Leaving the traced mode flushes the provider before the window closes: the BatchSpanProcessor
exports on its own schedule (every 2,048 spans or 5 s), so without the flush the export of a traced
window's last spans, and the freeing of them, would run in the no-op window after it and be booked
to the wrong mode.

Besides the totals per mode, the report lists every window (mode, seconds, CPU seconds, requests,
and the CPU time the hypervisor stole from the machine meanwhile, where /proc/stat says), so the
benchmark can compare each window with its neighbours and see which ones a noisy host disturbed.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry import trace

from tailscope import instrument as ts

USER_HZ = 100  # /proc/stat's unit (sysconf(_SC_CLK_TCK) on every Linux this runs on)


def stolen_seconds() -> float | None:
    """CPU time the hypervisor has taken from this machine since boot (all CPUs), or None."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
        return int(fields[8]) / USER_HZ
    except (OSError, IndexError, ValueError):
        return None


class TracingSwitch:
    def __init__(
        self,
        pipeline,
        sdk_tracer: trace.Tracer,
        flush: Callable[[], object] = lambda: None,
        provider: trace.TracerProvider | None = None,
    ) -> None:
        self.pipeline, self.sdk_tracer, self.flush, self.provider = pipeline, sdk_tracer, flush, provider
        self.traced, self.booking = True, False
        self.books: dict = {
            mode: {"seconds": 0.0, "cpu_seconds": 0.0, "requests": 0, "windows": 0}
            for mode in ("traced", "no-op")
        }
        self.books["windows"] = []
        self._start_window()

    def _gc_seconds(self) -> list[float]:
        gc_log = getattr(self.pipeline, "gc_log", None)
        return [ns / 1e9 for ns in gc_log.total_ns] if gc_log is not None else [0.0, 0.0, 0.0]

    def _start_window(self) -> None:
        self._wall, self._cpu, self._stolen = time.perf_counter(), time.process_time(), stolen_seconds()
        self._gc, self._requests = self._gc_seconds(), 0

    @property
    def mode(self) -> str:
        return "traced" if self.traced else "no-op"

    def completed(self) -> None:
        if self.booking:
            self._requests += 1

    def _close_window(self) -> None:
        flushed = time.perf_counter()
        if self.traced:
            self.flush()  # the traced window pays for exporting its spans
        wall, cpu, stolen = time.perf_counter(), time.process_time(), stolen_seconds()
        window = {
            "flush_seconds": wall - flushed,
            "gc_seconds": [now - then for now, then in zip(self._gc_seconds(), self._gc, strict=True)],
            "mode": self.mode,
            "seconds": wall - self._wall,
            "cpu_seconds": cpu - self._cpu,
            "requests": self._requests,
            "stolen_seconds": None if stolen is None or self._stolen is None else stolen - self._stolen,
        }
        self.books["windows"].append(window)
        book = self.books[self.mode]
        for key in ("seconds", "cpu_seconds", "requests"):
            book[key] += window[key]
        book["windows"] += 1
        self._start_window()

    def toggle(self) -> None:
        if not self.booking:  # the load has started: book from now on
            self.booking = True
            self._start_window()
            return
        self._close_window()
        self.traced = not self.traced
        self.pipeline.tracer = self.sdk_tracer if self.traced else trace.NoOpTracer()
        if self.provider is not None:  # the stage spans (tailscope.instrument) follow
            ts.use(self.provider if self.traced else trace.NoOpTracerProvider())

    def install(self) -> None:
        """SIGUSR1 swaps; the handler runs on the main thread, which is the event loop's."""
        signal.signal(signal.SIGUSR1, lambda signum, frame: self.toggle())
        signal.signal(signal.SIGUSR2, lambda signum, frame: self.stop())

    def stop(self) -> None:
        if self.booking:
            self._close_window()
            self.booking = False

    def report(self, path: Path) -> None:
        self.stop()
        path.write_text(json.dumps(self.books))
