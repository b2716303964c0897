"""A model server running several instances of its model on one GPU, built from the mechanism
(tests/test_diagnosis_shared_device.py): forward passes that overlap share the device and each runs
slower the more others run beside it. No lock: nothing waits, everything is stretched."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import TraceBuilder, lognormal


def shared_gpu_service(seed: int, n: int = 4000, rps: float = 150.0, instances: int = 4):
    """Requests prepare (~3 ms), then run `forward` (~14 ms alone) on one of two model pods, each with
    `instances` model instances on its GPU: a pass takes 0.6x longer for each other pass running when
    it starts (the device's time shared); with every instance busy a request waits (`queue`)."""
    b = TraceBuilder(seed)
    b.stages.update({"forward": "model_forward", "queue": "queue", "prepare": "preprocessing"})
    free = {m: [0.0] * instances for m in ("model/0", "model/1")}
    for i, t in enumerate(b.arrivals(n, rps)):
        root, call, srv, model, cur = _model_call(b, i, t)
        slots = free[model]
        k = int(np.argmin(slots))
        go = max(cur + 0.25, slots[k])
        if go > cur + 0.3:
            b.span(srv, "queue", "Internal", model, cur + 0.25, go - cur - 0.25)
        busy = sum(1 for j, s in enumerate(slots) if j != k and s > go)  # passes running beside it
        work = lognormal(b.rng, 14.0, 0.2) * (1.0 + 0.6 * busy)  # the device's time shared
        b.span(srv, "forward", "Internal", model, go, work)
        slots[k] = go + work
        b.set_end(srv, go + work + 0.05)
        b.set_end(call, go + work + 0.3)
        b.set_end(root, go + work + 0.5)
    return b.frame()


def locked_section_service(seed: int, n: int = 4000, rps: float = 150.0):
    """The twin with a lock: after the same forward (~14 ms, one pass per instance, never stretched),
    each request scores its results in `rescore` under one mutex per model pod (~10 ms held): a request
    that finds it taken waits inside the span until the holder lets go."""
    b = TraceBuilder(seed)
    b.stages.update({"forward": "model_forward", "rescore": "postprocessing", "prepare": "preprocessing"})
    lock = {"model/0": 0.0, "model/1": 0.0}
    for i, t in enumerate(b.arrivals(n, rps)):
        root, call, srv, model, cur = _model_call(b, i, t)
        work = lognormal(b.rng, 14.0, 0.2)
        b.span(srv, "forward", "Internal", model, cur + 0.25, work)
        at = cur + 0.3 + work
        got = max(at, lock[model])
        hold = lognormal(b.rng, 10.0, 0.2)
        b.span(srv, "rescore", "Internal", model, at, got + hold - at)
        lock[model] = got + hold
        b.set_end(srv, got + hold + 0.05)
        b.set_end(call, got + hold + 0.3)
        b.set_end(root, got + hold + 0.5)
    return b.frame()


def _model_call(b: TraceBuilder, i: int, t: float) -> tuple[int, int, int, str, float]:
    """Request `i` of both services up to its model call: `POST /rank` on one of three api pods, its
    `prepare` (~3 ms), then the `Infer` CLIENT span and its SERVER span on one of two model pods (both
    ended by the caller); returns (root, call, server span, model pod, the call's start in ms)."""
    b.new_trace()
    pod, model = f"api/{i % 3}", ("model/0", "model/1")[i % 2]
    root = b.span(None, "POST /rank", "Server", pod, t, 0.0)
    d = lognormal(b.rng, 3.0, 0.2)
    b.span(root, "prepare", "Internal", pod, t + 0.05, d)
    cur = t + d + 0.1
    call = b.span(root, "Infer", "Client", pod, cur, 0.0)
    srv = b.span(call, "Infer", "Server", model, cur + 0.2, 0.0)
    return root, call, srv, model, cur
