"""gc_pause on a tier that only forwards (an API gateway, a sidecar, a BFF in front of the service).

Mechanism. Behind a proxy tier the request is the callee's span (frame.py), so stalls of the proxy's
own processes never show in the analysed latency, and the proxy has too little work of its own for
gc_pause's cross-name test. Yet a stop-the-world pause (or a throttled CPU) on a proxy instance
delays everything that instance must do while it lasts: forwarding the requests that arrived,
reading the responses that came back, replying. Those events all happen at the moment the process
runs again, so the proxy's own time per request (its SERVER span minus the callee's SERVER span:
its processing and the reply's way back) is stretched for a set of requests *released together*. The
time from its call to the callee's handler is the callee's door (its accept backlog, or a stopped
callee letting calls in together: stopped_accepts.py), left out of the proxy's time, and so is a
client's retry loop
(earlier attempts of the same call under the proxy's span, rejected by a throttling callee, and the
backoff sleeps between them: attempts retried after the same backoff also come back together).

Statistic, per proxy instance: a request's proxy time is slow above its p90 and 1.5x its median; its
event times (forwarding start, the response read, the reply) are binned by 1 ms; a release bin holds
events of >= 2 slow requests, each *held*: late by a bin or more after what it waited for (the
request's arrival, the callee's answer, the read), as what a paused process does when it runs again
is (a burst's requests forwarded as they arrive come together too, on time). The share of slow
requests with an event in a release bin is compared with the same share after moving each slow
request by a random offset (20 draws): a ratio and a z.
Weight: the share of the proxy's end-to-end tail excess (its SERVER span's latency) carried by the
slow requests' proxy time. The finding is gc_pause on the proxy's instances (its runtime's own GC
events, where reported, confirm); the released stretches are left in the notes so that network does
not read them as the wire.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import cpu_throttling
from tailscope.analysis.diagnosis.attributes import error_flags
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.gc_pause import ADVICE
from tailscope.analysis.diagnosis.long_stalls import _merged as merged
from tailscope.analysis.diagnosis.long_stalls import stall_overlap
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import (
    clamp01,
    excess_share,
    logistic,
    material_weight,
    ms,
    tail_split,
)
from tailscope.analysis.diagnosis.where import busiest, main_service

PATTERN = "gc_pause"
BIN_NS = 1_000_000
BUNCH = 2  # a pause with few requests in flight releases a few at once
DRAWS = 20


def proxy_calls(ctx: Context) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(proxy SERVER span, its CLIENT call, the callee's request root) per request handed on by a
    proxy tier in another service; None where there is none."""
    f = ctx.frame
    reqs = f.requests
    call = reqs.client_span
    has = call >= 0
    if has.sum() < 100:
        return None
    root, call = reqs.root[has], call[has]
    outer = f.parent[call]
    ok = (outer >= 0) & (f.kind[call] == KIND_CLIENT)
    ok[ok] &= (f.kind[outer[ok]] == KIND_SERVER) & (f.service[outer[ok]] == f.service[call[ok]])
    ok[ok] &= f.service[outer[ok]] != f.service[root[ok]]
    if ok.sum() < 100:
        return None
    return outer[ok], call[ok], root[ok]


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    found = proxy_calls(ctx)
    if found is None:
        return []
    outer, call, root = found
    # the proxy's processing and the wire back: not the time from its call to the callee's handler
    # (the callee's door: its accept backlog, or a stopped callee letting calls in together)
    door = np.maximum(f.start[root] - f.start[call], 0)
    own = (f.dur[outer] - f.dur[root] - door).astype(np.float64)
    own -= _retry_loop(ctx, outer, call)
    inst = f.instance[outer]
    slow = np.zeros(len(outer), bool)
    for i in np.unique(inst):
        m = inst == i
        if m.sum() >= 50:
            p90, p50 = np.quantile(own[m], [0.9, 0.5])
            slow[m] = own[m] > max(p90, 1.5 * p50)
    if slow.sum() < 20:
        return []
    events = np.stack([f.start[call], f.end[call], f.end[outer]], axis=1)[slow]
    held = _held(inst, np.stack([f.start[call] - f.start[outer], f.end[call] - f.end[root],
                                 f.end[outer] - f.end[call]], axis=1))[slow]
    s_inst = inst[slow]
    released = _released(s_inst, events, held)
    observed = float(released.mean())
    rng = ctx.rng
    span = int(f.end.max()) + 1
    null = [
        float(_released(s_inst, (events + rng.integers(0, span, len(events))[:, None]) % span, held).mean())
        for _ in range(DRAWS)
    ]
    ratio = observed / max(float(np.mean(null)), 1e-3)
    z = (observed - float(np.mean(null))) / (float(np.std(null)) + 0.01)
    latency = f.dur[outer].astype(np.float64)
    split = tail_split(latency)
    rel = np.nonzero(slow)[0][released]
    stretched = np.zeros(len(outer))
    stretched[rel] = own[rel] - np.median(own)
    share = clamp01(excess_share(stretched, split))
    strength = logistic(observed, 0.25, 0.06) * logistic(ratio, 3.0, 0.5) * logistic(z, 4.0, 1.0)
    # beside a heavier cause (a queue behind the tier fills its tail) the stops carry little of the
    # tail excess yet hold many requests: what they add to the mean request over the median latency
    added = float(stretched.sum()) / len(outer) / max(float(np.median(latency)), 1.0)
    confidence = strength * max(material_weight(share), 0.9 * logistic(added, 0.03, 0.01))
    if confidence < 0.05:
        return []
    # the released stretches (from the slowest request's last event back by its extra proxy time),
    # for network: a proxy that stopped reading responses is not the wire
    end = events[released].max(axis=1)
    extra = own[rel] - np.median(own)
    if confidence >= 0.3:
        ctx.notes["proxy_stalls"] = (inst[rel], (end - extra).astype(np.int64), end.astype(np.int64))
    service = main_service(f, outer)
    instances = busiest(f, inst[rel])
    reported = None
    if len(f.gc_time):
        ev = stall_overlap(inst, f.start[outer], f.end[outer], *ctx.reported_pauses)
        reported = excess_share(ev, split)
    p50, p99 = np.quantile(own, [0.5, 0.99])
    summary = (
        f"The {service} tier only forwards (its requests are handed on to "
        f"{main_service(f, root)}), yet its own time per request (p50 "
        f"{ms(p50):.2f} ms, p99 {ms(p99):.1f} ms) is stretched for requests released together: "
        f"{observed:.0%} of its slow requests resume in the same millisecond as another one or more on "
        f"the same instance ({ratio:.1f}x chance, z {z:.1f}), as after a pause of the whole process; "
        f"that time carries {share:.0%} of the {service} latency's tail excess (instances: "
        f"{', '.join(instances)})"
        + (f"; the runtime reported GC pauses covering {reported:.0%} of it" if reported is not None else "")
        + ". The service behind it is not affected."
    )
    stats = {
        "service": service,
        "instances": instances,
        "slow_requests": int(slow.sum()),
        "released_together": round(observed, 3),
        "released_by_chance": round(float(np.mean(null)), 3),
        "ratio": round(ratio, 2),
        "z": round(z, 2),
        "proxy_time_p50_ms": ms(p50),
        "proxy_time_p99_ms": ms(p99),
        "tail_excess_share": round(share, 3),
        "added_over_median": round(added, 4),
        "tail_of": f"{service} latency",
        "tail_excess_share_in_reported_gc": None if reported is None else round(reported, 3),
    }
    top = inst == np.bincount(inst[rel]).argmax()
    pick = np.nonzero(top)[0][:3000]
    chart = {
        "kind": "proxy_time",
        "time_s": (f.start[outer[pick]] / 1e9).round(3).tolist(),
        "proxy_ms": (own[pick] / 1e6).round(3).tolist(),
        "released": np.isin(pick, rel).tolist(),
        "instance": f.instances[int(np.bincount(inst[rel]).argmax())],
    }
    evidence = {"summary": summary, "stats": stats, "chart": chart}
    name = f.names[int(np.bincount(f.name[outer]).argmax())]
    finding = Finding(PATTERN, clamp01(confidence), "ingress", name, evidence, ADVICE)
    # stalls that end on a CPU quota's period boundaries are throttling, as gc_pause's are
    earlier = ctx.notes.get("stall_findings") or []
    # one stop per stretch: the requests it released together share it (counted once, not per request)
    stops = [(i, *merged(t0[inst[rel] == i], t1[inst[rel] == i])) for i in np.unique(inst[rel])
             for t0, t1 in [((end - extra).astype(np.int64), end.astype(np.int64))]]
    episodes = tuple(np.concatenate(x) for x in zip(*[(np.full(len(a), i), a, b) for i, a, b in stops],
                                                    strict=True))
    out = cpu_throttling.split(ctx, finding, episodes, reported)
    ctx.notes["stall_findings"] = [*earlier, *out]
    return out


