"""A service with an in-process dynamic batcher, built from its mechanism for diagnosis tests: each request
runs a little work, waits in the batcher's queue (a `Batcher.wait` span, stage queue) until its batch
closes (full, or its oldest member has waited `max_wait`, and the previous batch is done), then the batch
runs once (`Model.run`, one span per member with the batch's interval: batched work) with the batch's
`seq.bucket` attribute, and the request answers.

Knobs: the timer (`max_wait`), the arrival rate and a burst, a new kind of input arriving mid-run whose
first batch on each instance compiles (`compile_ms`), kinds that are slow every time (`kind_cost`), and
process stops at given times (`stops`: every thread frozen, as a pause is), a device shared with a
co-tenant (`shared_device`)."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import Pauses, TraceBuilder, lognormal

KINDS = ("s32", "s64", "s128")


def batcher_service(seed: int = 1, n: int = 3000, rps: float = 120.0, max_wait: float = 4.0,
                    max_batch: int = 16, instances: int = 3, burst: float = 1.0,
                    new_kind_from: float | None = None, compile_ms: float = 0.0, kind_cost: float = 1.0,
                    stops: dict[str, list[tuple[float, float]]] | None = None,
                    shared_device: dict[str, list[tuple[float, float]]] | None = None,
                    gc_events: list[tuple[str, float, float]] | None = None, model: str | None = None,
                    into: TraceBuilder | None = None):
    """`burst`: arrivals x this over the middle tenth of the run; `new_kind_from`: from this share of
    the run 15 % of the requests are of a new kind ("s256"), whose first batch on an instance takes
    `compile_ms` more (a compile) and every batch `kind_cost` x the usual (longer inputs);
    `shared_device`: windows (ms) in which an instance's device is time-sliced with a co-tenant (its
    kernels take 3x as long); `gc_events`: (instance, start, end) ms the runtime reports as
    collections. `model`: the queue and the run sit in a span of that name (a server's model, whose
    batcher it is); `into`: add the requests to that builder and return it (several models' batchers
    on one server) instead of the frame."""
    b = into or TraceBuilder(seed)
    b.stages.update({"Batcher.wait": "queue", "Model.run": "model_forward"})
    gaps = b.rng.exponential(1000.0 / rps, n)
    t = np.cumsum(gaps)
    mid = (t > 0.45 * t[-1]) & (t < 0.55 * t[-1])
    gaps[mid] /= burst
    arrive = np.cumsum(gaps)
    horizon = arrive[-1]
    pauses = Pauses(stops)
    inst = b.rng.integers(instances, size=n)
    kind = np.array([KINDS[int(k)] for k in b.rng.integers(3, size=n)], dtype=object)
    if new_kind_from is not None:
        late = (arrive > new_kind_from * horizon) & (b.rng.random(n) < 0.15)
        kind[late] = "s256"
    for i in range(instances):
        name = f"scorer/{i}"
        mine = np.nonzero(inst == i)[0]
        ready = np.array([pauses.run(name, float(arrive[j]) + 0.1, lognormal(b.rng, 1.0, 0.2)) for j in mine])
        free, k, built = 0.0, 0, set(KINDS)
        while k < len(mine):
            opened = ready[k]
            members = [k]
            k += 1
            close = max(opened + max_wait, free)
            while k < len(mine) and len(members) < max_batch and ready[k] <= close:
                members.append(k)
                k += 1
            if len(members) == max_batch:
                close = max(ready[members[-1]], free)
            kinds = {kind[mine[m]] for m in members}
            bucket = "s256" if "s256" in kinds else max(kinds, key=KINDS.index)
            work = (3.0 + 2.0 * len(members)) * b.rng.lognormal(0.0, 0.05)
            if bucket == "s256":
                work *= kind_cost
                if bucket not in built:
                    work += compile_ms * b.rng.lognormal(0.0, 0.1)
                    built.add(bucket)
            if any(a <= close < z for a, z in (shared_device or {}).get(name, ())):
                work *= 3.0
            end = pauses.run(name, close, work)
            free = end
            for m in members:
                j = mine[m]
                b.new_trace()
                a = float(arrive[j])
                root = b.span(None, "POST /score", "Server", name, a, 0.0)
                b.span(root, "Features.build", "Internal", name, a + 0.1, ready[m] - a - 0.1)
                inner = root if model is None else b.span(root, model, "Internal", name, ready[m],
                                                          end - ready[m])
                b.span(inner, "Batcher.wait", "Internal", name, ready[m], close - ready[m])
                b.span(inner, "Model.run", "Internal", name, close, end - close, seq__bucket=bucket,
                       batch__size=len(members))
                done = pauses.run(name, end + 0.05, lognormal(b.rng, 0.5, 0.2))
                b.set_end(root, done)
    return b if into is not None else b.frame(gc=gc_events)
