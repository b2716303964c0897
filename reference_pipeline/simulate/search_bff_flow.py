"""The request flow of the blind family `search-bff` (search_bff.py): arrivals, each Node process's
event loop (V8 pauses and long synchronous work as process-wide stalls), the personalisation call's
socket pool, deadline and retry, and the order of the calls; the backends are search_bff_backends."""

from __future__ import annotations

import bisect
import random
from typing import Any

from reference_pipeline.simulate import search_bff_spans as spans
from reference_pipeline.simulate.search_bff_backends import EsCluster, Gunicorn, MemcachedRing, SocketAgent
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Stalls,
    TraceTable,
    WorkerPool,
    lognormal_ms,
    merge_intervals,
    poisson_arrivals,
    random_pauses,
)

DEADLINE_MS = 150.0
PRODUCTS = 40_000


class Loop(Stalls):
    """One Node process's event loop: the stalls of its V8 pauses, plus the synchronous work of its
    requests (>= 1 ms), added as the requests run, during which no other callback of it runs."""

    def occupy(self, t: float, work: float) -> float:
        start = self.settle(t)
        end = self.run(start, work)
        if work >= NS_PER_MS:
            self.add(start, end)
        return end

    def add(self, a: float, b: float) -> None:
        k = bisect.bisect_right(self.starts, a) - 1
        if k >= 0 and self.ends[k] >= a:  # merge with the stall it touches
            a = self.starts[k]
            b = max(b, self.ends[k])
        else:
            k += 1
        j = k
        while j < len(self.starts) and self.starts[j] <= b:
            b = max(b, self.ends[j])
            j += 1
        self.starts[k:j] = [a]
        self.ends[k:j] = [b]



def _pauses(rng: random.Random, horizon: float, major: bool) -> list[tuple[float, float, str]]:
    out = [(a, b, "minor") for a, b in random_pauses(rng, horizon, (0.2, 0.8), (1.0, 3.0))]
    out += [(a, b, "major") for a, b in random_pauses(rng, horizon, (15.0, 40.0), (8.0, 20.0))]
    if major:  # old space near its limit: full mark-compacts
        out += [(a, b, "major") for a, b in random_pauses(rng, horizon, (0.8, 2.5), (120.0, 350.0))]
    return sorted(out)


def _bot(rng: random.Random, horizon: float) -> list[tuple[float, int, float]]:
    """(arrival, query length, regex CPU ns) of the scraper's requests, ~2/s on its one connection."""
    out, t = [], rng.uniform(0.2, 1.0) * NS_PER_S
    while t < horizon:
        length = rng.randrange(300, 1200)
        cpu = min(320.0, 40.0 * 2 ** ((length - 300) / 300)) * rng.uniform(0.85, 1.15)
        out.append((t, length, cpu * NS_PER_MS))
        t += rng.expovariate(2.0) * NS_PER_S
    return out


def _pers_time(rng: random.Random, slow: bool) -> float:
    if slow:
        t = lognormal_ms(rng, 70.0, 0.3)
        if rng.random() < 0.12:
            t += 90.0 * NS_PER_MS * rng.paretovariate(1.5)
        return t
    t = lognormal_ms(rng, 18.0, 0.35)
    if rng.random() < 0.02:  # a profile rebuilt from the event store
        t += rng.uniform(30.0, 150.0) * NS_PER_MS
    return t


