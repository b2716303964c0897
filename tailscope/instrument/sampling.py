"""Head sampling with a weight per request, and an always-keep rule for slow or failed requests.

`SamplingProcessor(inner, rate, keep_slower_than_ms)` wraps the service's span processor (a
BatchSpanProcessor and its exporter). A request's trace is head-sampled when its trace id falls under
`rate` (the low 64 bits against rate × 2^64, as OpenTelemetry's TraceIdRatioBased sampler decides, so
every process of a request agrees without talking). The decision for the others is taken at the end
of the request, when its span ends (tail-based, within the process): it is kept anyway when it failed
(ERROR status), took at least `keep_slower_than_ms`, or carries `tailscope.sample.keep=true`. Until
then its spans wait in memory (a bounded buffer: the requests in flight).

Every kept request's span (a SERVER or CLIENT span whose parent is in another process, or none)
carries `tailscope.sample.weight`: how many requests it stands for, the inverse of the probability
that it was kept — 1 for the requests kept by rule (kept whatever the draw), 1 / rate for the others.
Percentiles, stage shares and waterfalls weighted by it estimate those of all requests without bias
(Horvitz-Thompson), however many slow requests the rule adds.

Spans of a request made in another process (the model process's queue and forward spans) have a
parent in the front end: they pass when the trace is head-sampled and otherwise wait until
`keep(trace_id)` (the front end's decision, sent over) or are dropped when the buffer is full.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanKind, StatusCode

WEIGHT = "tailscope.sample.weight"
KEEP = "tailscope.sample.keep"
_LOW_64 = (1 << 64) - 1
_REQUEST_KINDS = (SpanKind.SERVER, SpanKind.CLIENT)


def head_sampled(trace_id: int, rate: float) -> bool:
    """The trace's head-sampling draw: its id's low 64 bits under rate × 2^64."""
    return rate >= 1.0 or (trace_id & _LOW_64) < round(rate * (1 << 64))


def request_weight(trace_id: int, rate: float, ruled: bool) -> float | None:
    """How many requests a request stands for when kept, None when it is dropped: kept by the rule
    (`ruled`: failed, slow or marked), it stands for itself (kept whatever the draw); head-sampled,
    for 1 / rate requests."""
    if ruled or rate >= 1.0:
        return 1.0
    return 1.0 / rate if head_sampled(trace_id, rate) else None


def is_request_span(span: ReadableSpan) -> bool:
    """A request's span in this process: SERVER/CLIENT with no parent or one in another process."""
    parent = span.parent
    return span.kind in _REQUEST_KINDS and (parent is None or parent.is_remote)


def with_attribute(span: ReadableSpan, key: str, value: float) -> ReadableSpan:
    """A copy of an ended span with one attribute more (an ended span's attributes are frozen)."""
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes={**(span.attributes or {}), key: value},
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class SamplingProcessor(SpanProcessor):
    def __init__(
        self,
        inner: SpanProcessor,
        rate: float = 1.0,
        keep_slower_than_ms: float | None = None,
        on_late_keep: Callable[[int], None] | None = None,
        max_pending_traces: int = 20_000,
    ) -> None:
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"sampling rate must be in (0, 1], got {rate}")
        self.inner, self.rate = inner, rate
        self.slow_ns = None if keep_slower_than_ms is None else int(keep_slower_than_ms * 1e6)
        self.on_late_keep = on_late_keep
        self._pending: OrderedDict[int, list[ReadableSpan]] = OrderedDict()
        self._decided: OrderedDict[int, bool] = OrderedDict()
        self._max = max_pending_traces
        self._lock = threading.Lock()
        self.kept = {"head": 0, "rule": 0, "dropped": 0}

    def on_start(self, span, parent_context=None) -> None:
        self.inner.on_start(span, parent_context=parent_context)

    def _rule_keeps(self, span: ReadableSpan) -> bool:
        if span.status.status_code is StatusCode.ERROR:
            return True
        if self.slow_ns is not None and span.end_time - span.start_time >= self.slow_ns:
            return True
        return bool((span.attributes or {}).get(KEEP))

    def on_end(self, span: ReadableSpan) -> None:
        trace_id = span.context.trace_id
        head = head_sampled(trace_id, self.rate)
        if not is_request_span(span):
            if head:
                self.inner.on_end(span)
                return
            with self._lock:
                decided = self._decided.get(trace_id)
                if decided is None:
                    self._pending.setdefault(trace_id, []).append(span)
                    while len(self._pending) > self._max:
                        self._pending.popitem(last=False)
                    return
            if decided:
                self.inner.on_end(span)
            return
        ruled = self._rule_keeps(span)
        keep = head or ruled
        with self._lock:
            waiting = self._pending.pop(trace_id, [])
            self._remember(trace_id, keep)
            self.kept["head" if head and not ruled else "rule" if keep else "dropped"] += 1
        if not keep:
            return
        for child in waiting:
            self.inner.on_end(child)
        weight = request_weight(trace_id, self.rate, ruled)
        assert weight is not None
        self.inner.on_end(with_attribute(span, WEIGHT, weight))
        if not head and self.on_late_keep is not None:
            self.on_late_keep(trace_id)

    def _remember(self, trace_id: int, keep: bool) -> None:
        self._decided[trace_id] = keep
        while len(self._decided) > self._max:
            self._decided.popitem(last=False)

    def decision(self, trace_id: int) -> bool | None:
        """Whether the request of `trace_id` was kept (None: not decided in this process)."""
        with self._lock:
            return self._decided.get(trace_id)

    def keep(self, trace_id: int) -> None:
        """Another process kept this trace's request: pass its spans waiting here, and later ones."""
        with self._lock:
            waiting = self._pending.pop(trace_id, [])
            self._remember(trace_id, True)
        for span in waiting:
            self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
