"""Writers released together on one replica are that replica's stall, not a collector (diag22, session
13): an embedded store on one pod stops its writes until compaction catches up (every write sent
meanwhile ends at the stop's end), while the pod's other work runs on and the other replicas write
freely. released_calls' release on every replica is the code's (a collector, a lock the code takes: the
same code under the same traffic does it alike on every replica): named, not capped (lock_contention
for the pods' own spans since diag28, see test_diagnosis_held_wait.py)."""

from __future__ import annotations

import numpy as np
from hand_frames import hand_frame

from tailscope.analysis.diagnosis.runner import diagnose_frame

INSTANCES = 4


def stalled_writes(stalling: tuple[int, ...], n: int = 3000, seed: int = 8) -> list[tuple]:
    """Per request on one of 4 instances: the root, a local write (0.04 ms; on a stalling instance,
    held to the end of a 150-300 ms stop every 1.5-3 s), then the request's own work."""
    rng = np.random.default_rng(seed)
    arrive = np.cumsum(rng.exponential(4.0, n))
    inst = rng.integers(0, INSTANCES, n)
    horizon = float(arrive[-1]) + 1000.0
    stops: dict[int, list[tuple[float, float]]] = {}
    for i in stalling:
        t, out = rng.uniform(0, 800), []
        while t < horizon:
            length = rng.uniform(150.0, 300.0)
            out.append((t, t + length))
            t += length + rng.uniform(1500.0, 3000.0)
        stops[i] = out
    rows: list[tuple] = []
    for j, (a, i) in enumerate(zip(arrive.tolist(), inst.tolist(), strict=True)):
        sent = a + 0.1
        end = sent + 0.04 * rng.lognormal(0.0, 0.3)
        for p0, p1 in stops.get(i, ()):
            if p0 <= sent < p1:
                end = p1 + 0.02 * rng.random()
                break
        work = 6.0 * rng.lognormal(0.0, 0.2)
        base = len(rows)
        rows += [
            (j, -1, "POST /rank", "Server", i, a, end - a + work + 0.4),
            (j, base, "store.put", "Internal", i, sent, end - sent),
            (j, base, "rank", "Internal", i, end + 0.1, work),
        ]
    return rows


def _gc(rows: list[tuple], pattern: str = "gc_pause") -> float:
    found = diagnose_frame(hand_frame(rows, [f"api-{i}" for i in range(INSTANCES)])).findings
    return max((f.confidence for f in found if f.pattern == pattern), default=0.0)


def test_writes_held_on_one_replica_are_no_collector() -> None:
    rows = stalled_writes((1,))
    assert _gc(rows) < 0.5
    assert _gc(rows, "lock_contention") < 0.5  # nor a resource the code holds on every replica


def test_the_same_releases_on_every_replica_stay_named() -> None:
    """The releases are INTERNAL spans of pods that run on through them: a resource each process
    holds (released_calls names that lock_contention since diag28; gc_pause before), not one replica's
    stall, so the one-replica cap does not apply."""
    assert _gc(stalled_writes(tuple(range(INSTANCES))), "lock_contention") >= 0.5
