"""The physics of the blind family `gpu-torch` (gpu_torch.py): one CPython process's GIL, the GPU's copy
engine, the model's cost per batch shape, CPython's collections, and the I/O calls (Redis, Postgres,
the taxonomy service, Kafka) as the frontend's threads see them.

Times are float ns from the start of the run.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms

SWITCH_NS = 5.0 * NS_PER_MS  # sys.getswitchinterval(): a thread holding the GIL is asked to drop it


class Busy:
    """A resource one thing holds at a time (the GIL, the copy engine): held intervals, sorted. A holder
    that wants it at t gets the first free gap at or after t long enough for its slice (first fit: a
    waiting thread gets the GIL when the holder drops it, at the latest after the switch interval)."""

    def __init__(self, held: list[tuple[float, float]] | None = None) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        for a, b in sorted(held or []):
            if self.ends and a <= self.ends[-1]:
                self.ends[-1] = max(self.ends[-1], b)
            else:
                self.starts.append(a)
                self.ends.append(b)

    def hold(self, t: float, length: float) -> tuple[float, float]:
        """Take the resource for `length` ns from the first gap at or after t: (start, end)."""
        k = bisect.bisect_right(self.starts, t)
        if k > 0 and self.ends[k - 1] > t:
            t = self.ends[k - 1]
        while k < len(self.starts) and self.starts[k] < t + length:
            t = max(t, self.ends[k])
            k += 1
        end = t + length
        if k > 0 and self.ends[k - 1] == t:
            self.ends[k - 1] = end
            if k < len(self.starts) and self.starts[k] == end:
                self.ends[k - 1] = self.ends[k]
                del self.starts[k], self.ends[k]
        elif k < len(self.starts) and self.starts[k] == end:
            self.starts[k] = t
        else:
            self.starts.insert(k, t)
            self.ends.insert(k, end)
        return t, end

    def run(self, t: float, work: float) -> float:
        """A thread's `work` ns of Python (GIL held throughout), in switch-interval slices."""
        while work > 0:
            piece = min(work, SWITCH_NS)
            t = self.hold(t, piece)[1]
            work -= piece
        return t

    def mixed(self, t: float, work: float, held: float, chunks: int = 4) -> float:
        """Native code that drops the GIL for part of its work (Pillow's decoder, numpy): `held` of the
        work needs the GIL (the Python around it, the parts of the C code that keep it), the rest runs
        on its own core; in `chunks` alternations."""
        for _ in range(chunks):
            t += work * (1.0 - held) / chunks
            t = self.run(t, work * held / chunks)
        return t


# --- the model on the GPU ---------------------------------------------------------------------------

SEQ_BUCKETS = (32, 64, 128, 256, 512)
WARM_BUCKETS = (32, 64, 128)  # compiled and graph-captured at start-up (warm-up requests)
GRAPH_SIZES = (1, 2, 4, 8, 16, 32)  # CUDA graphs are captured per padded batch size


def seq_bucket(tokens: int) -> int:
    return next((b for b in SEQ_BUCKETS if tokens <= b), SEQ_BUCKETS[-1])


def padded(batch: int) -> int:
    return next((b for b in GRAPH_SIZES if batch <= b), GRAPH_SIZES[-1])


def kernel_ms(rows: int, seq: int) -> float:
    """The compiled model's kernels for one padded batch: an image tower (ViT at 384 px) and a text
    tower whose cost grows with the sequence bucket, at full clocks, alone on the card."""
    return 3.0 + rows * (4.6 + 0.012 * seq)


def compile_ms(rng: random.Random) -> float:
    """A Dynamo recompile for a new sequence length (guards failed): tracing, Inductor's codegen and
    Triton's autotuning in the compile workers: seconds."""
    return lognormal_ms(rng, 1800.0, 0.2)


def capture_ms(rng: random.Random) -> float:
    """Warm-up runs and a CUDA graph capture for a new (padded batch, sequence) shape."""
    return lognormal_ms(rng, 70.0, 0.3)


