"""large_payload from calls repeated per item (N+1 queries): a request makes one call of a name for
each item it handles, so its time in those calls grows with its item count.

Mechanism. Code that loads a list and then asks the database (or a service, or a cache) once per item
(`includes` dropped from an ORM query, a lookup inside a loop) makes N calls where one would do. Each
call is fast; the request's time in them is N round trips and grows with N: payload-driven work, the
request's size sets its cost. Seen in a trace as the number of CLIENT spans of one name per request
following a size-like attribute of the request (an item count on its root), about one call per item,
made one after another (their summed durations no more than the time from the first one's start to
the last one's end: none overlaps another), and the request's summed time
in them following the same size.

What else makes the number of calls vary: retries (calls made again after a failure), a cache's misses
(a store call per missing key: only on some requests, following the misses, not the item count), a
parallel fan-out (the calls overlap, so their number barely moves the time). None of these makes the
count follow the item count at about one call per item, one call after another.

Statistic: Spearman rho of the per-request count with the size (>= 0.8) and its Theil-Sen slope in
calls per unit of size (>= 0.5: a call per item, not bytes), the calls' summed duration over the time
they span (<= 1.1: sequential); then Spearman rho and slope of the summed time with the size, and the
size-driven part of it (slope x (size - median)) as a share of the tail excess. Confidence: strength
of that rho x the material weight of the share (or of what it adds to the mean request). Not capped
where the sizes did not change: a call per item is a defect a batched query removes, whatever the
sizes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tailscope.analysis.diagnosis.attributes import numeric_attributes
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.size_change import size_confidence
from tailscope.analysis.diagnosis.stats import (
    clamp01,
    excess_share,
    ms,
    spearman,
    theil_sen,
)
from tailscope.analysis.diagnosis.where import busiest, main_service

PATTERN = "large_payload"
MIN_CALLS = 4  # median calls per request (of those making any) for a call repeated per item
MIN_COUNT_RHO = 0.8
MIN_PER_UNIT = 0.5  # calls per unit of size: about one call per item
HANDLER_PREFIX = "handler:"
MAX_OVERLAP = 1.1  # summed durations over the time the calls span: ~1 or less when none overlaps
ADVICE = (
    "{where} is called once per item: {calls:.1f} calls per unit of {key} (Spearman {rho:.2f}), about "
    "{slope} per unit, one round trip after another (N+1). Load the items' data in one call: eager-load "
    "the association (`includes`/`preload`, a JOIN or `WHERE id IN (...)`), batch the lookups "
    "(MGET, a batch endpoint, a DataLoader), or cache the per-item result. Faster hardware for the "
    "database does not remove the round trips."
)


def repeated_calls(
    ctx: Context, root_sizes: dict[str, np.ndarray], is_size: Callable[[str], bool]
) -> list[Finding]:
    """large_payload findings for CLIENT names called about once per item of a request's size (a
    size-like attribute of the request's root or of the SERVER span the calls are made under)."""
    f = ctx.frame
    n = ctx.n_requests
    if n < 100:
        return []
    cli = np.nonzero((f.kind == KIND_CLIENT) & (f.request >= 0))[0]
    if len(cli) == 0:
        return []
    sizes = {k: v for k, v in {**root_sizes, **_handler_sizes(ctx, cli)}.items() if is_size(k.lower())}
    if not sizes:
        return []
    k = len(f.names)
    per_name = np.bincount(f.name[cli], minlength=k)
    found = []
    for code in np.nonzero(per_name >= MIN_CALLS * 50)[0].tolist():
        spans = cli[f.name[cli] == code]
        count = np.bincount(f.request[spans], minlength=n).astype(np.float64)
        making = count > 0
        if making.sum() < 50 or np.median(count[making]) < MIN_CALLS:
            continue
        finding = _judge(ctx, code, spans, count, making, sizes)
        if finding is not None:
            found.append(finding)
    return found


def _handler_sizes(ctx: Context, calls: np.ndarray) -> dict[str, np.ndarray]:
    """Numeric attributes, per request, of the SERVER spans the calls are made under (their nearest
    SERVER ancestor: the handler of the service making them, below a proxy's root)."""
    f = ctx.frame
    up = f.parent[calls]
    for _ in range(16):
        ok = up >= 0
        climb = ok & (f.kind[np.maximum(up, 0)] != KIND_SERVER)
        if not climb.any():
            break
        up = np.where(climb, f.parent[np.maximum(up, 0)], up)
    handlers = np.unique(up[up >= 0])
    handlers = handlers[~np.isin(handlers, f.requests.root)]  # the roots' sizes are read already
    out: dict[str, np.ndarray] = {}
    for code in np.unique(f.name[handlers]).tolist():
        for key, (idx, values) in numeric_attributes(f, code, 50).items():
            per_req = out.setdefault(HANDLER_PREFIX + key, np.full(ctx.n_requests, np.nan))
            req = f.request[idx]
            keep = (req >= 0) & np.isin(idx, handlers)
            per_req[req[keep]] = values[keep]
    return out


