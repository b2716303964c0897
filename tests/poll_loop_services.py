"""A view that hands its scoring to a task queue and polls the result backend until the result is
there (tests/test_diagnosis_poll_loops.py): `wait_result` holds one `GET` to redis every 50 ms, so it
has two duration modes when a share of the tasks take longer (one poll more), with the extra `GET`
copies on the slow spans only, as a read-through cache's misses have extra store reads. Beside it, the
same lookup where a miss reads the store once per missing key (back-to-back copies): a cache miss."""

from __future__ import annotations

from tests.mechanism_frames import TraceBuilder, lognormal
from tests.mechanism_services import work_spans

POLL_MS = 50.0


def polling_service(seed: int, n: int = 3000, rps: float = 150.0):
    """Per request: `apply_async` (a publish), then `wait_result`: `GET celery-task-meta` every
    50 ms until the task is done; 80 % of the tasks take ~20 ms, 20 % (larger payloads) ~110 ms."""
    b = TraceBuilder(seed)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = work_spans(b, root, inst, t + 0.05)
        d = lognormal(b.rng, 0.6, 0.2)
        b.span(root, "apply_async", "Producer", inst, cur, d, messaging__system="rabbitmq")
        cur += d + 0.05
        ready = cur + (lognormal(b.rng, 110.0, 0.2) if b.rng.random() < 0.2 else lognormal(b.rng, 20.0, 0.3))
        wait = b.span(root, "wait_result", "Internal", inst, cur, 0.0)
        poll = cur + 0.02
        while True:
            d = lognormal(b.rng, 0.3, 0.2)
            b.span(wait, "GET", "Client", inst, poll, d, db__system="redis")
            if poll + d / 2 >= ready:
                cur = poll + d
                break
            poll += d + POLL_MS * lognormal(b.rng, 1.0, 0.01)
        b.set_end(wait, cur + 0.02)
        b.set_end(root, cur + 0.5)
    return b.frame()


def per_key_miss_service(seed: int, n: int = 3000, rps: float = 150.0):
    """Per request: `load_features` asks redis (`GET`, db.system redis); 15 % miss and read each of
    their 2-5 missing keys from the database one after another (`SELECT features`, ~12 ms each, the
    name every lookup's first read has too), then write them back (`SET`)."""
    b = TraceBuilder(seed)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        look = b.span(root, "load_features", "Internal", inst, t + 0.05, 0.0)
        cur = t + 0.08
        d = lognormal(b.rng, 0.3, 0.2)
        b.span(look, "GET", "Client", inst, cur, d, db__system="redis")
        cur += d + 0.02
        d = lognormal(b.rng, 1.0, 0.2)  # the customer's row, every request
        b.span(look, "SELECT features", "Client", inst, cur, d, db__system="postgresql")
        cur += d + 0.02
        if b.rng.random() < 0.15:
            for _ in range(int(b.rng.integers(2, 6))):
                d = lognormal(b.rng, 12.0, 0.3)
                b.span(look, "SELECT features", "Client", inst, cur, d, db__system="postgresql")
                cur += d + lognormal(b.rng, 0.05, 0.5)
            d = lognormal(b.rng, 0.3, 0.2)
            b.span(look, "SET", "Client", inst, cur, d, db__system="redis")
            cur += d + 0.02
        b.set_end(look, cur)
        cur = work_spans(b, root, inst, cur + 0.02)
        b.set_end(root, cur + 0.05)
    return b.frame()
