"""One `classify-frontend` pod of the blind family `gpu-torch` (gpu_torch.py), as a discrete-event model:
grpcio's thread pool, the request threads' work under one GIL, pageable copies through the copy engine,
the in-process batcher thread and the torch.compile'd model on the pod's GPU, and the calls after it.

A request's handler runs on a pool thread from the moment one is free; it decodes, copies, tokenises,
reads merchant features and enqueues to the batcher; the batcher thread takes up to `max_batch`
requests once the oldest has waited `max_wait` (or the batch is full) and the previous batch is done;
a new sequence bucket recompiles, a new (padded batch, bucket) shape is captured, the allocator may
free its cache and retry; the threads wake when the batch's outputs are on the host, post-process,
call the taxonomy service and hand the result to the Kafka producer, and the thread goes back to the
pool when the response is sent.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.gpu_torch_physics import (
    WARM_BUCKETS,
    Busy,
    Gpu,
    capture_ms,
    compile_ms,
    kafka_ack_ms,
    kernel_ms,
    padded,
    postgres_ms,
    redis_ms,
    seq_bucket,
    taxonomy_ms,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, Stalls, lognormal_ms

Span = tuple[float, float]
SLOW_TAXONOMY = 0  # the taxonomy pod a bad rollout reached first


@dataclass
class Request:
    """One request's inputs and, once simulated, its timeline."""

    pod: int
    send: float
    megapixels: float
    heavy: bool  # a CMYK / ICC-profiled upload: colour conversion in code that keeps the GIL
    tokens: int
    miss: bool
    cold_db: bool  # the buffer cache went cold: the eviction wave's reads
    start: float = 0.0
    decode: Span = (0.0, 0.0)
    copy: Span = (0.0, 0.0)
    tokenize: Span = (0.0, 0.0)
    cache_get: Span = (0.0, 0.0)
    query: Span | None = None
    cache_set: Span | None = None
    enqueued: float = 0.0
    batch: dict[str, Any] = field(default_factory=dict)
    post: Span = (0.0, 0.0)
    attempts: list[tuple[float, float, float, float, bool, int]] = field(default_factory=list)
    kafka: Span = (0.0, 0.0)
    end: float = 0.0


@dataclass
class Knobs:
    """One run's settings for a pod."""

    threads: int
    max_batch: int
    max_wait_ms: float
    db_pool: int
    timeout_ms: float
    taxonomy_pods: int
    alloc_retry_p: float  # chance a batch's allocation fails and the allocator frees its cache
    alloc_stall_ms: float


