"""A caller whose calls to a three-replica service go through a proxy below its instrumentation, built
from the mechanism (tests/test_diagnosis_hidden_retries.py): the proxy cuts an attempt at its per-try
timeout and sends it again to another replica (the abandoned attempt's handler runs on), or hedges: it
sends a second copy after a delay and takes whichever answer comes first. The callee traces each
attempt as a SERVER span under the caller's one CLIENT span."""

from __future__ import annotations

from tests.mechanism_frames import TraceBuilder, lognormal

REPLICAS = ("policy/0", "policy/1", "policy/2")


def proxied_caller(
    seed: int,
    policy: str,
    n: int = 3000,
    rps: float = 120.0,
    slow_ms: float = 115.0,
    per_try_ms: float = 80.0,
):
    """`policy`: "retry" (per-try timeout `per_try_ms`, then a retry to another replica after a 0-25 ms
    backoff) or "hedge" (a second copy to another replica after `per_try_ms`, the first answer taken).
    Replica 0 takes ~`slow_ms` per call (lognormal, sigma 0.45), the others ~10 ms."""
    b = TraceBuilder(seed)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"score/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        d = lognormal(b.rng, 6.0, 0.2)
        b.span(root, "rank", "Internal", inst, t + 0.05, d)
        cur = t + d + 0.1
        call = b.span(root, "POST /policy", "Client", inst, cur, 0.0)
        replica = int(b.rng.integers(3))
        start, answers = cur + 0.3, []
        while True:
            work = lognormal(b.rng, slow_ms if replica == 0 else 10.0, 0.45 if replica == 0 else 0.3)
            b.span(call, "POST /policy", "Server", REPLICAS[replica], start, work)
            answers.append(start + work)
            if work <= per_try_ms or len(answers) == 3:
                break
            if policy == "retry":  # the try is cut at the timeout; its handler runs on
                start += per_try_ms + float(b.rng.uniform(0.0, 25.0)) + 0.5
            else:  # a hedge: a second copy after the delay, the first answer wins
                start += per_try_ms
            replica = (replica + 1 + int(b.rng.integers(2))) % 3
        end = answers[-1] if policy == "retry" else min(answers)
        b.set_end(call, end + 0.3)
        b.set_end(root, end + 0.5)
    return b.frame()
