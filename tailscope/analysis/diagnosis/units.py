"""Units of work: a run's requests, and the asynchronous work that queue consumers do for them.

An API that hands work to a broker (Kafka, RabbitMQ, SQS, Pub/Sub: a PRODUCER span) answers before
the work is done: its request root ends, and the work's latency lives on the consumer's side, from
the publish to the end of the processing (the wait in the broker, a queue that grows when arrivals
outrun the consumers, plus the processing). OpenTelemetry carries the context two ways, and both
are found from span kinds, parent links, timing and span links only, never from names:

- a *detached* CONSUMER child: a CONSUMER span whose parent holds less than half of it
  (structure.containing_parent; the PRODUCER span that published the message ended before it
  started), of a (service, name) whose spans mostly end after their request root has ended (the
  API did not wait for the work; an API that waits for a reply keeps the work in its request);
- a CONSUMER *root*: a batch consumer starts a trace per batch (no parent) with a span link to each
  message's PRODUCER span.

Each such span heads a unit of work: itself and everything below it, but for the units headed
further down (a consumer that publishes to the next stage). Where the message's producer span is in
the run (the parent, or the earliest linked span for a batch), the unit's root is a span of its own
for the time from the publish's end to the consumer's end, stage `queue`, the CONSUMER span its
child: its uncovered time is the wait in the broker, read by the detectors as any queue's wait, and
its duration the unit's end-to-end latency. Where the producer is not in the run, the CONSUMER span
is the unit's root (its processing only).

A run whose units are all of one kind diagnoses as before (`populations` returns None). Otherwise
each kind of unit is a population of its own, diagnosed apart (runner.py): the requests (what is
left of the traces without the consumers' work), and one population per consumer (service, name):
fast HTTP requests and slow consumer batches in one latency population would make a false second
mode and a tail that is only the mix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analysis.diagnosis.frame import SPAN_KINDS, TraceFrame, build_frame
from tailscope.vocabulary import ALL_STAGES

KIND_CONSUMER = SPAN_KINDS.index("Consumer")
ASYNC_AFTER = 0.5  # a consumer (service, name) whose spans mostly end after their request root's end
WAIT_SUFFIX = " (from publish)"  # the name of a unit's end-to-end span: the consumer span's, with this


@dataclass
class Population:
    """One kind of unit of work: `unit` "request" or "consumer", `entry` the entry point (service and
    name of its most common root), and the frame holding its units as requests."""

    unit: str
    entry: str
    frame: TraceFrame


def heads(frame: TraceFrame) -> np.ndarray:
    """Span indices of the spans that head asynchronous units of work (see the module docstring)."""
    f = frame
    consumer = np.nonzero(f.kind == KIND_CONSUMER)[0]
    if len(consumer) == 0:
        return consumer
    rooted = consumer[f.parent[consumer] < 0]
    child = consumer[(f.parent[consumer] >= 0) & (f.excl_parent[consumer] != f.parent[consumer])]
    if len(child):
        req = f.request[child]
        root_end = np.full(len(child), -1, np.int64)
        ok = req >= 0
        roots = f.requests.root[req[ok]]
        root_end[ok] = f.start[roots] + f.dur[roots]
        after = (f.start[child] + f.dur[child] > root_end) & (f.request[child] >= 0)
        after |= f.request[child] < 0
        group = f.service[child] * (len(f.names) + 1) + f.name[child]
        codes, inverse = np.unique(group, return_inverse=True)
        share = np.bincount(inverse, weights=after, minlength=len(codes)) / np.bincount(inverse)
        child = child[share[inverse] > ASYNC_AFTER]
    return np.sort(np.r_[rooted, child]).astype(np.int64)


def sent_at(frame: TraceFrame, head: np.ndarray) -> np.ndarray:
    """Per head: when its message entered the broker, the end of its producer span (the parent for a
    detached child, the earliest-ending linked span for a batch), clipped to the head's start; the
    head's start where no producer span is in the run."""
    f = frame
    out = f.start[head].copy()
    par = f.parent[head]
    has = par >= 0
    out[has] = np.minimum(out[has], f.start[par[has]] + f.dur[par[has]])
    if len(f.link_from):
        position = np.full(len(f), -1, np.int64)
        position[head] = np.arange(len(head))
        at = position[f.link_from]
        keep = (at >= 0) & (f.link_to >= 0)
        ends = f.start[f.link_to[keep]] + f.dur[f.link_to[keep]]
        earliest = np.full(len(head), np.iinfo(np.int64).max)
        np.minimum.at(earliest, at[keep], ends)
        out = np.minimum(out, earliest)
    return out


