"""gc_pause where a process runs one piece of work at a time (a queue consumer's worker, a
single-threaded model server): one stretched span per pause, the same stretch whatever the span.

Mechanism. A stop-the-world pause stops a process for as long as it lasts. With several requests in
flight it stretches spans of several names at once (gc_pause's cross-name test); with one piece of
work in flight it stretches whichever span is running, and nothing lines up across names. What
still shows is that the stretch does not depend on the work: a pause adds its own length, so the
in-process spans of *different* names (a 0.3 ms decode, a 4 ms scoring step) that a pause hits are
stretched by the same few tens of ms, far beyond their own spread. A cause that belongs to one kind
of work (a cache miss, a lock, a slow input) stretches one name, by its own amount; a slow call to
another service stretches the call, not the process's own spans; the network stretches calls only.

Statistic, per service: the stretched work spans (quota_stalls.stretched_spans: leaves that are not
calls or queues, above their name's p90 and 1.5 x its median, >= 5 ms over it, not what their
input's size predicts), outside the instances' warm-up, whose stretch is also a mode of its own
(>= SPREAD x the name's interquartile range). Names with >= MIN_PER_NAME such spans whose median
stretch lies within a factor ALIKE of the service's median stretch are *alike*; calls whose caller's
side (the CLIENT span minus its callee's SERVER span) is stretched by the same amount count as
support. Two alike names at least are needed, one of them work; strength = logistic(alike work
names + 2 x alike call names, 2.5, 0.35): a reply read late by as much as a step is stretched is
what only a stopped process does to both (a step where pauses mostly land, beside the calls).
Weight: the share of the tail excess the stretches (and what waited behind them on the same
instance: a consumer's backlog) carry. The stretches are the stall episodes.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.long_stalls import request_stall_overlap
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.quota_stalls import stretched_spans
from tailscope.analysis.diagnosis.stats import excess_share, logistic, material_weight

SPREAD = 6.0  # a stretch of its own: this many interquartile ranges of the name over its median
ALIKE = 2.5  # names whose median stretch is within this factor of the service's
MIN_PER_NAME = 3
MIN_STRETCH_NS = 5_000_000


def _iqr(f, names: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per name code: the interquartile range of `values` (0 where a name has none)."""
    out = np.zeros(len(f.names))
    for code in np.unique(names).tolist():
        q25, q75 = np.quantile(values[names == code], [0.25, 0.75])
        out[code] = q75 - q25
    return out


def _caller_side(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(CLIENT span, ns its caller's side is stretched over the name's median) for the calls whose
    callee's SERVER span is traced: the call's time not spent in the callee."""
    f = ctx.frame
    server = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0))[0]
    server = server[(f.kind[f.parent[server]] == KIND_CLIENT) & (f.request[server] >= 0)]
    if len(server) < 100:
        return np.zeros(0, np.int64), np.zeros(0)
    call = f.parent[server]
    own = (f.dur[call] - f.dur[server]).astype(np.float64)
    med = np.zeros(len(f.names))
    for code in np.unique(f.name[call]).tolist():
        med[code] = np.median(own[f.name[call] == code])
    excess = own - med[f.name[call]]
    spread = _iqr(f, f.name[call], own)
    keep = (excess >= MIN_STRETCH_NS) & (excess >= SPREAD * spread[f.name[call]])
    return call[keep], excess[keep]


def find(ctx: Context, warm: np.ndarray) -> dict | None:
    """The alike stretches (see the module docstring): {"strength", "weight", "episodes" (instance,
    start, end), "stats"}, or None where fewer than two work names are alike on any service."""
    f = ctx.frame
    spans, excess = stretched_spans(ctx)
    if len(spans) == 0:
        return None
    work = (f.request >= 0) & (f.kind != KIND_CLIENT)
    everyone = np.nonzero(work & f.leaf)[0]
    spread = _iqr(f, f.name[everyone], f.dur[everyone].astype(np.float64))
    keep = ~warm[f.request[spans]] & (excess >= SPREAD * spread[f.name[spans]])
    spans, excess = spans[keep], excess[keep]
    calls, call_excess = _caller_side(ctx)
    best = None
    for svc in np.unique(f.service[spans]).tolist():
        mine = f.service[spans] == svc
        s, e = spans[mine], excess[mine]
        pooled = float(np.median(e))
        alike = []
        for code in np.unique(f.name[s]).tolist():
            sel = f.name[s] == code
            if sel.sum() >= MIN_PER_NAME and pooled / ALIKE <= np.median(e[sel]) <= pooled * ALIKE:
                alike.append(code)
        if not alike:
            continue
        c_mine = f.service[calls] == svc
        c, ce = calls[c_mine], call_excess[c_mine]
        support = [
            code for code in np.unique(f.name[c]).tolist()
            if (f.name[c] == code).sum() >= MIN_PER_NAME
            and pooled / ALIKE <= np.median(ce[f.name[c] == code]) <= pooled * ALIKE
        ]
        if len(alike) + len(support) < 2:
            continue
        on = np.isin(f.name[s], alike)
        c_on = np.isin(f.name[c], support)
        ep_inst = np.r_[f.instance[s[on]], f.instance[c[c_on]]]
        ep_t1 = np.r_[f.end[s[on]], f.end[c[c_on]]].astype(np.int64)
        ep_t0 = (ep_t1 - np.r_[e[on], ce[c_on]]).astype(np.int64)
        order = np.lexsort((ep_t0, ep_inst))
        episodes = (ep_inst[order], ep_t0[order], ep_t1[order])
        share = excess_share(request_stall_overlap(ctx, *episodes), ctx.split)
        found = {
            # a reply read late by as much as a step is stretched counts twice: a slow step or a
            # slow callee stretches one of them, only a stopped process both, alike
            "strength": logistic(len(alike) + 2 * len(support), 2.5, 0.35),
            "weight": material_weight(share),
            "episodes": episodes,
            "stats": {
                "stretched_work_names": [f.names[c] for c in alike],
                "stretched_call_names": [f.names[c] for c in support],
                "stretched_spans": int(on.sum() + c_on.sum()),
                "median_stretch_ms": round(pooled / 1e6, 3),
                "tail_excess_share": round(share, 3),
            },
        }
        if best is None or found["strength"] * found["weight"] > best["strength"] * best["weight"]:
            best = found
    return best


def describe(where: list[str], stats: dict) -> str:
    """The stretches in a sentence: where one piece of work at a time runs, the process stopped."""
    names = stats["stretched_work_names"] + stats["stretched_call_names"]
    if not names:
        return f"A process of {', '.join(where)} stopped now and then."
    return (
        f"One piece of work at a time runs on {', '.join(where)}, and {stats['stretched_spans']} spans of "
        f"{len(names)} unrelated kinds ({', '.join(repr(n) for n in names[:5])}) are stretched by the same "
        f"amount (median {stats['median_stretch_ms']} ms over their usual time, far beyond their own "
        "spread): the process stopped, whatever it was doing."
    )
