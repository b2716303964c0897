"""Postprocessing: calibration, thresholds, the shared score monitor, and explanation records.

Calibration is temperature scaling of the two logits followed by Platt scaling of the positive-class
log-odds; thresholds map the calibrated score to approve / review / reject.

`ScoreMonitor` is the shared, non-thread-safe resource: every prediction updates one sliding window
of scores and one audit table (a single `sqlite3` connection opened with check_same_thread=False,
which must never be used by two threads at once). A `threading.Lock` guards it, and the time spent
acquiring that lock is its own span, `lock.wait`. In the healthy setup the critical section is an
append and an uncommitted insert (microseconds). In `lock-contention` the monitor is configured the
way a well-meant drift check often is: every update recomputes drift quantiles over the whole window
(numpy, which releases the GIL while it sorts, so other threads queue on the lock rather than on the
GIL) and commits the audit row durably (`synchronous=FULL`, an fsync per prediction) while holding
the lock; several postprocessing threads then wait on each other.

`ExplanationLog` is the allocation-heavy part the gc-pressure scenario switches on: each prediction
builds a per-feature attribution tree of small cyclic dicts and keeps the last few hundred in a
ring, next to a large long-lived heap of cyclic "lineage" records built on start. Surviving
allocations promote into the oldest generation until CPython runs a full (gen-2) collection, which
walks the whole heap while every thread of the process waits.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from reference_pipeline import span_model
from tailscope import instrument as ts

TEMPERATURE = 1.7
PLATT_A, PLATT_B = 1.3, -0.2
APPROVE_BELOW, REJECT_ABOVE = 0.35, 0.8


def calibrate(logits: list[float]) -> float:
    """Probability of the positive class after temperature and Platt scaling."""
    scaled = [x / TEMPERATURE for x in logits]
    log_odds = scaled[1] - scaled[0]
    z = PLATT_A * log_odds + PLATT_B
    return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


def decide(score: float) -> str:
    return "approve" if score < APPROVE_BELOW else "reject" if score > REJECT_ABOVE else "review"


class ScoreMonitor:
    def __init__(self, audit_path: Path, heavy: bool, window: int = 1_000_000) -> None:
        self.heavy = heavy
        self.lock = threading.Lock()
        self._array = np.random.default_rng(5).random(window)  # a full window from the start
        self._next = 0
        self.drift_quantiles = np.zeros(5)
        audit_path.unlink(missing_ok=True)
        self.db = sqlite3.connect(audit_path, check_same_thread=False)
        self.db.execute(f"PRAGMA synchronous = {'FULL' if heavy else 'OFF'}")
        self.db.execute("CREATE TABLE audit (ts REAL, entity TEXT, score REAL, decision TEXT)")
        self._pending = 0

    def update(self, entity: str, score: float, decision: str) -> None:
        """Caller holds self.lock."""
        self._array[self._next] = score
        self._next = (self._next + 1) % len(self._array)
        self.db.execute("INSERT INTO audit VALUES (?, ?, ?, ?)", (time.time(), entity, score, decision))
        self._pending += 1
        if self.heavy:
            self.drift_quantiles = np.quantile(self._array, [0.01, 0.25, 0.5, 0.75, 0.99])
            self.db.commit()
            self._pending = 0
        elif self._pending >= 256:
            self.db.commit()
            self._pending = 0

    def close(self) -> None:
        with self.lock:
            self.db.commit()
            self.db.close()


class ExplanationLog:
    """Per-prediction attribution trees kept in a ring, over a large live heap of cyclic records."""

    def __init__(self, live_records: int, nodes_per_request: int, ring: int = 50) -> None:
        self.nodes_per_request = nodes_per_request
        self.ring: deque[list] = deque(maxlen=ring)
        self.lineage = []
        for i in range(live_records):
            record = {"id": i, "sources": [i, i + 1]}
            record["parent"] = {"child": record}  # a reference cycle, as object graphs have
            self.lineage.append(record)

    def record(self, features: list[float], score: float) -> None:
        tree = []
        for j in range(self.nodes_per_request):
            node = {"feature": j % len(features), "weight": [features[j % len(features)] * score]}
            node["self"] = node
            tree.append(node)
        if len(self.ring) == self.ring.maxlen:
            # the oldest tree leaves the ring with its cycles broken, so reference counting frees it:
            # the collector's pauses come from walking the live heap (lineage, ring), and a service
            # with the collector off (`gc_collect=False`, gc-pressure's pair) does not leak
            for old in self.ring.popleft():
                old["self"] = None
        self.ring.append(tree)


@dataclass
class Postprocessor:
    monitor: ScoreMonitor
    explanations: ExplanationLog | None
    # each wait for the monitor's lock is a `lock.wait` span, written once the lock is released, so
    # tracing never lengthens the hold
    monitor_lock: ts.TracedLock = field(init=False)

    def __post_init__(self) -> None:
        stage = span_model.STAGE_OF[span_model.LOCK_WAIT]
        self.monitor_lock = ts.TracedLock(self.monitor.lock, "score_monitor", stage=stage)

    def run(self, entity: str, logits: list[float], features: list[float]) -> dict:
        """Runs on a postprocessing thread inside the `postprocess` span's context."""
        score = calibrate(logits)
        decision = decide(score)
        if self.explanations is not None:
            self.explanations.record(features, score)
        with self.monitor_lock:
            self.monitor.update(entity, score, decision)
        return {"score": round(score, 6), "decision": decision}