def _retry_loop(ctx: Context, outer: np.ndarray, call: np.ndarray) -> np.ndarray:
    """Per request: the time from the proxy's first attempt of the call (earlier CLIENT spans of the
    call's name under the same span, rejected or unanswered: attempts a throttling callee turned
    away) to the answered one. A
    client's retry loop, its failed attempts and its backoff sleeps, is its policy, not a stall."""
    f = ctx.frame
    row = np.full(len(f), -1, np.int64)
    row[outer] = np.arange(len(outer))
    kids = np.nonzero((f.kind == KIND_CLIENT) & (f.parent >= 0))[0]
    kids = kids[row[f.parent[kids]] >= 0]
    r = row[f.parent[kids]]
    earlier = (f.name[kids] == f.name[call[r]]) & (f.start[kids] < f.start[call[r]])
    # an attempt: rejected (an error or 429 status) or never answered (no SERVER span under it); calls
    # of one name side by side that were each answered are a fan-out, not a retry loop
    answered = np.zeros(len(f), bool)
    srv = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0))[0]
    answered[f.parent[srv]] = True
    rejected = ~answered[kids]
    for code in np.unique(f.name[kids[earlier]]).tolist():
        flags = error_flags(f, code)
        if flags is not None:
            bad = np.zeros(len(f), bool)
            bad[flags[0][flags[1]]] = True
            rejected |= bad[kids]
        for key, (idx, values) in f.attributes(code).items():
            if key in ("http.response.status_code", "http.status_code"):
                hit = np.zeros(len(f), bool)
                hit[np.asarray(idx, np.int64)[[str(v).strip() == "429" for v in values]]] = True
                rejected |= hit[kids]
    earlier &= rejected
    first = f.start[call].astype(np.float64)
    np.minimum.at(first, r[earlier], f.start[kids[earlier]].astype(np.float64))
    return f.start[call] - first