def _unit_of(parent: np.ndarray, is_head: np.ndarray) -> np.ndarray:
    """Per span: the nearest head at or above it (-1 where none)."""
    out = np.where(is_head, np.arange(len(parent)), -1)
    todo = np.nonzero(~is_head)[0]
    cur = parent[todo]
    for _ in range(256):
        alive = cur >= 0
        todo, cur = todo[alive], cur[alive]
        if len(todo) == 0:
            break
        hit = is_head[cur]
        out[todo[hit]] = cur[hit]
        todo, cur = todo[~hit], parent[cur[~hit]]
    return out


def populations(frame: TraceFrame) -> list[Population] | None:
    """The run's kinds of units, each as a frame of its own (built), or None where the run's units
    are its requests (no asynchronous consumer work)."""
    f = frame
    head = heads(f)
    if len(head) == 0 or f.requests is None:
        return None
    is_head = np.zeros(len(f), bool)
    is_head[head] = True
    unit = _unit_of(f.parent, is_head)
    sent = sent_at(f, head)
    out = []
    rest = np.nonzero(unit < 0)[0]
    if len(rest):
        built = _subframe(f, rest, np.zeros(0, np.int64), np.zeros(0, np.int64), roots_given=False)
        if built.requests is not None and len(built.requests):
            out.append(Population("request", _entry(built), built))
    group = f.service[head] * (len(f.names) + 1) + f.name[head]
    for code in np.unique(group).tolist():
        mine = head[group == code]
        spans = np.nonzero(np.isin(unit, mine))[0]
        wait_from = sent[group == code]
        built = _subframe(f, spans, mine, wait_from, roots_given=True)
        out.append(Population("consumer", _entry(built), built))
    if len(out) == 1 and not (sent < f.start[head]).any():
        return None  # one kind of unit, no wait to add: the run's requests as they are
    return out


def _entry(frame: TraceFrame) -> str:
    """The service and name of a population's most common unit root (the consumer's, below a wait)."""
    roots = frame.requests.root
    below = frame.names[int(frame.name[roots[0]])].endswith(WAIT_SUFFIX) if len(roots) else False
    if below:
        roots = np.nonzero(np.isin(frame.parent, roots))[0]
    pairs = frame.service[roots] * (len(frame.names) + 1) + frame.name[roots]
    codes, counts = np.unique(pairs, return_counts=True)
    top = int(codes[np.argmax(counts)])
    return f"{frame.services[top // (len(frame.names) + 1)]} {frame.names[top % (len(frame.names) + 1)]}"


def _subframe(f: TraceFrame, spans: np.ndarray, head: np.ndarray, sent: np.ndarray,
              roots_given: bool) -> TraceFrame:
    """The frame of `spans` (sorted span indices of `f`); for a consumer population (`roots_given`),
    its heads are the unit roots, each below a span for its wait where `sent` is before its start."""
    n = len(spans)
    new = np.full(len(f), -1, np.int64)
    new[spans] = np.arange(n)
    waits = head[sent < f.start[head]]
    wait_from = sent[sent < f.start[head]]
    k = len(waits)
    parent = np.where(f.parent[spans] >= 0, new[np.maximum(f.parent[spans], 0)], -1)
    names = list(f.names)
    wait_name = np.zeros(k, np.int64)
    for i, code in enumerate(f.name[waits].tolist()):
        label = f.names[code] + WAIT_SUFFIX
        if label not in names:
            names.append(label)
        wait_name[i] = names.index(label)
    parent[new[head]] = -1
    parent[new[waits]] = n + np.arange(k)
    end = f.start[waits] + f.dur[waits]
    stage = f.read_stage if len(f.read_stage) == len(f) else f.stage
    sub = TraceFrame(
        run=f.run,
        trace=np.r_[f.trace[spans], f.trace[waits]],
        parent=np.r_[parent, np.full(k, -1, np.int64)],
        name=np.r_[f.name[spans], wait_name],
        names=names,
        kind=np.r_[f.kind[spans], np.full(k, KIND_CONSUMER, np.int64)],
        service=np.r_[f.service[spans], f.service[waits]],
        services=f.services,
        instance=np.r_[f.instance[spans], f.instance[waits]],
        instances=f.instances,
        start=np.r_[f.start[spans], wait_from],
        dur=np.r_[f.dur[spans], end - wait_from],
        stage=np.r_[stage[spans], np.full(k, ALL_STAGES.index("queue"), np.int64)],
        t0=f.t0,
        setup=f.setup,
        gc_instance=f.gc_instance,
        gc_time=f.gc_time,
        gc_dur=f.gc_dur,
    )
    if roots_given:
        is_root = np.zeros(n + k, bool)
        is_root[new[head]] = True
        is_root[new[waits]] = False
        is_root[n:] = True
        sub.unit_roots = is_root
    sub.attribute_source = _attributes_of(f, new, names)
    sub.retry_source = _retries_of(f, new)
    build_frame(sub)
    if roots_given:  # a unit below its wait span: the wait is the time before its only child started
        roots = sub.requests.root
        queued = np.zeros(len(roots), np.int64)
        below = roots >= n
        queued[below] = f.start[waits[roots[below] - n]] - wait_from[roots[below] - n]
        sub.requests.queued = queued
    if roots_given and len(f.link_from) and np.isin(f.link_from, head).any():
        sub.requests.work_arrival = np.sort(_message_times(f, head, sent))
        span, at = _messages(f, spans, head, sent)
        sub.requests.message_span, sub.requests.message_sent = new[span], at
    if f.requests is not None and f.requests.weight is not None and sub.requests is not None:
        by_trace = np.ones(int(f.trace.max(initial=0)) + 1)
        by_trace[f.trace[f.requests.root]] = f.requests.weight
        sub.requests.weight = by_trace[sub.trace[sub.requests.root]]
    return sub


