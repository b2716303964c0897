"""Open-loop load: Poisson arrivals at a (piecewise constant) rate, sent asynchronously.

Arrival times are drawn before the run (thinning handles burst windows), and every request is sent
at its time on its own task whatever the earlier ones are doing, so a slow server meets the same
arrivals as a fast one (no coordinated omission). Payloads: texts of log-normally distributed length
from the synthetic corpus, entity ids with Zipf popularity. Each request is a CLIENT span of service
tailscope-loadgen whose W3C `traceparent` the server continues; the latency recorded is the
client's (send → full response).

Closed loop (`LoadShape.concurrency` > 0), for throughput benchmarks only: that many clients each
send their next request as soon as the last one answers, for the duration. It keeps the server
saturated with a fixed, small number of connections, so the load generator (on the same machine)
does not compete with the server the way an ever-growing open-loop backlog does; it hides queueing,
so tail studies use the open loop.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass, field

import httpx
import orjson
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from reference_pipeline import span_model as sm
from reference_pipeline.features import entity_id
from reference_pipeline.scenarios import LoadShape
from reference_pipeline.text import Corpus
from tailscope.instrument.sampling import KEEP

CLOSED_LOOP_PAYLOADS = 4096
CLOSED_LOOP_MAX_RPS = 20_000


def arrival_times(shape: LoadShape, rng: random.Random) -> list[float]:
    """Seconds from the start of the run, by thinning a Poisson process at the peak rate."""
    peak = max([shape.rps] + [shape.rps * m for _, _, m in shape.bursts])
    times, t = [], 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= shape.duration_s:
            return times
        if rng.random() * peak < shape.rate_at(t):
            times.append(t)


def make_payloads(n: int, rng: random.Random, n_entities: int, corpus: Corpus | None = None) -> list[bytes]:
    corpus = corpus or Corpus()
    cumulative, total = [], 0.0
    for rank in range(n_entities):
        total += 1.0 / (rank + 1) ** 1.1
        cumulative.append(total)
    # popularity rank → entity: a fixed shuffle, so the popular entities are not simply the first ids
    order = list(range(n_entities))
    random.Random(23).shuffle(order)
    payloads = []
    for i in range(n):
        rank = rng.choices(range(n_entities), cum_weights=cumulative)[0]
        words = max(3, min(90, int(rng.lognormvariate(math.log(16), 0.6))))
        payloads.append(
            orjson.dumps(
                {
                    "request_id": f"r{i:07d}",
                    "entity_id": entity_id(order[rank]),
                    "text": corpus.sentence(rng, words),
                }
            )
        )
    return payloads


@dataclass
class LoadResult:
    latencies_ms: list[float] = field(default_factory=list)  # completed requests, in arrival order
    statuses: list[int] = field(default_factory=list)
    sent: int = 0
    errors: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0  # the load generator's own CPU seconds (its processes', start-up included)

    def quantile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> dict:
        ok = sum(1 for s in self.statuses if s == 200)
        return {
            "requests": self.sent,
            "errors": self.errors,
            "p50_ms": round(self.quantile(0.5), 2),
            "p99_ms": round(self.quantile(0.99), 2),
            "throughput_rps": round(ok / self.wall_s, 2) if self.wall_s else 0.0,
            "loadgen_cpu_ms_per_request": round(1000 * self.cpu_s / max(self.sent, 1), 2),
        }


async def run_load(
    url: str,
    shape: LoadShape,
    tracer: trace.Tracer,
    *,
    n_entities: int = 5000,
    seed: int = 1,
    drain_s: float = 30.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> LoadResult:
    """Send the whole schedule to `url` (…/v1/predict); wait up to drain_s for stragglers."""
    rng = random.Random(seed)
    if shape.concurrency > 0:  # closed loop: a pool of payloads, reused in turn; slots for the most
        times = []  # requests the duration could hold
        payloads = make_payloads(CLOSED_LOOP_PAYLOADS, rng, n_entities)
        slots: list[tuple[float, int] | None] = [None] * int(shape.duration_s * CLOSED_LOOP_MAX_RPS)
    else:
        times = arrival_times(shape, rng)
        payloads = make_payloads(len(times), rng, n_entities)
        slots = [None] * len(times)
    result = LoadResult(sent=len(times))

    async def one(client: httpx.AsyncClient, i: int) -> None:
        with tracer.start_as_current_span(
            sm.ROOT_SPAN,
            kind=SpanKind.CLIENT,
            attributes={"http.request.method": "POST", "url.full": url},
        ) as span:
            headers = {"content-type": "application/json"}
            propagate.inject(headers)
            start = time.perf_counter()
            try:
                response = await client.post(url, content=payloads[i % len(payloads)], headers=headers)
                status = response.status_code
            except httpx.HTTPError as exc:
                status = 0
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            slots[i] = ((time.perf_counter() - start) * 1000, status)
            if status and (sampled := response.headers.get(sm.SAMPLED_HEADER)) is not None:
                span.set_attribute(KEEP, sampled == "1")  # the service's keep decision
            if status:
                span.set_attribute("http.response.status_code", status)
                if status >= 400:
                    span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))

    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=1024)
    async with httpx.AsyncClient(limits=limits, timeout=drain_s, transport=transport) as client:
        loop = asyncio.get_running_loop()
        begin = loop.time()
        if shape.concurrency > 0:
            return await _closed_loop(client, shape, one, slots, result, begin)
        tasks = []
        for i, at in enumerate(times):
            delay = begin + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(client, i)))
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=drain_s)
            for task in pending:
                task.cancel()
        result.wall_s = loop.time() - begin
    return _collect(slots, result)


def _collect(slots: list[tuple[float, int] | None], result: LoadResult) -> LoadResult:
    for slot in slots:
        if slot is None:
            result.errors += 1
            continue
        latency, status = slot
        result.latencies_ms.append(latency)
        result.statuses.append(status)
        if status != 200:
            result.errors += 1
    return result


async def _closed_loop(client, shape: LoadShape, one, slots: list, result: LoadResult, begin: float):
    """`shape.concurrency` clients, each sending payload after payload until the duration is over."""
    loop = asyncio.get_running_loop()
    next_index = 0

    async def client_loop() -> None:
        nonlocal next_index
        while loop.time() - begin < shape.duration_s and next_index < len(slots):
            i, next_index = next_index, next_index + 1
            await one(client, i)

    await asyncio.gather(*(client_loop() for _ in range(shape.concurrency)))
    result.wall_s = loop.time() - begin
    del slots[next_index:]
    result.sent = next_index
    return _collect(slots, result)
