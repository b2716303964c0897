"""The orchestrator's side of `rag-chat` (see rag_chat.py): each request's path through one orchestrator
process (an asyncio loop: its steps wait on I/O, its CPU steps and the reads of replies run only when
the process is not stalled by GC or by its CPU quota), phase by phase, so that every shared server
(the embedder's batcher, the query nodes, the LLM engines) sees its requests in the order they reach it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.rag_chat_engine import (
    Engine,
    Gen,
    embed_batches,
    gc_pauses,
    run_engine,
    shard_searches,
    throttle_stalls,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms, merge_intervals

NET_MS = 0.25  # one hop inside the cluster
CANDIDATES = 24  # the vector search's top-n, reranked down to the prompt's top-k
RERANK_CPU_MS = 8.0  # the cross-encoder's CPU per candidate (ONNX Runtime, 4 intra-op threads)
RERANK_THREADS = 3.4
MAX_TOKENS = 512


@dataclass
class Req:
    """One chat request and every time its spans need (ns); `marks` holds the orchestrator's steps."""

    t0: float
    pod: int
    hit: bool
    query_tokens: int
    prompt: int
    output: int
    top_k: int
    marks: dict[str, tuple[float, float]] = field(default_factory=dict)
    embed: tuple[float, float, int, int] = (0.0, 0.0, 0, 0)  # batch start, end, size, replica
    shards: list[tuple[float, float, float, float, bool]] = field(default_factory=list)
    gen: Gen | None = None
    replica: int = -1
    attempts: list[tuple[float, float, float, float, bool]] = field(default_factory=list)
    skipped: bool = False


@dataclass
class Plan:
    """What a scenario changes, and the seed's sizes."""

    pods: int
    rps: float
    replicas: int
    shards: int
    hit_rate: float
    top_k: int = 4
    parent_docs: bool = False  # the prompt takes each hit's parent section instead of the chunk
    kv_tokens: int = 300_000
    quota_ms: float = 300.0  # a 3-CPU limit
    old_gen_gc: bool = False
    compacting: int = -1  # the query node whose merged segment waits for its index
    flush_at: float = -1.0  # share of the run at which the semantic cache is flushed
    rollout: bool = False  # LLM replicas replaced by new (cold) pods during the run
    slow_moderation: bool = False
    deadline_ms: float = 1500.0


def _hit_chance(plan: Plan, t: float, length: float) -> float:
    if plan.flush_at < 0 or t < plan.flush_at * length:
        return plan.hit_rate
    return plan.hit_rate * (1.0 - math.exp(-(t - plan.flush_at * length) / (0.6 * length)))


def draw(plan: Plan, requests: int, arrivals: list[float], rng: random.Random) -> list[Req]:
    length = arrivals[-1]
    out = []
    for t0 in arrivals:
        if plan.parent_docs:  # each hit brings its whole parent section
            chunks = sum(min(6000, int(rng.lognormvariate(math.log(900.0), 0.8))) for _ in range(plan.top_k))
        else:
            chunks = sum(rng.randint(280, 520) for _ in range(plan.top_k))
        output = min(MAX_TOKENS, max(4, int(rng.lognormvariate(math.log(100.0), 0.7))))
        out.append(
            Req(
                t0,
                rng.randrange(plan.pods),
                rng.random() < _hit_chance(plan, t0, length),
                rng.randint(8, 48),
                260 + rng.randint(0, 240) + chunks,
                output,
                plan.top_k,
            )
        )
    return out


def cpu_demand(plan: Plan, reqs: list[Req], horizon: float, rng: random.Random) -> list[list[float]]:
    """Per pod, the CPU (ms) its threads ask for in each ms: the request's own handling when it
    arrives, the rerank ~25 ms later on a miss (its intra-op threads at once), and reading the
    token stream while the answer is generated."""
    bins = int(horizon / NS_PER_MS) + 1
    demand = [[0.0] * bins for _ in range(plan.pods)]
    for r in reqs:
        d = demand[r.pod]
        b = int(r.t0 / NS_PER_MS)
        d[min(b, bins - 1)] += 1.0
        d[min(b + 1, bins - 1)] += 1.0
        if not r.hit:
            cpu = RERANK_CPU_MS * CANDIDATES * rng.lognormvariate(0.0, 0.1)
            at = b + 25
            while cpu > 0 and at < bins:
                d[at] += min(cpu, RERANK_THREADS)
                cpu -= RERANK_THREADS
                at += 1
            relay = 0.05 * r.output
            first, last = b + 150, b + 150 + int(9 * r.output)
            for at in range(first, min(last, bins - 1), 50):
                d[at] += relay * 50 / max(last - first, 50)
    return demand


