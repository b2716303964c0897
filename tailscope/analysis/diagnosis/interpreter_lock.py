"""lock_contention where a process's stalls are its interpreter lock (Ruby's GVL, CPython's GIL) held
by one request's long CPU work, not stop-the-world pauses (gc_pause.py finds the stalls; this module
says whose they are).

Mechanism. In a threaded process with one interpreter lock only the thread holding it runs code. A
thread that computes for a long time (serialising a large page, parsing a large body) keeps the lock
for a slice at a time (Ruby: 100 ms, CPython: 5 ms) while others want it; a thread whose I/O returned
or whose CPU work is due waits for the slice to end. From the other requests' side this is a stall of
the whole process: their spans in flight stretch together, as in a collector's pause. What differs:
a pause stops every thread, whenever it comes; a lock's stall comes only while one request's own work
(a span of in-process work, not a call) is in flight across it, and that work goes on through the
stall and beyond it (the holder takes turns: a stall is a slice, the holder's span several).

Statistic. For every stall episode (gc_pause's): is it *held*, i.e. covered on its instance by a span
(not a call) of one request that lasts at least HOLDER_OVER x the episode while that request waits for
no reply across it (a span the stall stretched hardly can: a pause adds its length to whatever it
holds up)? The held share of the episodes is
compared with the same share for the episodes moved to random moments of the same instance at which
at least two requests are in flight (how often a long span covers a busy moment by chance). A one-request
event loop blocked by a long step is loop_blocks.py's: there the stall lasts the whole step.

Confidence = min(CAP, the stall finding's) x strength, strength = logistic(held, 0.6) x
logistic(held - by chance, 0.35); the stall finding keeps 1 - 0.6 x strength of its confidence, with
the reason in its evidence. Where the runtime reports GC pauses covering much of the tail excess, the
stalls are the collector's and nothing changes.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, logistic

PATTERN = "lock_contention"
MECHANISM = "interpreter_lock"
ADVICE = (
    "One request's long CPU work holds the process's interpreter lock (Ruby's GVL, CPython's GIL) and "
    "every other thread of that process waits for it in turns: more threads make it worse. Move the "
    "CPU-heavy work (large exports, serialisation of big pages, parsing) to separate processes or a "
    "background job, page or stream it, or use a faster encoder that releases the lock; serve "
    "latency-sensitive routes from processes with fewer threads (more processes, fewer threads each)."
)
HOLDER_OVER = 2.5  # a holder's span lasts this many times the stall it holds at least
CAP = 0.75  # without a lock's own instrumentation, CPU starvation reads the same (compute_bound)
SHIFTS = 16
REPORTED_GC = 0.3  # the runtime's reported pauses covering this share of the tail excess: GC's


def split(ctx: Context, found: list[Finding]) -> list[Finding]:
    """The stall findings, and a lock_contention finding where their stalls are held by another
    request's long in-process work (the stall finding then lowered, with the reason)."""
    stall = next((x for x in found if x.pattern == "gc_pause"), None)
    episodes = ctx.notes.get("gc_episodes")
    if stall is None or stall.confidence < 0.3 or episodes is None or len(episodes[0]) < 5:
        return found
    stats = stall.evidence.get("stats", {})
    if (stats.get("tail_excess_share_in_reported_gc") or 0.0) >= REPORTED_GC:
        return found
    held = held_stalls(ctx, *episodes)
    if held is None:
        return found
    share, by_chance, holder = held
    strength = logistic(share, 0.6, 0.08) * logistic(share - by_chance, 0.35, 0.08)
    if strength < 0.2:
        return found
    was = stall.confidence
    stall.confidence = clamp01(was * (1 - 0.6 * strength))
    reason = (
        f" {share:.0%} of the stalls come while one request's own work ('{holder}') runs across them and "
        f"beyond (vs {by_chance:.0%} of busy moments at random): the process waits for that work's turn "
        "on its interpreter lock, not for a collector (see lock_contention)."
    )
    stall.evidence["summary"] = stall.evidence.get("summary", "") + reason
    lock_stats = {
        "mechanism": MECHANISM,
        "services": stats.get("services"),
        "instances": stats.get("instances"),
        "episodes": stats.get("episodes"),
        "median_stall_ms": stats.get("median_stall_ms"),
        "held_share": round(share, 3),
        "held_share_by_chance": round(by_chance, 3),
        "holder": holder,
        "tail_excess_share": stats.get("tail_excess_share"),
    }
    summary = (
        f"{stats.get('episodes')} stalls (median {stats.get('median_stall_ms')} ms) of every thread of a "
        f"process ({', '.join(stats.get('instances') or [])}) while one request's in-process work "
        f"('{holder}') ran across them and beyond: {share:.0%} of the stalls vs {by_chance:.0%} of busy "
        "moments at random. "
        "A collector's pause would stop that work too; here it goes on while the others wait, as threads "
        "do for an interpreter lock (GVL/GIL) held by CPU-heavy work. Without lock instrumentation, "
        "CPU starvation of the process reads alike."
    )
    evidence = {"summary": summary, "stats": lock_stats}
    if "chart" in stall.evidence:
        evidence["chart"] = stall.evidence["chart"]
    lock = Finding(PATTERN, clamp01(min(CAP, was) * strength), None, None, evidence, ADVICE)
    return [*found, lock]


