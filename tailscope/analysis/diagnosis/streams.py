"""Streamed requests: one trace is a stream (a speech utterance sent as it is spoken, a long upload in
chunks, a session fed by its client), and its root lasts as long as the input takes to arrive.

What the trace shows. The root's duration is then the stream's length (the audio's, paced by the
speaker; the chunks', paced by the sender), which no server-side mechanism explains: a long utterance
is no slow request. What the user feels is the time from the end of the input to the final result,
and that is the request to diagnose.

The signature (spans' kinds, parents, timing and attributes only; never names):
- the final span: in most requests (FINAL_SHARE) the root has a child of one (service, name) that
  starts late in the root (after LATE of its duration) and ends with it (within END_TOL of its
  duration, at least END_TOL_NS): the work on the result, begun when the input ended;
- the input dominates: the time before the final span (the stream) is at least STREAM_OVER_FINAL
  times the final span's at the median;
- the input is paced by its sender, not worked through by the service, one of:
  - *size*: a numeric attribute of the root (a duration, a count of chunks) predicts the stream's
    length at a steady rate (Spearman >= MIN_RHO, the rate's p5-p95 within RATE_SPREAD of its
    median, over streams whose lengths vary at least LENGTH_SPREAD-fold), and a call of the request
    that opened with the stream is still open when the final span starts (the service's
    downstream stream; in most requests): a batch whose time tracks its size is worked through
    first and its calls end before its reply is written;
  - *cadence*: spans of one name repeat in the stream (at least MIN_REPEATS per request) at a steady
    cadence (the CV of their start intervals <= MAX_CADENCE_CV at the median) with idle time between
    them (each starts after the last ended; together at most BUSY_SHARE of the stream): chunks
    handled as they arrive. A fan-out's
    calls start together; a batch's items run back to back.

Where the run is streams, its requests are diagnosed from the stream's end: each request's spans are
cut to [the final span's start, the root's end] (spans that ended before it dropped), the root's
duration the time to the final result (`populations`, runner.py); the report says so.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tailscope.analysis.diagnosis import units
from tailscope.analysis.diagnosis.attributes import numeric_attributes
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER, TraceFrame
from tailscope.analysis.diagnosis.stats import spearman

UNIT = "stream"  # the population's kind of unit: a stream's requests from its input's end
FINAL_SHARE = 0.8
LATE = 0.5
END_TOL, END_TOL_NS = 0.02, 2_000_000
STREAM_OVER_FINAL = 3.0
MIN_RHO = 0.95
RATE_SPREAD = 0.25
LENGTH_SPREAD = 2.0
OPEN_SHARE = 0.8
OPENED_WITHIN = 0.1  # a call opened with the stream: in its first tenth
MIN_REPEATS = 5
MAX_CADENCE_CV = 0.35
BUSY_SHARE = 0.5
MIN_REQUESTS = 50


def tops(frame: TraceFrame) -> np.ndarray:
    """The streams' roots: per trace holding a request, the topmost SERVER span at or above its
    request's root (a relay or a gateway in front of the work is the stream's receiver), -1 for a
    trace without one; indexed by trace code."""
    f = frame
    cur = f.requests.root.copy()
    top = cur.copy()
    for _ in range(64):
        up = f.parent[cur]
        ok = up >= 0
        if not ok.any():
            break
        cur = np.where(ok, up, cur)
        server = ok & (f.kind[np.maximum(up, 0)] == KIND_SERVER)
        top = np.where(server, up, top)
    out = np.full(int(f.trace.max(initial=-1)) + 1, -1, np.int64)
    out[f.trace[top]] = top
    return out


def final_spans(frame: TraceFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """(the streams' roots, per root its final span or -1) where most roots of the run's commonest
    (service, name) have a final span of one (service, name) (module docstring); None otherwise."""
    f = frame
    req = f.requests
    if req is None or len(req) < MIN_REQUESTS:
        return None
    by_trace = tops(f)
    roots = np.unique(by_trace[by_trace >= 0])
    group = f.service[roots] * (len(f.names) + 1) + f.name[roots]
    codes, counts = np.unique(group, return_counts=True)
    if counts.max() < MIN_REQUESTS:
        return None
    roots = roots[group == codes[np.argmax(counts)]]
    position = np.full(len(f), -1, np.int64)
    position[roots] = np.arange(len(roots))
    kids = np.nonzero(f.parent >= 0)[0]
    kids = kids[position[f.parent[kids]] >= 0]
    if len(kids) == 0:
        return None
    at = position[f.parent[kids]]
    r_start, r_dur = f.start[roots][at], f.dur[roots][at]
    tol = np.maximum(END_TOL * r_dur, END_TOL_NS)
    late = (f.start[kids] - r_start >= LATE * r_dur) & (
        np.abs(f.start[kids] + f.dur[kids] - (r_start + r_dur)) <= tol) & (r_dur > 0)
    kids, at = kids[late], at[late]
    if len(kids) < FINAL_SHARE * len(roots):
        return None
    group = f.service[kids] * (len(f.names) + 1) + f.name[kids]
    codes, counts = np.unique(group, return_counts=True)
    top = codes[np.argmax(counts)]
    kids, at = kids[group == top], at[group == top]
    out = np.full(len(roots), -1, np.int64)
    order = np.argsort(-f.start[kids], kind="stable")  # the earliest one per root written last
    out[at[order]] = kids[order]
    if (out >= 0).mean() < FINAL_SHARE:
        return None
    return roots, out


def cut(frame: TraceFrame) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(the streams' roots, per root when its input ended (ns), the sign read: 'size' or 'cadence')
    where the run's requests are streams (module docstring); None otherwise. Roots without a final
    span are left out."""
    f = frame
    found = final_spans(f)
    if found is None:
        return None
    roots, final = found
    roots, final = roots[final >= 0], final[final >= 0]
    end_of_input = f.start[final]
    stream = (end_of_input - f.start[roots]).astype(float)
    after = (f.start[roots] + f.dur[roots] - end_of_input).astype(float)
    if np.median(stream) < STREAM_OVER_FINAL * max(float(np.median(after)), 1.0):
        return None
    if _by_size(f, roots, stream, end_of_input):
        return roots, end_of_input, "size"
    if _by_cadence(f, roots, end_of_input, stream):
        return roots, end_of_input, "cadence"
    return None


def _member(f: TraceFrame, roots: np.ndarray) -> np.ndarray:
    """Per span: the index in `roots` of the stream whose trace holds it (-1 where none)."""
    by_trace = np.full(int(f.trace.max(initial=-1)) + 1, -1, np.int64)
    by_trace[f.trace[roots]] = np.arange(len(roots))
    return by_trace[f.trace]


def _by_size(f: TraceFrame, roots: np.ndarray, stream: np.ndarray, end_of_input: np.ndarray) -> bool:
    """A root attribute predicts the stream's length at a steady rate, and a call opened with the
    stream is still open when its input ends."""
    lo, hi = np.percentile(stream, [10, 90])
    if hi < LENGTH_SPREAD * max(lo, 1.0):
        return False
    position = np.full(len(f), -1, np.int64)
    position[roots] = np.arange(len(roots))
    paced = False
    for code in np.unique(f.name[roots]).tolist():
        for idx, values in numeric_attributes(f, int(code), len(roots) // 2).values():
            at = position[idx]
            keep = (at >= 0) & (values > 0)
            if keep.sum() < FINAL_SHARE * len(roots):
                continue
            s, v = stream[at[keep]], values[keep]
            rate = s / v
            p5, p50, p95 = np.percentile(rate, [5, 50, 95])
            if p50 > 0 and p95 - p5 <= 2 * RATE_SPREAD * p50 and spearman(v, s) >= MIN_RHO:
                paced = True
                break
        if paced:
            break
    return paced and _open_across(f, roots, stream, end_of_input)


def _open_across(f: TraceFrame, roots: np.ndarray, stream: np.ndarray, end_of_input: np.ndarray) -> bool:
    """In most streams a CLIENT call opened in the stream's first tenth is open when its input ends."""
    calls = np.nonzero(f.kind == KIND_CLIENT)[0]
    at = _member(f, roots)[calls]
    calls, at = calls[at >= 0], at[at >= 0]
    opened = f.start[calls] - f.start[roots[at]] <= OPENED_WITHIN * stream[at]
    open_at_end = f.start[calls] + f.dur[calls] > end_of_input[at]
    hit = np.zeros(len(roots), bool)
    hit[at[opened & open_at_end]] = True
    return hit.mean() >= OPEN_SHARE


def _by_cadence(f: TraceFrame, roots: np.ndarray, end_of_input: np.ndarray, stream: np.ndarray) -> bool:
    """Spans of one name repeat through the stream at a steady cadence, idle between them."""
    at = _member(f, roots)
    spans = np.nonzero(at >= 0)[0]
    at = at[spans]
    before = f.start[spans] + f.dur[spans] <= end_of_input[at]
    spans, at = spans[before], at[before]
    if len(spans) == 0:
        return False
    group = at * (len(f.names) + 1) + f.name[spans]
    codes, counts = np.unique(group, return_counts=True)
    many = codes[counts >= MIN_REPEATS]
    if len(np.unique(many // (len(f.names) + 1))) < FINAL_SHARE * len(roots):
        return False
    order = np.argsort(group, kind="stable")
    spans, group = spans[order], group[order]
    bounds = np.searchsorted(group, many)
    cvs, busy = [], []
    for code, lo in zip(many.tolist(), bounds.tolist(), strict=True):  # a few names per stream
        mine = spans[lo:lo + int(counts[np.searchsorted(codes, code)])]
        gaps = np.diff(np.sort(f.start[mine]).astype(float))
        idle = gaps.mean() > 0 and np.median(gaps) > np.median(f.dur[mine])  # each after the last ended
        cvs.append(gaps.std() / gaps.mean() if idle else np.inf)
        busy.append(f.dur[mine].sum() / max(stream[code // (len(f.names) + 1)], 1.0))
    return float(np.median(cvs)) <= MAX_CADENCE_CV and float(np.median(busy)) <= BUSY_SHARE


def populations(frame: TraceFrame) -> list[units.Population] | None:
    """The run's streams from their input's end (one units.Population of unit UNIT: each stream's
    spans cut to [its input's end, its root's end], its root the unit's; the run's other requests
    as they are) where its requests are streams; None otherwise."""
    found = cut(frame)
    if found is None:
        return None
    roots, ends, _ = found
    f = frame
    member = _member(f, roots)
    below = units._unit_of(f.parent, np.isin(np.arange(len(f)), roots)) >= 0
    in_stream = (member >= 0) & below
    per = ends[np.maximum(member, 0)]
    span_end = f.start + f.dur
    keep = in_stream & (span_end > per)
    start = np.where(keep, np.maximum(f.start, per), f.start)
    clipped = dataclasses.replace(f, start=start, dur=(span_end - start).astype(f.dur.dtype),
                                  _end_cache=None)
    # a stream's receiver without a final span (cut short, an error) is left out, not kept whole
    top = tops(f)[f.trace]
    cut_short = (member < 0) & (top >= 0)
    cut_short[cut_short] = (f.service[top[cut_short]] == f.service[roots[0]]) & (
        f.name[top[cut_short]] == f.name[roots[0]])
    others = f.requests.root[(member[f.requests.root] < 0) & ~cut_short[f.requests.root]]
    spans = np.nonzero(keep | ((member < 0) & ~cut_short))[0]
    heads = np.sort(np.r_[roots, others])
    sub = units._subframe(clipped, spans, heads, clipped.start[heads], roots_given=True)
    if sub.requests is None or len(sub.requests) < MIN_REQUESTS:
        return None
    return [units.Population(UNIT, units._entry(sub), sub)]
