"""Blind family `bff-fanout`: a Node.js backend-for-frontend that fans out to four backends at once.

Shape (OTLP/JSON lines, OTel JS conventions): `storefront-bff` (Node.js, 3-5 pods) serves
`GET /api/home`; its SERVER span has four parallel CLIENT children named by method only (`GET`,
`POST`: `profile-svc`, `recs-model`, `pricing-svc`, `inventory-svc`, told apart by `server.address`
and `url.full`), each with its backend's SERVER span beneath, then `mapRecommendations` and
`renderHome`. The recommendation model's SERVER span holds `score_candidates` and `json.dumps`.
Instances: `service.instance.id` + `host.name` (pod); the BFF pods also carry `process.pid`.

Mechanisms:

- **One event loop per BFF pod**: every callback of every request on a pod runs on one thread, in
  the order it became ready. A span starts or ends when its callback runs; a long callback (parsing a
  big response) delays every other request's callbacks on that pod. V8's garbage collector stops the
  loop: minor scavenges of 1-4 ms always; `gc` adds mark-compact pauses of 60-200 ms every 1-3 s per
  pod (a heap near its limit). Seeds 0, 1 (mod 4) report GC as `v8js.gc` span events
  (`v8js.gc.type`, `v8js.gc.duration` in s) on the SERVER span; others report nothing.
- **Fan-out**: the page waits for all four responses (Promise.all), so the slowest backend sets the
  request's time. `slow-backend`: inventory-svc's own time gets a heavy tail (row locks in its
  database, not traced): 10 % of its calls add a Pareto delay (25 ms scale, alpha 1.2).
- **Client timeout and retry** (`timeout-retry`): pricing calls carry a 120 ms timeout and one retry.
  Pricing slows (7 % of its calls add a Pareto delay of 50 ms scale, alpha 1.1); a call still
  unanswered at the deadline ends when the timer callback runs, with status ERROR and
  `error.type=ETIMEDOUT`, and a second `GET` to the same peer (`http.request.resend_count=1`)
  follows at once. The abandoned call's SERVER span at pricing runs on to its own end.
- **Payload size** (`large-payload`): some clients ask for whole catalogue pages, so recommendation
  responses grow from ~50 items (~75 kB) to a heavy-tailed count (median 180, up to 5,000 items of
  1.5 kB). The model scores the same candidates; what grows is `json.dumps` at the model (~60 MB/s),
  the transfer (~120 MB/s, in the CLIENT span, with `http.response.body.size`), and the BFF's
  JSON.parse in `mapRecommendations` (~250 MB/s, `app.recs.count`), which also holds the loop.

Truth: slow_dependency at inventory-svc (stage downstream); timeout_retry at the BFF, whose deadline
acts (peer pricing-svc; the slow pricing service is a side mechanism); large_payload on the recs path
(stage downstream); gc_pause on the BFF pods.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    lognormal_ms,
    poisson_arrivals,
    random_pauses,
)

FAMILY = "bff-fanout"
BFF = "storefront-bff"
# backend -> (service, method, path, port, median ms, sigma, pods)
BACKENDS = {
    "profile": ("profile-svc", "GET", "/v2/profile/{id}", 8080, 4.0, 0.3, 2),
    "recs": ("recs-model", "POST", "/v1/predict", 9000, 16.0, 0.22, 3),
    "pricing": ("pricing-svc", "GET", "/quotes", 8443, 6.0, 0.3, 2),
    "inventory": ("inventory-svc", "GET", "/availability", 8080, 5.0, 0.35, 2),
}
TIMEOUT_MS = 120.0
ITEM_BYTES = 1500
SCENARIOS = ("healthy", "slow-backend", "timeout-retry", "large-payload", "gc+slow-backend")
PODS = (3, 4, 5)
RPS = (90.0, 120.0, 150.0)


def setup(seed: int) -> dict[str, Any]:
    return {"pods": PODS[seed % 3], "rps": RPS[seed % 3], "gc_events": seed % 4 < 2, "fmt": "otlp-json"}


def _pods(n: int) -> tuple[str, ...]:
    return tuple(f"storefront-bff-5d8f-{k}" for k in range(n))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    pods = _pods(setup(seed)["pods"])
    slow = Cause(
        "slow_dependency", "downstream", "GET", "inventory-svc", tuple(f"inventory-svc-{k}" for k in range(2))
    )
    table = {
        "healthy": (),
        "slow-backend": (slow,),
        "timeout-retry": (Cause("timeout_retry", "downstream", "GET", BFF, pods, side=("slow_dependency",)),),
        "large-payload": (Cause("large_payload", "downstream", "POST", BFF, pods),),
        "gc+slow-backend": (Cause("gc_pause", None, "GET /api/home", BFF, pods), slow),
    }
    if scenario not in table:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(table)}")
    return table[scenario]


class _Call:
    """One backend call attempt: when it left, when the backend answered, and its span's end."""

    def __init__(self, backend: str, start: float, attempt: int) -> None:
        self.backend, self.start, self.attempt = backend, start, attempt
        self.server: tuple[int, float, float] = (0, 0.0, 0.0)  # backend pod, SERVER start, end
        self.arrive = self.end = 0.0  # the reply is in; the callback that ends the span has run
        self.timed_out = False
        self.size = 0
        self.dumps = (0.0, 0.0)


