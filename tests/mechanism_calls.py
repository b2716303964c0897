"""Services whose requests call other services, built from a mechanism for issue 25's rule tests
(test_diagnosis_fan_out.py): an aggregator's side-by-side calls, a search API calling two services in
turn, a payload's transfer time on the wire, a payload step inside a callee."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import TraceBuilder, lognormal
from tests.mechanism_services import BASE, work_spans


def fan_out_service(seed: int, slow_branch: bool = True, deadline_ms: float | None = None):
    """An aggregator calls three services side by side and answers when the last one returns: a model
    server (its work traced below its SERVER span, the longest branch at the median), a profile lookup
    and an inventory lookup whose calls hang for 40-150 ms 8 % of the time when `slow_branch`. The
    aggregator's latency is the slowest branch, whichever it is, plus a small render step. With
    `deadline_ms`, the aggregator gives up on a hanging inventory call at the deadline (error status)
    and calls it again (the callee's side runs on to its end)."""
    b = TraceBuilder(seed)
    for t in b.arrivals(4000, 150):
        b.new_trace()
        inst = f"bff/{int(b.rng.integers(2))}"
        root = b.span(None, "GET /home", "Server", inst, t, 0.0)
        cur = t + 0.1
        ends = []
        branches = (("model", "POST", 12.0), ("profile", "GET", 3.0), ("inventory", "GET", 4.0))
        for callee, name, median in branches:
            work = lognormal(b.rng, median, 0.2)
            if callee == "inventory" and slow_branch and b.rng.random() < 0.08:
                work += b.rng.uniform(40.0, 150.0)
            start = cur + b.rng.uniform(0.0, 0.1)
            if deadline_ms is not None and work > deadline_ms:  # cut, then called again
                call = b.span(root, name, "Client", inst, start, deadline_ms + b.rng.uniform(0.0, 0.2),
                              otel__status_code="Error")
                b.span(call, f"{name} /{callee}", "Server", f"{callee}/0", start + 0.2, work)
                start += deadline_ms + 0.3
                work = lognormal(b.rng, median, 0.2)
            call = b.span(root, name, "Client", inst, start, work + 0.4)
            where = f"{callee}/{int(b.rng.integers(2))}"
            server = b.span(call, f"{name} /{callee}", "Server", where, start + 0.2, work)
            if callee == "model":
                work_spans(b, server, where, start + 0.25, [("score", "Internal", 0.85 * median, 0.2)])
            ends.append(start + work + 0.4)
        cur = max(ends) + 0.05
        d = lognormal(b.rng, 1.5, 0.2)
        b.span(root, "render", "Internal", inst, cur, d)
        b.set_end(root, cur + d + 0.05)
    return b.frame()


def payload_callee_service(seed: int):
    """A front end calls a model server and, side by side, a profile service; the model server encodes
    its answer at 25 ms per MB of a response whose size varies over two orders of magnitude (its
    SERVER span records the size). The caller's call is as slow as the encoding inside the callee
    makes it."""
    b = TraceBuilder(seed)
    for t in b.arrivals(3000, 100):
        b.new_trace()
        inst = f"web/{int(b.rng.integers(2))}"
        root = b.span(None, "GET /feed", "Server", inst, t, 0.0)
        cur = work_spans(b, root, inst, t + 0.05, BASE[:1])
        size = int(200_000 * np.exp(b.rng.normal(0.0, 1.1)))
        model = f"model/{int(b.rng.integers(2))}"
        profile = lognormal(b.rng, 3.0, 0.2)
        side = b.span(root, "GET", "Client", inst, cur + 0.05, profile + 0.4)
        b.span(side, "GET /profile", "Server", f"profile/{int(b.rng.integers(2))}", cur + 0.25, profile)
        call = b.span(root, "POST", "Client", inst, cur, 0.0)
        server = b.span(call, "POST /predict", "Server", model, cur + 0.2, 0.0, rpc__response__size=size)
        end = work_spans(b, server, model, cur + 0.25, BASE[2:])
        d = (0.3 + size / 1e6 * 25.0) * lognormal(b.rng, 1.0, 0.1)
        b.span(server, "encode", "Internal", model, end, d)
        b.set_end(server, end + d + 0.05)
        b.set_end(call, end + d + 0.3)
        b.set_end(root, end + d + 0.4)
    return b.frame()


def two_call_service(seed: int, slow_index: bool = False, transfer_ms_per_mb: float = 0.0):
    """A search API calls an embedder (its work traced below its SERVER span) and then a vector index,
    one after the other; which of the two takes longer changes from request to request. With
    `slow_index`, 6 % of index calls take 30-120 ms more. The embedder's answer is compact (about
    3 KB) for 70 % of calls and a large per-token array (0.2-4 MB) for the rest (rpc.response.size on
    both sides of the call); sending it back costs `transfer_ms_per_mb` after the embedder's span has
    ended (the caller's CLIENT span ends when the last byte arrives)."""
    b = TraceBuilder(seed)
    for t in b.arrivals(4000, 150):
        b.new_trace()
        inst = f"search/{int(b.rng.integers(2))}"
        root = b.span(None, "GET /v1/search", "Server", inst, t, 0.0)
        cur = t + 0.1
        large = b.rng.random() < 0.3
        size = int(200_000 * np.exp(b.rng.uniform(0.0, 3.0))) if large else int(3100 + b.rng.integers(40))
        emb = f"embedder/{int(b.rng.integers(2))}"
        call = b.span(root, "Embed", "Client", inst, cur, 0.0, rpc__response__size=size)
        server = b.span(call, "Embed", "Server", emb, cur + 0.3, 0.0, rpc__response__size=size)
        end = work_spans(b, server, emb, cur + 0.35, [("tokenize", "Internal", 0.4, 0.3),
                                                       ("encode", "Internal", 3.5, 0.5)])
        b.set_end(server, end + 0.05)
        back = lognormal(b.rng, 0.35, 0.2) + size / 1e6 * transfer_ms_per_mb
        b.set_end(call, end + 0.05 + back)
        cur = end + 0.1 + back
        work = lognormal(b.rng, 4.0, 0.4)
        if slow_index and b.rng.random() < 0.06:
            work += b.rng.uniform(30.0, 120.0)
        call = b.span(root, "POST", "Client", inst, cur, work + 0.6, server__address="index")
        b.span(call, "POST /points/search", "Server", f"index/{int(b.rng.integers(2))}", cur + 0.3, work)
        cur += work + 0.7
        d = lognormal(b.rng, 0.4, 0.2)
        b.span(root, "merge_results", "Internal", inst, cur, d)
        b.set_end(root, cur + d + 0.05)
    return b.frame()


def pool_service(seed: int, slots: int = 2, slow_calls: float = 0.0, rps: float = 120.0):
    """Each request takes a database connection from a pool of `slots` per instance in 'load_history'
    (it waits there while all are taken), queries on it, then calls a scoring service (25 ms; 50-150
    ms more on a `slow_calls` share) and writes its result, and gives the connection back only when
    the request ends: a connection held across a remote call. Waiters take freed connections one at a
    time."""
    b = TraceBuilder(seed)
    pools = {f"api/{i}": [0.0] * slots for i in range(3)}
    for t in b.arrivals(4000, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = t + 0.1
        pool = pools[inst]
        k = int(np.argmin(pool))
        got = max(cur + 0.05, pool[k] + 0.02)  # a freed connection goes to the next waiter at once
        query = lognormal(b.rng, 3.0, 0.3)
        load = b.span(root, "load_history", "Internal", inst, cur, got + query + 0.05 - cur)
        b.span(load, "SELECT history", "Client", inst, got, query, db__system="postgresql")
        cur = got + query + 0.1
        work = lognormal(b.rng, 25.0, 0.3) + (b.rng.uniform(50, 150) if b.rng.random() < slow_calls else 0.0)
        call = b.span(root, "POST", "Client", inst, cur, work + 0.5, server__address="scorer")
        b.span(call, "POST /v1/score", "Server", f"scorer/{int(b.rng.integers(2))}", cur + 0.2, work)
        cur += work + 0.6
        d = lognormal(b.rng, 2.0, 0.2)
        b.span(root, "INSERT scores", "Client", inst, cur, d, db__system="postgresql")
        end = cur + d + 0.05
        b.set_end(root, end)
        pool[k] = end  # the connection is given back when the request ends
    return b.frame()
