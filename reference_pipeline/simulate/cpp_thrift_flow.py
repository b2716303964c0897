"""One run of the blind family `cpp-thrift` (cpp_thrift.py): arrivals at the feed-api (every request,
traced or not, goes through the model; one in `sample` is traced), the client-side power-of-two-choices
balancer, load shedding and one retry, and a ranker handler's timeline step by step (the physics of
each step: cpp_thrift_host.py)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from reference_pipeline.simulate import cpp_thrift_spans as sp
from reference_pipeline.simulate.cpp_thrift_host import (
    CORES,
    SHARDS,
    AdsHost,
    Host,
    JavaService,
    Windows,
    multiget_ns,
    stall_windows,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms, poisson_arrivals

NET_MS = 0.12  # one way inside the data centre
ADS_TIMEOUT_MS, HEDGE_MS = 80.0, 40.0
FEATURE_HOSTS, ADS_HOSTS = 3, 4
SCRAPE_EVERY_S = 15.0
FAILED_SHARD = 5


def _net(rng: random.Random) -> float:
    return NET_MS * NS_PER_MS * rng.lognormvariate(0.0, 0.25)


def _scrapes(rng: random.Random, horizon: float, slow: bool) -> Windows:
    out = []
    t = rng.uniform(0.0, SCRAPE_EVERY_S) * NS_PER_S
    while t < horizon:
        hold = min(1200.0, max(250.0, 600.0 * rng.lognormvariate(0.0, 0.3))) if slow else (
            min(12.0, max(1.5, 4.0 * rng.lognormvariate(0.0, 0.4))))
        out.append((t, t + hold * NS_PER_MS))
        t += SCRAPE_EVERY_S * NS_PER_S * rng.uniform(0.98, 1.02)
    return Windows(out)


class Run:
    def __init__(self, rng: random.Random, s: dict[str, Any], parts: frozenset[str], requests: int,
                 special: dict[str, int], restart_order: tuple[int, ...]) -> None:
        self.rng, self.s, self.parts = rng, s, parts
        self.traced = requests
        self.run_ns = requests / s["rps"] * NS_PER_S
        horizon = self.run_ns * 1.5 + 30 * NS_PER_S
        self.hosts = []
        for k in range(s["hosts"]):
            thp = "thp-compaction" in parts and k == special["thp-compaction"]
            compaction = (stall_windows(rng, horizon, 0.5, 170.0, 0.6, 50.0, 500.0) if thp
                          else stall_windows(rng, horizon, 8.0, 6.0, 0.5, 2.0, 25.0))
            self.hosts.append(Host(
                k, s["workers"], 4 * s["workers"],
                1.4 if "numa-remote" in parts and k == special["numa-remote"] else 1.0,
                0.45 if "cpu-steal" in parts and k == special["cpu-steal"] else 0.0,
                Windows(compaction), _scrapes(rng, horizon, "slow-metrics-scrape" in parts),
                cores=CORES // 2 if "numa-remote" in parts and k == special["numa-remote"] else CORES))
        if "rolling-restart" in parts:
            for n, k in enumerate(restart_order):
                down = (0.15 + 0.12 * n) * self.run_ns
                self.hosts[k].down = (down, down + 0.1 * self.run_ns)
        self.features = [JavaService(Windows(stall_windows(rng, horizon, 2.0, 12.0, 0.4, 4.0, 60.0)))
                         for _ in range(FEATURE_HOSTS)]
        slow_ads = 0.2 * self.run_ns if "slow-ads-blender" in parts else None
        self.ads = [AdsHost(slow_ads) for _ in range(ADS_HOSTS)]

    # --- arrivals and balancing ------------------------------------------------------------------

    def requests(self) -> Iterator[sp.Request]:
        rng, s = self.rng, self.s
        n_real = self.traced * s["sample"]
        run_s = self.run_ns / NS_PER_S
        bursts: tuple[tuple[float, float, float], ...] = ()
        if "worker-burst" in self.parts:
            # ~1.3x what the fleet's cores serve (4 intra-op threads x ~22 ms per inference each)
            capacity = s["hosts"] * CORES * 1.15 / (4 * 0.022)
            bursts = ((0.4 * run_s, 0.06 * run_s, 1.3 * capacity / (s["rps"] * s["sample"])),)
        arrivals = poisson_arrivals(rng, s["rps"] * s["sample"], n_real, bursts)
        traced = set(rng.sample(range(n_real), self.traced))
        for n, t in enumerate(arrivals):
            request = self._request(t, n in traced)
            if request is not None:
                yield request

    def _pick(self, t: float, feed: int, exclude: int | None) -> int:
        rng = self.rng
        up = [h for h in self.hosts if h.up(t) and h.index != exclude]
        a, b = rng.sample(up, 2) if len(up) > 1 else (up[0], up[0])
        return a.index if a.outstanding(t, feed) <= b.outstanding(t, feed) else b.index

    def _request(self, t: float, traced: bool) -> sp.Request | None:
        rng = self.rng
        feed = rng.randrange(self.s["feeds"])
        user = int(rng.paretovariate(1.1) * 1000)
        at = t + lognormal_ms(rng, 0.6, 0.3)
        attempts: list[sp.Call] = []
        handler = None
        exclude = None
        for _ in range(2):
            k = self._pick(at, feed, exclude)
            host = self.hosts[k]
            host.restart_check(at)
            arrive = at + _net(rng) + lognormal_ms(rng, 0.03, 0.3)  # the IO thread reads and decodes
            gen = 1 if host.restarted else 0
            if host.queued(arrive) >= host.queue_cap:  # shed in the IO thread
                end = arrive + 0.02 * NS_PER_MS + _net(rng)
                attempts.append(sp.Call(k, at, end, "TApplicationException: loadshedding request", None, gen))
                at, exclude = end + lognormal_ms(rng, 0.05, 0.3), k
                continue
            handler = self._handle(host, arrive, feed)
            end = handler.end + _net(rng)
            attempts.append(sp.Call(k, at, end, "", (handler.start, handler.end), gen))
            at = end
            break
        if not traced:
            return None
        end = at + lognormal_ms(rng, 0.5, 0.3) + (0.0 if handler is None else 0.0004 * handler.candidates
                                                  * NS_PER_MS)
        return sp.Request(feed, t, end, attempts, handler, user)

    # --- one handler ------------------------------------------------------------------------------

    def _handle(self, host: Host, arrive: float, feed: int) -> sp.Handler:
        rng, parts, run = self.rng, self.parts, self.run_ns
        start, slot = host.take(arrive)
        stalls: list[tuple[float, float]] = []
        where: list[str] = []

        def cpu(t: float, work_ms: float, fault_p: float, name: str) -> float:
            before = len(stalls)
            end = host.cpu(rng, t, work_ms * NS_PER_MS, fault_p, stalls)
            where.extend([name] * (len(stalls) - before))
            return end

        t = cpu(start, lognormal_ms(rng, 0.04, 0.3) / NS_PER_MS, 0.1, sp.RANK)
        keys = [rng.randrange(SHARDS) for _ in range(rng.randint(8, 14))]
        failed = FAILED_SHARD if "mcrouter-failover" in parts and t >= 0.25 * run else None
        took, _remote = multiget_ns(rng, keys, failed)
        multiget = (t, t + took, len(keys))
        t = multiget[1] + lognormal_ms(rng, 0.02, 0.3)
        miss_p = 0.004
        share = 0.0
        if "memcached-evictions" in parts and t >= 0.2 * run:
            share = min(1.0, (t - 0.2 * run) / (0.1 * run))
            miss_p += 0.18 * share
        missing = sum(rng.random() < miss_p for _ in keys)
        features = None
        if missing:
            j = rng.randrange(FEATURE_HOSTS)
            svc = self.features[j]
            svc.load = 1.0 + 1.5 * share
            srv = svc.serve(rng, t + _net(rng), 7.5, 0.9, missing)
            end = srv[1] + _net(rng)
            features = sp.Call(j, t, end, "", srv)
            t = end + lognormal_ms(rng, 0.03, 0.3)
        look_s = t
        hit = host.lru_hit(rng)
        t = cpu(t, lognormal_ms(rng, 0.015, 0.3) / NS_PER_MS, 0.05, sp.RANK)
        embedding = None
        if not hit:
            j = rng.randrange(FEATURE_HOSTS)
            srv = self.features[j].serve(rng, t + _net(rng), 5.0, 0.0, 0)
            end = srv[1] + _net(rng)
            embedding = sp.Call(j, t, end, "", srv)
            t = end + lognormal_ms(rng, 0.01, 0.3)
        lookup = (look_s, t, hit)
        growth = "candidate-growth" in parts
        candidates = int(min(6000, max(500, 1500 * rng.lognormvariate(0, 0.45)))) if growth else int(
            min(2000, max(200, 600 * rng.lognormvariate(0, 0.45))))
        f_s = t + lognormal_ms(rng, 0.05, 0.3)
        before = len(stalls)
        work = (1.5 + 0.032 * candidates) * NS_PER_MS * rng.lognormvariate(0.0, 0.08)
        f_e = host.forward(rng, f_s, slot, work, 0.8, stalls)
        where.extend([sp.FORWARD] * (len(stalls) - before))
        r_s = f_e + lognormal_ms(rng, 0.03, 0.3)
        r_e = cpu(r_s, lognormal_ms(rng, 2.2, 0.1) / NS_PER_MS, 0.4, sp.RANK)
        blends, fallback, t = self._blend(r_e + lognormal_ms(rng, 0.03, 0.3))
        stats_s = t + lognormal_ms(rng, 0.02, 0.3)
        stats_e = host.metrics(stats_s)
        end = cpu(stats_e, 0.15 + 0.0002 * candidates, 0.1, sp.RANK)
        host.release(slot, end, feed)
        return sp.Handler(host.index, 1 if host.restarted else 0, start, end, multiget, features, lookup,
                          embedding, (f_s, f_e), candidates, (r_s, r_e), blends, fallback, (stats_s, stats_e),
                          stalls, where)

    def _blend(self, t: float) -> tuple[list[sp.Call], bool, float]:
        """The ads call: a hedge to another host after 40 ms; the first answer wins, the loser is
        cancelled; an attempt with no answer at 80 ms times out."""
        rng = self.rng
        first = rng.randrange(ADS_HOSTS)
        tries = [(first, t)]
        srv = [self.ads[first].serve(rng, t + _net(rng))]
        answers = [srv[0][1] + _net(rng)]
        if answers[0] > t + HEDGE_MS * NS_PER_MS:
            second = (first + 1 + rng.randrange(ADS_HOSTS - 1)) % ADS_HOSTS
            t2 = t + HEDGE_MS * NS_PER_MS
            tries.append((second, t2))
            srv.append(self.ads[second].serve(rng, t2 + _net(rng)))
            answers.append(srv[1][1] + _net(rng))
        deadlines = [s + ADS_TIMEOUT_MS * NS_PER_MS for _, s in tries]
        ok = [a for a, d in zip(answers, deadlines, strict=True) if a <= d]
        won = min(ok) if ok else None
        calls = []
        for (j, s), (a, d), server in zip(tries, zip(answers, deadlines, strict=True), srv, strict=True):
            if won is not None and a == won:
                calls.append(sp.Call(j, s, a, "", server))
            elif d < (won if won is not None else float("inf")):
                calls.append(sp.Call(j, s, d, "TTransportException: Timed out", server))
            else:
                calls.append(sp.Call(j, s, won, "OperationCancelled: hedged request lost", server))
        end = won if won is not None else max(deadlines)
        return calls, won is None, end + lognormal_ms(rng, 0.03, 0.3)