def _message_times(f: TraceFrame, head: np.ndarray, sent: np.ndarray) -> np.ndarray:
    """When each message the heads read entered the broker: the end of each linked span, and the
    head's `sent` for a head without links (ns since the run's first span)."""
    linked = np.isin(f.link_from, head) & (f.link_to >= 0)
    to = f.link_to[linked]
    alone = ~np.isin(head, f.link_from[linked])
    return np.r_[f.start[to] + f.dur[to], sent[alone]].astype(np.int64)


def _messages(f: TraceFrame, spans: np.ndarray, head: np.ndarray, sent: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """A batch's messages one by one: per message, the span that ends its processing and when it
    entered the broker. A batch head's children (in start order) process its linked messages in the
    order they were published (a consumer takes the oldest first) where there are as many of each;
    any other head is one message, itself, sent at `sent` (span indices of `f`)."""
    linked = np.isin(f.link_from, head) & (f.link_to >= 0)
    lf, to = f.link_from[linked], f.link_to[linked]
    ends = f.start[to] + f.dur[to]
    order = np.lexsort((ends, lf))
    lf, ends = lf[order], ends[order]
    kids = spans[np.isin(f.parent[spans], head)]
    kids = kids[np.lexsort((f.start[kids], f.parent[kids]))]
    n_links = np.bincount(np.searchsorted(head, lf), minlength=len(head))
    n_kids = np.bincount(np.searchsorted(head, f.parent[kids]), minlength=len(head))
    split = (n_links == n_kids) & (n_links > 0)
    by_kid = split[np.searchsorted(head, f.parent[kids])]
    by_link = split[np.searchsorted(head, lf)]
    span = np.r_[kids[by_kid], head[~split]]
    at = np.r_[ends[by_link], sent[~split]]
    order = np.argsort(span, kind="stable")
    return span[order].astype(np.int64), at[order].astype(np.int64)


def _retries_of(f: TraceFrame, new: np.ndarray):
    """A sub-frame's retry events (frame.retries): the whole frame's, its span indices renumbered."""
    if f.retry_source is None:
        return None

    def retries(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        got = f.retries(name)
        if got is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        idx, offset, wait = got
        keep = new[idx] >= 0
        return new[idx][keep], offset[keep], wait[keep]

    return retries


def _attributes_of(f: TraceFrame, new: np.ndarray, names: list[str]):
    """A sub-frame's attribute source: the whole frame's, its span indices renumbered (a unit's own
    wait span has none)."""

    def attributes(name: str) -> dict:
        if name not in f.names:
            return {}
        out = {}
        for key, (idx, values) in f.attributes(f.names.index(name)).items():
            keep = new[idx] >= 0
            out[key] = (new[idx][keep], [v for v, k in zip(values, keep.tolist(), strict=True) if k])
        return out

    return attributes