def held_stalls(ctx: Context, ep_inst: np.ndarray, ep_t0: np.ndarray, ep_t1: np.ndarray):
    """(share of the episodes held by one request's in-process work, the same share for the episodes
    moved to random busy moments of their instance, the holders' most frequent name)."""
    f = ctx.frame
    length = (ep_t1 - ep_t0).astype(np.int64)
    if not len(length):
        return None
    calls = np.isin(f.name, _codes(ctx)) | (f.kind == KIND_CLIENT)
    # a holder: a span of a request, not a call, long enough to hold the median stall
    cand = np.nonzero((f.request >= 0) & ~calls & (f.dur >= HOLDER_OVER * np.median(length)))[0]
    if len(cand) == 0:
        return None
    # the holders' requests' calls: a request waiting for a reply across a stall holds no lock
    waits = np.nonzero(calls & np.isin(f.request, np.unique(f.request[cand])))[0]
    holders = (f.instance[cand], f.start[cand], f.end[cand], f.request[cand], f.name[cand])
    replies = (f.instance[waits], f.start[waits], f.end[waits], f.request[waits])
    held, names = _held(holders, replies, ep_inst, ep_t0, ep_t1)
    busy = _busy(f.requests)
    run_end = int(f.end.max())
    rng = np.random.default_rng(ctx.seed + 11)
    hits = tries = 0
    for _ in range(SHIFTS):
        t0 = rng.integers(0, max(run_end - int(length.max()), 1), len(ep_t0))
        ok = _in_flight(busy, ep_inst, t0) >= 2
        if ok.any():
            h, _ = _held(holders, replies, ep_inst[ok], t0[ok], t0[ok] + length[ok])
            hits, tries = hits + int(h.sum()), tries + int(ok.sum())
    if tries == 0 or not held.any():
        return None
    holder = f.names[int(np.bincount(names[held]).argmax())]
    return float(held.mean()), hits / tries, holder


def _codes(ctx: Context) -> np.ndarray:
    f = ctx.frame
    return np.array([f.names.index(n) for n in ctx.client_names if n in f.names], np.int64)


def _held(holders, replies, ep_inst, ep_t0, ep_t1):
    """Per episode: whether a span of in-process work on its instance starts before it, ends after
    it and lasts HOLDER_OVER x its length while its request waits for no reply across it; and that
    span's name code."""
    h_inst, h_s, h_e, h_req, h_name = holders
    r_inst, r_s, r_e, r_req = replies
    held = np.zeros(len(ep_t0), bool)
    names = np.zeros(len(ep_t0), np.int64)
    for i in np.unique(ep_inst):
        mine, theirs = h_inst == i, r_inst == i
        s, e, req, nm = h_s[mine], h_e[mine], h_req[mine], h_name[mine]
        rs, re_, rr = r_s[theirs], r_e[theirs], r_req[theirs]
        for k in np.nonzero(ep_inst == i)[0]:
            a, b = ep_t0[k], ep_t1[k]
            cover = (s <= a) & (e >= b) & (e - s >= HOLDER_OVER * (b - a))
            if not cover.any():
                continue
            cover &= ~np.isin(req, rr[(rs < b) & (re_ > a)])
            if cover.any():
                held[k] = True
                names[k] = nm[np.argmin(np.where(cover, e - s, np.iinfo(np.int64).max))]
    return held, names


def _busy(reqs) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for i in np.unique(reqs.instance):
        sel = reqs.instance == i
        out[int(i)] = (np.sort(reqs.start[sel]), np.sort(reqs.start[sel] + reqs.latency[sel]))
    return out


def _in_flight(busy, inst, t) -> np.ndarray:
    """Requests of each moment's instance in flight at that moment."""
    out = np.zeros(len(t), np.int64)
    for i in np.unique(inst):
        if int(i) not in busy:
            continue
        starts, ends = busy[int(i)]
        sel = inst == i
        out[sel] = np.searchsorted(starts, t[sel], side="right") - np.searchsorted(ends, t[sel], side="right")
    return out
