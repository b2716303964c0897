"""TraceFrame: one run's spans as numpy columns, with the request structure the detectors need.

Detectors never touch SQL or strings per span: the loader (`load.py`) or a test hands `build_frame`
integer-coded columns, and `build_frame` derives, with vectorised numpy only,

- the request root of every span (the topmost SERVER span of its trace; a trace without SERVER spans
  is rooted at its parentless span), so a client-side wrapper (a load generator's CLIENT span) sits
  above the request and is kept as the client-observed latency. A proxy tier is treated the same way:
  where the roots of one (service, name) hand the request on to a service whose work is traced (a
  CLIENT call whose SERVER child in another service has children covers ≥ 60 % of the median root or
  carries ≥ 50 % of the roots' tail excess: an API gateway, a sidecar, a front end), the request is
  that callee's span, and the proxy's call is its client wrapper,
- each span's exclusive (self) time: its duration minus the union of its children's intervals,
- leaves, depth, and the request table (start, latency, instance, index of the request on its instance).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.proxies import descend_proxies
from tailscope.analysis.diagnosis.structure import (
    callee_mask,
    containing_parent,
    work_instances,
    wrapper_spans,
)
from tailscope.vocabulary import ALL_STAGES

SPAN_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
KIND_SERVER = SPAN_KINDS.index("Server")
KIND_CLIENT = SPAN_KINDS.index("Client")
KIND_PRODUCER = SPAN_KINDS.index("Producer")
NO_STAGE = -1


def stage_code(stage: str | None) -> int:
    return ALL_STAGES.index(stage) if stage in ALL_STAGES else NO_STAGE


@dataclass
class Requests:
    """One row per request, ordered by start time."""

    root: np.ndarray  # span index of the request root
    start: np.ndarray  # ns since the run's first span
    latency: np.ndarray  # ns, the root's duration
    instance: np.ndarray  # instance code of the work: the root's, or the worker's it hands on to
    client_latency: np.ndarray  # float ns of a CLIENT parent of the root, nan where none
    client_span: np.ndarray  # span index of that CLIENT parent, -1 where none
    index_on_instance: np.ndarray  # 0 for an instance's first request, 1 for its second, ...
    root_instance: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # how many requests each stands for (a head-sampled run's tailscope.sample.weight, from the
    # derived requests: load.request_weights); None: each itself. The tail split weighs by it.
    weight: np.ndarray | None = None
    # when the work arrived, one time per message, where a unit carries several (a batch consumer's
    # unit: each linked message's publish, units.py); None: each unit's own arrival
    work_arrival: np.ndarray | None = None
    # ns each unit waited in a broker before its consumer started (units.py); None: requests
    queued: np.ndarray | None = None
    # a batch consumer's messages one by one (units.py): per message, the span whose end is the end
    # of its processing and when it entered the broker (ns); None where each unit is one message
    message_span: np.ndarray | None = None
    message_sent: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.root)

    @property
    def arrival(self) -> np.ndarray:
        """When each request was sent: its CLIENT parent's start where traced (a stalled server
        accepts late, so server-side starts clump after a pause), else the root's start."""
        return self._arrival

    _arrival: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass
