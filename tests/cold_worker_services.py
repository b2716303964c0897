"""A view that publishes a scoring task and waits for its result, the task run by a pool of worker
processes (a CONSUMER span per task, parented to the PRODUCER span: the view waits for it), built
from the mechanism (tests/test_diagnosis_cold_workers.py). A deploy replaces the ten worker processes
at 30 % of the run: with `load_on_first`, each new process loads its model on its first task (~2 s,
a `load_model` span) while the tasks it was given wait; otherwise the new processes are warm at once
and 0.5 % of all tasks are slow (~2 s) at random moments."""

from __future__ import annotations

from tests.mechanism_frames import TraceBuilder, lognormal

WORKERS = 10


def worker_pool_service(seed: int, load_on_first: bool, n: int = 3000, rps: float = 100.0):
    b = TraceBuilder(seed)
    arrivals = b.arrivals(n, rps)
    deploy = 0.3 * float(arrivals[-1])
    free = {f"worker/a{k}": 0.0 for k in range(WORKERS)}
    free.update({f"worker/b{k}": deploy + 20.0 * k for k in range(WORKERS)})
    cold = {f"worker/b{k}" for k in range(WORKERS)} if load_on_first else set()
    for turn, t in enumerate(arrivals):
        b.new_trace()
        api = f"api/{int(b.rng.integers(4))}"
        root = b.span(None, "POST /score", "Server", api, t, 0.0)
        cur = t + lognormal(b.rng, 1.0, 0.3)
        d = lognormal(b.rng, 0.5, 0.2)
        pub = b.span(root, "publish score", "Producer", api, cur, d)
        cur += d
        live = [w for w in free if (w[7] == "b") == (t >= deploy)]
        worker = live[turn % len(live)]
        start = max(cur + lognormal(b.rng, 0.4, 0.3), free[worker])
        task = b.span(pub, "run score", "Consumer", worker, start, 0.0)
        at = start + 0.05
        if worker in cold:
            d = lognormal(b.rng, 2000.0, 0.1)
            b.span(task, "load_model", "Internal", worker, at, d)
            at += d
            cold.discard(worker)
        d = lognormal(b.rng, 5.0, 0.2)
        if not load_on_first and b.rng.random() < 0.005:
            d += lognormal(b.rng, 2000.0, 0.1)
        b.span(task, "predict", "Internal", worker, at, d)
        at += d + 0.05
        b.set_end(task, at)
        free[worker] = at
        wait = b.span(root, "wait result", "Internal", api, cur + 0.05, 0.0)
        cur = at + lognormal(b.rng, 0.5, 0.2)
        b.set_end(wait, cur)
        b.set_end(root, cur + lognormal(b.rng, 0.5, 0.2))
    return b.frame()
