"""One run of the blind family `kstreams-iq` (kstreams_iq.py): the deployment's state (the JVMs'
pauses, each event loop's stalls, each card-features instance, the runners) and each traced request's
path through it, in three passes: to the runner's dispatcher (the batches need every request's
submission, traced or not), to the pool (its FIFO needs every acquisition), then the response.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate import kstreams_iq_physics as ph
from reference_pipeline.simulate import kstreams_iq_spans as sp
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Stalls,
    lognormal_ms,
    merge_intervals,
    poisson_arrivals,
)

API_PODS, LOOPS, INSTANCES, TASKS, REPLICAS = 4, 4, 6, 12, 2
RESTART, L0_INSTANCE, HOT_TASK, CANARY_PODS = 2, 4, 7, (1, 3)
HOT_SHARE, BLOCK_P = 0.04, 0.2
BACKOFF_MS, RETRIES = 50.0, 3


def owner(task: int) -> int:
    """The task's active instance in a settled group (2 tasks per instance)."""
    return task % INSTANCES


def standby(task: int) -> int:
    return (owner(task) + 1) % INSTANCES


def _rtt(rng: random.Random, zone_a: int, zone_b: int) -> float:
    return (0.18 if zone_a == zone_b else 0.75) * NS_PER_MS * rng.lognormvariate(0.0, 0.25)


def _l0_flushes(rng: random.Random, inst: ph.StreamsInstance, horizon: float, commit_s: float
                ) -> list[tuple[float, float]]:
    """Commit flushes on an instance whose L0 is past the triggers: past 20 files RocksDB delays the
    puts (delayed_write_rate), at 36 it stops them until the compaction ends, with the lock held."""
    out = []
    t = rng.uniform(0.0, commit_s) * NS_PER_S
    while t < horizon:
        files, compacting = inst.l0_files(t)
        length = lognormal_ms(rng, 0.3, 0.5)
        if files >= 20.0:
            length += lognormal_ms(rng, 12.0, 0.5) * (files - 18.0) / 6.0
        if compacting and files >= 34.0:  # writes stopped until the compaction brings L0 down
            k = max(i for i, c in enumerate(inst.l0_cycles) if c[0] <= t)
            length = max(length, inst.l0_cycles[k][1] - t)
        out.append((t, t + length))
        t += length + commit_s * NS_PER_S * rng.uniform(0.97, 1.03)
    return out


