"""large_payload on the wire: a call's time outside its callee's span grows with the size of what it
carries.

Mechanism. Sending a request or a response costs time in proportion to its bytes (bandwidth, TCP
windows, the proxy in between); that time is the caller's and not the callee's: it sits in the gap
between a CLIENT span and its SERVER child (client duration - server duration), mostly after the
server span ends for a response. Latency on the wire (a long route, retransmits, a congested link)
does not follow the payload; transfer does. So, for each CLIENT name with a traced SERVER child in
another service, the gap is compared with the size-like numeric attributes of the client span, of the
server span, or of the request's root (the same screening as large_payload's).

Statistic. Sizes often come in modes (a compact answer for most calls, a large one for some): within
a mode the size varies by a few bytes and the gap by noise, which dilutes a rank correlation over all
calls. So the strength is measured on pairs of calls whose sizes differ at least 2x (a difference that
can move a transfer's time): the concordance (share of such pairs whose larger payload has the larger
gap, 2c - 1), or Spearman rho where it is higher. The slope is the median of those pairs' gap
differences per size difference; the size-driven part of each call's gap (slope x (size - median size))
as a share of the tail excess weighs the finding. The network detector leaves that part of its large
gaps to this finding (`ctx.notes["wire_driven"]`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, spearman

MIN_PAIRS = 100  # calls of one CLIENT name with a traced SERVER child
MATERIAL_RATIO = 2.0  # sizes at least this far apart can move a transfer's time
SAMPLE_PAIRS = 20000

Sizes = Callable[[Context, int, np.ndarray, dict], Iterator[tuple[str, np.ndarray]]]


def material_pairs(size: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random pairs (i, j) of calls with size[j] >= 2 x size[i]."""
    n = len(size)
    i = rng.integers(0, n, SAMPLE_PAIRS)
    j = rng.integers(0, n, SAMPLE_PAIRS)
    lo, hi = np.minimum(size[i], size[j]), np.maximum(size[i], size[j])
    swap = size[i] > size[j]
    i, j = np.where(swap, j, i), np.where(swap, i, j)
    keep = hi >= MATERIAL_RATIO * np.maximum(lo, 1e-12)
    return i[keep], j[keep]


def size_relation(size: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """(strength, slope, intercept) of y on size: the larger of Spearman rho and the concordance over
    materially different sizes (2c - 1), and the median slope over those pairs."""
    i, j = material_pairs(size, rng)
    rho = spearman(size, y)
    if len(i) < 50:
        return rho, 0.0, float(np.median(y))
    concord = 2.0 * float((y[j] > y[i]).mean()) - 1.0
    slope = float(np.median((y[j] - y[i]) / (size[j] - size[i])))
    return max(rho, concord), slope, float(np.median(y - slope * size))


def call_pairs(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(client span, server span) of every call to a traced service inside a request."""
    f = ctx.frame
    srv = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0))[0]
    cli = f.parent[srv]
    ok = (f.kind[cli] == KIND_CLIENT) & (f.service[cli] != f.service[srv]) & (f.request[cli] >= 0)
    return cli[ok], srv[ok]


def wire_candidates(ctx: Context, root_sizes: dict, sizes: Sizes) -> list[dict]:
    """Per CLIENT name whose gap follows a size: the key, strength, slope and the size-driven gap per
    call, with its share of the tail excess. Also leaves `ctx.notes["wire_driven"]` (per span)."""
    f = ctx.frame
    cli, srv = call_pairs(ctx)
    out = []
    driven_all = np.zeros(len(f))
    for code in np.unique(f.name[cli]).tolist():
        sel = f.name[cli] == code
        if sel.sum() < MIN_PAIRS:
            continue
        c, s = cli[sel], srv[sel]
        gap = np.maximum(f.dur[c] - f.dur[s], 0).astype(np.float64)
        best = None
        server_code = int(np.bincount(f.name[s]).argmax())
        keyed = [(key, v) for key, v in sizes(ctx, code, c, root_sizes)]
        on_server = f.name[s] == server_code
        for key, v in sizes(ctx, server_code, s[on_server], {}):
            full = np.full(len(s), np.nan)
            full[on_server] = v
            keyed.append((key, full))
        for key, v in keyed:
            ok = np.isfinite(v)
            if ok.mean() < 0.5 or len(np.unique(v[ok])) < 10:
                continue
            q10, q90 = np.quantile(v[ok], [0.1, 0.9])
            if q10 < 0 or q90 < 2 * max(q10, 1e-12):
                continue
            strength, slope, intercept = size_relation(v[ok], gap[ok], ctx.rng)
            if slope > 0 and (best is None or strength > best["strength"]):
                best = {"key": key, "strength": strength, "slope": slope, "intercept": intercept, "v": v}
        if best is None or best["strength"] < 0.5:
            continue
        v = best["v"]
        ok = np.isfinite(v)
        driven = np.where(ok, best["slope"] * (v - float(np.median(v[ok]))), 0.0)
        per_request = np.bincount(f.request[c], weights=driven, minlength=ctx.n_requests)
        share = clamp01(excess_share(per_request, ctx.split))
        confidence = logistic(best["strength"], 0.65, 0.07) * material_weight(share)
        driven_all[c] = np.clip(driven, 0.0, gap)
        out.append({**best, "code": code, "spans": c, "gap": gap, "share": share, "confidence": confidence})
    ctx.notes["wire_driven"] = driven_all
    return out
