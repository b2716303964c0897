"""One request of the blind family `loan-pricing` (loan_pricing.py), timed through its pod's runtime
(GC stalls, thread pool, JIT tiers) and its clients (the Redis multiplexer, the SQL pool, the bureau's
resilience pipeline, Cosmos DB's request units): `request()` returns the request's `Timings`."""

from __future__ import annotations

import bisect
import random
from typing import Any

from reference_pipeline.simulate.loan_pricing_runtime import (
    Breaker,
    ConnectionPool,
    Multiplexer,
    Pause,
    RequestUnits,
    ThreadPool,
    Tiering,
    bureau_pipeline,
    gc_pauses,
    in_flight,
    stalls_of,
)
from reference_pipeline.simulate.loan_pricing_spans import Timings
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms

__all__ = ["PodState", "World", "in_flight", "proxy_stalls", "request"]
# product: (share of requests, rate options, schedule months, options once the buydown grid grew)
PRODUCTS = {"fixed-30y": (0.35, 6, 360, (48, 120)), "arm-7-1": (0.15, 8, 360, (48, 120)),
            "fixed-15y": (0.25, 6, 180, None), "personal-5y": (0.25, 4, 60, None)}
ROW_BYTES = 92.0  # one schedule row as System.Text.Json writes it
SERIALIZE_MB_S = 28.0  # decimals through custom converters
BROKER_SHARE = 0.08
WRITE_RU = (9.5, 11.5)
PROVISIONED_RU = 10_000.0  # autoscale maximum


class World:
    """What every pod shares: the scenario's windows, the Cosmos container's RU budget."""

    def __init__(self, rng: random.Random, s: dict[str, Any], parts: set[str], arrivals: list[float]) -> None:
        self.rng = rng

        def at(share: float) -> float:  # windows by the share of the run's requests sent before
            return arrivals[int(share * (len(arrivals) - 1))]

        # beside each other the two windows follow one another (a pool that holds requests back keeps
        # their writes from the RU budget)
        paired = {"sql-pool-exhaustion", "cosmos-throttling"} <= parts
        sql_window = (at(0.1), at(0.28)) if paired else (at(0.25), at(0.8))
        self.slow_sql = sql_window if "sql-pool-exhaustion" in parts else None
        self.slow_bureau = "bureau-timeout-retry" in parts
        self.sync_over_async = "threadpool-starvation" in parts
        self.big_sheet = "redis-head-of-line" in parts
        self.grown = "rate-table-growth" in parts
        demand = s["rps"] * sum(WRITE_RU) / 2
        window = (at(0.55), at(0.97)) if paired else (at(0.3), at(0.75))
        left = 0.7 if paired else 0.85  # the share of the writes' usual demand the backfill leaves them
        backfill = ((*window, 1.0 - left * demand / PROVISIONED_RU) if "cosmos-throttling" in parts else None)
        self.ru = RequestUnits(PROVISIONED_RU, backfill)


class PodState:
    """One api pod: its GC pauses, thread pool, clients, JIT state and the ends of its requests."""

    def __init__(self, rng: random.Random, s: dict[str, Any], horizon: float, blocking_gen2: bool,
                 loh_heavy: bool, warm: bool, started: float) -> None:
        self.pauses: list[Pause] = [p for p in gc_pauses(rng, horizon, blocking_gen2, loh_heavy)
                                    if p.start >= started]
        self.pause_ends = [p.end for p in self.pauses]
        self.stalls = stalls_of(self.pauses)
        self.threads = ThreadPool(s["threads"], rng)
        self.pool = ConnectionPool(s["max_pool"], min(s["max_pool"], 10) if warm else 0)
        self.mux = Multiplexer(rng)
        self.breaker = Breaker()
        self.tier = Tiering(s["r2r"], warm, rng)
        self.session_ready: float | None = 0.0 if warm else None
        self.bureau_connections = 4 if warm else 0
        self.ort_runs = 1 if warm else 0
        self.ends: list[float] = []

    def pauses_in(self, a: float, b: float) -> list[Pause]:
        lo, hi = bisect.bisect_left(self.pause_ends, a), bisect.bisect_right(self.pause_ends, b)
        return self.pauses[lo:hi]


def proxy_stalls(rng: random.Random, horizon: float) -> Stalls:
    """YARP is .NET too: young-generation pauses only."""
    return stalls_of(gc_pauses(rng, horizon, False, False))


def _product(rng: random.Random, grown: bool) -> tuple[str, int, int]:
    x, acc = rng.random(), 0.0
    name = "fixed-30y"
    for name in PRODUCTS:  # the product drawn is the one the loop stops at
        acc += PRODUCTS[name][0]
        if x < acc:
            break
    _share, options, months, growth = PRODUCTS[name]
    if grown and growth is not None:
        options = rng.randint(*growth)
    return name, options, months