@dataclass
class World:
    parts: frozenset[str]
    arrivals: list[float]
    untraced: list[float]
    run_ns: float
    standbys: int
    pool: int
    api_gc: list[list[ph.GcPause]]
    instances: list[ph.StreamsInstance]
    runners: list[ph.Runner]
    failover: float = float("inf")  # when the restarted instance's tasks are active on their standby
    gc: dict[tuple[str, int], list[ph.GcPause]] = field(default_factory=dict)

    @classmethod
    def build(cls, rng: random.Random, parts: frozenset[str], requests: int, s: dict[str, Any]) -> World:
        rps = s["rps"]
        run_s = requests / rps
        bursts: tuple[tuple[float, float, float], ...] = ((0.6 * run_s, 0.1 * run_s, 1.4),)
        if "r2dbc-pool" in parts:
            bursts = ((0.3 * run_s, 0.15 * run_s, 6.0), *bursts)
        arrivals = poisson_arrivals(rng, rps, requests, bursts)
        other = rps / s["sample"] - rps
        untraced = poisson_arrivals(rng, other, int(requests * other / rps), bursts)
        horizon = arrivals[-1] + 10 * NS_PER_S
        api_gc = [ph.g1_pauses(rng, horizon, "g1-humongous" in parts and k in CANARY_PODS)
                  for k in range(API_PODS)]
        thrash = "retention-thrash" in parts
        instances = []
        for k in range(INSTANCES):
            pauses = ph.g1_pauses(rng, horizon, False)
            throttled: list[tuple[float, float]] = []
            if "punctuator-throttle" in parts:
                for _ in range(TASKS // INSTANCES):
                    throttled += ph.throttled_periods(rng, horizon, 2.0, 900.0)
            stalled = "l0-write-stall" in parts and k == L0_INSTANCE
            inst = ph.StreamsInstance(ph.instance_stalls(pauses, throttled), pauses,
                                      0.45 if thrash else 0.96, 0.3 if thrash else 0.8, 20 if thrash else 8,
                                      ph.l0_cycles(rng, horizon) if stalled else [])
            for task in range(k, TASKS, INSTANCES):
                if inst.l0_cycles:
                    flushes = _l0_flushes(rng, inst, horizon, s["commit_ms"] / 1000.0)
                elif task == HOT_TASK and "hot-card" in parts:
                    flushes = ph.flush_intervals(rng, horizon, s["commit_ms"] / 1000.0, 40.0, 0.4)
                else:
                    flushes = ph.flush_intervals(rng, horizon, s["commit_ms"] / 1000.0, 0.3, 0.5)
                inst.hold_lock(task, flushes)
            instances.append(inst)
        world = cls(parts, arrivals, untraced, run_s * NS_PER_S, s["standbys"], s["pool"], api_gc, instances,
                    [cls._runner(parts) for _ in range(REPLICAS)])
        if "rebalance-restore" in parts:
            world._restart(rng)
        world.gc = {(sp.API, k): p for k, p in enumerate(api_gc)}
        world.gc.update({(sp.STREAMS, k): inst.pauses for k, inst in enumerate(instances)})
        return world

    @staticmethod
    def _runner(parts: frozenset[str]) -> ph.Runner:
        if "runner-cpu" in parts:  # TreeSHAP reason codes for every row
            return ph.Runner(32, 4.0, 3.0, 1.0)
        if "batch-wait" in parts:
            return ph.Runner(64, 25.0, 1.2, 0.05)
        return ph.Runner(32, 4.0, 1.2, 0.05)

    def _restart(self, rng: random.Random) -> None:
        """Instance RESTART's pod restarts at a quarter of the run with an empty state directory."""
        gone = 0.25 * self.run_ns
        up = gone + rng.uniform(3.0, 3.8) * NS_PER_S  # termination, a new pod, the JVM and Spring context
        inst = self.instances[RESTART]
        inst.down = (gone, up)
        if self.standbys:  # dynamic membership: the group rebalances, the standbys take over
            self.failover = gone + rng.uniform(1.6, 2.4) * NS_PER_S + rng.uniform(0.2, 0.4) * NS_PER_S
            return
        for task in range(RESTART, TASKS, INSTANCES):  # static membership: it keeps them and restores
            inst.restoring[task] = up + rng.uniform(3.5, 4.5) * NS_PER_S

    def owner_at(self, task: int, t: float) -> int:
        if owner(task) == RESTART and t >= self.failover:
            return standby(task)
        return owner(task)

    def _loops(self, rng: random.Random, pods: list[int], loops: list[int]) -> tuple[dict, dict]:
        """Each loop's stalls (its JVM's pauses and the synchronous vault calls run on it, one after
        another) and the traced requests' own calls."""
        blocks: dict[tuple[int, int], list[tuple[float, float, int]]] = {}
        if "loop-blocked" in self.parts:
            for r, t in enumerate(self.arrivals):
                if rng.random() < BLOCK_P:
                    blocks.setdefault((pods[r], loops[r]), []).append((t + 0.25 * NS_PER_MS, 0.0, r))
            for t in self.untraced:
                if rng.random() < BLOCK_P:
                    key = (rng.randrange(API_PODS), rng.randrange(LOOPS))
                    blocks.setdefault(key, []).append((t + 0.25 * NS_PER_MS, 0.0, -1))
        stalls, own = {}, {}
        for pod in range(API_PODS):
            gc = [(g.start, g.end) for g in self.api_gc[pod]]
            for loop in range(LOOPS):
                busy, end = [], 0.0
                for t, _, r in sorted(blocks.get((pod, loop), [])):
                    start = max(t, end)
                    end = start + lognormal_ms(rng, 12.0, 0.5)
                    busy.append((start, end))
                    if r >= 0:
                        own[r] = end
                stalls[(pod, loop)] = Stalls(merge_intervals(gc + busy))
        return stalls, own

    def _attempt(self, rng: random.Random, zone: int, task: int, t: float) -> sp.Attempt:
        up = [k for k in range(INSTANCES) if not self.instances[k].is_down(t)]
        rcv = rng.choice(up)
        inst = self.instances[rcv]
        rtt = _rtt(rng, zone, rcv % 3)
        s_start = inst.stalls.settle(t + rtt / 2)
        h = inst.stalls.run(s_start, lognormal_ms(rng, 0.08, 0.3))
        own = self.owner_at(task, h)
        hop = None
        status = hop_status = 200
        if own == rcv:
            if inst.unavailable(task, h):
                status, end = 503, h + lognormal_ms(rng, 0.1, 0.3)
            else:
                end = inst.query(rng, task, h)
        else:
            target = self.instances[own]
            if target.is_down(h):  # the owner's pod is gone: its headless-service name does not resolve
                hop_e = h + lognormal_ms(rng, 1.2, 0.4)
                hop, hop_status = (h, hop_e, own, hop_e, hop_e), 503
            else:
                rtt2 = _rtt(rng, rcv % 3, own % 3)
                o_s = target.stalls.settle(h + rtt2 / 2)
                if target.unavailable(task, o_s):
                    o_e, hop_status = o_s + lognormal_ms(rng, 0.12, 0.3), 503
                else:
                    o_e = target.query(rng, task, o_s)
                hop_e = inst.stalls.settle(o_e + rtt2 / 2)
                hop = (h, hop_e, own, o_s, o_e)
            status = hop_status
            end = inst.stalls.run(hop_e, lognormal_ms(rng, 0.04, 0.3))
        return sp.Attempt(t, end + rtt / 2, status, rcv, (s_start, end), hop, hop_status)

    def timelines(self, rng: random.Random) -> Iterator[sp.Timeline]:
        n = len(self.arrivals)
        pods = [rng.randrange(API_PODS) for _ in range(n)]
        loops = [rng.randrange(LOOPS) for _ in range(n)]
        stalls, own = self._loops(rng, pods, loops)
        items: list[dict[str, Any]] = []
        submissions: list[tuple[float, int, int]] = []
        for r, t0 in enumerate(self.arrivals):
            loop, zone = stalls[(pods[r], loops[r])], pods[r] % 3
            root_s = loop.settle(t0)
            ready = max(loop.run(root_s, lognormal_ms(rng, 0.25, 0.3)), own.get(r, 0.0))
            hot = "hot-card" in self.parts and rng.random() < HOT_SHARE  # the pooled card's own checks
            card = rng.randrange(10**9) * TASKS + HOT_TASK if hot else rng.randrange(10**10)
            attempts = []
            t = ready + lognormal_ms(rng, 0.02, 0.3)
            for k in range(RETRIES + 1):
                a = self._attempt(rng, zone, card % TASKS, t)
                attempts.append(a)
                if a.status == 200 or k == RETRIES:
                    break
                backoff = BACKOFF_MS * 2**k * rng.uniform(0.5, 1.5) * NS_PER_MS
                t = loop.settle(loop.settle(a.end) + backoff)  # the retry's timer fires on the loop
            feats = (ready, loop.run(loop.settle(attempts[-1].end), lognormal_ms(rng, 0.05, 0.3)))
            replica = rng.randrange(REPLICAS)
            score_s = loop.run(feats[1], lognormal_ms(rng, 0.08, 0.3))
            rtt = _rtt(rng, zone, replica % 3)
            bento_s = score_s + rtt / 2
            sub = bento_s + lognormal_ms(rng, 0.6, 0.3)  # Starlette, the request's parsing
            submissions.append((sub, r, replica))
            items.append({"r": r, "loop": loop, "root_s": root_s, "card": card, "attempts": attempts,
                          "feats": feats, "replica": replica, "score_s": score_s, "rtt": rtt,
                          "bento_s": bento_s, "sub": sub})
        for k, t in enumerate(self.untraced):
            submissions.append((t + lognormal_ms(rng, 5.0, 0.4), -1 - k, rng.randrange(REPLICAS)))
        scored: dict[int, ph.Scored] = {}
        for t, key, replica in sorted(submissions):
            self.runners[replica].submit(rng, key, t, scored)
        for runner in self.runners:
            runner.flush(rng, scored)
        wants: list[list[tuple[float, float, int]]] = [[] for _ in range(API_PODS)]
        for it in items:
            sc = scored[it["r"]]
            runner_e = sc.end + lognormal_ms(rng, 0.15, 0.3)
            bento_e = runner_e + lognormal_ms(rng, 0.4, 0.3)
            score_e = it["loop"].settle(bento_e + it["rtt"] / 2)
            it.update(sc=sc, runner=(it["sub"], runner_e), bento=(it["bento_s"], bento_e),
                      score=(it["score_s"], score_e), hold=self._hold(rng))
            want = it["loop"].run(score_e, lognormal_ms(rng, 0.1, 0.3))
            wants[pods[it["r"]]].append((want, it["hold"], it["r"]))
        for k, t in enumerate(self.untraced):
            want = t + lognormal_ms(rng, 14.0, 0.35)
            wants[rng.randrange(API_PODS)].append((want, self._hold(rng), -1 - k))
        grants: dict[int, float] = {}
        for pod in range(API_PODS):
            grants.update(ph.pool_grants(wants[pod], self.pool))
        for it in items:
            r, loop = it["r"], it["loop"]
            got = grants[r]
            insert = (got + lognormal_ms(rng, 0.02, 0.3), got + it["hold"])
            root_e = loop.run(loop.settle(insert[1]), lognormal_ms(rng, 0.1, 0.3))
            failed = it["attempts"][-1].status != 200
            decision = "review" if failed else rng.choices(("approve", "decline", "review"), (93, 5, 2))[0]
            yield sp.Timeline(pods[r], (it["root_s"], root_e), f"{it['card']:016d}", it["feats"],
                              it["attempts"], it["score"], it["replica"], it["bento"], it["runner"], it["sc"],
                              insert, decision)

    @staticmethod
    def _hold(rng: random.Random) -> float:
        """A connection's hold for the INSERT: round trip, execution, the commit's WAL flush; now
        and then a commit behind a checkpoint's fsync."""
        hold = lognormal_ms(rng, 1.9, 0.35)
        if rng.random() < 0.003:
            hold += lognormal_ms(rng, 25.0, 0.4)
        return hold
