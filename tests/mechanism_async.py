"""Asynchronous, queue-fed work built from its mechanism for issue 25's unit-of-work tests
(tests/test_diagnosis_async.py). An API accepts an event over HTTP, publishes it to a broker (a
PRODUCER span) and answers 202; consumers on worker instances take the messages in arrival order as
they free up. The work's latency is from the publish to the end of the consumer's processing: the
wait in the broker (a queue: it grows when arrivals outrun the consumers) plus the processing.

Two ways OpenTelemetry carries the context to the consumer:
- `child`: one message at a time; the CONSUMER span is a child of the PRODUCER span in the same
  trace and starts after it has ended;
- `batch`: a consumer polls up to `BATCH` ready messages and starts a new trace per batch (a CONSUMER
  root span without parent) that links to each message's PRODUCER span; a span per message under it.

Causes, each acting on the consumer side after the HTTP root has ended: bursts of arrivals (a backlog
in the broker), stop-the-world pauses on the worker instances, a dependency the consumer calls that
hangs now and then.
"""

from __future__ import annotations

import numpy as np

from ingest.columns import SpanColumns
from tailscope.analysis.diagnosis.frame import TraceFrame
from tests.mechanism_frames import Pauses, TraceBuilder, lognormal

BATCH = 16
BASE_NS = 1_700_000_000_000_000_000


