"""Traces for the path and dependency detectors (network, lock_contention, dependency_tail) built from
what physically happens on the path: a function platform that starts an execution environment
before its first invoke, a wire that loses packets, a server that tells every client to retry at the
next second. Times in ms; see mechanism_frames.TraceBuilder."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import TraceBuilder, lognormal


def environments_service(seed: int, cold_inits: bool, lossy_wire: float = 0.0, one_identity: bool = False,
                         coldstart_attribute: bool = False, n: int = 2000, rps: float = 40.0):
    """A caller's CLIENT span around each invoke of a function: a front end (auth, routing: ~10 ms of
    gap) hands the invoke to an idle execution environment (one invoke at a time each), else starts a
    new one, whose init (~1.3 s) runs before its first handler starts, inside the caller's gap. Now and
    then (0.3 %) the front end starts a new environment though others are idle. `lossy_wire`: that
    share of calls loses a packet and waits for a 200 ms retransmission timeout on the way, whichever
    environment serves it. `one_identity`: the trace names every environment the same (no instance
    attribute); `coldstart_attribute`: the handler span says whether its invoke started cold."""
    b = TraceBuilder(seed)
    free: list[float] = [0.0] * 4  # environments warm before the run
    for t in b.arrivals(n, rps):
        b.new_trace()
        at = t + lognormal(b.rng, 9.0, 0.2)
        idle = [k for k, f in enumerate(free) if f <= at]
        init = 0.0
        if cold_inits and (not idle or b.rng.random() < 0.003):
            free.append(at)
            k = len(free) - 1
            init = lognormal(b.rng, 1300.0, 0.08)
        else:
            k = idle[int(b.rng.integers(len(idle)))] if idle else int(np.argmin(free))
            at = max(at, free[k])
        if lossy_wire and b.rng.random() < lossy_wire:
            at += b.rng.uniform(200.0, 230.0)
        inst = "score/env" if one_identity else f"score/env-{k}"
        cli = b.span(None, "POST /score", "Client", f"checkout/{int(b.rng.integers(3))}", t, 0.0)
        start = at + init
        attrs = {"faas__coldstart": init > 0} if coldstart_attribute else {}
        root = b.span(cli, "score-handler", "Server", inst, start, 0.0, **attrs)
        cur = start + 0.1
        for name, median in (("validate", 1.0), ("features", 8.0), ("predict", 20.0)):
            d = lognormal(b.rng, median, 0.25)
            b.span(root, name, "Internal", inst, cur, d)
            cur += d + 0.02
        b.set_end(root, cur)
        free[k] = cur + 1.0
        b.set_end(cli, cur + lognormal(b.rng, 1.5, 0.2))
    return b.frame()


def sdk_attempts_service(seed: int, throttled: float = 0.0, n: int = 3000, rps: float = 60.0):
    """A handler makes three SDK calls per request (a feature read of ~5 ms, a model call of ~30 ms, a
    queue write of ~3 ms), each a CLIENT span with one child CLIENT span per HTTP attempt (the HTTP
    library's own, named alike for every destination). `throttled`: that share of feature reads is
    refused and retried after a backoff of 25 ms x 2^n (up to 4 attempts): the read is slow, as a whole.
    """
    b = TraceBuilder(seed)
    calls = (("Features.Read", 5.0), ("Model.Invoke", 30.0), ("Queue.Send", 3.0))
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"handler/{int(b.rng.integers(4))}"
        root = b.span(None, "handler", "Server", inst, t, 0.0)
        cur = t + 0.2
        for name, median in calls:
            call = b.span(root, name, "Client", inst, cur, 0.0)
            a = cur + 0.3
            for attempt in range(4):
                refused = name == "Features.Read" and b.rng.random() < throttled and attempt < 3
                took = lognormal(b.rng, 3.0 if refused else median, 0.2)
                b.span(call, "HTTP POST", "Client", inst, a, took)
                a += took
                if not refused:
                    break
                a += b.rng.uniform(0.5, 1.0) * 25.0 * 2**attempt
            b.set_end(call, a + 0.2)
            cur = a + 0.4
        b.set_end(root, cur + 0.1)
    return b.frame()


def clock_throttled_writes(seed: int, n: int = 6000, rate: float = 150.0, pooled: int = 0):
    """Three pods write each request's result to an untraced store (`server.address` quotes-db) whose
    write budget is accounted per wall-clock second; in the middle third of the run another job takes
    most of it, so the budget covers ~85 % of the writes: a write over it is told to retry at the next
    second (plus 0-40 ms of jitter) and the SDK waits and retries inside its one CLIENT span. Every
    throttled write of a second retries just after the same boundary, as do the writes accepted then.
    `pooled` > 0: the writes also take one of that many connections shared by every pod, held only
    for the write's round trip (plenty: they never wait for one)."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(n, rate)
    tight = (arrivals[-1] / 3, 2 * arrivals[-1] / 3)
    spent: dict[int, float] = {}
    peer = {"server.address": "quotes-db", "db.system": "cosmosdb"}
    for i, t in enumerate(arrivals):
        b.new_trace()
        pod = f"api/{i % 3}"
        root = b.span(None, "POST /quote", "Server", pod, t, 0.0)
        work = lognormal(b.rng, 8.0, 0.2)
        b.span(root, "price", "Internal", pod, t + 0.1, work)
        read_s = t + work + 0.2
        read_e = read_s + lognormal(b.rng, 1.5, 0.2)
        b.span(root, "read rates", "Client", pod, read_s, read_e - read_s, **peer)
        write_s = read_e + 0.1
        a = write_s
        for _ in range(9):
            second = int(a // 1000.0)
            budget = rate * (0.85 if tight[0] <= a < tight[1] else 3.0)
            if spent.get(second, 0.0) + 1.0 <= budget:
                spent[second] = spent.get(second, 0.0) + 1.0
                break
            a = (second + 1) * 1000.0 + b.rng.uniform(0.0, 40.0) + b.rng.uniform(0.8, 2.0)
        write_e = a + lognormal(b.rng, 5.5, 0.45)
        b.span(root, "write quote", "Client", pod, write_s, write_e - write_s, **peer)
        b.set_end(root, write_e + 0.3)
    return b.frame()


def multiplexed_cache(seed: int, head_of_line: bool, n: int = 4000, rps: float = 150.0):
    """Three processes read a rate table from an untraced cache (`GET`, server.address rates-cache) on
    every request, then price it (~6 ms). With `head_of_line`, each process writes its commands on ONE
    connection and reads the replies in order: 8 % of requests fetch a 2-8 MB value (45 MB/s), and
    every command sent while it is being read waits for it. Without, each command has a connection of
    its own and the cache itself stalls now and then (a blocking command: every process's commands
    in flight wait until it ends), 8 % of the run's time in stalls of 20-120 ms."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(n, rps)
    stalls: list[tuple[float, float]] = []
    t = 0.0
    while not head_of_line and t < arrivals[-1] + 1000:
        t += b.rng.exponential(800.0)
        length = b.rng.uniform(20.0, 120.0)
        stalls.append((t, t + length))
        t += length
    last_reply = {f"api/{i}": 0.0 for i in range(3)}
    for t in arrivals:
        b.new_trace()
        pod = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /price", "Server", pod, t, 0.0)
        sent = t + 0.2
        big = head_of_line and b.rng.random() < 0.08
        ready = sent + lognormal(b.rng, 0.45, 0.25)
        for a, z in stalls:
            if a <= ready < z:
                ready = z + 0.05
        reply = ready + (b.rng.uniform(2e6, 8e6) / 45e6 * 1000.0 if big else 0.01)
        if head_of_line:
            reply = max(reply, last_reply[pod] + 0.02)
            last_reply[pod] = reply
        b.span(root, "GET", "Client", pod, sent, reply - sent, server__address="rates-cache",
               db__system="redis")
        work = lognormal(b.rng, 6.0, 0.2)
        b.span(root, "price", "Internal", pod, reply + 0.05, work)
        b.set_end(root, reply + 0.1 + work)
    return b.frame()


def deferred_flush_service(seed: int, n: int = 3000, rps: float = 50.0):
    """A handler validates, reads a feature store (~5 ms; 3 % of reads slow, +150-400 ms) and
    serialises its answer; a request that ran long (over 100 ms) also starts a metrics flush as it
    returns, which runs ~450 ms after the response is sent (its span, a child of the handler, ends
    after the handler): work off the request's path, present mostly in the slow requests."""
    b = TraceBuilder(seed)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"fn/{int(b.rng.integers(4))}"
        root = b.span(None, "handler", "Server", inst, t, 0.0)
        cur = t + 0.1
        d = lognormal(b.rng, 1.0, 0.2)
        b.span(root, "validate", "Internal", inst, cur, d)
        cur += d + 0.02
        d = lognormal(b.rng, 5.0, 0.2) + (b.rng.uniform(150.0, 400.0) if b.rng.random() < 0.03 else 0.0)
        b.span(root, "features.read", "Client", inst, cur, d, server__address="features")
        cur += d + 0.02
        d = lognormal(b.rng, 0.8, 0.2)
        b.span(root, "serialize", "Internal", inst, cur, d)
        cur += d + 0.05
        if cur - t > 100.0 or b.rng.random() < 0.1:
            b.span(root, "flush_metrics", "Internal", inst, cur - 0.03, lognormal(b.rng, 450.0, 0.3))
        b.set_end(root, cur)
    return b.frame()


def batched_model_server(seed: int, n: int = 4000, rps: float = 150.0, surge: float = 0.5,
                         per_item: float = 5.0):
    """One caller process sends every request's scoring call (`HTTP POST`, server.address ctr-model)
    to a traced model server with a dynamic batcher: a call waits in the server's queue until the
    running batch ends, then runs in the next batch (up to 32 requests, 1.3 ms + 5 ms per request), and
    every call of a batch ends together. In the middle fifth of the run arrivals rise to 1.5x: the
    queue grows and the calls are long. The wait is inside the server's span (its queue), and the calls
    of one batch end together, one just after another sent earlier from the same process."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(n, rps)
    span = arrivals[-1]
    busy = (0.4 * span, 0.6 * span)
    times = [float(t) for t in arrivals]
    extra = [float(t) for t in np.linspace(busy[0], busy[1], int(surge * 0.2 * n))]
    sent = np.sort(np.array(times + extra)) + 0.3
    ends = np.zeros(len(sent))
    free, i = 0.0, 0
    while i < len(sent):
        start = max(free, sent[i])
        j = i
        while j < len(sent) and sent[j] <= start and j - i < 32:
            j += 1
        free = start + 1.3 + per_item * (j - i) * lognormal(b.rng, 1.0, 0.05)
        ends[i:j] = free
        i = j
    for s, e in zip(sent, ends, strict=True):
        b.new_trace()
        root = b.span(None, "POST /auction", "Server", "auction/0", s - 0.3, 0.0)
        call = b.span(root, "HTTP POST", "Client", "auction/0", s, e + 0.2 - s, server__address="ctr-model")
        b.span(call, "predict", "Server", "ctr-model/0", s + 0.1, e - s - 0.05)
        b.set_end(root, e + 0.5)
    return b.frame()