def orchestrator_stalls(
    plan: Plan,
    reqs: list[Req],
    horizon: float,
    rng: random.Random,
) -> tuple[list[Stalls], list[list[tuple[float, float, int]]]]:
    pauses = [gc_pauses(rng, horizon, plan.old_gen_gc, reqs[-1].t0) for _ in range(plan.pods)]
    demand = cpu_demand(plan, reqs, horizon, rng)
    stalls = []
    for k in range(plan.pods):
        throttled = throttle_stalls(demand[k], plan.quota_ms, cores=6.0)
        stalls.append(Stalls(merge_intervals([(a, b) for a, b, _ in pauses[k]] + throttled)))
    return stalls, pauses


def simulate(plan: Plan, reqs: list[Req], stalls: list[Stalls], rng: random.Random) -> float:
    """Fill in every request's times; returns when the LLM replicas were replaced (rollout) or -1."""

    def ms(median: float, sigma: float = 0.3) -> float:
        return lognormal_ms(rng, median, sigma)

    net = NET_MS * NS_PER_MS
    for r in reqs:  # up to the embedding call
        st = stalls[r.pod]
        root_s = st.settle(r.t0 + ms(0.3) + net)  # the ingress, then the loop accepts
        parse = (root_s + ms(0.05), st.run(root_s + ms(0.05), ms(0.8)))
        e_s = st.run(parse[1], ms(0.05))
        call_s = e_s + ms(0.04)
        r.marks.update(root=(root_s, 0.0), receive=parse, embed_query=(e_s, 0.0), embed_call=(call_s, 0.0))
    embed_at = [r.marks["embed_call"][0] + net for r in reqs]
    for replica in range(2):
        mine = [i for i, r in enumerate(reqs) if i % 2 == replica]
        batches = embed_batches([embed_at[i] for i in mine], [reqs[i].query_tokens for i in mine], rng)
        for i, (a, b, size) in zip(mine, batches, strict=True):
            reqs[i].embed = (a, b, size, replica)
    searches: list[Req] = []
    for i, r in enumerate(reqs):  # reply read, cache lookup, on a miss the search starts
        st = stalls[r.pod]
        read = st.settle(r.embed[1] + ms(0.1) + net)
        r.marks["embed_call"] = (r.marks["embed_call"][0], read)
        e_e = st.run(read, ms(0.2))
        r.marks["embed_query"] = (r.marks["embed_query"][0], e_e)
        l_s = st.run(e_e, ms(0.05))
        redis_s = l_s + ms(0.1)
        redis_e = st.settle(redis_s + ms(1.1, 0.35) + (ms(8.0) if rng.random() < 0.01 else 0.0))
        l_e = st.run(redis_e, ms(0.4))
        r.marks.update(lookup=(l_s, l_e), redis=(redis_s, redis_e))
        embed_at[i] = l_e
        if r.hit:
            end = st.run(l_e, ms(0.6))
            r.marks["send"] = (end, st.run(end, ms(0.1)))
            r.marks["root"] = (r.marks["root"][0], r.marks["send"][1] + ms(0.02))
            continue
        rv_s = st.run(l_e, ms(0.05))
        call_s = st.run(rv_s, ms(0.3))
        r.marks.update(retrieve=(rv_s, 0.0), search_call=(call_s, 0.0), proxy=(call_s + net, 0.0))
        searches.append(r)
    _search(plan, searches, rng, net)
    gens: list[list[Gen]] = [[] for _ in range(plan.replicas * (2 if plan.rollout else 1))]
    length = reqs[-1].t0
    swap = [(0.25 + 0.5 * j / plan.replicas) * length for j in range(plan.replicas)] if plan.rollout else []
    for r in searches:  # the search's reply, rerank, the prompt; the request reaches a replica
        st = stalls[r.pod]
        read = st.settle(r.marks["proxy"][1] + net)
        r.marks["search_call"] = (r.marks["search_call"][0], read)
        rv_e = st.run(read, ms(0.3))
        r.marks["retrieve"] = (r.marks["retrieve"][0], rv_e)
        rr = (st.run(rv_e, ms(0.05)), 0.0)
        wall = RERANK_CPU_MS * CANDIDATES / RERANK_THREADS * rng.lognormvariate(0.0, 0.1) * NS_PER_MS
        r.marks["rerank"] = (rr[0], st.run(rr[0], wall))
        bp_s = st.run(r.marks["rerank"][1], ms(0.05))
        r.marks["build_prompt"] = (bp_s, st.run(bp_s, ms(0.6) + 0.0008 * r.prompt * NS_PER_MS))
        llm_s = st.run(r.marks["build_prompt"][1], ms(0.1))
        r.marks["llm_call"] = (llm_s, 0.0)
        at = llm_s + ms(0.4) + net
        slot = rng.randrange(plan.replicas)
        r.replica = slot + (plan.replicas if swap and at >= swap[slot] else 0)
        r.gen = Gen(at, r.prompt, r.output)
        gens[r.replica].append(r.gen)
    for k, mine in enumerate(gens):
        mine.sort(key=lambda g: g.arrive)
        run_engine(mine, Engine(kv_tokens=plan.kv_tokens, cold=k >= plan.replicas), rng)
    for r in searches:
        _finish(plan, r, stalls[r.pod], rng, net)
    return swap[0] if swap else -1.0


