"""One request of the blind family `llm-agent` (llm_agent.py) as a coroutine over the physics of
llm_agent_sim.py: the agent's loop of steps (count the prompt's tokens on the event loop, ask the
semantic cache, call the provider through the worker's connection pool and the key's rate limits,
run the tool the model asked for, append its result), recorded as span records (`Rec`) for
llm_agent_spans.py to name by the seed's conventions.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.llm_agent_sim import (
    Loop,
    Pool,
    Proc,
    RateLimit,
    Replica,
    Sandbox,
    Scheduler,
    decode_ns,
    shard_ms,
    ttft_ms,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms

SHARDS = 4
MAX_TOKENS = 1024  # the call's max_tokens: the provider counts it against the tokens-per-minute limit
CONSISTENCY_LAG_S = 1.0  # the SQL tool's check: a replica further behind than this is retried
TRUNCATE_TOKENS = 6000  # a tool result is cut to this many tokens after counting it


@dataclass
class Rec:
    """One span as the model made it: a role (root, step, tokenize, cache, llm, tool, db, vdb, http,
    sandbox), its parent record, times and what the spans module needs to name and attribute it."""

    role: str
    parent: int
    start: float
    end: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Req:
    index: int
    t0: float
    pod: int
    worker: int  # 0..3 within the pod
    steps: int
    tools: list[str]
    final_tokens: int
    huge: dict[int, int]  # tool step -> size in bytes of the huge document it returns
    recs: list[Rec] = field(default_factory=list)
    failed: bool = False
    proc: Proc | None = None

    def add(self, role: str, parent: int, start: float, **info: Any) -> int:
        self.recs.append(Rec(role, parent, start, start, info))
        return len(self.recs) - 1


@dataclass
class World:
    rng: random.Random
    sched: Scheduler
    loops: list[Loop]  # per worker process (pod * 4 + worker)
    pools: list[Pool]
    limit: RateLimit
    sandboxes: list[Sandbox]  # per pod's node
    replicas: list[Replica]
    hit_rate: Any  # (t, step) -> the semantic cache's hit probability
    degraded_from: float | None
    slow_shard: int | None


def tokenize_ns(chars: int) -> float:
    """The synchronous BPE count: ~0.3 µs a character, worse than linear on long unbroken runs."""
    return chars * 300.0 * (1.0 + chars / 1.5e6)


def agent(w: World, q: Req) -> Proc:
    rng = w.rng
    proc = q.proc
    assert proc is not None
    slot = q.pod * 4 + q.worker
    loop, pool = w.loops[slot], w.pools[slot]
    now = yield q.t0
    root = q.add("root", -1, now)
    prompt = int(1500 + 600 * rng.random())
    pending_chars = 0  # a tool result appended but not counted yet
    for k in range(q.steps):
        final = k == q.steps - 1
        step = q.add("step", root, now, index=k)
        chars = 4 * prompt + pending_chars
        block = tokenize_ns(chars)
        tok = q.add("tokenize", step, now, chars=chars)
        loop.block(now, now + block)  # nothing else on this worker runs meanwhile
        now += block
        q.recs[tok].end = now
        if pending_chars:
            prompt += min(pending_chars // 4, TRUNCATE_TOKENS)
            pending_chars = 0
        q.recs[tok].info["tokens"] = prompt
        c0 = q.add("cache", step, now)
        now = yield now + lognormal_ms(rng, 18.0, 0.3)  # embed the prompt, search Redis' vector index
        hit = rng.random() < w.hit_rate(now, k)
        q.recs[c0].end, q.recs[c0].info["hit"] = now, hit
        out = q.final_tokens if final else int(40 + 100 * rng.random())
        llm = q.add("llm", step, now, prompt=prompt, out=out, final=final, hit=hit, attempts=[])
        if hit:
            now = yield now + lognormal_ms(rng, 5.0, 0.3)
        else:
            now = yield from _call(w, q, llm, pool, loop, prompt, out)
        q.recs[llm].end = now
        if q.failed:
            q.recs[step].end = now
            break
        prompt += out
        if not final:
            now, result = yield from _tool(w, q, step, k, now)
            if result > 4 * TRUNCATE_TOKENS:
                pending_chars = result
            else:
                prompt += result // 4
        q.recs[step].end = now
        now = yield now + lognormal_ms(rng, 0.4, 0.3)
    q.recs[root].end = (yield now + lognormal_ms(rng, 1.5, 0.3))
    q.recs[root].info["steps"] = sum(r.role == "step" for r in q.recs)


def _call(w: World, q: Req, llm: int, pool: Pool, loop: Loop, prompt: int, out: int):
    """The streamed chat call: a connection from the pool (waiting inside the client when all are
    busy), up to 3 retries after a 429's Retry-After, then the stream: TTFT, then the decode."""
    rng, proc = w.rng, q.proc
    attempts = q.recs[llm].info["attempts"]
    now = q.recs[llm].start
    if not pool.acquire(proc):
        now = yield None
    for attempt in range(4):
        a0 = now
        retry_after = w.limit.admit(now, prompt + MAX_TOKENS)
        if retry_after:
            now = yield now + lognormal_ms(rng, 70.0, 0.3)
            attempts.append((a0, now, 429, retry_after))
            pool.release(now, w.sched, loop)
            if attempt == 3:
                q.failed = True
                return now
            now = yield now + retry_after * NS_PER_S * (1.0 + 0.05 * rng.random())
            if not pool.acquire(proc):
                now = yield None
            continue
        degraded = w.degraded_from is not None and now >= w.degraded_from
        first = ttft_ms(rng, prompt, degraded)
        now = yield now + first + decode_ns(rng, out)
        attempts.append((a0, now, 200, 0.0))
        q.recs[llm].info["ttft"] = first
        pool.release(now, w.sched, loop)
        return now
    raise AssertionError("unreachable")