class LinkedBuilder(TraceBuilder):
    """A TraceBuilder whose spans may belong to any trace and carry span links."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.links: list[tuple[int, int]] = []
        self.cold: dict[str, int] = {}  # cold replicas: messages handled so far
        self.score_ms = 4.0

    def span_in(self, trace: int, *args, **kwargs) -> int:
        current, self.trace = self.trace, trace
        try:
            return self.span(*args, **kwargs)
        finally:
            self.trace = current

    def frame(self, gc=None) -> TraceFrame:
        frame = super().frame(gc)
        if self.links:
            frame.link_from = np.array([a for a, _ in self.links], np.int64)
            frame.link_to = np.array([b for _, b in self.links], np.int64)
        return frame


def _arrivals(b: TraceBuilder, seconds: float, rps: float, burst: bool) -> np.ndarray:
    """Poisson arrivals; with `burst`, three 1.5 s stretches at six times the rate."""
    rate_at = np.full(int(seconds * 10), rps)
    if burst:
        for start in (0.2, 0.5, 0.8):
            a = int(start * len(rate_at))
            rate_at[a : a + 15] = 6 * rps
    out, t = [], 0.0
    while t < seconds * 1000.0:
        t += b.rng.exponential(1000.0 / rate_at[min(int(t / 100.0), len(rate_at) - 1)])
        out.append(t)
    return np.array(out[:-1])


def _worker_pauses(b: TraceBuilder, workers: list[str], until_ms: float) -> Pauses:
    """Collections every 150-400 ms on each worker, stopping it for 40-90 ms."""
    out = {}
    for inst in workers:
        t, spans = b.rng.uniform(0, 200), []
        while t < until_ms:
            length = b.rng.uniform(40.0, 90.0)
            spans.append((t, t + length))
            t += length + b.rng.uniform(150.0, 400.0)
        out[inst] = spans
    return Pauses(out)


def async_pipeline(seed: int, gc_events: bool = False, **options) -> TraceFrame:
    """An intake API (two instances) in front of single-threaded consumers (see the module docstring
    and `async_builder`'s options), as a built frame; `gc_events`: the workers report their pauses."""
    b, pauses = async_builder(seed, **options)
    if not gc_events:
        return b.frame()
    return b.frame([(inst, a, z) for inst, spans in pauses.spans.items() for a, z in spans])


def async_builder(seed: int, style: str = "child", burst: bool = False, paused: bool = False,
                  slow_dependency: bool = False, seconds: float = 30.0, rps: float = 90.0,
                  workers: int = 4, partitioned: bool = False,
                  slow_step: bool = False, cold_replicas: int = 0,
                  cold_at: float = 0.8, score_ms: float = 4.0) -> tuple[LinkedBuilder, Pauses]:
    """The spans of `async_pipeline`: `workers` consumers taking the messages in arrival order as they
    free up (with `partitioned`, each worker its own partition's, as a Kafka consumer group does);
    each message is decoded, enriched by a call to a profile service, scored and written (with
    `slow_step`, the scoring alone takes 40-90 ms more in 5 % of the messages: a cause of one step;
    with `cold_replicas`, that many workers join at `cold_at` of the run, their first messages'
    scoring ~150x slower, decaying by 0.85 per message: an autoscaler adding cold instances;
    `score_ms`: the scoring step's median)."""
    b = LinkedBuilder(seed)
    b.score_ms = score_ms
    names = [f"enricher/{i}" for i in range(workers)]
    pauses = _worker_pauses(b, names, seconds * 1000.0 + 30_000.0) if paused else Pauses()
    ready: list[tuple[float, int, int]] = []  # (in the broker since, trace, producer span)
    for t in _arrivals(b, seconds, rps, burst):
        trace = b.new_trace()
        api = f"intake/{int(b.rng.integers(2))}"
        root = b.span(None, "POST /v1/events", "Server", api, t, 0.0)
        pub_start = t + lognormal(b.rng, 0.4, 0.2)
        pub_end = pub_start + lognormal(b.rng, 0.8, 0.3)
        producer = b.span(root, "events publish", "Producer", api, pub_start, pub_end - pub_start,
                          messaging__system="kafka", messaging__operation__type="publish")
        b.set_end(root, pub_end + lognormal(b.rng, 0.2, 0.2))
        ready.append((pub_end, trace, producer))
    if partitioned:  # each message's key picks its partition, each partition one worker
        owner = b.rng.integers(workers, size=len(ready))
        for w, worker in enumerate(names):
            _consume(b, [m for m, o in zip(ready, owner, strict=True) if o == w], [worker], style, pauses,
                     (slow_dependency, slow_step))
    else:
        joined = [f"enricher/new-{i}" for i in range(cold_replicas)]
        b.cold = dict.fromkeys(joined, 0)
        _consume(b, ready, names + joined, style, pauses, (slow_dependency, slow_step),
                 dict.fromkeys(joined, cold_at * seconds * 1000.0))
    b.stages.update({"score": "model_forward"})
    return b, pauses


def _consume(b: LinkedBuilder, ready: list[tuple[float, int, int]], names: list[str], style: str,
             pauses: Pauses, slow: tuple[bool, bool], joins: dict[str, float] | None = None) -> None:
    """The consumers `names` take the `ready` messages in order, each as it frees up (from the time
    in `joins` for a worker that joins later)."""
    free = {w: (joins or {}).get(w, 0.0) for w in names}
    i = 0
    while i < len(ready):
        worker = min(names, key=lambda w: free[w])
        begin = max(free[worker], ready[i][0]) + lognormal(b.rng, 0.3, 0.3)  # the poll's hand-off
        if style == "child":
            _, trace, producer = ready[i]
            head = b.span_in(trace, producer, "events process", "Consumer", worker, begin, 0.0,
                             messaging__system="kafka", messaging__operation__type="process")
            end = _handle(b, trace, head, worker, begin + 0.05, pauses, slow)
            b.set_end(head, end + 0.05)
            i += 1
        else:
            batch = [m for m in ready[i : i + BATCH] if m[0] <= begin] or [ready[i]]
            trace = b.new_trace()
            head = b.span(None, "events process", "Consumer", worker, begin, 0.0,
                          messaging__system="kafka", messaging__batch__message_count=len(batch))
            b.links += [(head, producer) for _, _, producer in batch]
            end = begin + 0.1
            for _ in batch:
                one = b.span(head, "handle event", "Internal", worker, end, 0.0)
                inner = _handle(b, trace, one, worker, end + 0.02, pauses, slow)
                b.set_end(one, inner + 0.02)
                end = inner + 0.05
            b.set_end(head, end + 0.05)
            i += len(batch)
        free[worker] = b.rows[head][6] + b.rows[head][7]


def to_columns(b: LinkedBuilder, trace_base: int = 0) -> SpanColumns:
    """The builder's spans as the loader writes them (ids, parents, links, attributes; the instance as
    service.instance.id), to load into a store; trace ids counted from `trace_base` + 1."""
    per_span: dict[int, dict[str, str]] = {}
    for keys in b.attrs.values():
        for key, (spans, values) in keys.items():
            for i, value in zip(spans, values, strict=True):
                per_span.setdefault(i, {})[key] = str(value)
    links: dict[int, list[tuple[str, str, str, dict[str, str]]]] = {}
    trace_id = [f"{trace_base + row[0] + 1:032x}" for row in b.rows]
    span_id = [f"{i + 1:016x}" for i in range(len(b.rows))]
    for src, dst in b.links:
        links.setdefault(src, []).append((trace_id[dst], span_id[dst], "", {}))
    cols = SpanColumns()
    for i, (_, parent, name, kind, service, instance, start, dur) in enumerate(b.rows):
        cols.append(
            timestamp_ns=BASE_NS + int(start * 1e6), trace_id=trace_id[i], span_id=span_id[i],
            parent_span_id=span_id[parent] if parent >= 0 else "", span_name=name,
            duration_ns=int(dur * 1e6), service_name=service, span_kind=kind,
            resource_attributes={"service.instance.id": instance.split("/", 1)[1]},
            span_attributes=per_span.get(i, {}), links=links.get(i),
        )
    return cols


def _handle(b: LinkedBuilder, trace: int, parent: int, worker: str, t: float, pauses: Pauses,
            slow: tuple[bool, bool]) -> float:
    """One message's work on `worker` from `t`: decode, profile lookup (a call to another service),
    score, write; returns its end (ms)."""
    end = pauses.run(worker, t, lognormal(b.rng, 0.3, 0.2))
    b.span_in(trace, parent, "decode", "Internal", worker, t, end - t)
    cur = end + 0.02
    work = lognormal(b.rng, 3.0, 0.25)
    if slow[0] and b.rng.random() < 0.06:
        work = b.rng.uniform(40.0, 120.0)
    read = pauses.run(worker, cur + work + 0.4, 0.0)  # a paused caller reads the answer late
    call = b.span_in(trace, parent, "GET", "Client", worker, cur, read - cur)
    b.span_in(trace, call, "GET /profiles/{id}", "Server", f"profiles/{int(b.rng.integers(3))}",
              cur + 0.2, work)
    cur = read + 0.02
    warm_up = 1.0
    if worker in b.cold:  # a cold replica: its first messages' scoring is slow, then decays
        warm_up += 150.0 * 0.85 ** b.cold[worker]
        b.cold[worker] += 1
    end = pauses.run(worker, cur, warm_up * lognormal(b.rng, b.score_ms, 0.15) + (
        b.rng.uniform(40.0, 90.0) if slow[1] and b.rng.random() < 0.05 else 0.0))
    b.span_in(trace, parent, "score", "Internal", worker, cur, end - cur)
    cur = end + 0.02
    end = pauses.run(worker, cur, lognormal(b.rng, 1.0, 0.2))
    b.span_in(trace, parent, "INSERT enriched", "Client", worker, cur, end - cur, db__system="postgresql")
    return end
