"""gc_pause without a stop: a concurrent collector slows the process's own work while it marks.

Mechanism. A concurrent GC (Go's; the JVM's G1 / ZGC concurrent cycles; .NET's background GC) stops
the world for well under a millisecond, then marks the heap while the program runs: its workers take
a share of the CPU, and goroutines / threads that allocate during the mark are made to help ("mark
assists", in proportion to what they allocate; past the pacer's budget they park until credit
comes). Nothing freezes: the process's allocating steps run slower, all of them, for as long as the
mark lasts, while its waits for other processes (its calls) are not slowed. The marks come per
process, paced by its own allocation, so they are not in step across a service's instances.

What timing shows. The process's own work spans (leaves that are neither calls nor queues nor the
model's batched forward) of *different* names and *different* requests are slow together when they
run at the same time on the same instance, and much less so with those running at the same time on
the service's other instances: a change that slows every instance at once (a release, bigger
inputs for everyone) is the same on all of them, and a cause that belongs to a request (its input's
size) is that request's own, not its neighbours'.

Statistic, per service: each work span's log stretch r (log duration minus its name's lower
quartile); for each, the mean r of the other-name work spans of other requests whose midpoint falls
inside it on the same instance (`same`) and on the service's other instances (`other`). ρ_same =
Spearman(r, same), ρ_other = Spearman(r, other), over the spans with both; strength from ρ_same and
the contrast ρ_same − ρ_other (what is the process's own). Weight: the stretch the neighbours
predict (within a window of at least the service's median work span: a duration d at a neighbour
factor x took d (1 − 1/x) longer) as a share of the tail excess, or, beside a heavier cause, what it
adds to the mean request over the median latency (0.5 at 5 %). Where the runtime reports its GC
cycles (span events), their rate around each span confirms (Spearman with r) or, uncorrelated, says
the slowdown is the CPU's, not the collector's. A slowdown that settles with its instances' age (the
stretch falls with the time since the instance's first span) is a warm-up (a replica that joined
cold), not marks: it discounts the finding. Where the process's steps have no spans of their own (a Go
service's work between its calls), the spans that hold the calls stand for them by their exclusive
time; its goroutines then read their replies late as well (waiting for a P), so the stop test is a CPU
quota's period phase instead of the calls', and the weight the slowed requests' excess over the median.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER, SPAN_KINDS
from tailscope.analysis.diagnosis.long_stalls import slow_flags
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stall_chart import stall_chart
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, spearman
from tailscope.vocabulary import ALL_STAGES

MIN_SPANS = 50  # per name
MIN_MEDIAN_NS = 200_000  # work shorter than this is timer noise
MIN_PAIRS = 100  # spans with neighbours on both sides
BASE_Q = 0.25  # a name's unhurried duration: its lower quartile
GC_REACH_NS = 1_000_000_000  # reported GC cycles counted within this of a span's midpoint
KINDS = (SPAN_KINDS.index("Internal"), SPAN_KINDS.index("Unspecified"))
UNCONFIRMED_CAP = 0.75  # without the runtime's reports CPU contention looks alike
CONFIRMED_CAP = 0.95


def work_spans(ctx: Context, warm: np.ndarray) -> np.ndarray:
    """The in-process work spans outside the instances' warm-up: leaves of kind internal (or
    unspecified, Zipkin's local spans) that are neither queue waits nor the model's forward, of names
    with >= MIN_SPANS spans and a median of >= MIN_MEDIAN_NS."""
    return _kept(ctx, warm, ctx.frame.leaf & np.isin(ctx.frame.kind, KINDS), ctx.frame.dur)


def own_time_spans(ctx: Context, warm: np.ndarray) -> np.ndarray:
    """Where the process's work has no spans of its own (its steps run between its calls, inside the
    request's SERVER span and the in-process spans that hold the calls): those spans, measured by their
    exclusive time (the process's own time in them), with work_spans' rules on names and medians."""
    f = ctx.frame
    return _kept(ctx, warm, ~f.leaf & np.isin(f.kind, (*KINDS, KIND_SERVER)) & (f.excl > 0), f.excl)


def _kept(ctx: Context, warm: np.ndarray, ok: np.ndarray, measure: np.ndarray) -> np.ndarray:
    f = ctx.frame
    skip = np.isin(ctx.stage, [ALL_STAGES.index("queue"), ALL_STAGES.index("model_forward")])
    ok = ok & (f.request >= 0) & ~skip
    ok[ok] &= ~warm[f.request[ok]]
    spans = np.nonzero(ok)[0]
    names = f.name[spans]
    counts = np.bincount(names, minlength=len(f.names))
    med = np.zeros(len(f.names))
    for code in np.nonzero(counts >= MIN_SPANS)[0].tolist():
        med[code] = np.median(measure[spans[names == code]])
    return spans[(counts[names] >= MIN_SPANS) & (med[names] >= MIN_MEDIAN_NS)]


def _period_aligned(f, spans: np.ndarray, slowed: np.ndarray) -> float:
    """How surely the slowed spans end on a CPU quota's period boundaries and do not start on them
    (quota_stalls' alignment: per instance Rayleigh z of the phases modulo 100 ms, summed). A quota
    stops the process until the next period; a collector's mark ends whenever its work is done."""
    from tailscope.analysis.diagnosis.cpu_throttling import _rayleigh

    z_end = z_start = 0.0
    sel = spans[slowed]
    for i in np.unique(f.instance[sel]).tolist():
        mine = sel[f.instance[sel] == i]
        if len(mine) >= 3:
            z_end += _rayleigh(f.end[mine].astype(np.float64))
            z_start += _rayleigh(f.start[mine].astype(np.float64))
    return logistic(z_end, 8, 1.5) * logistic(z_end - z_start, 6, 1.5)


def _group(*cols: np.ndarray) -> np.ndarray:
    """Dense codes of the rows' value combinations."""
    key = np.zeros(len(cols[0]), np.int64)
    for c in cols:
        key = key * (int(c.max()) + 1) + c
    return np.unique(key, return_inverse=True)[1]


def _sums(group, rank, windows, values) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per span and window (lo, hi) of midpoint ranks: (sum of `values`, count) over the spans of its
    group whose midpoint rank lies in [lo, hi)."""
    n = len(rank) + 1
    key = group.astype(np.int64) * n + rank
    order = np.argsort(key, kind="stable")
    ks = key[order]
    cs = np.r_[0.0, np.cumsum(values[order])]
    base = group.astype(np.int64) * n
    out = []
    for lo, hi in windows:
        a, b = np.searchsorted(ks, base + lo, "left"), np.searchsorted(ks, base + hi, "left")
        out.append((cs[b] - cs[a], (b - a).astype(np.float64)))
    return out


def _neighbours(ctx: Context, spans: np.ndarray, r: np.ndarray) -> dict[str, tuple[np.ndarray, ...]]:
    """Per span: the mean r and count of the other-name spans of other requests whose midpoint falls
    inside it, on its instance (`same`) and on its service's other instances (`other`), and on its
    instance within a window of at least its service's median work span (`wide`)."""
    f = ctx.frame
    names, inst, svc, req = f.name[spans], f.instance[spans], f.service[spans], f.request[spans]
    mid = f.start[spans] + f.dur[spans] // 2
    sorted_mid = np.sort(mid)
    rank = np.searchsorted(sorted_mid, mid, "left")
    reach = np.zeros(len(spans), np.int64)
    for code in np.unique(svc).tolist():
        reach[svc == code] = int(np.median(f.dur[spans[svc == code]]))
    half = np.maximum(f.dur[spans] // 2, reach)
    windows = tuple((np.searchsorted(sorted_mid, a, "left"), np.searchsorted(sorted_mid, b, "right"))
                    for a, b in ((f.start[spans], f.end[spans]), (mid - half, mid + half)))
    g = {label: _sums(_group(*cols), rank, windows, r) for label, cols in (
        ("svc", (svc,)), ("svc_name", (svc, names)), ("inst", (inst,)), ("inst_name", (inst, names)),
        ("req", (req, inst)), ("req_name", (req, inst, names)))}

    def other_names(label: str, k: int, j: int) -> np.ndarray:
        return g[label][k][j] - g[label + "_name"][k][j]

    out = {}
    for label, k in (("same", 0), ("wide", 1)):
        s, n = (other_names("inst", k, j) - other_names("req", k, j) for j in (0, 1))
        out[label] = (s / np.maximum(n, 1), n)
    s, n = (other_names("svc", 0, j) - other_names("inst", 0, j) for j in (0, 1))
    out["other"] = (s / np.maximum(n, 1), n)
    return out


def _gc_rate(ctx: Context, spans: np.ndarray) -> np.ndarray | None:
    """Per span: the runtime's reported GC cycles on its instance within GC_REACH_NS of its midpoint;
    None where the run reports none for these instances."""
    f = ctx.frame
    inst = f.instance[spans]
    mine = np.isin(f.gc_instance, np.unique(inst))
    if mine.sum() < 10:
        return None
    span = int(max(f.end.max(), f.gc_time.max())) + 2 * GC_REACH_NS + 1
    key = np.sort(f.gc_instance[mine] * span + f.gc_time[mine] + GC_REACH_NS)
    mid = f.start[spans] + f.dur[spans] // 2 + GC_REACH_NS
    lo = np.searchsorted(key, inst * span + mid - GC_REACH_NS, "left")
    hi = np.searchsorted(key, inst * span + mid + GC_REACH_NS, "right")
    return (hi - lo).astype(np.float64)


def _log_stretch(f, spans: np.ndarray, own: bool = False) -> np.ndarray:
    """Per span: log duration (with `own`, exclusive time) minus its name's lower quartile of it."""
    names = f.name[spans]
    r = np.log(np.maximum((f.excl if own else f.dur)[spans], 1).astype(np.float64))
    for code in np.unique(names).tolist():
        sel = names == code
        r[sel] -= np.quantile(r[sel], BASE_Q)
    return r


def _calls_stretched(ctx: Context, warm: np.ndarray, spans: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Per service code: Spearman of the calls' log stretch (CLIENT leaves) with the mean log stretch
    of the work spans of other requests whose midpoint falls inside them on the same instance. A
    process that stops (a pause, a CPU quota) reads its calls' replies late as it runs its work late;
    a collector's mark slows only what allocates."""
    f = ctx.frame
    out = np.zeros(len(f.services))
    ok = f.leaf & (f.request >= 0) & (f.kind == KIND_CLIENT)
    ok[ok] &= ~warm[f.request[ok]]
    calls = np.nonzero(ok)[0]
    calls = calls[np.bincount(f.name[calls], minlength=len(f.names))[f.name[calls]] >= MIN_SPANS]
    if len(calls) < MIN_PAIRS:
        return out
    every = np.r_[spans, calls]
    is_work = np.r_[np.ones(len(spans)), np.zeros(len(calls))]
    values = np.r_[r, np.zeros(len(calls))]
    mid = f.start[every] + f.dur[every] // 2
    sorted_mid = np.sort(mid)
    rank = np.searchsorted(sorted_mid, mid, "left")
    window = ((np.searchsorted(sorted_mid, f.start[every], "left"),
               np.searchsorted(sorted_mid, f.end[every], "right")),)
    inst, req = f.instance[every], f.request[every]
    (s_in, _), = _sums(_group(inst), rank, window, values)
    (n_in, _), = _sums(_group(inst), rank, window, is_work)
    (s_rq, _), = _sums(_group(req, inst), rank, window, values)
    (n_rq, _), = _sums(_group(req, inst), rank, window, is_work)
    k = len(spans)
    n = (n_in - n_rq)[k:]
    mean = (s_in - s_rq)[k:] / np.maximum(n, 1)
    rc = _log_stretch(f, calls)
    for code in np.unique(f.service[calls]).tolist():
        sel = (f.service[calls] == code) & (n > 0)
        if sel.sum() >= MIN_PAIRS:
            out[code] = spearman(rc[sel], mean[sel])
    return out


def find(ctx: Context, warm: np.ndarray) -> dict | None:
    """The service whose work is slowed together per instance (see the module docstring):
    {"confidence", "share", "service", "instances", "episodes" (instance, start, end of the slowed
    spans), "stats"}, or None where no service has two work names with neighbours. The work spans are
    its own steps' leaves; where they give nothing, the process's own time in the spans that hold its
    calls (own_time_spans)."""
    found = _find(ctx, warm, work_spans(ctx, warm), own=False)
    return found if found is not None else _find(ctx, warm, own_time_spans(ctx, warm), own=True)


def _find(ctx: Context, warm: np.ndarray, spans: np.ndarray, own: bool) -> dict | None:
    f = ctx.frame
    if len(spans) < 2 * MIN_PAIRS:
        return None
    names = f.name[spans]
    r = _log_stretch(f, spans, own)
    # an instance slower all the time (a straggler replica, a slower node) is not slowed at times: each
    # (instance, name)'s own level is left out of the test, kept for the attribution
    level = _group(f.instance[spans], names)
    centred = r - (np.bincount(level, weights=r) / np.bincount(level))[level]
    nb = _neighbours(ctx, spans, centred)
    wide = _neighbours(ctx, spans, r)["wide"]
    rho_calls = _calls_stretched(ctx, warm, spans, centred) if not own else np.zeros(len(f.services))
    (same, n_same), (other, n_other), (wide, n_wide) = nb["same"], nb["other"], wide
    gc = _gc_rate(ctx, spans)
    best = None
    for code in np.unique(f.service[spans]).tolist():
        mine = f.service[spans] == code
        both = mine & (n_same > 0) & (n_other > 0)
        if both.sum() < MIN_PAIRS or len(np.unique(names[both])) < 2:
            continue
        rho_same = spearman(centred[both], same[both])
        rho_other = spearman(centred[both], other[both])
        strength = logistic(rho_same, 0.5, 0.05) * logistic(rho_same - rho_other, 0.2, 0.05)
        has = mine & (n_wide > 0)
        factor = np.exp(np.maximum(wide[has], 0.0))
        if own:  # a runtime that waits for a CPU while it marks reads its replies late too: no stop
            # test from the calls; a quota's stop ends on its period's boundaries, a mark does not
            aligned = _period_aligned(f, spans[mine], centred[mine] >= np.log(1.5))
            strength *= 1 - aligned
        else:  # the calls read late alike: the process stops (gc_pause's stops, cpu_throttling)
            strength *= 1 - logistic(rho_calls[code] / max(rho_same, 1e-6), 0.5, 0.1)
        stretch = (f.excl if own else f.dur)[spans[has]] * (1 - 1 / factor)
        per_req = np.bincount(f.request[spans[has]], weights=stretch, minlength=ctx.n_requests)
        if own:  # its calls' replies were read as late: the requests' excess while their neighbours slowed
            lat = f.requests.latency.astype(np.float64)
            per_req = np.zeros(ctx.n_requests)
            hit = f.request[spans[has][factor >= 1.5]]
            per_req[hit] = np.maximum(lat[hit] - float(np.median(lat)), 0.0)
        share = excess_share(per_req, ctx.split)
        # beside a heavier cause the slowdown carries little of the p99 yet slows every request: what it
        # adds to the mean request over the median latency weighs as its share does
        added = float(per_req.mean() / max(np.median(ctx.frame.requests.latency), 1.0))
        rho_gc = None if gc is None or np.ptp(gc[mine]) == 0 else spearman(r[mine], gc[mine])
        if rho_gc is None:
            cap = UNCONFIRMED_CAP
        else:  # the runtime's cycles follow the slowdown, or do not (the CPU's, not the collector's)
            cap = 0.45 + (CONFIRMED_CAP - 0.45) * logistic(rho_gc, 0.25, 0.05)
        confidence = cap * strength * max(material_weight(share), logistic(added, 0.05, 0.015))
        if best is not None and confidence <= best["confidence"]:
            continue
        slowed = has.copy()
        slowed[has] = factor >= 1.5
        ep = spans[slowed]
        order = np.lexsort((f.start[ep], f.instance[ep]))
        ep = ep[order]
        per_inst = np.bincount(f.instance[spans[has]], weights=stretch, minlength=len(f.instances))
        # the own-time reading names the instances that carry it (at least half the most's stretch)
        least = 0.5 * per_inst.max() if own else 0.0
        top = [int(i) for i in np.argsort(-per_inst)[:4] if per_inst[i] > least]
        best = {
            "confidence": confidence,
            "share": share,
            "service": f.services[code],
            "instances": [f.instances[i] for i in top],
            "episodes": (f.instance[ep], f.start[ep], f.end[ep]),
            "own": own,
            "stats": {
                "work_names": [f.names[c] for c in np.unique(names[both])],
                "work_measure": "exclusive time of the spans holding the calls" if own else "leaf duration",
                "spans_with_neighbours": int(both.sum()),
                "rho_same_instance": round(rho_same, 3),
                "rho_other_instances": round(rho_other, 3),
                "rho_calls_same_instance": None if own else round(float(rho_calls[code]), 3),
                "quota_period_alignment": round(aligned, 3) if own else None,
                "median_slowdown_when_slowed": round(float(np.median(factor[factor >= 1.5])), 2)
                if (factor >= 1.5).any() else 1.0,
                "slowed_share_of_work_spans": round(float((factor >= 1.5).mean()), 3),
                "rho_reported_gc_rate": None if rho_gc is None else round(rho_gc, 3),
                "tail_excess_share": round(share, 3),
                "added_over_median_latency": round(added, 3),
            },
        }
    return best


ADVICE = (
    "A concurrent garbage collector is marking the heap while requests run: allocating code is made to "
    "help it (mark assists) and its workers take CPU, so the process's own steps run several times "
    "slower for as long as each mark lasts; there is no long stop-the-world pause to tune away, and "
    "more replicas only spread the same allocation. Allocate less per request on the hot path (reuse "
    "buffers, sync.Pool / pooled arrays, decode into preallocated images, avoid per-request pointerful "
    "caches: pointer-free values are not scanned), let cycles come less often (Go: raise GOGC or set "
    "GOMEMLIMIT to the container's memory; JVM: a larger heap / young generation), and watch the "
    "runtime's GC CPU fraction (Go: /cpu/classes/gc/mark/assist:cpu-seconds; GODEBUG=gctrace=1)."
)
UNCONFIRMED = (
    " The runtime reported no GC cycles here: a CPU shared with something else on the instance (a "
    "sidecar, a noisy neighbour, a background thread) slows the same steps alike; the runtime's GC CPU "
    "fraction tells them apart."
)
NOT_GC = (
    " Yet the runtime's reported GC cycles do not come more often while the work is slow: the CPU is "
    "more likely taken by something else on the instance (a sidecar, a neighbour, a background thread)."
)


def describe(found: dict) -> str:
    st = found["stats"]
    rho_gc = st["rho_reported_gc_rate"]
    text = (
        f"On {', '.join(found['instances'])} ({found['service']}), the process's own steps "
        f"({', '.join(repr(n) for n in st['work_names'][:4])}) of different requests were slow together "
        f"when they ran at the same time on the same instance (Spearman {st['rho_same_instance']:.2f}) and "
        f"much less so with those running at the same time on its other instances "
        f"({st['rho_other_instances']:.2f}): the process slows as a whole, at times of its own, while its "
        f"calls to other services do not. {st['slowed_share_of_work_spans']:.0%} of those steps ran "
        f"{st['median_slowdown_when_slowed']:.1f}x slower (median); the slowdown carries "
        f"{st['tail_excess_share']:.0%} of the tail excess. No long stop: the pattern of a concurrent "
        "collector's mark (assists slow allocating work)"
    )
    if rho_gc is None:
        return text + "." + UNCONFIRMED
    if rho_gc >= 0.25:
        return text + f"; the runtime's reported GC cycles come more often where the work is slow " \
                      f"(Spearman {rho_gc:.2f})."
    return text + "." + NOT_GC


def finding(ctx: Context, warm: np.ndarray) -> Finding | None:
    """gc_pause from the slowdown (see `find`), with the slowed steps drawn as the stretches."""
    found = find(ctx, warm)
    if found is None or found["confidence"] < 0.05:
        return None
    f = ctx.frame
    young = _young(ctx, warm, found["episodes"][0], found["own"])
    confidence = found["confidence"] * (1 - logistic(young, 0.3, 0.06))
    stats = {"services": [found["service"]], "instances": found["instances"], "mechanism": "concurrent mark",
             **found["stats"], "settles_with_age": round(young, 3)}
    spans = np.nonzero(f.leaf & (f.request >= 0))[0]
    slow = slow_flags(ctx, f.name[spans], f.dur[spans], len(f.names))
    chart = stall_chart(ctx, spans, slow, *found["episodes"]) if len(found["episodes"][0]) else None
    summary = describe(found) + (
        f" The slowdown settles as its instances age (Spearman of stretch with age {-young:.2f}): a new "
        "instance warming up (see cold_start), not a collector's marks, which recur." if young >= 0.2
        else "")
    evidence = {"summary": summary, "stats": stats, "chart": chart}
    return Finding("gc_pause", clamp01(confidence), None, None, evidence, ADVICE)


def _young(ctx: Context, warm: np.ndarray, ep_inst: np.ndarray, own: bool = False) -> float:
    """How strongly the process's own work settles with its instance's age: minus the Spearman of the
    work spans' log stretch with their time since the instance's first span (any kind: a callee's
    replica serves no request roots), per instance, weighted by its slowed spans. Marks recur while
    the process runs (no trend); a replica that joined cold is slow at first and settles."""
    f = ctx.frame
    spans = own_time_spans(ctx, warm) if own else work_spans(ctx, warm)
    if len(spans) == 0 or len(ep_inst) == 0:
        return 0.0
    r = _log_stretch(f, spans, own)
    first = np.full(len(f.instances), np.iinfo(np.int64).max)
    np.minimum.at(first, f.instance, f.start)
    age = f.start[spans] - first[f.instance[spans]]
    weight = np.bincount(ep_inst, minlength=len(f.instances)).astype(np.float64)
    total = trend = 0.0
    for i in np.nonzero(weight)[0].tolist():
        mine = f.instance[spans] == i
        if mine.sum() >= 20:
            trend += weight[i] * -spearman(r[mine], age[mine].astype(np.float64))
            total += weight[i]
    return max(0.0, trend / total) if total else 0.0
