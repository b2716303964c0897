"""The physics of the blind family `asr-stream` (asr_stream.py): one GPU decoder process's micro-batcher
and CPU threads, the phrase-hint cache over Redis, Postgres' group commit, and the gateway's JVM.

A decoder process holds the state of the streams routed to it. A chunk of a stream can be decoded only
after the stream's previous chunk (the acoustic model's cache carries from one to the next). Every
`interval` the batcher takes every chunk waiting (up to `max_batch`) into one micro-batch on the GPU
(a fixed launch cost plus a cost per chunk): a batch that runs past the next tick makes the next one
form as soon as the GPU frees, bigger. Each chunk's beam search then runs on one of the process'
CPU threads (cost grows with the beam width). A device-wide stall (cudaFree after the caching
allocator dropped its cache) stops the GPU; a CFS throttle stops the process' CPU threads, the thread
that launches batches too.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

import numpy as np

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms


@dataclass
class Chunk:
    """One chunk of audio at a decoder: its stream (utterance) and index, when it reached the
    decoder, the re-decode work it carries (chunks of history to rebuild, 0 if none) and when it was
    ready, batched and decoded."""

    utt: int
    index: int
    arrive: float
    beam: int
    rebuild: int = 0
    ready: float = 0.0
    batch_start: float = 0.0
    batch_size: int = 0
    done: float = 0.0


@dataclass
class Batch:
    start: float
    end: float
    chunks: list[Chunk]


@dataclass
class GpuHost:
    """One decoder process on one GPU: the batcher's tick, its costs, the GPU's and the process'
    stalls, the beam-search threads, and a fresh process' cold window (lazy CUDA module loads on its
    first batch, then allocator growth slowing batches while it lasts)."""

    interval: float
    gpu_stalls: Stalls
    cpu_stalls: Stalls
    threads: int
    cold_from: float | None = None  # a fresh process took traffic from here
    max_batch: int = 64
    batches: list[Batch] = field(default_factory=list)

    def batch_cost(self, rng: random.Random, start: float, work: float, noise: float) -> float:
        cost = (3.0 + 1.5 * work) * NS_PER_MS * noise
        if self.cold_from is not None and start >= self.cold_from:
            age = (start - self.cold_from) / NS_PER_S
            cost *= 1.0 + 0.6 * max(0.0, 1.0 - age / 15.0)  # cudaMalloc growth while the pool fills
            if not self.batches or self.batches[-1].start < self.cold_from:
                cost += lognormal_ms(rng, 1200.0, 0.25)  # lazy module loading on first use
        return cost

    def run(self, rng: random.Random, streams: dict[int, list[Chunk]]) -> None:
        """Decode every stream's chunks (each list in chunk order); fills ready/batch/done."""
        ready: list[tuple[float, int, int]] = []
        pos = dict.fromkeys(streams, 0)
        for utt, chunks in streams.items():
            chunks[0].ready = chunks[0].arrive
            heapq.heappush(ready, (chunks[0].ready, utt, 0))
        total = sum(map(len, streams.values()))
        nrng = np.random.default_rng(rng.getrandbits(32))
        batch_noise = nrng.lognormal(0.0, 0.08, total + 1).tolist()
        beam_noise = (0.9 / 8.0 * NS_PER_MS * nrng.lognormal(0.0, 0.25, total + 1)).tolist()
        used = 0
        beam_threads = [0.0] * self.threads
        gpu_free = 0.0
        phase = rng.random() * self.interval
        while ready:
            first = ready[0][0]
            tick = phase + self.interval * max(0.0, -(-(first - phase) // self.interval))
            tick = self.cpu_stalls.settle(max(tick, gpu_free))  # the launching thread must run
            taken: list[Chunk] = []
            while ready and ready[0][0] <= tick and len(taken) < self.max_batch:
                _, utt, k = heapq.heappop(ready)
                taken.append(streams[utt][k])
            work = sum(1.0 + 0.2 * c.rebuild for c in taken)
            end = self.gpu_stalls.run(tick, self.batch_cost(rng, tick, work, batch_noise[len(self.batches)]))
            self.batches.append(Batch(tick, end, taken))
            gpu_free = end
            for c in taken:
                c.batch_start, c.batch_size = tick, len(taken)
                cost = (c.beam + 4.0 * c.rebuild) * beam_noise[used]
                used += 1
                start = max(end, heapq.heappop(beam_threads))
                c.done = self.cpu_stalls.run(start, cost)
                heapq.heappush(beam_threads, c.done)
                pos[c.utt] += 1
                chunks = streams[c.utt]
                if pos[c.utt] < len(chunks):
                    nxt = chunks[pos[c.utt]]
                    nxt.ready = max(nxt.arrive, c.done)
                    heapq.heappush(ready, (nxt.ready, c.utt, pos[c.utt]))


def device_syncs(rng: random.Random, horizon: float, every_s: float, median_ms: float
                 ) -> list[tuple[float, float]]:
    """cudaFree after the caching allocator released its cache: a device-wide synchronization."""
    out = []
    t = rng.expovariate(1.0 / every_s) * NS_PER_S
    while t < horizon:
        length = min(320.0, max(90.0, lognormal_ms(rng, median_ms, 0.3) / NS_PER_MS)) * NS_PER_MS
        out.append((t, t + length))
        t += length + rng.expovariate(1.0 / every_s) * NS_PER_S
    return out


def cfs_throttles(rng: random.Random, horizon: float, share: float, tail_ms: tuple[float, float]
                  ) -> list[tuple[float, float]]:
    """A CFS quota spent before the 100 ms period ends: the process waits for the next period. A
    period's bursts (a batch's beam searches, a rescoring pass) exhaust it with probability `share`."""
    out = []
    period = 100 * NS_PER_MS
    t = rng.random() * period
    while t < horizon:
        if rng.random() < share:
            length = rng.uniform(*tail_ms) * NS_PER_MS
            out.append((t + period - length, t + period))
        t += period
    return out


def gc_pauses(rng: random.Random, horizon: float, humongous: bool) -> list[tuple[float, float, str]]:
    """G1 on the gateway: young pauses of a few ms every ~2 s; with humongous audio buffers each
    allocation over half a region starts a cycle: frequent pauses of 60-250 ms (evacuation failure)."""
    out = []
    t = rng.expovariate(0.5) * NS_PER_S
    while t < horizon:
        if humongous and rng.random() < 0.8:
            length = min(260.0, max(55.0, 110.0 * rng.lognormvariate(0.0, 0.35)))
            cause = "G1 Humongous Allocation"
            gap = rng.expovariate(1.0 / 0.9)
        else:
            length, cause = 4.0 + 6.0 * rng.random(), "G1 Evacuation Pause"
            gap = rng.expovariate(1.0 / 2.0)
        out.append((t, t + length * NS_PER_MS, cause))
        t += length * NS_PER_MS + gap * NS_PER_S
    return out


@dataclass
class Redis:
    """One Redis primary: single-threaded, so a big HGETALL reply delays every command behind it."""

    free: float = 0.0

    def call(self, rng: random.Random, t: float, phrases: int) -> float:
        arrive = t + 0.2 * NS_PER_MS
        start = max(arrive, self.free)
        self.free = start + (0.03 + phrases * 0.0008) * NS_PER_MS * rng.lognormvariate(0.0, 0.15)
        transfer = phrases * 60 / 1.2e9 * NS_PER_S  # ~60 bytes a phrase over ~10 Gbit/s
        return self.free + transfer + 0.2 * NS_PER_MS * rng.lognormvariate(0.0, 0.2)


@dataclass
class HintCache:
    """A decoder's in-process phrase-hint cache: customer -> expiry; no single flight, so every
    finalization that finds the entry missing loads and compiles it itself."""

    expires: dict[str, float]


@dataclass
class Wal:
    """Postgres' WAL flush with group commit: a commit waits for the flush in progress to end, then
    for the next flush, which takes every commit that arrived meanwhile."""

    rng: random.Random
    backup: tuple[float, float] | None
    busy_until: float = 0.0
    next_end: float = 0.0

    def fsync(self, t: float) -> float:
        ms = 1.2 * self.rng.lognormvariate(0.0, 0.35)
        if self.rng.random() < 0.004:  # a checkpoint's writes on the same disk
            ms += 15.0 * self.rng.lognormvariate(0.0, 0.5)
        if self.backup is not None and self.backup[0] <= t < self.backup[1]:
            ms = 18.0 * self.rng.lognormvariate(0.0, 0.9)
            ms = min(ms, 900.0)
        return ms * NS_PER_MS

    def commit(self, t: float) -> float:
        """When a commit issued at t (commits come in time order) is durable."""
        if self.next_end and t >= self.busy_until:  # the waiting group's flush is the current one
            self.busy_until, self.next_end = self.next_end, 0.0
        if t >= self.busy_until:  # the log is idle: this commit's flush starts now
            self.busy_until = t + self.fsync(t)
            return self.busy_until
        if not self.next_end:  # the first to wait: the next flush starts when this one ends
            self.next_end = self.busy_until + self.fsync(self.busy_until)
        return self.next_end
