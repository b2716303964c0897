"""Traces built from a mechanism for diagnosis tests: a few thousand requests whose span timings come
from what a pause, a deadline, a payload or a CPU quota physically does, with attributes. No store, no
simulator: each test states its mechanism in a few lines and gets a built TraceFrame.

    b = TraceBuilder(seed=1)
    for t in b.arrivals(3000, rps=200):
        root = b.span(t, None, "POST /score", "Server", "api/1", 0.0, 10.0)   # times in ms
        ...
    frame = b.frame()
"""

from __future__ import annotations

import copy
import functools
from math import exp as _exp
from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import SPAN_KINDS, TraceFrame, build_frame
from tailscope.vocabulary import ALL_STAGES

MS = 1_000_000


class Pauses:
    """Stop-the-world stretches per instance: work makes no progress inside them."""

    def __init__(self, spans: dict[str, list[tuple[float, float]]] | None = None) -> None:
        self.spans = {k: sorted(v) for k, v in (spans or {}).items()}

    def run(self, instance: str, t: float, work: float) -> float:
        """Wall-clock end (ms) of `work` ms of progress started at `t` on `instance`."""
        for a, b in self.spans.get(instance, ()):
            if b <= t:
                continue
            if a >= t + work:
                break
            if a > t:
                work -= a - t
            t = max(t, b)
        return t + work


class TraceBuilder:
    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.rows: list[tuple] = []
        self.attrs: dict[str, dict[str, tuple[list[int], list[Any]]]] = {}
        self.stages: dict[str, str] = {}  # span name -> stage (as the loader's naming would give it)
        self.trace = -1

    def arrivals(self, n: int, rps: float) -> np.ndarray:
        """Poisson arrival times in ms; each starts a new trace when iterated through `traces`."""
        return np.cumsum(self.rng.exponential(1000.0 / rps, n))

    def joining_arrivals(self, n: int, rps: float):
        """Arrivals spread over three instances serving from the start and two that join a third and
        half of the way in: (time in ms, instance, requests it served before this one, joined)."""
        joins = {"api/3": 0.3 * n / rps * 1000.0, "api/4": 0.45 * n / rps * 1000.0}
        served: dict[str, int] = {}
        for t in self.arrivals(n, rps):
            live = ["api/0", "api/1", "api/2"] + [r for r, at in joins.items() if t >= at]
            inst = live[int(self.rng.integers(len(live)))]
            served[inst] = served.get(inst, 0) + 1
            yield t, inst, served[inst] - 1, inst in joins

    def new_trace(self) -> int:
        self.trace += 1
        return self.trace

    def span(self, parent: int | None, name: str, kind: str, instance: str, start_ms: float,
             dur_ms: float, service: str | None = None, **attrs: Any) -> int:
        """Add a span of the current trace; returns its index (the parent of later spans)."""
        # the diagnosis tests' hottest line (hundreds of thousands of spans per file): kept to plain
        # operations; `0.001 if d < 0.001 else d` is max(d, 0.001) (d unless 0.001 is larger)
        service = service or instance.partition("/")[0]
        idx = len(self.rows)
        self.rows.append((self.trace, -1 if parent is None else parent, name, kind, service, instance,
                          start_ms, 0.001 if dur_ms < 0.001 else dur_ms))
        if attrs:
            keys = self.attrs.setdefault(name, {})
            for key, value in attrs.items():
                spans, values = keys.setdefault(key.replace("__", "."), ([], []))
                spans.append(idx)
                values.append(value)
        return idx

    def set_end(self, idx: int, end_ms: float) -> None:
        row = list(self.rows[idx])
        row[7] = max(end_ms - row[6], 0.001)
        self.rows[idx] = tuple(row)

    def frame(self, gc: list[tuple[str, float, float]] | None = None) -> TraceFrame:
        cols = list(zip(*self.rows, strict=True))
        names = sorted(set(cols[2]))
        services = sorted(set(cols[4]))
        instances = sorted(set(cols[5]))
        start = np.array(cols[6], np.float64)
        t0 = start.min()
        attrs = {
            name: {key: (np.array(spans, np.int64), list(values)) for key, (spans, values) in keys.items()}
            for name, keys in self.attrs.items()
        }
        # each value's position in its sorted list, looked up in a dict (list.index per span was most of
        # a frame's build: ~2 M scans per diagnosis test file)
        name_at, kind_at, service_at, instance_at = (
            {v: k for k, v in enumerate(values)} for values in (names, SPAN_KINDS, services, instances)
        )
        stage_of = {n: ALL_STAGES.index(self.stages[n]) if n in self.stages else -1 for n in names}
        frame = TraceFrame(
            run="mechanism",
            trace=np.array(cols[0], np.int64),
            parent=np.array(cols[1], np.int64),
            name=np.array([name_at[n] for n in cols[2]], np.int64),
            names=names,
            kind=np.array([kind_at[k] for k in cols[3]], np.int64),
            service=np.array([service_at[s] for s in cols[4]], np.int64),
            services=services,
            instance=np.array([instance_at[i] for i in cols[5]], np.int64),
            instances=instances,
            start=((start - t0) * MS).astype(np.int64),
            dur=(np.array(cols[7]) * MS).astype(np.int64),
            stage=np.array([stage_of[n] for n in cols[2]], np.int64),
        )
        frame.attribute_source = lambda name: attrs.get(name, {})
        if gc:
            frame.gc_instance = np.array([instances.index(i) for i, _, _ in gc], np.int64)
            frame.gc_time = ((np.array([a for _, a, _ in gc]) - t0) * MS).astype(np.int64)
            frame.gc_dur = (np.array([b - a for _, a, b in gc]) * MS).astype(np.int64)
        return build_frame(frame)


