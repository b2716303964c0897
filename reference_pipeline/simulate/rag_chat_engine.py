"""The servers behind `rag-chat` (see rag_chat.py): the LLM server's continuous-batching engine, the
embedding service's dynamic batcher, the vector database's shard searches, and the orchestrator
processes' stalls (Python GC, a CFS CPU quota).

Each is a discrete-event model over all the requests that reach it, in the order they arrive there;
times are float ns from the start of the run.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, WorkerPool, lognormal_ms

BLOCK = 16  # tokens per KV-cache block
PERIOD_NS = 100 * NS_PER_MS  # the CFS period


@dataclass
class Engine:
    """One LLM replica's scheduler: `kv_tokens` of KV cache, at most `max_seqs` running sequences,
    `budget` prompt tokens prefilled per step (the first admitted prompt always fits); a cold replica
    (`cold`) is slow on its first steps (weights paged in from the lazily mapped files, allocator
    warm-up) and compiles a graph the first time it meets each batch-size bucket."""

    kv_tokens: int
    max_seqs: int = 128
    budget: int = 8192
    cold: bool = False
    step_ms: float = 6.5  # weights read once per step (an 8B model in bf16 on an H100)
    per_seq_ms: float = 0.09  # sampling, per-sequence kernels
    per_ctx_ms: float = 0.000045  # KV reads: attention over every running sequence's context
    per_prefill_ms: float = 0.024  # prefill FLOPs per prompt token
    quad_ms: float = 0.8e-6  # prefill attention, quadratic in the prompt


@dataclass
class Gen:
    """One generation at the LLM server: what it asks, and what the scheduler did with it."""

    arrive: float
    prompt: int
    output: int
    done_tokens: int = 0
    blocks: int = 0
    waits: list[tuple[float, float]] = field(default_factory=list)  # (queued, scheduled)
    prefills: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, tokens)
    preempted: list[float] = field(default_factory=list)
    first_token: float = -1.0
    end: float = -1.0
    queued_at: float = 0.0


def _blocks(tokens: int) -> int:
    return -(-tokens // BLOCK)


def run_engine(gens: list[Gen], engine: Engine, rng: random.Random) -> None:
    """Serve `gens` (sorted by arrival) step by step, filling in their waits, prefills, preemptions,
    first-token and end times. A step runs the prompts admitted in it and one decode token for every
    other running sequence; its time is the weights read plus per-sequence, KV-read and prefill work.
    When a running sequence needs a new KV block and none is free, the newest running sequence is
    preempted: its blocks are freed and it goes back to the head of the queue, to prefill its prompt
    and the tokens it had already produced again (recompute)."""
    capacity = engine.kv_tokens // BLOCK
    waiting: deque[Gen] = deque()
    running: list[Gen] = []
    used = 0
    i, n, t, steps = 0, len(gens), 0.0, 0
    seen_buckets: set[int] = set()
    while i < n or waiting or running:
        if not waiting and not running:
            t = max(t, gens[i].arrive)
        while i < n and gens[i].arrive <= t:
            gens[i].queued_at = gens[i].arrive
            waiting.append(gens[i])
            i += 1
        new: list[Gen] = []
        prefill = 0
        while waiting and len(running) < engine.max_seqs:
            g = waiting[0]
            tokens = g.prompt + g.done_tokens
            need = _blocks(tokens + 1)
            if used + need > capacity or (new and prefill + tokens > engine.budget):
                break
            waiting.popleft()
            g.waits.append((g.queued_at, t))
            g.blocks = need
            used += need
            running.append(g)
            new.append(g)
            prefill += tokens
        if not running:  # a prompt larger than the whole cache cannot happen with these settings
            t = gens[i].arrive if i < n else t + NS_PER_MS
            continue
        decode = len(running) - len(new)
        context = sum(g.prompt + g.done_tokens for g in running) - prefill
        ms = (
            engine.step_ms
            + engine.per_seq_ms * decode
            + engine.per_ctx_ms * context
            + engine.per_prefill_ms * prefill
            + engine.quad_ms * sum((g.prompt + g.done_tokens) ** 2 for g in new)
        )
        ms *= rng.lognormvariate(0.0, 0.04)
        if engine.cold:
            ms *= 1.0 + 1.5 * math.exp(-steps / 250.0)
            bucket = 1 << max(len(running) - 1, 0).bit_length()
            if bucket not in seen_buckets:  # the first step at this batch size compiles its graph
                seen_buckets.add(bucket)
                ms += rng.uniform(150.0, 450.0)
        start = t
        t += ms * NS_PER_MS
        steps += 1
        for g in new:
            g.prefills.append((start, t, g.prompt + g.done_tokens))
        still: list[Gen] = []
        for g in running:
            g.done_tokens += 1
            if g.first_token < 0:
                g.first_token = t
            if g.done_tokens >= g.output:
                g.end = t
                used -= g.blocks
                continue
            need = _blocks(g.prompt + g.done_tokens + 1)
            used += need - g.blocks
            g.blocks = need
            still.append(g)
        running = still
        while used > capacity and len(running) > 1:
            victim = running.pop()  # the newest admitted
            used -= victim.blocks
            victim.blocks = 0
            victim.preempted.append(t)
            victim.queued_at = t
            waiting.appendleft(victim)


def embed_batches(
    arrivals: list[float], tokens: list[int], rng: random.Random, max_batch: int = 32, delay_ms: float = 2.0
) -> list[tuple[float, float, int]]:
    """A dynamic batcher with one GPU worker: a batch closes when the worker is free and either
    `max_batch` requests wait or the first has waited `delay_ms`. Returns, per request (arrival
    order), (batch start, batch end, batch size)."""
    order = sorted(range(len(arrivals)), key=arrivals.__getitem__)
    out: list[tuple[float, float, int]] = [(0.0, 0.0, 0)] * len(arrivals)
    free, k = 0.0, 0
    while k < len(order):
        first = arrivals[order[k]]
        if free > first:
            close = free
        else:
            full = arrivals[order[k + max_batch - 1]] if k + max_batch - 1 < len(order) else math.inf
            close = min(first + delay_ms * NS_PER_MS, full)
        j = k
        while j < len(order) and j - k < max_batch and arrivals[order[j]] <= close:
            j += 1
        batch = order[k:j]
        work = lognormal_ms(rng, 2.5, 0.1) + 0.004 * NS_PER_MS * sum(tokens[r] for r in batch)
        start = max(close, free)
        free = start + work
        for r in batch:
            out[r] = (start, free, len(batch))
        k = j
    return out


def shard_searches(
    arrivals: list[float], rng: random.Random, threads: int, compaction: tuple[float, float] | None
) -> list[tuple[float, float, bool]]:
    """One query node's searches (arrival order in, per request out): (start, end, brute_force). HNSW
    over sealed segments takes a few ms, now and then tens of ms (index pages faulted in from disk);
    while a compaction's merged segment waits for its index (`compaction` window), every search scans
    it flat, holding one of the node's search threads for about a second."""
    pool = WorkerPool(threads)
    order = sorted(range(len(arrivals)), key=arrivals.__getitem__)
    out: list[tuple[float, float, bool]] = [(0.0, 0.0, False)] * len(arrivals)
    for r in order:
        t = arrivals[r]
        start = pool.acquire(t)
        work = lognormal_ms(rng, 3.5, 0.35)
        if rng.random() < 0.015:
            work += lognormal_ms(rng, 25.0, 0.5)
        flat = compaction is not None and compaction[0] <= start < compaction[1]
        if flat:
            work += lognormal_ms(rng, 2000.0, 0.25)
        pool.release(start + work)
        out[r] = (start, start + work, flat)
    return out


