"""Services built from a mechanism for issue 25's rule tests (test_diagnosis_mechanisms.py): each
plants one physical cause (a cache's slow path, a client deadline and retry, a payload that grows, a
CPU quota's stalls, a worker pool's accept queue, cold replicas, a gateway's pauses) on
mechanism_frames.TraceBuilder traces."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import Pauses, TraceBuilder, lognormal

BASE = [("auth", "Internal", 0.4, 0.3), ("featurize", "Internal", 1.5, 0.3), ("infer", "Internal", 8.0, 0.15)]


def work_spans(b: TraceBuilder, root: int, inst: str, cur: float, stages=BASE, scale: float = 1.0) -> float:
    """`stages` (name, kind, median ms, sigma) one after another under `root` from `cur`, each
    lognormal and `scale` times as long (a cold replica); the time after the last."""
    for name, kind, median, sigma in stages:
        d = lognormal(b.rng, median, sigma) * scale
        b.span(root, name, kind, inst, cur, d)
        cur += d + 0.02
    return cur


def two_mode_service(seed: int, child_on_slow: bool = False, hit_attribute: bool = False):
    """A lookup that takes a slow path 15 % of the time (6x slower)."""
    b = TraceBuilder(seed)
    for t in b.arrivals(3000, 150):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = t + 0.05
        slow = b.rng.random() < 0.15
        work = lognormal(b.rng, 12.0 if slow else 2.0, 0.2)
        attrs = {"lookup.hit": not slow} if hit_attribute else {}
        look = b.span(root, "load_profile", "Internal", inst, cur, work, **attrs)
        if slow and child_on_slow:
            b.span(look, "SELECT profiles", "Client", inst, cur + 0.3, work - 0.5, db__system="postgresql")
        cur += work + 0.02
        cur = work_spans(b, root, inst, cur)
        b.set_end(root, cur + 0.05)
    return b.frame()


def planted_pauses(
    b: TraceBuilder, instances: list[str], every_ms: float, lengths: tuple[float, float], until_ms: float
) -> Pauses:
    out = {}
    for inst in instances:
        t, spans = b.rng.uniform(0, every_ms), []
        while t < until_ms:
            length = b.rng.uniform(*lengths)
            spans.append((t, t + length))
            t += length + b.rng.uniform(0.5 * every_ms, 1.5 * every_ms)
        out[inst] = spans
    return Pauses(out)


def calling_service(
    seed: int,
    deadline_ms: float | None,
    hang_rate: float = 0.04,
    fan_out: bool = False,
    callee_spans: bool = False,
    callee_forward: bool = False,
):
    """Each request calls a ranker; a few calls hang on the callee's side. With a deadline the
    client gives up at `deadline_ms` (error status) and calls again; without one, a request that
    needs a second page calls again after the first answer; with `fan_out`, two calls side by side; with
    `callee_forward`, the call is to a model's forward pass (a gRPC method of a model service)."""
    b = TraceBuilder(seed)
    if callee_forward:
        b.stages["ranker.v1.RankModel/Predict"] = "model_forward"
    for t in b.arrivals(4000, 120):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /rank", "Server", inst, t, 0.0)
        cur = t + 0.05
        cur = work_spans(b, root, inst, cur, BASE[:2])
        attempts = 1
        while True:
            callee = lognormal(b.rng, 5.0, 0.3)
            hang = b.rng.random() < hang_rate
            if hang:
                callee += b.rng.uniform(100.0, 2000.0)
            cut = deadline_ms is not None and callee > deadline_ms
            d = deadline_ms + b.rng.uniform(0.0, 0.3) if cut else callee
            attrs = (
                {"server.address": "ranker", "otel.status_code": "Error"}
                if cut
                else {"server.address": "ranker"}
            )
            rpc = "ranker.v1.RankModel/Predict" if callee_forward else "GET /rank"  # gRPC: named alike
            call = b.span(root, rpc, "Client", inst, cur, d, **attrs)
            if callee_spans or callee_forward:  # the callee's side runs to its end whatever the caller does
                b.span(call, rpc, "Server", f"ranker/{int(b.rng.integers(2))}", cur + 0.2, callee)
            if fan_out:
                b.span(
                    root,
                    "GET /rank",
                    "Client",
                    inst,
                    cur + 0.01,
                    lognormal(b.rng, 5.0, 0.3),
                    server__address="ranker",
                )
            cur += d + 0.05
            again = cut if deadline_ms is not None else (hang and attempts == 1)
            if not again or attempts >= 2:
                break
            attempts += 1
        d = lognormal(b.rng, 8.0, 0.15)
        b.span(root, "infer", "Internal", inst, cur, d)
        b.set_end(root, cur + d + 0.05)
    return b.frame()