def _search(plan: Plan, searches: list[Req], rng: random.Random, net: float) -> None:
    length = searches[-1].t0 if searches else 0.0
    window = (0.25 * length, 0.85 * length)
    for shard in range(plan.shards):
        sends = [r.marks["proxy"][0] + ms_(rng, 0.15) + 0.02 * shard * NS_PER_MS for r in searches]
        found = shard_searches(
            [s + net for s in sends], rng, 48, window if shard == plan.compacting else None
        )
        for r, send, (a, b, flat) in zip(searches, sends, found, strict=True):
            r.shards.append((send, b + net + ms_(rng, 0.05), a, b, flat))
    for r in searches:
        back = max(s[1] for s in r.shards)
        reduce = (back + ms_(rng, 0.03), back + ms_(rng, 0.4) + 0.01 * CANDIDATES * plan.shards * NS_PER_MS)
        r.marks.update(reduce=reduce, proxy=(r.marks["proxy"][0], reduce[1] + ms_(rng, 0.1)))


def ms_(rng: random.Random, median: float, sigma: float = 0.3) -> float:
    return lognormal_ms(rng, median, sigma)


def _finish(plan: Plan, r: Req, st: Stalls, rng: random.Random, net: float) -> None:
    """The stream's reading, moderation (deadline and one retry, fail-open), the reply, the cache
    write that runs as a background task after it."""
    assert r.gen is not None
    first = st.settle(r.gen.first_token + net)
    done = st.settle(r.gen.end + net)
    done = max(done, st.run(first, 0.05 * r.output * NS_PER_MS))
    r.marks["llm_call"] = (r.marks["llm_call"][0], done)
    r.marks["first_read"] = (first, first)
    m_s = st.run(done, ms_(rng, 0.1))
    t = st.run(m_s, ms_(rng, 0.2))
    deadline = plan.deadline_ms * NS_PER_MS
    for attempt in range(2):
        srv_s = t + net + ms_(rng, 0.1)
        if plan.slow_moderation:
            work = ms_(rng, 400.0, 0.5) + (
                900.0 * NS_PER_MS * rng.paretovariate(1.1) if rng.random() < 0.25 else 0.0
            )
        else:
            work = ms_(rng, 40.0, 0.3) + (lognormal_ms(rng, 150.0, 0.6) if rng.random() < 0.01 else 0.0)
        work += 0.04 * r.output * NS_PER_MS
        reply = srv_s + work + net
        failed = reply > t + deadline
        end = st.settle(t + deadline + ms_(rng, 0.2) if failed else reply)
        r.attempts.append((t, end, srv_s, srv_s + work, failed))
        t = end
        if not failed:
            break
        if attempt == 0:
            t = st.run(t, 250 * NS_PER_MS)  # tenacity's wait before the second attempt
    r.skipped = r.attempts[-1][4]  # both timed out: the answer goes out unmoderated (fail-open)
    m_e = st.run(t, ms_(rng, 0.1))
    r.marks["moderate"] = (m_s, m_e)
    send = st.run(m_e, ms_(rng, 0.8))
    r.marks["send"] = (send, st.run(send, ms_(rng, 0.1)))
    r.marks["root"] = (r.marks["root"][0], r.marks["send"][1] + ms_(rng, 0.02))
    store = st.run(r.marks["send"][1], ms_(rng, 0.1))
    hset = (store + ms_(rng, 0.1), st.settle(store + ms_(rng, 1.3, 0.35)))
    r.marks.update(store=(store, st.run(hset[1], ms_(rng, 0.1))), hset=hset)


def horizon_of(reqs: list[Req]) -> float:
    return reqs[-1].t0 + 60 * NS_PER_S


def plan_summary(plan: Plan) -> dict[str, Any]:
    return {"pods": plan.pods, "rps": plan.rps, "replicas": plan.replicas, "shards": plan.shards}