def _held(inst: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """Per request and event (forwarding, reading the reply, replying): was the event late after what
    it waited for (the tier's own arrival, the callee's answer, the read), by a bin or more over the
    instance's median? A paused process runs what it held when it resumes, each event late after its
    trigger; requests of a burst forwarded as they arrive, or answered late by a busy callee, come
    together on time (their slowness is at the callee's door, not here)."""
    held = np.zeros(segments.shape, bool)
    for i in np.unique(inst):
        m = inst == i
        held[m] = segments[m] - np.median(segments[m], axis=0) >= BIN_NS
    return held


def _released(inst: np.ndarray, events: np.ndarray, held: np.ndarray | None = None) -> np.ndarray:
    """Per slow request: does one of its events fall in a 1 ms bin (on its instance) holding events
    of at least BUNCH slow requests? Only events `held` (where given) take part: each of the others
    gets a bin of its own."""
    n = len(inst)
    key = inst.astype(np.int64)[:, None] * (1 << 40) + events // BIN_NS
    if held is not None:
        key = np.where(held, key, -1 - np.arange(key.size, dtype=np.int64).reshape(key.shape))
    flat = key.reshape(-1)
    owner = np.repeat(np.arange(n), events.shape[1])
    pairs = np.unique(np.c_[flat, owner], axis=0)  # a request counted once per bin
    _, inverse, counts = np.unique(pairs[:, 0], return_inverse=True, return_counts=True)
    bunched = counts[inverse.reshape(-1)] >= BUNCH
    out = np.zeros(n, bool)
    out[pairs[bunched, 1]] = True
    return out
