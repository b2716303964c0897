"""The fraud-check family's model (fraud_check.py): arrivals at the payments API, the draw of each
request (history size, profile misses, grey zone, vendor answers, service times), which scorer pod
and worker process takes it (gunicorn's recycling included), each pod's CFS quota, then every worker
process's event loop (fraud_check_loop.py), and the spans of both services in the table."""

from __future__ import annotations

import math
import random
from typing import Any

from reference_pipeline.simulate.fraud_check_loop import GcModel, Request, Worker, handle
from reference_pipeline.simulate.fraud_check_spans import caller_resource, emit_scorer, names, scorer_resource
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Stalls,
    TraceTable,
    lognormal_ms,
    poisson_arrivals,
    random_pauses,
)

PODS = (3, 2, 4)
WORKERS = (2, 3, 2)
CALLERS = 3
CPU_PER_REQUEST_S = 0.0068
PERIOD = 100 * NS_PER_MS  # the CFS period
FIRST_PID = 7  # gunicorn's master is pid 1; its workers are forked after the app's imports
MISS_BASE = {"card": 0.02, "merchant": 0.005, "device": 0.035}
MISS_WAVE = {"card": 0.75, "merchant": 0.45, "device": 0.8}
HEALTHY_GC = GcModel(
    30 * NS_PER_MS,
    (0.3 * NS_PER_MS, 1.2 * NS_PER_MS),
    (1.5 * NS_PER_S, 3.0 * NS_PER_S),
    (12 * NS_PER_MS, 35 * NS_PER_MS),
)
LEAKY_GC = GcModel(
    30 * NS_PER_MS,
    (0.3 * NS_PER_MS, 1.2 * NS_PER_MS),
    (0.1 * NS_PER_S, 0.25 * NS_PER_S),
    (180 * NS_PER_MS, 380 * NS_PER_MS),
    growth=0.5,
)


def pod_names(seed: int, n: int) -> list[str]:
    rng = random.Random(seed * 31 + 5)
    template = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(10))
    return [
        f"fraud-scorer-{template[:9]}-{''.join(rng.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(5))}"
        for _ in range(n)
    ]


def pod_ip(p: int) -> str:
    return f"10.60.{p}.{17 + 3 * p}"


def workers_per_pod(s: dict[str, Any], parts: set[str]) -> int:
    return 1 if "request-burst" in parts else s["workers"]


def pid(generation: int, slot: int, workers: int) -> int:
    return FIRST_PID + generation * workers + slot


def pids_of(s: dict[str, Any], part: str) -> list[tuple[int, int]]:
    """(pod, pid) of the processes a planted cause acts on."""
    w = workers_per_pod(s, {part})
    if part == "worker-gc":
        return [(0, pid(0, 0, w))]
    generation = 1 if part == "worker-recycle" else 0
    return [(p, pid(generation, j, w)) for p in range(s["pods"]) for j in range(w)]


def _miss_rate(key: str, t: float, wave: tuple[float, float] | None) -> float:
    rate = MISS_BASE[key]
    if wave is not None and t >= wave[0]:
        plateau_end = wave[0] + wave[1]
        rate += MISS_WAVE[key] * (1.0 if t < plateau_end else math.exp(-(t - plateau_end) / (0.4 * wave[1])))
    return min(rate, 0.95)


def _vendor_ms(rng: random.Random, slow: bool) -> float:
    if slow:
        return 330.0 * rng.lognormvariate(0.0, 0.45)
    answer = 42.0 * rng.lognormvariate(0.0, 0.35)
    if rng.random() < 0.006:
        answer += 100.0 * rng.paretovariate(1.6)
    return answer