def run(parts: set[str], requests: int, seed: int, s: dict[str, Any], v: dict[str, Any], rng: random.Random,
        table: TraceTable) -> TraceTable:
    c = spans.conventions(seed)
    pods, procs = s["pods"], s["procs"]
    recycle = (s.get("max_requests", 300), 100) if "worker-recycle" in parts else (0, 0)
    rerank = Gunicorn(rng, s["rerank_pods"], s["rerank_workers"], *recycle)
    span_s = requests / s["rps"]
    bursts: tuple[tuple[float, float, float], ...] = ()
    if "rerank-burst" in parts:
        bursts = ((0.3 * span_s, 1.5, 1.3 * rerank.capacity_rps(48) / s["rps"]),)
    horizon = span_s * NS_PER_S * 1.2 + 5 * NS_PER_S
    bot = _bot(rng, span_s * NS_PER_S) if "loop-block" in parts else []
    arrivals = poisson_arrivals(rng, s["rps"], max(requests - len(bot), 1), bursts)
    es = EsCluster(rng, s["es_nodes"], s["shards"], v["slow_node"] if "slow-shard" in parts else None)
    restart = None
    if "memcached-restart" in parts:  # one node restarts a quarter into the run
        restart = (seed % s["memcached_nodes"], 0.25 * span_s * NS_PER_S)
    cache = MemcachedRing(rng, s["memcached_nodes"], restart)
    max_sockets = 1 if "socket-pool" in parts else 64
    catalog = WorkerPool(32)  # the catalog database's connections, shared by every BFF process
    loops, gcs, agents = [], [], []
    blocks: dict[float, float] = {}
    for p in range(pods):
        for j in range(procs):
            gc = _pauses(rng, horizon, "mark-compact" in parts and p in v["canary"])
            stalls = [(a, b) for a, b, _ in gc]
            if (p, j) == v["blocked"]:
                quiet = Stalls(merge_intervals(stalls))
                blocks = {t: quiet.settle(t) + 0.3 * NS_PER_MS for t, _, _ in bot}
                stalls += [(blocks[t], blocks[t] + cpu) for t, _, cpu in bot]
            loops.append(Loop(merge_intervals(stalls)))
            gcs.append(gc)
            agents.append(SocketAgent(max_sockets))
    res = spans.resources(table, c, pods, procs, s["pers_pods"], s["es_nodes"])
    work = [(t, None) for t in arrivals] + [(t, (length, cpu)) for t, length, cpu in bot]
    for t0, scraper in sorted(work, key=lambda w: w[0]):
        pod, proc = v["blocked"] if scraper else (rng.randrange(pods), rng.randrange(procs))
        k = pod * procs + proc
        loop = loops[k]
        large = "large-pages" in parts and rng.random() < 0.4
        page, doc_kb, shown_kb = (96, 12.0, 14.0) if large else (24, 2.5, 3.0)
        if scraper:  # its regex is one of the loop's stalls: the span lasts the stall
            norm_s = blocks[t0]
            root_s, norm_e = norm_s - 0.25 * NS_PER_MS, loop.settle(norm_s)
        else:
            root_s = loop.settle(t0 + lognormal_ms(rng, 0.1, 0.3))
            norm_s = loop.run(root_s, lognormal_ms(rng, 0.2, 0.3))
            norm_e = loop.run(norm_s, lognormal_ms(rng, 0.15, 0.3))
        fan = loop.run(norm_e, lognormal_ms(rng, 0.1, 0.3))
        attempts = []
        t = fan
        for _ in range(2):
            start = loop.run(t, lognormal_ms(rng, 0.05, 0.3))
            sock = agents[k].acquire(start)
            srv_s = sock + lognormal_ms(rng, 0.35, 0.3)
            srv_e = srv_s + _pers_time(rng, "pers-timeout" in parts)
            reply = srv_e + lognormal_ms(rng, 0.35, 0.3)
            deadline = start + DEADLINE_MS * NS_PER_MS
            timed_out = reply > deadline
            end = loop.settle(deadline + lognormal_ms(rng, 0.05, 0.3) if timed_out else reply)
            agents[k].release(end)  # given back (or destroyed, on abort) when the callback runs
            if timed_out and sock > deadline:  # aborted while still queued for a socket: never sent
                srv_s = srv_e = -1.0
            attempts.append(spans.Attempt(start, end, timed_out, rng.randrange(s["pers_pods"]), srv_s, srv_e))
            if not timed_out:
                break
            t = loop.run(end, lognormal_ms(rng, 0.2, 0.3))
        es_s = loop.run(fan, lognormal_ms(rng, 0.08, 0.3))
        reply = es.search(es_s + lognormal_ms(rng, 0.3, 0.3), page, doc_kb)
        arrived = reply.coord_end + lognormal_ms(rng, 0.3, 0.3) + reply.body_bytes / 120e6 * NS_PER_S
        es_e = loop.occupy(arrived, reply.body_bytes / 250e6 * NS_PER_S + lognormal_ms(rng, 0.1, 0.3))
        candidates = 2 * page
        rr_s = loop.run(max(attempts[-1].end, es_e), lognormal_ms(rng, 0.3, 0.3))
        call = rerank.handle(rr_s + lognormal_ms(rng, 0.4, 0.3), candidates)
        rr_e = loop.settle(call.end + lognormal_ms(rng, 0.4, 0.3) + candidates * 0.004 * NS_PER_MS)
        mc_s = loop.run(rr_e, lognormal_ms(rng, 0.2, 0.3))
        products = [int(PRODUCTS ** rng.random() ** 0.5) for _ in range(page)]  # a long tail of results
        lookups = cache.lookup(mc_s, products)
        mc, missing = [], []
        for i, (node, (asked, missed)) in enumerate(sorted(lookups.items())):
            start = mc_s + i * 0.03 * NS_PER_MS
            end = loop.settle(start + lognormal_ms(rng, 0.5, 0.3) + len(asked) * 0.004 * NS_PER_MS)
            mc.append((node, start, end, len(asked), len(missed)))
            missing += missed
        after = max(m[2] for m in mc)
        db = None
        if missing:
            db_s = loop.run(after, lognormal_ms(rng, 0.1, 0.3))
            core = catalog.acquire(db_s + lognormal_ms(rng, 0.3, 0.3))  # waits for a connection
            done = core + lognormal_ms(rng, 2.0, 0.3) + len(missing) * lognormal_ms(rng, 14.0, 0.4)
            catalog.release(done)
            db_e = loop.settle(done + lognormal_ms(rng, 0.3, 0.3))
            cache.refill(db_e, missing)
            db, after = (db_s, db_e, len(missing)), db_e
        body = int(page * shown_kb * 1024 + 2048 + rng.randrange(512))
        ser_s = loop.run(after, lognormal_ms(rng, 0.1, 0.3))
        stringified = loop.occupy(ser_s, body / 250e6 * NS_PER_S + lognormal_ms(rng, 0.1, 0.3))
        ser_e = loop.settle(stringified + body / 40e6 * NS_PER_S + lognormal_ms(rng, 0.2, 0.3))
        root_e = loop.run(ser_e, lognormal_ms(rng, 0.15, 0.3))
        gc = [(a, kind, (b - a) / NS_PER_MS) for a, b, kind in gcs[k] if a < root_e and b > root_s]
        spans.emit(table, c, res, spans.RequestTimes(
            pod, proc, (root_s, root_e), (norm_s, norm_e), scraper[0] if scraper else rng.randrange(3, 60),
            page, attempts, (es_s, es_e), reply, (rr_s, rr_e), call, candidates, mc, db, (ser_s, ser_e),
            body, gc))
    return table