class _Request:
    def __init__(self, arrive: float, pod: int, items: int) -> None:
        self.arrive, self.pod, self.items = arrive, pod, items
        self.start = self.end = 0.0
        self.calls: list[_Call] = []
        self.pending = 4
        self.map = self.render = (0.0, 0.0)


def _backend_call(
    rng: random.Random, req: _Request, backend: str, start: float, attempt: int, parts: set[str]
) -> _Call:
    *_, median, sigma, pods = BACKENDS[backend]
    call = _Call(backend, start, attempt)
    s0 = start + lognormal_ms(rng, 0.35, 0.3)
    own = lognormal_ms(rng, median, sigma)
    if backend == "inventory" and "slow-backend" in parts and rng.random() < 0.10:
        own += 25.0 * NS_PER_MS * rng.paretovariate(1.2)
    if backend == "pricing" and "timeout-retry" in parts and rng.random() < 0.07:
        own += 50.0 * NS_PER_MS * rng.paretovariate(1.1)
    size = 2_000 + rng.randint(0, 3_000)
    if backend == "recs":
        size = req.items * ITEM_BYTES + 400
        dumps = size / 60e6 * NS_PER_S * rng.lognormvariate(0, 0.1)
        call.dumps = (s0 + own, s0 + own + dumps)
        own += dumps
    call.size = size
    call.server = (rng.randrange(pods), s0, s0 + own)
    call.arrive = call.end = s0 + own + lognormal_ms(rng, 0.35, 0.3) + size / 120e6 * NS_PER_S  # + transfer
    return call


