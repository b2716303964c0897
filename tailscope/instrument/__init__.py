"""tailscope.instrument: the minimum instrumentation for a Python inference service.

It writes through the service's own OpenTelemetry TracerProvider and exporter (it never makes or
replaces one) and needs only `opentelemetry-api`: no Streamlit, DuckDB, pandas or PyTorch. The lines
a service adds:

    from tailscope import instrument as ts

    ts.install()                                          # GC pauses become span events
    with ts.stage("feature_hydration", cache_hit=hit):    # a span per stage, labelled
        ...
    lock = ts.traced_lock(threading.Lock(), "scores")     # lock waits become spans
    ts.record_queue_wait(enqueued_ns, started_ns, batch_size=n)   # a batcher's queue time
    ts.freeze_after_startup()                             # once ready: shorter full collections

Light mode (`ts.set_mode("light")`, then `with ts.request(server_span):` around a request's
handling): the same lines make no span; the stages' times land on the request's span as attributes
and tailscope's phase rules split them back into stages (tailscope.instrument.light). Head sampling
with a weight per request and an always-keep rule for slow or failed ones: wrap the provider's span
processor in `tailscope.instrument.sampling.SamplingProcessor` (needs the SDK, as the processor does).

What each lets the diagnosis see that timing alone cannot: `tailscope.stage` maps a span whatever its
name; `cache.hit` explains a bimodal lookup (cache_miss); `python.gc` events prove a stop-the-world
pause (gc_pause) where timing only suggests one; `lock.wait` spans separate waiting for a lock from
working under it (lock_contention); the queue span separates waiting for a batch from computing it
(queueing vs compute_bound).
"""

from __future__ import annotations

from tailscope.instrument._tracer import use
from tailscope.instrument.gc_pauses import (
    GC_EVENT,
    attach_gc_pauses,
    freeze_after_startup,
    install,
    uninstall,
)
from tailscope.instrument.light import MODES, mode, request, set_mode
from tailscope.instrument.stages import STAGE_ATTRIBUTE, record_span, stage, stage_attributes
from tailscope.instrument.waits import (
    LOCK_WAIT,
    AsyncTracedLock,
    TracedLock,
    record_queue_wait,
    traced_lock,
)

__all__ = [
    "GC_EVENT",
    "LOCK_WAIT",
    "MODES",
    "STAGE_ATTRIBUTE",
    "AsyncTracedLock",
    "TracedLock",
    "attach_gc_pauses",
    "freeze_after_startup",
    "install",
    "mode",
    "record_queue_wait",
    "record_span",
    "request",
    "set_mode",
    "stage",
    "stage_attributes",
    "traced_lock",
    "uninstall",
    "use",
]