def gc_pauses(
    rng: random.Random, horizon: float, old_gen: bool, run_ns: float
) -> list[tuple[float, float, int]]:
    """A CPython process's collections: young ones (gen 0/1) every fraction of a second for a few ms,
    an occasional gen-2 pass; with a leaking heap (`old_gen`: objects that are never freed), gen-2
    passes every few seconds whose length grows with the heap, from ~0.5 s to ~5 s over the run
    (`run_ns` long)
    (start, end, generation)."""
    out: list[tuple[float, float, int]] = []
    t = rng.uniform(0.0, 0.5) * NS_PER_S
    while t < horizon:
        length = rng.uniform(0.8, 4.0) * NS_PER_MS
        out.append((t, t + length, rng.choice((0, 0, 0, 1))))
        t += length + rng.uniform(0.2, 0.9) * NS_PER_S
    every, span = ((2.0, 5.0), (0.5, 5.0)) if old_gen else ((25.0, 60.0), (0.025, 0.06))
    t = rng.uniform(0.0, every[1]) * NS_PER_S
    while t < horizon:
        grown = min(t / (0.8 * run_ns), 1.0) if old_gen else rng.random()
        length = (span[0] + (span[1] - span[0]) * grown) * rng.uniform(0.8, 1.2) * NS_PER_S
        out.append((t, t + length, 2))
        t += length + rng.uniform(*every) * NS_PER_S
    return out


def throttle_stalls(demand: list[float], quota_ms: float, cores: float) -> list[tuple[float, float]]:
    """A cgroup's throttled time. `demand` is the CPU (ms) the pod's threads ask for in each 1 ms of
    the run; they run up to `cores` ms per ms. Per 100 ms period the pod may use `quota_ms`: once it
    has, every thread stalls until the period ends, and the work not done carries into the next."""
    out: list[tuple[float, float]] = []
    backlog = 0.0
    per = int(PERIOD_NS / NS_PER_MS)
    for p in range(0, len(demand), per):
        chunk = demand[p : p + per]
        if backlog == 0.0 and sum(chunk) <= quota_ms and max(chunk, default=0.0) <= cores:
            continue  # a quiet period: nothing throttled, nothing carried
        used = 0.0
        for b, asked in enumerate(chunk):
            backlog += asked
            run = min(backlog, cores)
            if used + run >= quota_ms:
                left = quota_ms - used
                backlog -= left
                at = (p + b + left / run) * NS_PER_MS
                out.append((at, (p + per) * NS_PER_MS))
                break
            used += run
            backlog -= run
        else:
            continue
        for asked in chunk[b + 1 :]:
            backlog += asked
    return out