class Pod:
    """The DES of one frontend process."""

    def __init__(self, rng: random.Random, knobs: Knobs, gpu: Gpu, pauses: list[tuple[float, float, int, int]]
                 ) -> None:
        self.rng, self.k, self.gpu = rng, knobs, gpu
        self.pauses = pauses
        self.stalls = Stalls([(a, b) for a, b, _, _ in pauses])
        self.gil = Busy([(a, b) for a, b, _, _ in pauses])  # a collection holds the GIL throughout
        self.copier = Busy()
        self.db = [0.0] * knobs.db_pool
        self.compiled = set(WARM_BUCKETS)
        self.captured = {(b, s) for b in (1, 2, 4, 8, 16, 32) for s in WARM_BUCKETS}
        self.retries = 0
        self.batches = 0

    # --- the handler thread, before the batcher ---------------------------------------------------
    def _before(self, r: Request, t: float) -> float:
        rng, gil = self.rng, self.gil
        r.start = t = self.stalls.settle(t)
        t = gil.run(t, lognormal_ms(rng, 0.12, 0.3))  # grpc deserialisation, the interceptor
        d0 = t
        if r.heavy:  # CMYK + ICC: ImageCms / ImageOps in code paths that keep the GIL
            t = gil.mixed(t, lognormal_ms(rng, 24.0, 0.3) * max(1.0, r.megapixels), 0.88, 6)
        else:  # libjpeg-turbo drops the GIL in the decoder; the conversion to float32 too
            t = gil.mixed(t, (0.6 + 3.1 * r.megapixels) * NS_PER_MS * rng.lognormvariate(0.0, 0.15), 0.22)
        r.decode = (d0, t)
        c0 = gil.run(t, lognormal_ms(rng, 0.05, 0.3))
        nbytes = 12.0 * r.megapixels * 1e6  # float32 CHW from pageable memory
        length = nbytes / 2.9e9 * 1e9 * rng.lognormvariate(0.0, 0.08) + 0.03 * NS_PER_MS
        _, c1 = self.copier.hold(c0 + 0.02 * NS_PER_MS, length)  # one copy engine, copies in turn
        r.copy = (c0, self.stalls.settle(c1 + 0.02 * NS_PER_MS))
        k0 = r.copy[1] + lognormal_ms(rng, 0.03, 0.3)
        r.tokenize = (k0, gil.run(k0, (0.25 + 0.004 * r.tokens) * NS_PER_MS * rng.lognormvariate(0.0, 0.2)))
        g0 = r.tokenize[1] + lognormal_ms(rng, 0.03, 0.3)
        g1 = gil.run(self.stalls.settle(g0 + redis_ms(rng)), 0.04 * NS_PER_MS)
        r.cache_get = (g0, g1)
        t = g1
        if r.miss:  # psycopg_pool: wait for a connection (untraced), then the query
            free = heapq.heappop(self.db)
            q0 = max(t + lognormal_ms(rng, 0.05, 0.3), free)
            q1 = gil.run(self.stalls.settle(q0 + postgres_ms(rng, r.cold_db)), 0.1 * NS_PER_MS)
            heapq.heappush(self.db, q1)
            r.query = (q0, q1)
            s0 = q1 + lognormal_ms(rng, 0.03, 0.3)
            r.cache_set = (s0, gil.run(self.stalls.settle(s0 + redis_ms(rng)), 0.03 * NS_PER_MS))
            t = r.cache_set[1]
        r.enqueued = gil.run(t, lognormal_ms(rng, 0.04, 0.3))
        return r.enqueued

    # --- the batcher thread ---------------------------------------------------------------------------
    def _forward(self, batch: list[Request], t: float) -> float:
        rng = self.rng
        self.batches += 1
        seq = max(seq_bucket(r.tokens) for r in batch)
        rows = padded(len(batch))
        t0 = t
        t = self.gil.run(t, (0.25 + 0.04 * len(batch)) * NS_PER_MS)  # collate, pad, launch
        recompiled = seq not in self.compiled
        if recompiled:  # Dynamo traces in this thread (GIL), Inductor compiles in its workers
            t = self.gil.mixed(t, compile_ms(rng), 0.3, 40)
            self.compiled.add(seq)
        captured = (rows, seq) not in self.captured
        if captured:
            t += capture_ms(rng)
            self.captured.add((rows, seq))
        stall = 0.0
        if rng.random() < self.k.alloc_retry_p * (1.0 + rows / 16) * max(1.0, seq / 128):  # bigger blocks
            # the caching allocator could not find a block: it frees every cached block (cudaFree
            # synchronises the device) and mallocs again; copies in flight wait for the sync
            stall = lognormal_ms(rng, self.k.alloc_stall_ms, 0.35)
            self.copier.hold(t, stall)
            self.retries += 1
        kernels = kernel_ms(rows, seq) * NS_PER_MS * self.gpu.slowdown(t) * rng.lognormvariate(0.0, 0.04)
        g0 = t + stall
        end = self.stalls.settle(g0 + kernels + 0.08 * NS_PER_MS)  # synchronize, outputs to the host
        info = {"size": len(batch), "rows": rows, "seq": seq, "start": t0, "end": end,
                "recompiled": recompiled,
                "captured": captured, "gpu_ms": (end - g0) / NS_PER_MS - 0.05, "retries": self.retries,
                "number": self.batches, "max_batch": self.k.max_batch, "max_wait_ms": self.k.max_wait_ms}
        for r in batch:
            r.batch = info
        return end

    # --- the handler thread, after the batch ---------------------------------------------------------
    def _after(self, r: Request, t: float, slow_window: tuple[float, float] | None) -> float:
        rng, gil = self.rng, self.gil
        p0 = gil.run(t + lognormal_ms(rng, 0.03, 0.3), 0.03 * NS_PER_MS)  # the Future wakes the thread
        r.post = (p0, gil.run(p0, lognormal_ms(rng, 0.45, 0.3)))  # top-k to lists, label names
        t = r.post[1]
        for _attempt in range(2):  # requests.post(timeout=...), one retry on a read timeout
            a0 = t + lognormal_ms(rng, 0.05, 0.3)
            tpod = rng.randrange(self.k.taxonomy_pods)  # a keep-alive connection to either pod
            slow = slow_window is not None and slow_window[0] <= a0 < slow_window[1] and tpod == SLOW_TAXONOMY
            net = lognormal_ms(rng, 0.25, 0.3)
            s0 = a0 + net
            s1 = s0 + taxonomy_ms(rng, slow)
            back = s1 + lognormal_ms(rng, 0.25, 0.3)
            limit = a0 + self.k.timeout_ms * NS_PER_MS
            timed_out = back > limit
            a1 = gil.run(self.stalls.settle(min(back, limit + 0.3 * NS_PER_MS)), 0.05 * NS_PER_MS)
            r.attempts.append((a0, a1, s0, s1, timed_out, tpod))
            t = a1
            if not timed_out:
                break
        k0 = t + lognormal_ms(rng, 0.03, 0.3)
        k1 = gil.run(k0, 0.08 * NS_PER_MS)  # producer.send(): returns at once
        r.kafka = (k0, self.stalls.settle(k1 + kafka_ack_ms(rng)))  # ends in the delivery callback
        r.end = self.stalls.settle(gil.run(k1, lognormal_ms(rng, 0.1, 0.3)))  # serialise, send
        return r.end

    def run(self, requests: list[Request], arrive: list[float],
            slow_window: tuple[float, float] | None) -> None:
        """Simulate the pod's requests (in send order; `arrive`: when each reaches the pod)."""
        events: list[tuple[float, int, int, Any]] = []
        seq = 0

        def push(t: float, kind: int, what: Any) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(events, (t, seq, kind, what))

        for r, t in zip(requests, arrive, strict=True):
            push(t, 0, r)
        free, waiting = self.k.threads, deque()
        queue: list[Request] = []
        busy_until = 0.0
        wait_ns = self.k.max_wait_ms * NS_PER_MS

        def try_launch(t: float) -> None:
            nonlocal busy_until
            if not queue or busy_until > t:
                return
            if len(queue) >= self.k.max_batch or t >= queue[0].enqueued + wait_ns:
                batch = queue[: self.k.max_batch]
                del queue[: self.k.max_batch]
                busy_until = self._forward(batch, t)
                push(busy_until, 2, batch)
            else:
                push(queue[0].enqueued + wait_ns, 3, None)

        while events:
            t, _, kind, what = heapq.heappop(events)
            if kind == 0:  # an RPC reaches the server: a pool thread, or grpc's queue
                if free:
                    free -= 1
                    push(self._before(what, t), 1, what)
                else:
                    waiting.append(what)
            elif kind == 1:  # the handler enqueued to the batcher
                queue.append(what)
                try_launch(t)
            elif kind == 2:  # a batch is done: its threads carry on
                for r in what:
                    push(self._after(r, t, slow_window), 4, r)
                try_launch(t)
            elif kind == 3:
                try_launch(t)
            else:  # a response was sent: the thread takes the next queued RPC
                if waiting:
                    nxt = waiting.popleft()
                    push(self._before(nxt, t), 1, nxt)
                else:
                    free += 1