def payload_service(seed: int, grows: bool):
    """The response body varies over two orders of magnitude (the root records its size); encoding
    it costs 25 ms per MB when `grows`, a fixed 0.5 ms otherwise. A small parse step follows the
    request body's size in both."""
    b = TraceBuilder(seed)
    for t in b.arrivals(3000, 100):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        out_bytes = int(200_000 * np.exp(b.rng.normal(0.0, 1.1)))
        in_bytes = int(2_000 * np.exp(b.rng.normal(0.0, 0.8)))
        root = b.span(
            None,
            "GET /feed",
            "Server",
            inst,
            t,
            0.0,
            http__response__body__size=out_bytes,
            http__request__body__size=in_bytes,
            user__id=int(b.rng.integers(1_000_000)),
        )
        cur = t + 0.05
        d = 0.05 + in_bytes / 1e6 * 2.0
        b.span(root, "parse", "Internal", inst, cur, d)
        cur += d + 0.02
        cur = work_spans(b, root, inst, cur, BASE[1:])
        d = (0.3 + out_bytes / 1e6 * 25.0 if grows else 0.5) * lognormal(b.rng, 1.0, 0.1)
        b.span(root, "render", "Internal", inst, cur, d)
        b.set_end(root, cur + d + 0.05)
    return b.frame()


def stalled_service(seed: int, throttled: bool, gc_events: bool = False, lengths: tuple = (10.0, 60.0),
                    timer: bool = False):
    """Process-wide stalls on three instances. Throttled: a CPU quota runs out in some 100 ms periods
    and the process sleeps until the next period starts (stalls of `lengths` ms ending on the instance's
    period boundary). Otherwise GC-like pauses of the same lengths starting at random moments, or with
    `timer` at one phase of the period (a timer-driven collection: its start and end both keep it)."""
    b = TraceBuilder(seed)
    instances = ["api/0", "api/1", "api/2"]
    until = 40_000.0
    stalls: dict[str, list[tuple[float, float]]] = {}
    for inst in instances:
        phase = 100.0 * b.rng.random()
        periods = np.arange(phase, until, 100.0)
        hit = periods[b.rng.random(len(periods)) < 0.06]
        long = b.rng.uniform(*lengths, len(hit))
        if throttled:
            stalls[inst] = [(e - length, e) for e, length in zip(hit, long, strict=True)]
        elif timer:
            stalls[inst] = [(e, e + length) for e, length in zip(hit, long, strict=True)]
        else:
            starts = np.sort(b.rng.uniform(0, until, len(hit)))
            stalls[inst] = [(s, s + length) for s, length in zip(starts, long, strict=True)]
    pauses = Pauses(stalls)
    for t in b.arrivals(6000, 150):
        b.new_trace()
        inst = instances[int(b.rng.integers(3))]
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = t + 0.05
        for name, kind, median, sigma in BASE:
            end = pauses.run(inst, cur, lognormal(b.rng, median, sigma))
            b.span(root, name, kind, inst, cur, end - cur)
            cur = end + 0.02
        b.set_end(root, cur + 0.05)
    gc = [(inst, a, b_) for inst, spans in stalls.items() for a, b_ in spans] if gc_events else None
    return b.frame(gc=gc)