@dataclass
class Gpu:
    """One pod's card: a co-tenant's time slices double the kernels' time in `shared` windows; the
    power cap lowers the clocks from `capped_at` (ramping over `ramp` ns to `cap` x slower)."""

    shared: list[tuple[float, float]]
    capped_at: float | None
    cap: float
    ramp: float

    def slowdown(self, t: float) -> float:
        f = 1.0
        if self.capped_at is not None and t > self.capped_at:
            f *= 1.0 + (self.cap - 1.0) * min(1.0, (t - self.capped_at) / self.ramp)
        if any(a <= t < b for a, b in self.shared):
            f *= 2.0
        return f


# --- CPython's collector ----------------------------------------------------------------------------

def collections(rng: random.Random, served_at: list[float], horizon: float, base_objects: float,
                leak_per_request: float) -> list[tuple[float, float, int, int]]:
    """(start, end, generation, objects) of the process' gen1 and gen2 collections. A full collection
    runs when the long-lived objects pending promotion exceed a quarter of the long-lived total
    (CPython's rule), and walks every tracked object (~48 ns each); a leak grows the heap with every
    request served, so full collections come as the heap grows a quarter and last longer each time.
    Without a leak, the steady churn promotes enough for one every ~10-20 s."""
    out = []
    t = rng.uniform(0.3, 1.2) * NS_PER_S
    while t < horizon:  # gen1: a fraction of the young objects survive, ~1-3 ms
        length = lognormal_ms(rng, 1.6, 0.4)
        out.append((t, t + length, 1, 0))
        t += length + rng.uniform(0.6, 1.6) * NS_PER_S
    churn = base_objects / 4 / rng.uniform(10.0, 20.0)  # promoted per s by steady traffic
    total, pending, t, k = base_objects, rng.uniform(0.0, base_objects / 4), 0.0, 0
    step = 0.05 * NS_PER_S
    while t < horizon:
        t += step
        while k < len(served_at) and served_at[k] <= t:
            k += 1
            pending += leak_per_request
            total += leak_per_request
        pending += churn * step / NS_PER_S
        if pending > total / 4:
            length = (0.048 * total / 1000.0) * NS_PER_MS * rng.lognormvariate(0.0, 0.1)
            out.append((t, t + length, 2, int(total)))
            pending = 0.0
            t += length
    return sorted(out)


# --- I/O, as a frontend thread sees it (GIL released while it waits) --------------------------------

def redis_ms(rng: random.Random) -> float:
    return lognormal_ms(rng, 0.35, 0.3)


def postgres_ms(rng: random.Random, cold: bool) -> float:
    """The merchant-features query (an aggregate over the merchant's catalogue): shared buffers hot, or
    cold after an eviction wave sent every merchant's read at once (disk reads, a heavier tail); 1 % of
    healthy reads hit cold pages too."""
    if cold:
        return lognormal_ms(rng, 30.0, 0.6)
    ms = lognormal_ms(rng, 5.0, 0.35)
    return ms + (lognormal_ms(rng, 18.0, 0.5) if rng.random() < 0.01 else 0.0)


def taxonomy_ms(rng: random.Random, slow: bool) -> float:
    """The taxonomy service's handler time: a few ms; while it is slow (a bad rollout of its in-memory
    tree: every lookup rebuilds a path index) a median of ~220 ms with a heavy tail."""
    if slow:
        return lognormal_ms(rng, 220.0, 0.55)
    ms = lognormal_ms(rng, 4.5, 0.35)
    return ms + (lognormal_ms(rng, 25.0, 0.6) if rng.random() < 0.004 else 0.0)


def kafka_ack_ms(rng: random.Random) -> float:
    """linger.ms (5) and the leader's acks=1 reply: a producer span ends at the delivery callback."""
    return 5.0 * NS_PER_MS + lognormal_ms(rng, 3.0, 0.5)