def lognormal(rng: np.random.Generator, median: float, sigma: float) -> float:
    """`median * exp(N(0, sigma))`, drawn as `float(median * np.exp(rng.normal(0.0, sigma)))` drew it: the
    same draw from the stream (the generator's normal is `loc + scale * standard_normal`) and the same
    value (math.exp and numpy's scalar exp agreed on 300,000 draws on one CPU; within a few units in the last
    place on CPUs where numpy's vectorised exp rounds otherwise), in 1.0 µs instead of 1.5-2.3 µs. The
    builders call it ~650,000 times in test_diagnosis_mechanisms alone (bench/RESULTS.md, suite18)."""
    return median * _exp(sigma * rng.standard_normal())


def sequential_service(b: TraceBuilder, n: int, rps: float, stages: list[tuple[str, str, float, float]],
                       instances: int = 3, pauses: Pauses | None = None, service: str = "api",
                       root: str = "POST /score") -> None:
    """A plain service: every request runs `stages` (name, kind, median ms, sigma) one after another
    under a SERVER root on one of `instances` instances, stretched by `pauses`."""
    pauses = pauses or Pauses()
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"{service}/{int(b.rng.integers(instances))}"
        r = b.span(None, root, "Server", inst, t, 0.0)
        cur = t + 0.05
        for name, kind, median, sigma in stages:
            end = pauses.run(inst, cur, lognormal(b.rng, median, sigma))
            b.span(r, name, kind, inst, cur, end - cur)
            cur = end + 0.02
        b.set_end(r, cur + 0.05)


def by_pattern(findings) -> dict[str, float]:
    """Each pattern's highest confidence among a diagnosis' findings."""
    out: dict[str, float] = {}
    for f in findings:
        out[f.pattern] = max(out.get(f.pattern, 0.0), f.confidence)
    return out


@functools.cache
def _diagnosis(builder: Any, *args: Any, **kwargs: Any) -> Any:
    from tailscope.analysis.diagnosis import diagnose_frame

    return diagnose_frame(builder(*args, **kwargs))


def diagnosed(builder: Any, *args: Any, **kwargs: Any) -> Any:
    """`diagnose_frame(builder(*args, **kwargs))`, built and diagnosed once per test process (a deep copy
    each call): the builders are seeded, so the same arguments give the same frame, and several tests
    assert different things of one frame's diagnosis (test_diagnosis_mechanisms, _changes, _paths;
    bench/RESULTS.md, suite19). Only for a builder whose frame nothing changes after it is built."""
    return copy.deepcopy(_diagnosis(builder, *args, **kwargs))