def worker_pool_service(
    seed: int, workers: int, bursts: bool = True, rate: float = 200.0, slow_wire: float = 0.0
):
    """A caller sends calls (with bursts, or at a steady `rate`) to a server with `workers` slots per
    instance: a call's SERVER span starts when a slot is free (the wait shows as the client-server gap),
    the wire adds ~0.4 ms, and 40 ms more on a `slow_wire` share of calls (retransmits)."""
    b = TraceBuilder(seed)
    free = {inst: [0.0] * workers for inst in ("model/0", "model/1")}
    t, times = 0.0, []
    while len(times) < 6000:
        now = 700.0 if bursts and (t // 2000) % 5 == 4 else rate  # a burst for 2 s out of every 10 s
        t += b.rng.exponential(1000.0 / now)
        times.append(t)
    for i, t in enumerate(times):
        b.new_trace()
        inst = ("model/0", "model/1")[i % 2]
        wire = lognormal(b.rng, 0.4, 0.1) + (40.0 if b.rng.random() < slow_wire else 0.0)
        slots = free[inst]
        k = int(np.argmin(slots))
        start = max(t + wire, slots[k])
        cli = b.span(None, "POST /predict", "Client", f"web/{i % 3}", t, 0.0)
        root = b.span(cli, "POST /predict", "Server", inst, start, 0.0)
        cur = start + 0.05
        cur = work_spans(b, root, inst, cur)
        b.set_end(root, cur)
        slots[k] = cur
        b.set_end(cli, cur + lognormal(b.rng, 0.4, 0.1))
    return b.frame()


def autoscaled_service(seed: int):
    """Two instances serve steady traffic; at each burst a new instance starts and takes a share of
    the calls, its first requests slow in every stage (cold caches, JIT, lazy loading)."""
    b = TraceBuilder(seed)
    served: dict[str, int] = {}
    live = ["api/0", "api/1"]
    t, count = 0.0, 0
    while count < 12000:
        burst = (t // 3000) % 4 == 3
        t += b.rng.exponential(1000.0 / (1200.0 if burst else 400.0))
        if burst and len(live) < 2 + int(t // 12000) + 1:
            live.append(f"api/{len(live)}")  # a replica added for the burst, cold
        inst = live[int(b.rng.integers(len(live)))]
        n = served.get(inst, 0)
        served[inst] = n + 1
        cold = 1.0 + 5.0 * np.exp(-n / 150.0) if inst not in ("api/0", "api/1") else 1.0
        b.new_trace()
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = t + 0.05
        cur = work_spans(b, root, inst, cur, scale=cold)
        b.set_end(root, cur + 0.05)
        count += 1
    return b.frame()


def gateway_service(seed: int, gateway_pauses: bool, rps: float = 150.0, forward_stage: bool = False):
    """A gateway (two instances) forwards every request to a model server (three instances) that does
    the work. With `gateway_pauses`, the gateway's processes stop for 50-150 ms every ~3 s: whatever a
    gateway instance must do during a pause (forward, read the response, reply) waits for its end.
    With `forward_stage`, 'infer' is known as the model's forward pass (the stage mapping's)."""
    b = TraceBuilder(seed)
    if forward_stage:
        b.stages["infer"] = "model_forward"
    gws = ["gw/0", "gw/1"]
    pauses = planted_pauses(b, gws, 3000.0, (50.0, 150.0), 60_000.0) if gateway_pauses else Pauses()
    pauses_until = 60_000.0 * 150.0 / rps
    if gateway_pauses:
        pauses = planted_pauses(b, gws, 3000.0, (50.0, 150.0), pauses_until)
    for t in b.arrivals(8000, rps):
        b.new_trace()
        gw, model = gws[int(b.rng.integers(2))], f"model/{int(b.rng.integers(3))}"
        outer = b.span(None, "POST /api/score", "Server", gw, t, 0.0)  # accepted, then handled
        c_start = pauses.run(gw, t, lognormal(b.rng, 0.15, 0.3))
        call = b.span(outer, "grpc score", "Client", gw, c_start, 0.0)
        s_start = c_start + lognormal(b.rng, 0.2, 0.2)
        root = b.span(call, "Score", "Server", model, s_start, 0.0)
        cur = s_start + 0.05
        for name, kind, median, sigma in BASE:
            d = lognormal(b.rng, median, sigma)
            b.span(root, name, kind, model, cur, d)
            cur += d + 0.02
        b.set_end(root, cur)
        c_end = pauses.run(gw, cur + lognormal(b.rng, 0.2, 0.2), 0.05)
        b.set_end(call, c_end)
        b.set_end(outer, pauses.run(gw, c_end, lognormal(b.rng, 0.1, 0.3)))
    return b.frame()


def burst_replicas(seed):
    """Two warm instances; each 3 s burst (every 12 s) adds a replica that serves only that burst, its
    first requests slow in every stage."""
    b = TraceBuilder(seed)
    served = {}
    t, count = 0.0, 0
    while count < 12000:
        k = int(t // 3000)
        burst = k % 4 == 3
        t += b.rng.exponential(1000.0 / (1500.0 if burst else 400.0))
        live = ["api/0", "api/1"] + ([f"api/burst{k}"] if burst else [])
        inst = live[int(b.rng.integers(len(live)))]
        n = served.get(inst, 0)
        served[inst] = n + 1
        cold = 1.0 + 4.0 * np.exp(-n / 150.0) if "burst" in inst else 1.0
        b.new_trace()
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = t + 0.05
        cur = work_spans(b, root, inst, cur, scale=cold)
        b.set_end(root, cur + 0.05)
        count += 1
    return b.frame()