def _draw(
    rng: random.Random, parts: set[str], t: float, index: int, duration: float, served: int, cold: bool
) -> Request:
    """One request's sizes, misses, vendor answers and service times (ns)."""
    big = "large-histories" in parts and rng.random() < 0.25
    items = (
        min(15_000, int(900 * rng.lognormvariate(0.0, 1.0)))
        if big
        else min(300, int(14 * rng.lognormvariate(0.0, 0.7)))
    )
    wave = (0.3 * duration, 0.33 * duration) if "redis-eviction" in parts else None
    misses = tuple(k for k in MISS_BASE if rng.random() < _miss_rate(k, t, wave))
    windows = []  # the vendor's slow periods: three, or one short one beside the worker's GC
    if "vendor-timeouts" in parts:
        windows = (
            [(0.55 * duration, 0.06 * duration)]
            if "worker-gc" in parts
            else [(f * duration, 0.12 * duration) for f in (0.15, 0.45, 0.75)]
        )
    slow = any(a <= t < a + b for a, b in windows)
    vendor = (_vendor_ms(rng, slow), _vendor_ms(rng, slow))
    cold_ms = (lambda first, rate: first * rate**served) if cold else (lambda first, rate: 0.0)
    d = {
        "read": lognormal_ms(rng, 0.12, 0.3),
        "receive": lognormal_ms(rng, 0.03, 0.3) + items * 0.4e3,
        "middleware": lognormal_ms(rng, 0.15, 0.25),
        "routing": lognormal_ms(rng, 0.2, 0.25),
        "validate": lognormal_ms(rng, 0.22, 0.25)
        + items * 8e3 * rng.lognormvariate(0.0, 0.08)
        + cold_ms(25.0, 0.35) * NS_PER_MS,
        "command": lognormal_ms(rng, 0.05, 0.3),
        "redis": lognormal_ms(rng, 0.45, 0.35),
        "redis_connect": lognormal_ms(rng, 3.0, 0.3),
        "decode": lognormal_ms(rng, 0.12, 0.3),
        "connect": lognormal_ms(rng, 32.0, 0.25),
        "compile": lognormal_ms(rng, 0.25, 0.3),
        "velocity": lognormal_ms(rng, 1.8, 0.4),
        "set": lognormal_ms(rng, 0.4, 0.3),
        "assemble": lognormal_ms(rng, 0.15, 0.3),
        "preprocess": lognormal_ms(rng, 0.3, 0.25) + items * 18e3 * rng.lognormvariate(0.0, 0.08),
        "predict": lognormal_ms(rng, 4.2, 0.15) + (cold_ms(150.0, 0.5) + cold_ms(10.0, 0.93)) * NS_PER_MS,
        "vendor_cpu": lognormal_ms(rng, 0.2, 0.3),
        "tls": lognormal_ms(rng, 70.0, 0.3),
        "insert": lognormal_ms(rng, 2.2, 0.3),
        "serialize": lognormal_ms(rng, 0.18, 0.3),
        "send": lognormal_ms(rng, 0.04, 0.3),
        "teardown": lognormal_ms(rng, 0.12, 0.3),
        "kafka": lognormal_ms(rng, 9.0, 0.35),
        "ack": lognormal_ms(rng, 0.03, 0.3),
    }
    for i in range(len(misses)):
        d[f"fallback{i}"] = lognormal_ms(rng, 30.0, 0.45)
    return Request(
        index, t, items, 320 + 240 * items, misses, rng.random() < 0.2, vendor, d, served_index=served
    )


def _cpu_estimate(req: Request) -> float:
    d = req.draws
    per_miss = 2 * d["compile"] + d["command"]
    return (
        d["read"]
        + d["receive"]
        + d["middleware"]
        + d["routing"]
        + d["validate"]
        + 2 * d["command"]
        + d["decode"]
        + 2 * d["compile"]
        + d["assemble"]
        + d["preprocess"]
        + d["predict"]
        + d["serialize"]
        + d["send"]
        + d["teardown"]
        + len(req.misses) * per_miss
        + (3 * d["vendor_cpu"] if req.grey else 0.0)
    )


