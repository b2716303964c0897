"""One request's steps in the blind family `node-triton`'s BFF (node_triton.py): every callback takes its
turn on its process' one JavaScript thread, dns.lookup and gzip take a libuv threadpool thread, the
audit INSERT a pool connection, the reputation call a keep-alive socket. Two passes around Triton:
the first runs every request up to its Triton call (in arrival order), Triton runs every call in
time order (its batcher needs them so), the second finishes the requests in the order their calls
were sent."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reference_pipeline.simulate import node_triton_spans as sp
from reference_pipeline.simulate.node_triton_sim import Agent, Exec, Lanes, gc_pauses
from reference_pipeline.simulate.trace_table import NS_PER_MS, lognormal_ms

GC_POD, HOT_POD = 1, 0
CONNECTIONS = 96
LOOP_MS_PER_REQUEST = 3.2  # the JavaScript thread's time for a mean request (the model below)
HOT_LOAD = 0.88  # the event loop's busy share on the pod holding most connections (keepalive-skew)
REPUTATION_SHARE = 0.35  # content with links or from a new author is checked against the reputation API
TIMEOUT_MS = 250.0
_WIRE = 1.25  # bytes per ns: 10 Gbit/s


class Bff:
    """The BFF pods: per pod its event loop (V8's pauses placed on it from the start), threadpool,
    pg pool and reputation agent; the caller's connections and the pod each landed on."""

    def __init__(self, rng: random.Random, s: dict[str, Any], style: sp.Style, parts: set[str],
                 change: float, run_ns: float, horizon: float) -> None:
        self.rng, self.s, self.style, self.parts = rng, s, style, parts
        self.change, self.run_ns = change, run_ns
        pods = s["bff_pods"]
        self.gcs = [gc_pauses(rng, horizon, change if "heap-limit-gc" in parts and k == GC_POD else None)
                    for k in range(pods)]
        self.gc_starts = [[a for a, _, _ in g] for g in self.gcs]
        self.loops = [Lanes(1, [(a, b) for a, b, _ in g], squeeze=True) for g in self.gcs]
        self.threadpools = [Lanes(4) for _ in range(pods)]
        self.pg = [Lanes(10) for _ in range(pods)]
        self.agents = [Agent(24) for _ in range(pods)]
        share = HOT_LOAD * 1000.0 / (s["rps"] * LOOP_MS_PER_REQUEST)  # of all requests, on the hot pod
        hot = (share - 1.0 / pods) / (1.0 - 1.0 / pods) if "keepalive-skew" in parts else 0.0
        # kube-proxy picks a pod per connection; after the rollout most reconnected to the first new pod
        self.conn_pod = [HOT_POD if rng.random() < hot else rng.randrange(pods) for _ in range(CONNECTIONS)]

    def hit_rate(self, t: float) -> float:
        if "verdict-eviction" in self.parts and t >= self.change:
            return 0.02 + 0.58 * (1.0 - math.exp(-(t - self.change) / (0.6 * self.run_ns)))
        return 0.6

    def cpu(self, ms: float) -> float:
        return lognormal_ms(self.rng, ms, 0.2)

    def gcs_in(self, pod: int, a: float, b: float) -> list[tuple[float, float, str]]:
        k = bisect.bisect_left(self.gc_starts[pod], a)
        out = []
        while k < len(self.gcs[pod]) and self.gcs[pod][k][0] < b:
            out.append(self.gcs[pod][k])
            k += 1
        return out


@dataclass
class _Head:
    """A request up to its Triton call."""

    key: int
    pod: int
    caller: int
    kind: str
    body: int
    content: str
    client_start: float
    root_start: float
    handler_start: float
    get: tuple[float, float]
    hit: bool
    checked: bool
    sent: float  # the callback that sends the calls ends: the Triton call (on a miss), the reputation call
    triton_pod: int
    triton_arrival: float


def _head(b: Bff, key: int, t0: float) -> _Head:
    rng, s = b.rng, b.s
    c = rng.randrange(CONNECTIONS)
    pod = b.conn_pod[c]
    loop = b.loops[pod]
    image = rng.random() < 0.25
    bulk = "large-json-bodies" in b.parts and not image and rng.random() < 0.008
    if bulk:  # a whole comment thread imported at once: deeply nested JSON
        body = int(rng.uniform(3.0, 14.0) * 1e6)
        parse_ms = body / 70e3
    elif image:  # base64 in a JSON string: parsed fast, then decoded and hashed synchronously
        body = int(600e3 * rng.lognormvariate(0.0, 0.45))
        parse_ms = body / 1e6 + body * 0.75 / 6e5
    else:
        body = int(2500 * rng.lognormvariate(0.0, 0.6))
        parse_ms = body / 120e3
    arrive = t0 + lognormal_ms(rng, 0.25, 0.2)
    root_s, root_e = loop.run(arrive, b.cpu(0.45))  # the request event: the SERVER span starts
    parse_s, parse_e = loop.run(max(root_e, arrive + body / _WIRE), b.cpu(1.1) + parse_ms * NS_PER_MS)
    handler_s = parse_s + parse_ms * NS_PER_MS + 0.6 * (parse_e - parse_s - parse_ms * NS_PER_MS)
    rtt = lognormal_ms(rng, 0.35, 0.25)
    if rng.random() < 0.003:
        rtt += rng.uniform(5.0, 30.0) * NS_PER_MS  # a slow reply (a big key's neighbour, a fork)
    hit = rng.random() < b.hit_rate(t0)
    checked = rng.random() < REPUTATION_SHARE
    cb_s, cb_e = loop.run(parse_e + rtt, b.cpu(0.25 + (0.1 if checked else 0.0)
                                               + (0.0 if hit else 0.35 + (0.5 if image else 0.0))))
    triton_pod = pod % s["triton_pods"] if b.style.transport == "grpc" else rng.randrange(s["triton_pods"])
    sent = cb_e
    arrival = sent + lognormal_ms(rng, 0.2, 0.2) + (450e3 / _WIRE if image else 0.0)
    return _Head(key, pod, c % 2, "image" if image else "text", body, f"{rng.getrandbits(48):012x}", t0,
                 root_s, handler_s, (parse_e - 0.04 * NS_PER_MS, cb_s + 0.02 * NS_PER_MS), hit, checked, sent,
                 triton_pod, arrival)


def _reputation(b: Bff, h: _Head) -> tuple[list[sp.Attempt], float]:
    """The reputation call (timeout 250 ms from the request's start, one retry): its attempts and
    when the last one's callback has run."""
    rng, pod = b.rng, h.pod
    loop, agent = b.loops[pod], b.agents[pod]
    slow = "reputation-timeouts" in b.parts and h.sent >= b.change
    t = h.sent + 0.02 * NS_PER_MS
    attempts = []
    done = t
    for attempt in range(2):
        got, sock = agent.take(t)
        rtt = lognormal_ms(rng, 4.0, 0.15)
        dns = None
        send = got
        if sock is None:  # a new socket: getaddrinfo on the threadpool, TCP, TLS 1.3
            _, lookup_e = b.threadpools[pod].run(got, lognormal_ms(rng, 1.8, 0.4))
            dns_cb, dns_end = loop.run(lookup_e, b.cpu(0.05))
            dns = (got, dns_cb + 0.01 * NS_PER_MS)
            _, tls_e = loop.run(dns_end + rtt, b.cpu(0.7))
            send = tls_e + rtt
        server = lognormal_ms(rng, 150.0, 0.55) if slow else lognormal_ms(rng, 18.0, 0.4)
        if rng.random() < 0.005:
            server += rng.uniform(100.0, 400.0) * NS_PER_MS
        answer = send + rtt + server
        deadline = t + TIMEOUT_MS * NS_PER_MS
        if answer > deadline:  # axios' timer fires: the request is aborted and its socket destroyed
            cb_s, done = loop.run(deadline, b.cpu(0.08))
            attempts.append(sp.Attempt(t, cb_s + 0.02 * NS_PER_MS, True, dns))
            agent.give(sock, got, cb_s, keep=False)
            t = done + 0.02 * NS_PER_MS
            if attempt == 0:
                continue
            break
        cb_s, done = loop.run(answer, b.cpu(0.15))
        attempts.append(sp.Attempt(t, cb_s + 0.02 * NS_PER_MS, False, dns))
        agent.give(sock, got, answer, keep=True)
        break
    return attempts, done


def _tail(b: Bff, h: _Head, steps: list[Exec] | None) -> sp.Timeline:
    rng, pod = b.rng, h.pod
    loop = b.loops[pod]
    attempts, joined = _reputation(b, h) if h.checked else ([], h.sent)
    infer = None
    if steps is not None:
        server = (h.triton_arrival, steps[-1].end + lognormal_ms(rng, 0.15, 0.2))
        cb_s, cb_e = loop.run(server[1] + lognormal_ms(rng, 0.2, 0.2), b.cpu(0.25))
        infer = sp.Infer(h.sent - 0.3 * NS_PER_MS, cb_s + 0.02 * NS_PER_MS, h.triton_pod, server, steps)
        joined = max(joined, cb_e)
    _, verdict = loop.run(joined, b.cpu(0.2))
    setex = None
    if not h.hit:  # fire and forget
        reply_s, _ = loop.run(verdict + lognormal_ms(rng, 0.35, 0.25), b.cpu(0.05))
        setex = (verdict - 0.02 * NS_PER_MS, reply_s + 0.01 * NS_PER_MS)
    commit = lognormal_ms(rng, 1.6, 0.4) + lognormal_ms(rng, 0.5, 0.2)
    if rng.random() < 0.005:
        commit += rng.uniform(10.0, 80.0) * NS_PER_MS  # a checkpoint's fsync
    if "audit-pool" in b.parts and verdict >= b.change:  # the commit waits for the remote standby
        commit += lognormal_ms(rng, 62.0, 0.3)
    free, _ = b.pg[pod].run(verdict, commit + 0.3 * NS_PER_MS)
    pool_cb, pool_done = loop.run(free, b.cpu(0.06))
    ins_cb, ins_done = loop.run(pool_done + commit, b.cpu(0.08))
    explain = "gzip-threadpool" in b.parts and h.client_start >= b.change and rng.random() < 0.3
    if explain:
        response = int(2.0e6 * rng.lognormvariate(0.0, 0.5))
    else:
        response = int((1400 if h.kind == "text" else 3500) * rng.lognormvariate(0.0, 0.3))
    send_s, send_e = loop.run(ins_done, b.cpu(0.3) + response / 0.3)  # reply.send + JSON.stringify
    zipped = send_e
    if response >= 1024:  # @fastify/compress' threshold: gzip on the threadpool
        _, zipped = b.threadpools[pod].run(send_e, 0.04 * NS_PER_MS + response / 0.03)
    write_s, write_e = loop.run(zipped, b.cpu(0.1))
    root_end = write_e + response * 0.2 / _WIRE
    client_end = root_end + lognormal_ms(rng, 0.25, 0.2)
    return sp.Timeline(
        h.pod, h.caller, h.kind, h.body, response, h.content, (h.client_start, client_end),
        (h.root_start, root_end), (h.handler_start, send_s + 0.05 * NS_PER_MS), h.get, h.hit, infer, attempts,
        setex, (verdict, pool_cb + 0.01 * NS_PER_MS), (pool_done, ins_cb + 0.01 * NS_PER_MS),
        (send_e, write_s + 0.01 * NS_PER_MS), b.gcs_in(pod, h.root_start, root_end) if b.style.gc else [])


Calls = dict[int, tuple[float, int, str, int]]


def run_bff(b: Bff, arrivals: list[float], triton: Callable[[Calls], dict[int, list[Exec]]]
            ) -> list[sp.Timeline]:
    heads = [_head(b, key, t0) for key, t0 in enumerate(arrivals)]
    calls = {h.key: (h.triton_arrival, h.triton_pod, h.kind, min(h.body, 20000)) for h in heads if not h.hit}
    steps = triton(calls)
    out: dict[int, sp.Timeline] = {}
    for h in sorted(heads, key=lambda h: h.sent):
        out[h.key] = _tail(b, h, steps.get(h.key))
    return [out[k] for k in range(len(heads))]
