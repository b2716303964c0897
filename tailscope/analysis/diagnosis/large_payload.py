"""large_payload: a stage whose time grows with the size of what it handles.

Mechanism. Serialising, compressing, copying or sending a payload costs time in proportion to its size
(bytes, items, rows); so does a query that returns more rows. When sizes vary from request to request,
the stage's duration follows them: a monotone relation between a size and the time, whatever the
stage's name. Sizes are recognised generically: numeric span attributes that vary over a range
(>= 10 distinct values, p90 >= 2x p10) on the span itself or on its request's root (a body size the
server records, a serialisation step below it), read for the few names that carry the tail. Keys that
measure time, a queue or a retry (latency, duration, wait, depth, attempt...) are not sizes; the
model's forward pass is compute_bound's (its batch size), a queue's wait is queueing's.

Statistic: Spearman rho between the size and the stage's duration (>= 0.5 to be a candidate), the
Theil-Sen slope (time per unit of size), and the size-driven part of each request's time
(slope x (size - median size)) as a share of the tail excess. Confidence = strength of rho x the
material weight of that share, at most 0.45 where the sizes did not change during the run (one
population, the same spread from start to end) and the largest stay within 8x the median
(size_change.py): work that always scales with what it handles, as an LLM's decode with its output
tokens under a max-token limit, is the service's normal cost, not a cause. A call
made only on a named cache miss's slow path grows with what the misses fetch: part of that finding
(runner.arbitrate). A call whose tail is its payload makes slow_dependency on it part of
this finding, and so does a call whose time per request follows a size another step's time follows
closely (notes["request_sizes"]: the rows a hydration query fetches are the candidates re-ranked). A
call whose time on the wire (client - server gap) follows a size is judged the same
way in payload_wire.py, and the network detector leaves that part of its gaps to this finding.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np

from tailscope.analysis.diagnosis.attributes import numeric_attributes
from tailscope.analysis.diagnosis.frame import SPAN_KINDS
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.payload_wire import wire_candidates
from tailscope.analysis.diagnosis.repeated_calls import repeated_calls
from tailscope.analysis.diagnosis.size_change import size_change, size_confidence
from tailscope.analysis.diagnosis.stats import (
    clamp01,
    excess_share,
    ms,
    spearman,
    theil_sen,
)
from tailscope.analysis.diagnosis.where import busiest, main_service
from tailscope.vocabulary import ALL_STAGES

PATTERN = "large_payload"
SKIP = {ALL_STAGES.index(s) for s in ("queue", "model_forward", "ingress")}
CANDIDATES = 4  # span names read (each a query): the ones carrying most of the tail
MIN_SHARE = 0.08  # a candidate carries at least this share of the tail excess
MIN_RHO = 0.5
SIZE_RHO = 0.8  # a size the work follows this closely is the request's size (notes["request_sizes"])
FORWARD_PART = 0.2  # the model's forward inside a span at least this part of its time: a model call
NOT_A_SIZE = re.compile(
    r"time|latency|duration|elapsed|(^|[._])ms$|_ms|(^|[._])ns$|_ns|seconds|wait|queue|depth|retry|"
    r"attempt|resend|concurren|inflight|in_flight|pending|backlog|status|(^|[._])code$|(^|[._])port$|"
    r"(^|[._])pid$|(^|[._ ])id$|[._]id$|timestamp|epoch|version|priority|ttl|(^|[._])load|cpu|"
    r"memory|(^|[._])gc"
)
# a batch's count (messaging.batch.message_count, batch_size): how many waited when the server took its
# next batch, set by the backlog, not by what a client sent; it changes when the queue does
GATHERED = re.compile(r"batch")
ROOT_PREFIX = "root:"
BYTES = re.compile(r"size|bytes|length|octets")
ADVICE = (
    "{where} takes longer the more it handles: its time follows {key} (Spearman {rho:.2f}, about "
    "{slope} per {unit}), and the requests with the largest payloads make the tail. Send less: compress "
    "the payload (gzip/zstd on the wire, a compact encoding such as protobuf instead of JSON), paginate "
    "or stream large results instead of building them whole, return only the fields the caller needs "
    "(smaller outputs), and cap the size a request may ask for. Faster hardware for the model will not "
    "change this stage."
)


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if ctx.n_requests < 100 or ctx.split.excess_ns <= 0 or f.attribute_source is None:
        return []
    inside = (f.request >= 0) & (f.parent >= 0)
    counts = np.bincount(f.name[inside], minlength=len(f.names))
    by_name = _duration_shares(ctx)
    # a queue-stage name whose spans are in-process leaves (INTERNAL, nothing below: decoding a message
    # that carries messaging.* attributes) is work on the payload, not a wait in a queue
    internal_leaf = inside & (f.kind == SPAN_KINDS.index("Internal")) & f.leaf
    leaves = np.bincount(f.name[internal_leaf], minlength=len(f.names))
    in_process_work = leaves >= 0.9 * np.maximum(counts, 1)
    in_process_work &= ctx.name_stage != ALL_STAGES.index("model_forward")
    shares = []
    for code in np.nonzero(counts >= 100)[0].tolist():
        if int(ctx.name_stage[code]) in SKIP and not in_process_work[code]:
            continue
        shares.append((float(by_name[code]), code))
    shares.sort(reverse=True)
    findings = []
    root_sizes = None
    for share, code in shares[:CANDIDATES]:
        if share < MIN_SHARE:
            break
        if root_sizes is None:
            root_sizes = _root_sizes(ctx)
        finding = _judge(ctx, code, root_sizes)
        if finding is not None:
            findings.append(finding)
    for wire in wire_candidates(ctx, root_sizes if root_sizes is not None else _root_sizes(ctx), _sizes):
        if wire["confidence"] >= 0.05:
            findings.append(_finding(
                ctx, wire["code"], wire["spans"], wire["key"], wire["strength"], wire["slope"],
                wire["intercept"], wire["v"], wire["share"], wire["confidence"], wire["gap"],
            ))
    if root_sizes is None:
        root_sizes = _root_sizes(ctx)
    named = {fd.span_name for fd in findings}
    repeated = repeated_calls(ctx, root_sizes, lambda key: not NOT_A_SIZE.search(key))  # N+1 queries
    findings += [fd for fd in repeated if fd.span_name not in named]
    findings.sort(key=lambda x: -x.confidence)
    ctx.notes["payload_names"] = {
        f.names.index(fd.span_name): fd.confidence for fd in findings if fd.span_name in f.names
    }
    ctx.notes["payload_names:share"] = {
        f.names.index(fd.span_name): fd.evidence["stats"]["tail_excess_share"]
        for fd in findings
        if fd.span_name in f.names
    }
    return findings[:2]


def _duration_shares(ctx: Context) -> np.ndarray:
    """Per span name: the share of the tail excess carried by its spans' durations (a span inside
    another of its name not counted twice), all names in one pass."""
    f, sp = ctx.frame, ctx.split
    k = len(f.names)
    if sp.excess_ns <= 0 or not sp.tail.any() or not sp.body.any():
        return np.zeros(k)
    has_p = f.parent >= 0
    top = f.request >= 0
    top[has_p] &= f.name[f.parent[has_p]] != f.name[has_p]
    req = np.maximum(f.request, 0)
    in_tail, in_body = top & sp.tail[req], top & sp.body[req]
    dur = f.dur.astype(np.float64)
    t = np.bincount(f.name[in_tail], weights=dur[in_tail], minlength=k) / sp.tail.sum()
    b = np.bincount(f.name[in_body], weights=dur[in_body], minlength=k) / sp.body.sum()
    return (t - b) / sp.excess_ns


def _root_sizes(ctx: Context) -> dict[str, np.ndarray]:
    """Numeric attributes of the request roots, per request (nan where a root lacks it)."""
    f = ctx.frame
    roots = f.requests.root
    out: dict[str, np.ndarray] = {}
    for code in np.unique(f.name[roots]).tolist():
        for key, (idx, values) in numeric_attributes(f, code, 50).items():
            per_req = out.setdefault(ROOT_PREFIX + key, np.full(ctx.n_requests, np.nan))
            req = f.request[idx]
            ok = req >= 0
            per_req[req[ok]] = values[ok]
    return out


def span_sizes(ctx: Context, code: int, spans: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """(key, value per span of `spans`, nan where absent) for the size-like numeric attributes of the
    spans of name `code`."""
    f = ctx.frame
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    for key, (idx, values) in numeric_attributes(f, code, max(50, len(spans) // 2)).items():
        if NOT_A_SIZE.search(key.lower()):
            continue
        v = np.full(len(spans), np.nan)
        ok = pos[idx] >= 0
        v[pos[idx][ok]] = values[ok]
        yield key, v


def _sizes(ctx: Context, code: int, spans: np.ndarray, root_sizes: dict[str, np.ndarray]):
    """(key, per-span size) for every size-like numeric attribute of the spans or of their roots."""
    f = ctx.frame
    yield from span_sizes(ctx, code, spans)
    for key, per_req in root_sizes.items():
        if NOT_A_SIZE.search(key.lower()):
            continue
        yield key, per_req[f.request[spans]]


def _callee_service(f, spans: np.ndarray) -> str | None:
    """The service answering the calls (their SERVER children's): the far end of the wire."""
    child = np.nonzero((f.parent >= 0) & np.isin(f.parent, spans) & (f.service != f.service[spans[0]]))[0]
    return main_service(f, child) if len(child) else None


def forward_inside(ctx: Context) -> np.ndarray:
    """Per span: the model's forward time inside it (its forward descendants' durations). An input
    that takes longer to run through the model is compute (compute_bound's per-item cost), not the
    handling of a payload: a span's payload time is its duration without it."""
    f = ctx.frame
    if "forward_inside" not in ctx.notes:
        out = np.zeros(len(f))
        fw = np.nonzero(ctx.span_stage_mask("model_forward"))[0]
        cur, d = f.parent[fw], f.dur[fw].astype(np.float64)
        for _ in range(32):
            alive = cur >= 0
            if not alive.any():
                break
            np.add.at(out, cur[alive], d[alive])
            cur = np.where(alive, f.parent[np.maximum(cur, 0)], -1)
        ctx.notes["forward_inside"] = out
    return ctx.notes["forward_inside"]


def _forward_names_below(ctx: Context, spans: np.ndarray) -> list[str]:
    """The names of the model's forward spans below `spans` (children, grandchildren, ...)."""
    f = ctx.frame
    mine = np.zeros(len(f), bool)
    mine[spans] = True
    fw = np.nonzero(ctx.span_stage_mask("model_forward"))[0]
    cur, below = f.parent[fw], np.zeros(len(fw), bool)
    for _ in range(32):
        alive = cur >= 0
        if not alive.any():
            break
        below |= alive & mine[np.maximum(cur, 0)]
        cur = np.where(alive, f.parent[np.maximum(cur, 0)], -1)
    return [f.names[int(c)] for c in np.unique(f.name[fw[below]])]


def _judge(ctx: Context, code: int, root_sizes: dict[str, np.ndarray]) -> Finding | None:
    f = ctx.frame
    spans = np.nonzero((f.name == code) & (f.request >= 0))[0]
    forward = forward_inside(ctx)[spans]
    full = f.dur[spans].astype(np.float64)
    d = np.maximum(full - forward, 0.0)
    # a span with the model's forward inside it (a call to the model server): where the sizes its
    # requests carry changed during the run (a client sending more items from some moment on) and its
    # whole time, the forward included, follows them, the requests grew and the forward with them:
    # the payload changed, not the model (which is compute_bound's when the sizes stay the same)
    with_forward = float(forward.sum()) > FORWARD_PART * float(full.sum())
    best = grown = None
    for key, v in _sizes(ctx, code, spans, root_sizes):
        ok = np.isfinite(v)
        if ok.mean() < 0.5 or len(np.unique(v[ok])) < 10:
            continue
        q10, q90 = np.quantile(v[ok], [0.1, 0.9])
        if q10 < 0 or q90 < 2 * max(q10, 1e-12):
            continue
        rho = spearman(v[ok], d[ok])
        if rho >= MIN_RHO and (best is None or rho > best[1]):
            best = (key, rho, v)
        if with_forward and not GATHERED.search(key.lower()):
            rho_full = spearman(v[ok], full[ok])
            if rho_full >= MIN_RHO and (grown is None or rho_full > grown[1]) and \
                    size_change(v[ok], f.start[spans][ok], ctx.rng)["changed"]:
                grown = (key, rho_full, v)
    if grown is not None:
        best, d = grown, full
    if best is None:
        return None
    key, rho, v = best
    ok = np.isfinite(v)
    slope, intercept = theil_sen(v[ok], d[ok], ctx.rng)
    if slope <= 0:
        return None
    driven = np.where(ok, slope * (v - float(np.median(v[ok]))), 0.0)
    per_request = np.bincount(f.request[spans], weights=driven, minlength=ctx.n_requests)
    share = clamp01(excess_share(per_request, ctx.split))
    # beside a rarer, heavier cause that owns the p99 the payload still slows many requests: what the
    # sizes above the small ones (p10) add to the mean request, over the median latency
    above = np.where(ok, slope * np.maximum(v - float(np.quantile(v[ok], 0.1)), 0.0), 0.0)
    added = float(above.sum()) / ctx.n_requests / max(float(np.median(ctx.frame.requests.latency)), 1.0)
    confidence = size_confidence(rho, share, added)
    if confidence < 0.05:
        return None
    finding = _finding(ctx, code, spans, key, rho, slope, intercept, v, share, confidence, added=added)
    if d is full:
        finding.evidence["stats"]["forward_inside"] = _forward_names_below(ctx, spans)
        finding.evidence["summary"] = finding.evidence["summary"].removesuffix(".") + (
            f"; the model's forward inside it grows with {key.removeprefix(ROOT_PREFIX)} too, and the sizes "
            "changed during the run: the requests grew, not the model's cost per item."
        )
    return finding


def _finding(ctx, code, spans, key, rho, slope, intercept, v, share, confidence, wire=None,
             added: float | None = None) -> Finding:
    """`wire`: the call's time outside its callee's span, where that is what grows (payload_wire)."""
    f = ctx.frame
    ok = np.isfinite(v)
    d = f.dur[spans].astype(np.float64) if wire is None else wire
    on_root = key.startswith(ROOT_PREFIX)
    key = key.removeprefix(ROOT_PREFIX)
    label = f"{key} (on the request's root span)" if on_root else key
    name = f.names[code]
    stage = ctx.stage_of_name(code)
    bytes_like = bool(BYTES.search(key.lower()))
    unit_value = 1e6 if bytes_like else (1000.0 if np.median(v[ok]) >= 1000 else 1.0)
    unit = {1e6: "MB" if bytes_like else "million", 1000.0: f"1,000 of {key}", 1.0: f"1 of {key}"}[unit_value]
    slope_text = f"{ms(slope * unit_value):.2f} ms"
    q10, q50, q90, q99 = np.quantile(v[ok], [0.1, 0.5, 0.9, 0.99])
    tail = ctx.split.tail[f.request[spans]]
    tail_size = float(np.median(v[ok & tail])) if (ok & tail).any() else float("nan")
    service = main_service(f, spans)
    # sizes the service always handles (one population, the same spread all run) make its slowest
    # requests in every run: the normal physics of the work, a possible cause and not a named one
    change = size_change(v[ok], f.start[spans][ok], ctx.rng)
    if not change["changed"]:
        confidence = min(confidence, 0.45)
    instances = busiest(f, f.instance[spans])
    what = "takes longer" if wire is None else "spends longer on the wire (outside the callee's span)"
    summary = (
        f"'{name}' (in {service}) {what} the larger {label} is: strength {rho:.2f}, about "
        f"{slope_text} per {unit} ({key} p10 {q10:,.0f}, p50 {q50:,.0f}, p90 {q90:,.0f}, p99 "
        f"{q99:,.0f}; the tail requests' median {tail_size:,.0f})"
        + (f" from {_callee_service(f, spans)}" if wire is not None and _callee_service(f, spans) else "")
        + "; the size-driven part of its time "
        f"carries {share:.0%} of the tail excess"
        + (f" and adds {added:.0%} of the median latency to the mean request" if added else "")
        + f" (instances: {', '.join(instances)})"
        + ("" if change["changed"] else (
            f"; its sizes are the same all run (drift index {change['drift']:.1f}, ~1 when steady), one "
            f"population, the largest {change['p99_over_median']:.1f}x the median (p99): how this work "
            "always scales, the service's normal cost, not a change"))
        + "."
    )
    stats = {
        "size_attribute": key,
        "size_on": "request root" if on_root else "span",
        "time": "duration" if wire is None else "client - server gap (transfer)",
        "spearman": round(rho, 3),
        "ms_per_unit": slope / 1e6,
        "ms_per_" + ("mb" if bytes_like else "1000" if unit_value == 1000 else "unit"): round(
            ms(slope * unit_value), 4),
        "intercept_ms": ms(intercept),
        "size_p50": float(q50),
        "size_p99": float(q99),
        "tail_size_median": tail_size,
        "tail_excess_share": round(share, 3),
        "added_share_of_median_latency": None if added is None else round(added, 4),
        "service": service,
        "callee_service": _callee_service(f, spans) if wire is not None else None,
        "size_drift_index": change["drift"],
        "second_size_population": change["second_population"],
        "size_p99_over_median": change["p99_over_median"],
        "sizes_changed": change["changed"],
        "instances": instances,
    }
    if rho >= SIZE_RHO:  # the request's size, for slow_dependency: a call that grows with it is not slow
        per_request = np.full(ctx.n_requests, np.nan)
        per_request[f.request[spans][ok]] = v[ok]
        ctx.notes.setdefault("request_sizes", {})[key] = (per_request, confidence)
    pick = np.nonzero(ok)[0]
    if len(pick) > 2000:
        pick = np.sort(ctx.rng.choice(pick, 2000, replace=False))
    top = float(np.quantile(v[ok], 0.999))
    chart = {
        "kind": "size_vs_time",
        "size": v[pick].round(3).tolist(),
        "duration_ms": (d[pick] / 1e6).round(3).tolist(),
        "tail": tail[pick].tolist(),
        "fit_ms": [ms(intercept), ms(intercept + slope * top)],
        "fit_size": [0.0, top],
        "size_attribute": key,
    }
    where = f"'{name}'" + (f" ({stage})" if stage else "")
    advice = ADVICE.format(where=where, key=label, rho=rho, slope=slope_text, unit=unit)
    evidence = {"summary": summary, "stats": stats, "chart": chart}
    return Finding(PATTERN, clamp01(confidence), stage, name, evidence, advice)
