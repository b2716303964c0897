"""The discrete-event model of the blind family `lambda-scorer` (see lambda_scorer.py for the shape, the
conventions and the truth): the caller's attempts, the Lambda frontend's routing to execution
environments under a concurrency limit, each invoke's init and handler timeline (CPU work scaled by
the memory setting, DynamoDB reads against provisioned capacity with SDK retries, the SageMaker
endpoint's variants and model workers, the synchronous SQS / Kinesis write), Python GC in the handler,
TCP loss on one subnet and frozen background flushes. It produces records; lambda_scorer_spans.py
renders them as spans in the seed's conventions."""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms, poisson_arrivals

FULL_VCPU_MB = 1769.0  # Lambda gives one full vCPU at 1,769 MB; less memory, a proportional share
CLIENT_DEADLINE_MS = 5000.0  # the caller's HTTP client timeout (API Gateway's own is 29 s)
CLIENT_ATTEMPTS = 4  # the caller retries 429 / 502-504 / timeouts: 100 ms x 2^n, jittered
DDB_ATTEMPTS = 6  # the SDK's retries of ProvisionedThroughputExceeded: 25 ms x 2^n, equal jitter
DDB_BIN_NS = 100 * NS_PER_MS  # capacity is spent per 100 ms (no burst credit left)
SAGEMAKER_WORKERS = 4  # model-server workers per endpoint instance
VARIANTS = (("variant-a", 2), ("variant-b", 2))  # (production variant, instances), weights 50/50
FLUSH_EVERY_NS = 5 * NS_PER_S  # the background metrics flush a handler starts at most this often
LOSS_PER_PACKET = 0.02  # the degraded subnet's packet loss (cross-AZ path)
WARM_UP_S = 15.0


class Workers:
    """A model server's workers, each one request at a time. Calls are placed in the order the model
    computes them, not in time order (a cold environment's call is computed when its invoke begins,
    after its init), so each worker keeps its busy intervals and a call takes the first gap."""

    def __init__(self, n: int) -> None:
        self.busy: list[list[tuple[float, float]]] = [[] for _ in range(n)]

    def take(self, t: float, hold: float) -> float:
        best: tuple[float, int] | None = None
        for w, intervals in enumerate(self.busy):
            start = t
            k = bisect.bisect_left(intervals, (t, -math.inf))
            if k > 0 and intervals[k - 1][1] > start:
                start = intervals[k - 1][1]
            while k < len(intervals) and intervals[k][0] < start + hold:
                start = max(start, intervals[k][1])
                k += 1
            if best is None or start < best[0]:
                best = (start, w)
        assert best is not None
        bisect.insort(self.busy[best[1]], (best[0], best[0] + hold))
        return best[0]


@dataclass
class Plan:
    """What a scenario changes in the healthy function."""

    memory_mb: float
    limit: int  # concurrent executions: reserved concurrency, else the account's 1,000
    bursts: tuple[tuple[float, float, float], ...] = ()
    rcu_per_s: float = 0.0  # provisioned read capacity (0: 15 times the steady demand, for sales)
    heavy_share: float = 0.0  # requests of the allocation-heavy type (`explain=true`)
    slow_variant: bool = False
    bad_subnet: int | None = None
    items_median: float = 3.0


@dataclass
class Env:
    k: int
    subnet: int
    free_at: float
    retire_at: float
    invokes: int = 0
    served: int = 0  # invokes for requests the run shows (not the warm-up's)
    cold: bool = False  # created during the run: its first invoke waits for init
    last_flush: float = -math.inf
    pending_flush: Stage | None = None
    remaining_flush: float = 0.0


@dataclass
class Stage:
    """One step of the handler: `key` names it (the spans module names it per convention)."""

    key: str
    start: float
    end: float
    attrs: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    calls: list[tuple[float, float, int]] = field(default_factory=list)  # SDK attempts (start, end, status)
    model: tuple[int, str, float, float, float, float] | None = None  # SageMaker side, when it answered


@dataclass
class Invoke:
    env: Env
    received: float  # the Lambda frontend took the invoke
    init: tuple[float, float] | None
    start: float
    end: float
    done: float  # after the runtime's overhead: the environment is free (and frozen)
    stages: list[Stage]
    status: int
    flush: Stage | None = None


@dataclass
class Attempt:
    start: float
    end: float
    status: int  # 0: cut by the client's deadline
    gateway: tuple[float, float]
    invoke: Invoke | None


@dataclass
class Request:
    t0: float
    pod: int
    items: int
    heavy: bool
    shown: bool = True
    attempts: list[Attempt] = field(default_factory=list)
    end: float = 0.0
    status: int = 200