def request(w: World, p: PodState, pod: int, t0: float, proxy: Stalls | None, px: int) -> Timings:
    rng, st, tp = w.rng, p.stalls, p.threads
    ms = NS_PER_MS

    def resume(x: float) -> float:  # a completion at x runs when a pool thread takes it, outside GC
        return st.settle(x + tp.delay(x))

    if proxy is not None:
        ps = proxy.settle(t0)
        cs = proxy.run(ps, lognormal_ms(rng, 0.25, 0.3))
        t_in = cs + lognormal_ms(rng, 0.18, 0.3)
    else:
        ps = cs = t_in = t0
    factor, jit = p.tier.enter(t_in)
    root_s = st.settle(t_in + tp.arrive(t_in))
    t = st.run(root_s, (0.35 * factor + 0.4 * jit) * ms)
    product, options, months = _product(rng, w.grown)
    broker = rng.random() < BROKER_SHARE
    # the rate table from Redis and the applicant from SQL, side by side
    keys = [(f"rates:{product}", options * 900.0 + 3000.0)]
    if broker:
        keys.append(("ratesheet:all", rng.uniform(2e6, 8e6)) if w.big_sheet else ("ratesheet:broker", 40e3))
    redis, tr = [], st.run(t, 0.03 * ms)
    for key, size in keys:
        sent, received = p.mux.command(tr, size)
        end = st.settle(received + 0.02 * ms)
        redis.append((tr, sent, received, end, key))
        tr = resume(end)
    repo_s = st.settle(t + 0.06 * ms)
    conn, _opened = p.pool.open(repo_s + 0.04 * ms, rng)
    if conn - repo_s > 15 * NS_PER_S:  # OpenAsync gives up at the connect timeout
        p.pool.give_up(conn)
        end = st.settle(repo_s + 15 * NS_PER_S)
        root_e = st.run(end, 0.4 * ms)
        return Timings(pod, (root_s, root_e), 500, 310, options, months, redis, (repo_s, end), None, True,
                       [], None, None, None, None, None, _proxy(proxy, px, ps, cs, root_e, root_e, 310),
                       p.pauses_in(root_s, root_e))
    sql_s = st.settle(conn + 0.05 * ms)
    slow = w.slow_sql is not None and w.slow_sql[0] <= sql_s < w.slow_sql[1]
    query = lognormal_ms(rng, 600.0, 0.35) if slow else lognormal_ms(rng, 3.2, 0.45)
    if rng.random() < 0.003:
        query += rng.uniform(20.0, 80.0) * ms
    sql_e = resume(sql_s + query)
    p.pool.close(sql_e + 0.03 * ms)
    repo_e = st.run(sql_e, 0.12 * factor * ms)
    # with the release that wrapped the bureau client in sync code, the request blocks its pool thread
    # until the call (with its retries) is done; otherwise it awaits, holding nothing
    tb = st.settle(tp.acquire(max(tr, repo_e)) if w.sync_over_async else resume(max(tr, repo_e)))
    connect = rng.uniform(25.0, 60.0) if p.bureau_connections < 4 else 0.0
    p.bureau_connections += 1
    attempts, b_end, _ok = bureau_pipeline(rng, st.run(tb, 0.1 * ms), w.slow_bureau, p.breaker, 400.0, 2,
                                           connect, resume)
    score_s = st.run(b_end, 0.05 * ms)
    if p.session_ready is None:  # the first Score builds the InferenceSession; the others wait on it
        p.session_ready = score_s + rng.uniform(300.0, 600.0) * ms
    features = st.run(max(score_s, p.session_ready), (1.0 * factor + 0.35 * jit) * ms)
    p.ort_runs += 1
    ort = lognormal_ms(rng, 2.4, 0.2) + (15.0 * ms if p.ort_runs == 1 else 0.0)  # first run: arenas
    score_e = st.settle(features + ort)  # native intra-op threads run through GC; the span ends after
    price_s = st.run(score_e, 0.03 * ms)
    price_e = st.run(price_s, (0.5 + 0.02 * options) * factor * ms)
    awaited = st.run(price_e, 0.05 * ms)
    if w.sync_over_async:
        tp.release(awaited)
    # the quote to Cosmos DB and the event to Service Bus, side by side
    cosmos_s = awaited + 0.02 * ms
    charge = rng.uniform(*WRITE_RU)
    accepted, throttled = w.ru.write(rng, cosmos_s + 0.6 * ms, charge)
    write = lognormal_ms(rng, 5.5, 0.35) + (rng.uniform(30.0, 120.0) * ms if rng.random() < 0.005 else 0.0)
    cosmos_e = resume(accepted + write)
    bus_s = awaited + 0.05 * ms
    bus_e = resume(bus_s + lognormal_ms(rng, 4.0, 0.4))
    body = int(options * months * ROW_BYTES * rng.lognormvariate(0.0, 0.08) + 1800)
    ser_s = st.settle(resume(max(cosmos_e, bus_e)) + 0.03 * ms)
    work = body / (SERIALIZE_MB_S * 1e6) * NS_PER_S * factor + 0.25 * jit * ms + body / 300e6 * NS_PER_S
    ser_e = st.run(ser_s, work)
    root_e = st.run(ser_e, 0.12 * ms)
    return Timings(pod, (root_s, root_e), 200, body, options, months, redis, (repo_s, repo_e),
                   (sql_s, sql_e), False, attempts, (score_s, score_e), (price_s, price_e),
                   (cosmos_s, cosmos_e, throttled, charge), (bus_s, bus_e), (ser_s, ser_e),
                   _proxy(proxy, px, ps, cs, ser_s, root_e, body), p.pauses_in(root_s, root_e))


def _proxy(proxy: Stalls | None, px: int, ps: float, cs: float, headers: float, root_e: float,
           body: int) -> tuple[int, float, float, float, float] | None:
    """YARP's spans: the forwarded call ends when the response headers arrive; the server span when
    the body has been copied through."""
    if proxy is None:
        return None
    ce = proxy.settle(headers + 0.2 * NS_PER_MS)
    pe = proxy.run(max(root_e + 0.2 * NS_PER_MS, ce), body / 400e6 * NS_PER_S + 0.1 * NS_PER_MS)
    return px, ps, pe, cs, ce