def _run_pod(rng: random.Random, requests: list[_Request], stalls: Stalls, parts: set[str]) -> None:
    """The pod's event loop: callbacks in the order they become ready, one at a time."""
    ready: list[tuple[float, int, int, str, Any]] = []
    seq = 0
    for i, req in enumerate(requests):
        ready.append((req.arrive, seq, i, "accept", None))
        seq += 1
    heapq.heapify(ready)
    loop_free = 0.0
    while ready:
        t, _, i, step, call = heapq.heappop(ready)
        req = requests[i]
        start = stalls.settle(max(t, loop_free))
        if step == "accept":
            req.start = start
            t = stalls.run(start, lognormal_ms(rng, 0.35, 0.3))
            for backend in BACKENDS:
                t = stalls.run(t, lognormal_ms(rng, 0.06, 0.3))
                c = _backend_call(rng, req, backend, t, 0, parts)
                req.calls.append(c)
                deadline = t + TIMEOUT_MS * NS_PER_MS if backend == "pricing" else float("inf")
                heapq.heappush(ready, (min(c.end, deadline), seq, i, "reply", c))
                seq += 1
            loop_free = t
        elif step == "reply":
            call.end = start
            loop_free = stalls.run(start, lognormal_ms(rng, 0.05, 0.3))
            if call.backend == "pricing" and call.arrive > call.start + TIMEOUT_MS * NS_PER_MS:
                call.timed_out = True
                if call.attempt == 0:
                    retry = _backend_call(rng, req, "pricing", loop_free, 1, parts)
                    req.calls.append(retry)
                    heapq.heappush(
                        ready, (min(retry.end, loop_free + TIMEOUT_MS * NS_PER_MS), seq, i, "reply", retry)
                    )
                    seq += 1
                    continue
            req.pending -= 1
            if req.pending == 0:
                heapq.heappush(ready, (loop_free, seq, i, "render", None))
                seq += 1
        else:
            parse = (
                req.items * ITEM_BYTES / 250e6 * NS_PER_S + lognormal_ms(rng, 0.4, 0.3)
            ) * rng.lognormvariate(0, 0.1)
            map_e = stalls.run(start, parse)
            render_s = stalls.run(map_e, lognormal_ms(rng, 0.02, 0.4))
            render_e = stalls.run(render_s, lognormal_ms(rng, 2.5, 0.35))
            req.map, req.render = (start, map_e), (render_s, render_e)
            req.end = stalls.run(render_e, lognormal_ms(rng, 0.12, 0.3))
            loop_free = req.end


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+"))
    rng = random.Random(seed * 1_000_033 + 29)
    table = TraceTable(seed, 0xBFF0)
    arrivals = poisson_arrivals(rng, s["rps"], requests)
    horizon = arrivals[-1] + 5 * NS_PER_S
    pauses = []
    for _ in range(s["pods"]):
        minor = random_pauses(rng, horizon, (0.4, 1.2), (1.0, 4.0))
        major = random_pauses(rng, horizon, (1.0, 3.0), (60.0, 200.0)) if "gc" in parts else []
        pauses.append(sorted(minor + major))
    stalls = [Stalls(p) for p in pauses]
    large = "large-payload" in parts
    reqs = [
        _Request(
            t,
            rng.randrange(s["pods"]),
            min(5000, max(10, int(180 * rng.lognormvariate(0, 1.1)))) if large else rng.randint(30, 70),
        )
        for t in arrivals
    ]
    for pod in range(s["pods"]):
        _run_pod(rng, [r for r in reqs if r.pod == pod], stalls[pod], parts)
    bff = [
        table.resource(
            {
                "service.name": BFF,
                "service.instance.id": f"{rng.getrandbits(128):032x}",
                "host.name": name,
                "process.pid": rng.randrange(7, 400),
                "process.runtime.name": "nodejs",
                "process.runtime.version": "20.11.1",
                "telemetry.sdk.language": "nodejs",
            },
            f"10.30.1.{10 + k}",
            3000,
        )
        for k, name in enumerate(_pods(s["pods"]))
    ]
    backend_res = {
        b: [
            table.resource(
                {
                    "service.name": svc,
                    "service.instance.id": f"{rng.getrandbits(128):032x}",
                    "host.name": f"{svc}-{k}",
                },
                f"10.30.2.{10 * j + k}",
                port,
            )
            for k in range(pods)
        ]
        for j, (b, (svc, _m, _p, port, _md, _sg, pods)) in enumerate(BACKENDS.items())
    }
    for req in reqs:
        trace = table.new_trace()
        res = bff[req.pod]
        events = []
        if s["gc_events"]:
            events = [
                (
                    b,
                    "v8js.gc",
                    {
                        "v8js.gc.type": "major" if b - a > 20 * NS_PER_MS else "minor",
                        "v8js.gc.duration": round((b - a) / NS_PER_S, 6),
                    },
                )
                for a, b in stalls[req.pod].overlapping(req.start, req.end)
            ]
        root = table.span(
            trace,
            None,
            "GET /api/home",
            "Server",
            res,
            "@opentelemetry/instrumentation-http",
            req.start,
            req.end,
            {
                "http.request.method": "GET",
                "http.route": "/api/home",
                "http.response.status_code": 200,
                "url.scheme": "https",
            },
            events=events,
        )
        for call in req.calls:
            svc, method, path, port, *_ = BACKENDS[call.backend]
            attrs: dict[str, Any] = {
                "http.request.method": method,
                "server.address": svc,
                "server.port": port,
                "url.full": f"http://{svc}:{port}{path}",
            }
            if call.attempt:
                attrs["http.request.resend_count"] = call.attempt
            status, message = "Unset", ""
            if call.timed_out:
                attrs["error.type"] = "ETIMEDOUT"
                status, message = "Error", f"Timeout awaiting 'request' for {TIMEOUT_MS:g}ms"
            else:
                attrs.update({"http.response.status_code": 200, "http.response.body.size": call.size})
            span = table.span(
                trace,
                root,
                method,
                "Client",
                res,
                "@opentelemetry/instrumentation-http",
                call.start,
                call.end,
                attrs,
                status,
                message,
                peer=svc,
            )
            pod, s0, s1 = call.server
            server = table.span(
                trace,
                span,
                f"{method} {path}",
                "Server",
                backend_res[call.backend][pod],
                "opentelemetry.instrumentation.flask" if call.backend == "recs" else "otel.http",
                s0,
                s1,
                {
                    "http.request.method": method,
                    "http.route": path,
                    "http.response.status_code": 200,
                    "http.response.body.size": call.size,
                },
            )
            if call.backend == "recs":
                table.span(
                    trace,
                    server,
                    "score_candidates",
                    "Internal",
                    backend_res["recs"][pod],
                    "recs",
                    s0 + 0.1 * NS_PER_MS,
                    call.dumps[0],
                )
                table.span(
                    trace,
                    server,
                    "json.dumps",
                    "Internal",
                    backend_res["recs"][pod],
                    "recs",
                    *call.dumps,
                    {"app.recs.count": req.items},
                )
        table.span(
            trace,
            root,
            "mapRecommendations",
            "Internal",
            res,
            "storefront",
            *req.map,
            {"app.recs.count": req.items},
        )
        table.span(trace, root, "renderHome", "Internal", res, "storefront", *req.render)
    return table