def _tool(w: World, q: Req, step: int, k: int, now: float):
    """Run the tool the model asked for; returns (when it is done, the result's size in bytes)."""
    rng = w.rng
    name = q.tools[k]
    tool = q.add("tool", step, now, name=name)
    if name == "sql_query":
        result = int(1200 + 4500 * rng.random())
        replica = rng.randrange(len(w.replicas))
        retries = 0
        for attempt in range(4):
            c0 = now
            now = yield now + lognormal_ms(rng, 1.6, 0.3)
            lag = w.replicas[replica].lag_s(rng, now)
            q.add("db", tool, c0, check=True, host=replica, lag=lag)
            q.recs[-1].end = now
            if lag <= CONSISTENCY_LAG_S:
                break
            if attempt == 3:
                replica = -1  # give up on the replica: read the primary
                break
            retries += 1
            now = yield now + 2**attempt * NS_PER_S * (1.0 + 0.1 * rng.random())
        d0 = now
        work = lognormal_ms(rng, 6.0, 0.45)
        if rng.random() < 0.008:
            work += lognormal_ms(rng, 180.0, 0.5)
        now = yield now + work
        q.add("db", tool, d0, check=False, host=replica)
        q.recs[-1].end = now
        q.recs[tool].info["retries"] = retries
    elif name == "search_docs":
        result = int(6000 + 8000 * rng.random())
        v0 = now
        slowest = max(shard_ms(rng, s, w.slow_shard) for s in range(SHARDS))
        now = yield now + slowest + lognormal_ms(rng, 3.0, 0.3)
        q.add("vdb", tool, v0, top_k=8)
        q.recs[-1].end = now
    elif name == "http_fetch":
        result = q.huge.get(k) or int(1200 + 4000 * rng.random())
        h0 = now
        serve = lognormal_ms(rng, 35.0, 0.35) + result * 0.00002 * NS_PER_MS  # ~50 MB/s to serialize
        if rng.random() < 0.006:
            serve += lognormal_ms(rng, 400.0, 0.5)
        net = lognormal_ms(rng, 0.6, 0.3)
        now = yield now + 2 * net + serve + result / 100.0  # ~100 MB/s on the wire
        q.add("http", tool, h0, size=result, net=net)
        q.recs[-1].end = now
    else:
        result = int(600 + 2500 * rng.random())
        s0 = now
        arrive = now + lognormal_ms(rng, 1.0, 0.3)
        boot = w.sandboxes[q.pod].take(rng, arrive)
        begin = arrive if boot is None else boot[1]
        run = lognormal_ms(rng, 420.0, 0.55) + (0.0 if boot is None else lognormal_ms(rng, 1000.0, 0.3))
        timeout = run > 10 * NS_PER_S
        done = begin + min(run, 10 * NS_PER_S)
        now = yield done + lognormal_ms(rng, 1.0, 0.3)
        q.add("sandbox", tool, s0, arrive=arrive, done=done, boot=boot, timeout=timeout)
        q.recs[-1].end = now
    q.recs[tool].end = now
    q.recs[tool].info["bytes"] = result
    return now, result


def hit_curve(base: float, flush_at: float | None, tau: float):
    """The semantic cache's hit probability at t for step k: first steps (a plan for a common question)
    hit more often; after a flush the cache starts empty and refills as prompts are answered."""

    def rate(t: float, k: int) -> float:
        h = base * (1.25 if k == 0 else 0.9)
        if flush_at is not None and t >= flush_at:
            h *= 1.0 - math.exp(-(t - flush_at) / tau)
        return h

    return rate