@dataclass
class Run:
    requests: list[Request]
    envs: list[Env]  # every environment that served the run, in creation order
    warm: int  # how many were warm before the run
    burst_envs: list[int]  # environments created while a burst was on
    instances: list[tuple[str, int]]  # SageMaker (variant, index within it)
    memory_mb: float


class Model:
    def __init__(self, rng: random.Random, plan: Plan, rps: float) -> None:
        self.rng, self.plan = rng, plan
        self.slow = max(1.0, FULL_VCPU_MB / plan.memory_mb)
        demand = rps * 0.5 * (plan.items_median * 1.15 + 1)  # RCUs/s: 0.5 per item, eventually consistent
        self.rcu_bin = (plan.rcu_per_s or 15 * demand) * DDB_BIN_NS / NS_PER_S
        self.used: dict[int, float] = {}
        self.instances = [(v, i) for v, n in VARIANTS for i in range(n)]
        self.pools = [Workers(SAGEMAKER_WORKERS) for _ in self.instances]

    def cpu(self, t: float, ms: float) -> float:
        return t + ms * NS_PER_MS * self.slow * self.rng.lognormvariate(0.0, 0.12)

    def net(self, env: Env, rtt_ms: float, size: float, cross_az: bool = False) -> float:
        """One request/response exchange of `size` bytes: RTT and transfer; from the degraded subnet
        across the AZ boundary, extra latency, a retransmission per lost packet and the RTO when a
        flight's tail is lost."""
        rng = self.rng
        took = lognormal_ms(rng, rtt_ms, 0.25) + size / 60e6 * NS_PER_S
        if cross_az and env.subnet == self.plan.bad_subnet:
            took += lognormal_ms(rng, 2.5, 0.3)
            packets = 2 + int(size // 1448)
            lost = sum(rng.random() < LOSS_PER_PACKET for _ in range(min(packets, 400)))
            if lost:
                tail = rng.random() < min(1.0, 3.0 / packets) * lost
                took += rtt_ms * NS_PER_MS * 1.5 * lost + (rng.uniform(200, 230) * NS_PER_MS if tail else 0)
        return took

    def dynamo_call(self, env: Env, t: float, keys: int, first: bool) -> Stage:
        rng = self.rng
        stage = Stage("dynamodb", t, t, {"keys": keys})
        size = keys * 2500.0
        rcu = 0.5 * keys
        for n in range(DDB_ATTEMPTS):
            a = self.cpu(t, 0.9)  # botocore: serialise, sign
            if first and n == 0:
                a += lognormal_ms(rng, 12.0, 0.3)  # a new environment opens its TLS connection
            b = int(a // DDB_BIN_NS)
            hot = rng.random() < 0.002  # a hot partition now and then, in every run
            if hot or self.used.get(b, 0.0) + rcu > self.rcu_bin:
                e = a + self.net(env, 3.5, 300)
                stage.calls.append((a, e, 400))
                if n + 1 == DDB_ATTEMPTS:
                    stage.end, stage.attrs["error"] = e, "ProvisionedThroughputExceededException"
                    stage.attrs["retries"] = n
                    return stage
                t = e + rng.uniform(0.5, 1.0) * 25 * NS_PER_MS * 2**n
                continue
            self.used[b] = self.used.get(b, 0.0) + rcu
            e = a + self.net(env, 4.0, size)
            stage.calls.append((a, e, 200))
            stage.end = self.cpu(e, 0.3 + 0.08 * keys)  # TypeDeserializer on every attribute
            stage.attrs.update(retries=n, bytes=int(size))
            return stage
        raise AssertionError("unreachable")

    def sagemaker(self, env: Env, t: float, items: int, first: bool) -> Stage:
        rng = self.rng
        body = 600 + items * 2800.0  # the feature matrix as JSON
        a = self.cpu(t, 0.9 + 0.04 * body / 1000)  # json.dumps + sign
        if first:
            a += lognormal_ms(rng, 14.0, 0.3)
        k = rng.randrange(len(self.instances))
        variant, _ = self.instances[k]
        exchange = self.net(env, 2.0, body + 200 + items * 60, cross_az=True)  # a loss delays either way
        up = exchange * body / (body + 200 + items * 60)
        routed = a + up + lognormal_ms(rng, 3.0, 0.3)  # SageMaker's router: overhead latency
        parse_ns = (0.3 + 0.03 * body / 1000) * NS_PER_MS
        model_ms = 14.0 * (1 + 0.012 * items)
        if self.plan.slow_variant and variant == "variant-b":
            model_ms *= 9.0  # the new model on the CPU instance type
        model_ns = lognormal_ms(rng, model_ms, 0.3)
        if rng.random() < 0.004:
            model_ns += lognormal_ms(rng, 60.0, 0.4)  # a worker's own GC or a noisy neighbour, in every run
        got = self.pools[k].take(routed, parse_ns + model_ns + 0.3 * NS_PER_MS)
        parse = got + parse_ns
        done = parse + model_ns
        reply = done + 0.3 * NS_PER_MS
        received = reply + lognormal_ms(rng, 1.5, 0.3) + exchange - up
        stage = Stage("sagemaker", a, self.cpu(received, 0.4), {"bytes": int(body), "variant": variant})
        stage.model = (k, variant, got, reply, parse, done)
        stage.calls.append((a, received, 200))
        return stage

    def handler(self, env: Env, req: Request, t: float) -> tuple[list[Stage], float, int]:
        rng, first = self.rng, env.invokes == 1 and env.cold
        body = 600 + 1400.0 * req.items
        stages = [Stage("validate", t, self.cpu(t, 0.6 + 0.03 * body / 1000 + 0.15 * req.items),
                        {"bytes": int(body), "items": req.items})]
        t = stages[-1].end
        keys = req.items + 1
        while keys > 0:  # BatchGetItem takes 100 keys a call; the first opens the connection
            stages.append(self.dynamo_call(env, self.cpu(t, 0.1), min(keys, 100), first and keys > req.items))
            t, keys = stages[-1].end, keys - 100
            if "error" in stages[-1].attrs:
                return stages, t, 500
        features = Stage("features", t, 0.0, {"items": req.items, "explain": req.heavy})
        work = 11.0 + 0.12 * req.items + (lognormal_ms(rng, 30.0, 0.3) / NS_PER_MS if first else 0.0)
        pauses: list[tuple[float, float]] = []  # (at a share of the work, pause ms at a full vCPU)
        if req.heavy:
            work += 16.0 + 0.4 * req.items  # SHAP-style explanations: many small dicts
            if rng.random() < 0.45:  # a full collection walks every tracked object (the unfrozen cache)
                pauses.append((rng.random(), lognormal_ms(rng, 140.0, 0.35) / NS_PER_MS))
        if rng.random() < 0.03:  # gen-2 after gc.freeze(): short, in every run
            pauses.append((rng.random(), rng.uniform(3.0, 8.0)))
        if rng.random() < 0.3:
            pauses.append((rng.random(), rng.uniform(0.3, 1.5)))  # young collections
        cur = t
        done_share = 0.0
        for share, ms in sorted(pauses):
            cur = self.cpu(cur, work * (share - done_share))
            pause = ms * NS_PER_MS * self.slow
            gen = 2 if ms > 2.0 else 0
            report = {"gen": gen, "pause_ms": round(pause / NS_PER_MS, 3)}
            features.events.append((cur + pause, "python.gc", report))
            cur, done_share = cur + pause, share
        features.end = self.cpu(cur, work * (1.0 - done_share))
        stages.append(features)
        stages.append(self.sagemaker(env, self.cpu(features.end, 0.1), req.items, first))
        a = self.cpu(stages[-1].end, 1.0)
        sent = a + self.net(env, 9.0, 900)
        stages.append(Stage("sink", a, self.cpu(sent, 0.2), {}, calls=[(a, sent, 200)]))
        s = stages[-1].end
        stages.append(Stage("serialize", s, self.cpu(s, 0.4 + 0.05 * req.items), {"items": req.items}))
        return stages, stages[-1].end, 200

    def init(self, env: Env, t: float, extension: bool) -> float:
        rng = self.rng
        t += lognormal_ms(rng, 110.0, 0.2)  # the microVM and the Python runtime start
        if extension:
            t += lognormal_ms(rng, 180.0, 0.2)  # the telemetry extension registers
        t = self.cpu(t, 450.0)  # imports: numpy, pandas, pydantic, boto3
        t += self.net(env, 20.0, 30e6 / 1.3)  # the 30 MB encoders artefact from S3
        return self.cpu(t, 250.0)  # unpickling it


def simulate(plan: Plan, s: dict[str, Any], requests: int, seed: int) -> Run:
    rng = random.Random(seed * 7_000_003 + 101)
    model = Model(rng, plan, s["rps"])
    length_ns = requests / s["rps"] * NS_PER_S
    # a warm-up before the run (not shown): the pool of environments settles to the scenario's load,
    # as it had while the cause was in place before the run
    warm_up = poisson_arrivals(rng, s["rps"], int(s["rps"] * WARM_UP_S))
    arrivals = [t - WARM_UP_S * NS_PER_S for t in warm_up]
    arrivals += poisson_arrivals(rng, s["rps"], requests, plan.bursts)
    reqs = []
    for t0 in arrivals:
        items = max(1, min(250, round(plan.items_median * rng.lognormvariate(0.0, 0.6))))
        reqs.append(Request(t0, rng.randrange(s["callers"]), items, rng.random() < plan.heavy_share, t0 >= 0))
    envs = [Env(k, k % 3, -WARM_UP_S * NS_PER_S, rng.uniform(0.0, s["warm"] * length_ns))
            for k in range(s["warm"])]
    live = list(envs)
    burst_envs: list[int] = []
    heap = [(r.t0 + lognormal_ms(rng, 0.8, 0.3), i) for i, r in enumerate(reqs)]
    heapq.heapify(heap)
    while heap:
        t, i = heapq.heappop(heap)
        req = reqs[i]
        arrive = t + lognormal_ms(rng, 1.2, 0.25)
        at = arrive + lognormal_ms(rng, 5.0, 0.25)  # API Gateway: auth, mapping, the invoke
        live = [e for e in live if not (e.retire_at <= at and e.free_at <= at)]  # recycled after hours
        idle = [e for e in live if e.free_at <= at]
        env: Env | None = rng.choice(idle) if idle else None
        if env is not None and rng.random() < 0.0015:
            env = None  # placement now and then starts a new environment though others are idle
        if env is None and len(live) < plan.limit:
            env = Env(len(envs), len(envs) % 3, at, math.inf, cold=True)
            envs.append(env)
            live.append(env)
            if any(b0 * NS_PER_S <= at < (b0 + bl) * NS_PER_S + 2 * NS_PER_S for b0, bl, _ in plan.bursts):
                burst_envs.append(env.k)
        if env is None:
            gw_end = at + lognormal_ms(rng, 1.5, 0.3)
            att = Attempt(t, gw_end + lognormal_ms(rng, 1.2, 0.25), 429, (arrive, gw_end), None)
        else:
            inv = invoke(model, env, req, at, s)
            env.served += req.shown
            gw_end = inv.end + lognormal_ms(rng, 1.5, 0.3)
            att = Attempt(t, gw_end + lognormal_ms(rng, 1.2, 0.25), inv.status, (arrive, gw_end), inv)
        if att.end - t > CLIENT_DEADLINE_MS * NS_PER_MS:
            att.end, att.status = t + CLIENT_DEADLINE_MS * NS_PER_MS + lognormal_ms(rng, 0.2, 0.3), 0
        req.attempts.append(att)
        n = len(req.attempts)
        if att.status in (0, 429, 502, 503, 504) and n < CLIENT_ATTEMPTS:
            heapq.heappush(heap, (att.end + rng.uniform(0.5, 1.5) * 100 * NS_PER_MS * 2 ** (n - 1), i))
        else:
            req.status = att.status
            req.end = att.end + lognormal_ms(rng, 1.0, 0.3)
    return Run([r for r in reqs if r.shown], envs, s["warm"], burst_envs, model.instances, plan.memory_mb)


def invoke(model: Model, env: Env, req: Request, at: float, s: dict[str, Any]) -> Invoke:
    rng = model.rng
    env.invokes += 1
    init = None
    t = at + lognormal_ms(rng, 0.8, 0.3)
    if env.invokes == 1 and env.cold:
        init = (t, model.init(env, t, s["extension"]))
        t = init[1] + lognormal_ms(rng, 0.5, 0.3)
    if env.pending_flush is not None:  # thawed: the flush started in the last invoke finishes now
        env.pending_flush.end = t + env.remaining_flush
        env.pending_flush = None
        t += env.remaining_flush * 0.3  # it shares the CPU with this handler for a moment
    start = t
    stages, end, status = model.handler(env, req, t + lognormal_ms(rng, 0.3, 0.3))
    end = model.cpu(end, 0.2)
    done = end + lognormal_ms(rng, 1.0, 0.4)  # the runtime's overhead after the response
    flush = None
    if s["flush"] and end - env.last_flush >= FLUSH_EVERY_NS:
        env.last_flush = end
        flush = Stage("flush", end - 0.2 * NS_PER_MS, math.inf, {})
        work = lognormal_ms(rng, 9.0, 0.3)
        env.pending_flush, env.remaining_flush = flush, max(work - (done - flush.start), 0.5 * NS_PER_MS)
    env.free_at = done
    return Invoke(env, at, init, start, end, done, stages, status, flush)