def _throttling(rng: random.Random, reqs: list[Request], horizon: float, headroom: float) -> Stalls:
    """A pod's CFS stalls, from its demand per period (a fluid model with carry-over): where a
    period's demand d runs over the quota q, the pod's workers stop at q/d of the period until its end."""
    phase = rng.uniform(0.0, PERIOD)
    periods = int(horizon // PERIOD) + 2
    demand = [0.0] * periods
    for req in reqs:
        demand[int((req.arrive - phase) // PERIOD) + 1] += _cpu_estimate(req)
    quota = headroom * sum(demand) / max(1, sum(1 for x in demand if x > 0)) if reqs else PERIOD
    stalls, backlog = [], 0.0
    for k in range(periods):
        need = demand[k] + backlog
        start = phase + (k - 1) * PERIOD
        if need > quota:
            stalls.append((start + PERIOD * quota / need, start + PERIOD))
        backlog = max(0.0, need - quota)
    return Stalls(stalls)


def simulate(s: dict[str, Any], parts: set[str], requests: int) -> TraceTable:
    rng = random.Random(s["seed"] * 1_000_033 + 9)
    table = TraceTable(s["seed"], 0xF7A0D)
    n = names(s)
    w = workers_per_pod(s, parts)
    pods = pod_names(s["seed"], s["pods"])
    duration = requests / s["rps"] * NS_PER_S
    # bursts at ~1.25x what the pods' loops can run (a request takes ~6.8 ms of a loop's CPU)
    burst = 1.25 * s["pods"] * w / (s["rps"] * CPU_PER_REQUEST_S)
    bursts = (
        (
            (0.3 * duration / NS_PER_S, 0.07 * duration / NS_PER_S, burst),
            (0.68 * duration / NS_PER_S, 0.06 * duration / NS_PER_S, burst),
        )
        if "request-burst" in parts
        else ()
    )
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    horizon = arrivals[-1] + 5 * NS_PER_S
    callers = [caller_resource(table, s, k, f"{rng.getrandbits(128):032x}") for k in range(CALLERS)]
    caller_stalls = [Stalls(random_pauses(rng, horizon, (2.0, 6.0), (2.0, 8.0))) for _ in range(CALLERS)]
    recycle = "worker-recycle" in parts
    # (pod, slot) -> the current process: generation, live-from time, requests taken, max_requests
    procs = {
        (p, j): [0, 0.0, 0, _max_requests(rng, requests, s["pods"] * w) if recycle else 10**9]
        for p in range(s["pods"])
        for j in range(w)
    }
    assigned: dict[tuple[int, int, int], list[Request]] = {}
    calls = []
    for i, t0 in enumerate(arrivals):
        c = rng.randrange(CALLERS)
        st = caller_stalls[c]
        root_s = st.settle(t0)
        work_s = st.run(root_s, lognormal_ms(rng, 0.15, 0.3))
        call_s = st.run(work_s, lognormal_ms(rng, 0.6, 0.3))
        arrive = call_s + lognormal_ms(rng, 0.25, 0.3)
        p = rng.randrange(s["pods"])
        live = [j for j in range(w) if procs[(p, j)][1] <= arrive]
        j = rng.choice(live) if live else min(range(w), key=lambda x: procs[(p, x)][1])
        proc = procs[(p, j)]
        arrive = max(arrive, proc[1])  # all workers restarting: the kernel's accept queue holds it
        req = _draw(rng, parts, arrive, i, duration, proc[2], proc[0] > 0)
        assigned.setdefault((p, j, proc[0]), []).append(req)
        proc[2] += 1
        if proc[2] >= proc[3]:  # gunicorn restarts the worker after this request; the new one boots
            procs[(p, j)] = [proc[0] + 1, arrive + rng.uniform(0.15, 0.4) * NS_PER_S, 0, proc[3] * 10]
        calls.append((c, root_s, work_s, call_s, p, j, proc[0], req))
    headroom = (1.75 if "large-histories" in parts else 1.1) if "cpu-throttle" in parts else 4.0
    pod_stalls = [
        _throttling(rng, [r for (p, _j, _g), rs in assigned.items() if p == k for r in rs], horizon, headroom)
        for k in range(s["pods"])
    ]
    resources = {}
    for (p, j, g), reqs in sorted(assigned.items()):
        leaky = "worker-gc" in parts and (p, j, g) == (0, 0, 0)
        worker = Worker(
            pod_stalls[p],
            LEAKY_GC if leaky else HEALTHY_GC,
            _pool_size(parts),
            g == 0,
            random.Random(rng.getrandbits(64)),
            horizon,
        )
        worker.started = reqs[0].arrive
        worker.run(sorted(reqs, key=lambda r: r.arrive), handle)
        resources[(p, j, g)] = scorer_resource(table, s, pods[p], pid(g, j, w), pod_ip(p))
    java = s["caller"] == "java"
    new = s["semconv"] == "new"
    for c, root_s, work_s, call_s, p, j, g, req in calls:
        st = caller_stalls[c]
        call_e = st.settle(req.spans["server"][1] + lognormal_ms(rng, 0.25, 0.3))
        ins_s = st.run(call_e, lognormal_ms(rng, 0.2, 0.3))
        ins_e = st.settle(ins_s + lognormal_ms(rng, 2.0, 0.3))
        work_e = st.run(ins_e, lognormal_ms(rng, 0.1, 0.3))
        root_e = st.run(work_e, lognormal_ms(rng, 0.2, 0.3))
        trace = table.new_trace()
        status = "http.response.status_code" if new else "http.status_code"
        method = "http.request.method" if new else "http.method"
        root = table.span(
            trace,
            None,
            n["caller_root"],
            "Server",
            callers[c],
            "io.opentelemetry.spring-webmvc-6.0" if java else "otelhttp",
            root_s,
            root_e,
            {method: "POST", "http.route": "/v2/payments/authorize", status: 200},
        )
        parent = root
        if java:
            parent = table.span(
                trace,
                root,
                n["caller_work"],
                "Internal",
                callers[c],
                "io.opentelemetry.opentelemetry-instrumentation-annotations-1.16",
                work_s,
                work_e,
            )
        url = "url.full" if new else "http.url"
        call = table.span(
            trace,
            parent,
            n["caller_call"],
            "Client",
            callers[c],
            "io.opentelemetry.java-http-client" if java else "otelhttp",
            call_s,
            call_e,
            {
                method: "POST",
                url: "http://fraud-scorer.payments.svc:8000/v1/score",
                status: 200,
                "server.address" if new else "net.peer.name": "fraud-scorer.payments.svc",
            },
            peer="fraud-scorer",
        )
        score = (
            rng.uniform(0.35, 0.75)
            if req.grey
            else (rng.uniform(0.0, 0.35) if rng.random() < 0.97 else rng.uniform(0.75, 1.0))
        )
        emit_scorer(table, s, trace, call, resources[(p, j, g)], req, score)
        table.span(
            trace,
            parent,
            n["ledger"],
            "Client",
            callers[c],
            "io.opentelemetry.jdbc" if java else "otelsql",
            ins_s,
            ins_e,
            {
                "db.system": "postgresql",
                "db.name": "payments",
                "db.operation": "INSERT",
                "db.sql.table": "authorizations",
            },
            peer="payments-db",
        )
    return table


def _pool_size(parts: set[str]) -> tuple[int, int]:
    """(pool_size, max_overflow) per worker: SQLAlchemy's defaults (5, 10), or the cut to (1, 0)
    ((3, 0) beside the eviction wave)."""
    if "pool-exhaustion" not in parts:
        return 5, 10
    return (3, 0) if "redis-eviction" in parts else (1, 0)


def _max_requests(rng: random.Random, requests: int, processes: int) -> int:
    """`--max-requests` with its jitter, sized so each first-generation worker restarts once in the run."""
    return max(8, int(0.55 * requests / processes * rng.uniform(0.7, 1.3)))