class TraceFrame:
    """A run's spans, column-wise. Times are int64 nanoseconds relative to `t0` (the first span)."""

    run: str
    trace: np.ndarray
    parent: np.ndarray  # span index of the parent, -1 for none (or a parent not in the run)
    name: np.ndarray
    names: list[str]
    kind: np.ndarray
    service: np.ndarray
    services: list[str]
    instance: np.ndarray
    instances: list[str]
    start: np.ndarray
    dur: np.ndarray
    stage: np.ndarray  # index into ALL_STAGES, NO_STAGE where unmapped
    t0: int = 0
    setup: dict[str, str] = field(default_factory=dict)
    # runtime signals, confirmation only: GC pauses reported by the process (instance, start, duration)
    gc_instance: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gc_time: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gc_dur: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # span links: span link_from[i] links to span link_to[i], both in the frame (a batch consumer's span to
    # the producer span of each message it reads; load.py reads the CONSUMER spans' links only)
    link_from: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    link_to: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # the spans that root a unit of work, where a frame is one population of units (units.py: a
    # consumer's work below a span for its wait in the broker); None: the request roots build_frame finds
    unit_roots: np.ndarray | None = None
    # derived by build_frame
    # the stages as read, before build_frame marks moved proxy roots as ingress
    read_stage: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    request: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    excl: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    leaf: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    depth: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # the parent whose exclusive time a span is subtracted from (its own, unless detached)
    excl_parent: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    wrappers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # see structure.py
    requests: Requests | None = None
    # span name -> {attribute key: (span indices, values)}; None when attributes are not available
    attribute_source: Callable[[str], dict[str, tuple[np.ndarray, list[Any]]]] | None = None
    # span name -> (span indices, time after the span's start, wait asked; ns) of the refusals its events
    # report (retry_events.py); None when events are not available
    retry_source: Callable[[str], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
    # a sampled read (sample.SamplePlan: the time windows read, laid end to end), None when read whole;
    # and how many of the requests read ran past their window's margin (cut short)
    sample: Any = None
    cut_requests: int = 0

    _attribute_cache: dict[int, dict[str, tuple[np.ndarray, list[Any]]]] = field(default_factory=dict)
    # attributes.numeric_attributes' parse of a name's attributes (name code -> key -> (span indices,
    # floats, how many spans carry the key) or None where the key is not numeric): parsed once per name
    _numeric_cache: dict[int, dict[str, Any]] = field(default_factory=dict)
    _retry_cache: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    # `end` as last computed, with the start and dur arrays it came from (see `end`)
    _end_cache: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(
        default=None, repr=False, compare=False
    )

    def attributes(self, name_code: int) -> dict[str, tuple[np.ndarray, list[Any]]]:
        """The attributes of a span name's spans (read once per name: each read is a query)."""
        if self.attribute_source is None:
            return {}
        if name_code not in self._attribute_cache:  # the source must still be open: a read error is raised
            self._attribute_cache[name_code] = self.attribute_source(self.names[name_code])
        return self._attribute_cache[name_code]

    def retries(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The refusals the events of a span name's spans report (retry_events.py), None where the
        frame has no event reader."""
        if self.retry_source is None or name not in self.names:
            return None
        if name not in self._retry_cache:
            self._retry_cache[name] = self.retry_source(name)
        return self._retry_cache[name]

    def __len__(self) -> int:
        return len(self.dur)

    @property
    def end(self) -> np.ndarray:
        """start + dur, computed once per pair of arrays (the detectors ask for it ~200 times a run:
        4 % of a 1 M-span diagnosis' time) and read-only, so that no caller can change it for the
        others. A frame whose start or dur is replaced gets a new one; neither is changed in place."""
        cached = self._end_cache
        if cached is None or cached[0] is not self.start or cached[1] is not self.dur:
            end = self.start + self.dur
            end.flags.writeable = False
            cached = self._end_cache = (self.start, self.dur, end)
        return cached[2]

    def stage_name(self, code: int) -> str | None:
        return ALL_STAGES[code] if code >= 0 else None

    def name_stage(self) -> np.ndarray:
        """The most common stage of each span name (NO_STAGE where none is known)."""
        out = np.full(len(self.names), NO_STAGE, np.int64)
        known = self.stage >= 0
        if known.any():
            flat = self.name[known] * len(ALL_STAGES) + self.stage[known]
            counts = np.bincount(flat, minlength=len(self.names) * len(ALL_STAGES)).reshape(
                len(self.names), -1
            )
            has = counts.sum(axis=1) > 0
            out[has] = counts[has].argmax(axis=1)
        return out


def _depth_and_ancestors(parent: np.ndarray, is_server: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth of every span, and whether some proper ancestor is a SERVER span (pointer walking)."""
    n = len(parent)
    depth = np.zeros(n, np.int64)
    server_above = np.zeros(n, bool)
    cur = parent.copy()
    for _ in range(256):  # deeper traces than that are cut (cycles in hostile input end here too)
        alive = cur >= 0
        if not alive.any():
            break
        idx = np.nonzero(alive)[0]
        depth[idx] += 1
        server_above[idx] |= is_server[cur[idx]]
        cur[idx] = parent[cur[idx]]
    return depth, server_above


def _request_of(parent: np.ndarray, is_root: np.ndarray) -> np.ndarray:
    n = len(parent)
    req = np.where(is_root, np.arange(n), -1)
    cur = parent.copy()
    todo = np.nonzero(~is_root)[0]
    for _ in range(256):
        if len(todo) == 0:
            break
        c = cur[todo]
        alive = c >= 0
        todo, c = todo[alive], c[alive]
        hit = is_root[c]
        req[todo[hit]] = c[hit]
        todo, c = todo[~hit], c[~hit]
        cur[todo] = parent[c]
    return req


def exclusive_times(parent: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Duration minus the union of the children's intervals (clipped to the parent)."""
    n = len(parent)
    excl = dur.astype(np.int64).copy()
    child = np.nonzero(parent >= 0)[0]
    if len(child) == 0:
        return excl
    p = parent[child]
    pstart, pend = start[p], start[p] + dur[p]
    cs = np.clip(start[child], pstart, pend)
    ce = np.clip(start[child] + dur[child], pstart, pend)
    order = np.lexsort((cs, p))
    p, cs, ce, pstart = p[order], cs[order], ce[order], pstart[order]
    # running max of ends within each parent group: offset groups so one global cummax suffices
    rel_s, rel_e = cs - pstart, ce - pstart
    span = int(max(rel_e.max(initial=0), 1)) + 1
    group = np.cumsum(np.r_[True, p[1:] != p[:-1]]) - 1
    offset = group.astype(np.int64) * span
    run_end = np.maximum.accumulate(rel_e + offset) - offset
    prev_end = np.r_[np.int64(-1), run_end[:-1]]
    first = np.r_[True, p[1:] != p[:-1]]
    prev_end[first] = -1
    covered = np.maximum(0, rel_e - np.maximum(rel_s, prev_end))
    excl -= np.bincount(p, weights=covered, minlength=n).astype(np.int64)
    return np.maximum(excl, 0)


def self_segments(
    parent: np.ndarray, start: np.ndarray, dur: np.ndarray, owners: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stretches of time of each span in `owners` (spans with children) that no child covers: the
    span's own work, or waiting that has no span of its own (an uninstrumented queue). Returns
    (owner span, start, end) of every non-empty stretch."""
    n = len(parent)
    is_owner = np.zeros(n, bool)
    is_owner[owners] = True
    child = np.nonzero((parent >= 0) & is_owner[np.maximum(parent, 0)])[0]
    if len(child) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    p = parent[child]
    pstart, pend = start[p], start[p] + dur[p]
    cs = np.clip(start[child], pstart, pend)
    ce = np.clip(start[child] + dur[child], pstart, pend)
    order = np.lexsort((cs, p))
    p, cs, ce, pstart, pend = p[order], cs[order], ce[order], pstart[order], pend[order]
    first = np.r_[True, p[1:] != p[:-1]]
    last = np.r_[p[1:] != p[:-1], True]
    group = np.cumsum(first) - 1
    span = int(max((ce - pstart).max(initial=0), 1)) + 1
    offset = group.astype(np.int64) * span
    run_end = np.maximum.accumulate(ce - pstart + offset) - offset + pstart  # covered up to, inclusive
    gap_from = np.where(first, pstart, np.r_[np.int64(0), run_end[:-1]])
    owner = np.r_[p, p[last]]
    seg_s = np.r_[gap_from, run_end[last]]
    seg_e = np.r_[cs, pend[last]]
    keep = seg_e > seg_s
    return owner[keep], seg_s[keep], seg_e[keep]


def build_frame(frame: TraceFrame) -> TraceFrame:
    """Fill the derived fields of a frame whose span columns are set. Returns the same frame."""
    n = len(frame.dur)
    parent = frame.parent.astype(np.int64)
    is_server = frame.kind == KIND_SERVER
    depth, server_above = _depth_and_ancestors(parent, is_server)
    has_server = np.zeros(int(frame.trace.max(initial=-1)) + 1, bool)
    has_server[frame.trace[is_server]] = True
    frame.read_stage = frame.stage
    if frame.unit_roots is not None:  # one population of units, its roots given (units.py)
        is_root = frame.unit_roots.astype(bool).copy()
        moved = np.zeros(0, np.int64)
    else:
        is_root = (is_server & ~server_above) | ((parent < 0) & ~has_server[frame.trace])
        moved = descend_proxies(frame, parent, is_root, KIND_SERVER, KIND_CLIENT)
    if len(moved):  # the request root is ingress, whatever its name (as in the stage mapping)
        frame.stage = frame.stage.copy()
        frame.stage[moved] = ALL_STAGES.index("ingress")
    frame.depth = depth
    frame.request = _request_of(parent, is_root)
    frame.excl_parent = containing_parent(parent, frame.start, frame.dur)
    frame.excl = exclusive_times(frame.excl_parent, frame.start, frame.dur)
    frame.leaf = np.bincount(parent[parent >= 0], minlength=n) == 0 if n else np.zeros(0, bool)

    roots = np.nonzero(is_root)[0]
    roots = roots[np.argsort(frame.start[roots], kind="stable")]
    prnt = parent[roots]
    has_client = prnt >= 0
    has_client[has_client] = frame.kind[prnt[has_client]] == KIND_CLIENT
    client_latency = np.full(len(roots), np.nan)
    client_latency[has_client] = frame.dur[prnt[has_client]]
    req_index = np.full(n, -1, np.int64)
    req_index[roots] = np.arange(len(roots))
    request = np.where(frame.request >= 0, req_index[np.maximum(frame.request, 0)], -1)
    own = ~callee_mask(parent, frame.kind, depth, KIND_SERVER, KIND_CLIENT) & ~is_root
    inst = work_instances(request, frame.instance, frame.excl, own, frame.instance[roots])
    order = np.lexsort((frame.start[roots], inst))
    index_on = np.empty(len(roots), np.int64)
    if len(roots):
        sorted_inst = inst[order]
        first = np.r_[True, sorted_inst[1:] != sorted_inst[:-1]]
        group_start = np.maximum.accumulate(np.where(first, np.arange(len(roots)), 0))
        index_on[order] = np.arange(len(roots)) - group_start
    frame.requests = Requests(
        root=roots,
        start=frame.start[roots],
        latency=frame.dur[roots].astype(np.int64),
        instance=inst,
        client_latency=client_latency,
        client_span=np.where(has_client, prnt, -1),
        index_on_instance=index_on,
        root_instance=frame.instance[roots],
    )
    client_start = frame.start[np.maximum(prnt, 0)]
    frame.requests._arrival = np.where(has_client, client_start, frame.start[roots])
    frame.request = request  # an index into the request table (not a span index)
    frame.wrappers = wrapper_spans(request, frame.name, frame.dur, frame.leaf, roots, frame.requests.latency)
    return frame


def root_waits(frame: TraceFrame, inside: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(span, start, end) of the longest stretch of each request root, wrapper or callee's SERVER span
    (among the spans where `inside` is set) that no child covers, for the names where that stretch is
    a material part of the request (median >= 5 % of the median latency: a wait, not scheduling slack
    between stages). A callee's server holds its own queue as the root does."""
    roots = frame.requests.root if frame.requests is not None else np.zeros(0, np.int64)
    callees = np.nonzero((frame.kind == KIND_SERVER) & ~frame.leaf & (frame.parent >= 0))[0]
    owners = np.unique(np.r_[roots[~frame.leaf[roots]], frame.wrappers, callees]).astype(np.int64)
    owner, seg_s, seg_e = self_segments(frame.excl_parent, frame.start, frame.dur, owners[inside[owners]])
    if len(owner) == 0:
        return owner, seg_s, seg_e
    order = np.lexsort((seg_e - seg_s, owner))
    last = np.r_[owner[order][1:] != owner[order][:-1], True]
    pick = order[last]
    owner, seg_s, seg_e = owner[pick], seg_s[pick], seg_e[pick]
    material = np.zeros(len(owner), bool)
    for code in np.unique(frame.name[owner]).tolist():
        sel = frame.name[owner] == code
        material[sel] = np.median(seg_e[sel] - seg_s[sel]) >= 0.05 * np.median(frame.dur[owner[sel]])
    return owner[material], seg_s[material], seg_e[material]