def _judge(
    ctx: Context,
    code: int,
    spans: np.ndarray,
    count: np.ndarray,
    making: np.ndarray,
    root_sizes: dict[str, np.ndarray],
) -> Finding | None:
    f = ctx.frame
    n = ctx.n_requests
    req = f.request[spans]
    total = np.bincount(req, weights=f.dur[spans].astype(np.float64), minlength=n)
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.zeros(n, np.int64)
    np.minimum.at(first, req, f.start[spans])
    np.maximum.at(last, req, f.start[spans] + f.dur[spans])
    spanned = np.where(making, last - first, 0).astype(np.float64)
    sequential = float(total[making].sum()) / max(float(spanned[making].sum()), 1.0)
    if sequential > MAX_OVERLAP:  # calls in parallel: their number barely moves the time
        return None
    best = None
    for key, per_req in root_sizes.items():
        ok = making & np.isfinite(per_req)
        if ok.sum() < 50 or len(np.unique(per_req[ok])) < 5:
            continue
        rho_count = spearman(per_req[ok], count[ok])
        if rho_count < MIN_COUNT_RHO:
            continue
        per_unit, _ = theil_sen(per_req[ok], count[ok], ctx.rng)
        if per_unit < MIN_PER_UNIT:
            continue
        rho = spearman(per_req[ok], total[ok])
        if best is None or rho > best[1]:
            best = (key, rho, rho_count, per_unit, ok, per_req)
    if best is None or best[1] < 0.5:
        return None
    key, rho, rho_count, per_unit, ok, size = best
    slope, _ = theil_sen(size[ok], total[ok], ctx.rng)
    if slope <= 0:
        return None
    median = float(np.median(size[ok]))
    driven = np.where(ok, slope * (np.nan_to_num(size) - median), 0.0)
    share = clamp01(excess_share(driven, ctx.split))
    above = np.where(
        ok, slope * np.maximum(np.nan_to_num(size) - float(np.quantile(size[ok], 0.1)), 0.0), 0.0
    )
    added = float(above.sum()) / n / max(float(np.median(f.requests.latency)), 1.0)
    confidence = size_confidence(rho, share, added)
    if confidence < 0.05:
        return None
    return _finding(
        ctx,
        code,
        spans,
        key,
        rho,
        rho_count,
        per_unit,
        slope,
        count,
        ok,
        size,
        share,
        added,
        sequential,
        confidence,
    )


def _finding(
    ctx,
    code,
    spans,
    key,
    rho,
    rho_count,
    per_unit,
    slope,
    count,
    ok,
    size,
    share,
    added,
    sequential,
    confidence,
) -> Finding:
    f = ctx.frame
    name = f.names[code]
    stage = ctx.stage_of_name(code)
    label = key.removeprefix("root:").removeprefix(HANDLER_PREFIX)
    on = "the request's root" if key.startswith("root:") else "the span that handles the request"
    service = main_service(f, spans)
    instances = busiest(f, f.instance[spans])
    c10, c50, c90 = np.quantile(count[ok], [0.1, 0.5, 0.9])
    s50, s90 = np.quantile(size[ok], [0.5, 0.9])
    one_call = float(np.median(f.dur[spans])) / 1e6
    slope_text = f"{ms(slope):.2f} ms"
    summary = (
        f"'{name}' (in {service}) is called once per item (N+1): the calls per request follow {label} "
        f"on {on} (Spearman {rho_count:.2f}, {per_unit:.2f} calls per unit; p10 {c10:.0f}, "
        f"p50 {c50:.0f}, p90 {c90:.0f} calls for {label} p50 {s50:,.0f}, p90 {s90:,.0f}), one after "
        f"another (their summed time {sequential:.0%} of the time they span), {one_call:.2f} ms each; "
        f"the request's time in them grows {slope_text} per unit of {label} (strength {rho:.2f}), its "
        f"size-driven part carries {share:.0%} of the tail excess and adds {added:.0%} of the median "
        f"latency to the mean request (instances: {', '.join(instances)})."
    )
    stats = {
        "size_attribute": label,
        "size_on": "request root" if key.startswith("root:") else "handler span",
        "time": "calls per request x their duration (N+1)",
        "repeated_calls": True,
        "spearman": round(rho, 3),
        "calls_spearman": round(rho_count, 3),
        "calls_per_unit": round(per_unit, 3),
        "calls_p50": float(c50),
        "calls_p90": float(c90),
        "ms_per_unit": ms(slope),
        "call_p50_ms": round(one_call, 3),
        "summed_over_spanned": round(sequential, 3),
        "tail_excess_share": round(share, 3),
        "added_share_of_median_latency": round(added, 4),
        "service": service,
        "instances": instances,
    }
    where = f"'{name}'" + (f" ({stage})" if stage else "")
    advice = ADVICE.format(where=where, calls=per_unit, key=label, rho=rho_count, slope=slope_text)
    return Finding(PATTERN, clamp01(confidence), stage, name, {"summary": summary, "stats": stats}, advice)
