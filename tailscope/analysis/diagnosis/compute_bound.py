"""compute_bound: the model's forward pass itself carries the tail.

Statistic. The share of the tail excess carried by the exclusive time of model_forward spans. The
levers follow from the numbers: forward time is fitted (Theil-Sen) against the batch size (the
`batch.size`-like attribute when present, else the number of requests sharing one forward span, i.e.
spans of the same name with identical start and duration on one instance): a large fixed part per call
means batching and launch overhead matter, a large per-item part means the arithmetic does
(quantization, a smaller/distilled model, faster hardware). Device and dtype come from the run's setup
attributes (`*device*`, `*dtype*`).

Time the forward spent inside a process-wide stall (gc_pause's episodes) is the pause's, except where
the process' runtime reports its collections, none falls in the stall and no CPU quota explains it:
every thread waiting for a slow device is silent as a paused process is (`unreported_stops_left_out`).

A forward reached through a call (a CLIENT span above it) delays the request only while the caller
waits: where the caller gives up at a deadline (and retries), the callee's forward runs on after the
CLIENT span has ended, and the whole of an attempt the caller abandoned bought nothing: the request
waited for the deadline, then for the retry. Forward time under an abandoned attempt (timeout_retry's
note) and after its caller ended is left out of the share (timeout_retry explains that tail).

A queue consumer's messages wait in the broker for a busy consumer: where nothing else claims that wait
(it does not follow the arrivals, no stall or warm-up), the forward's part of the consumers' busy time
takes that part of the wait's share too (_busy_wait_share).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, ms, tail_split, theil_sen

PATTERN = "compute_bound"


def _batch_sizes(ctx: Context, spans: np.ndarray) -> tuple[np.ndarray, str]:
    f = ctx.frame
    for code in np.unique(f.name[spans])[:3]:
        for key, (idx, values) in f.attributes(int(code)).items():
            if "batch" in key.lower() and "size" in key.lower():
                pos = np.full(len(f), -1)
                pos[spans] = np.arange(len(spans))
                out = np.full(len(spans), np.nan)
                p = pos[idx]
                ok = p >= 0
                out[p[ok]] = _numbers(np.array(values, dtype=object)[ok])
                if np.isfinite(out).mean() > 0.5:
                    return out, f"attribute {key}"
    key = np.stack([f.instance[spans], f.name[spans], f.start[spans], f.dur[spans]], axis=1)
    _, inv, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    return counts[inv.reshape(-1)].astype(np.float64), "spans sharing one forward interval"


def _split_by_name(ctx: Context, fwd: np.ndarray) -> tuple[str | None, str]:
    """The forward span name that carries the tail (the only one, or one carrying >= 60 % of the
    forward's tail excess, e.g. prefill rather than decode), and words for the split by name."""
    f = ctx.frame
    codes = np.unique(f.name[fwd])
    if len(codes) == 1:
        return f.names[int(codes[0])], ""
    by_name = _shares_by_name(ctx, fwd)
    shares = sorted(((float(by_name[c]), f.names[int(c)]) for c in codes), reverse=True)
    total = sum(max(v, 0.0) for v, _ in shares)
    words = ", ".join(f"{name} {v:.0%}" for v, name in shares[:3] if v >= 0.005)
    if total > 0 and shares[0][0] >= 0.6 * total:
        return shares[0][1], words
    return None, words


def _shares_by_name(ctx: Context, mask: np.ndarray) -> np.ndarray:
    """Per span name: the tail-excess share of the exclusive time of its spans in `mask` (one pass,
    what ctx.share_of(mask & (name == c)) gives for each c)."""
    f, sp = ctx.frame, ctx.split
    k = len(f.names)
    if sp.excess_ns <= 0 or not sp.tail.any() or not sp.body.any():
        return np.zeros(k)
    sel = mask & (f.request >= 0)
    req = np.maximum(f.request, 0)
    t, b = sel & sp.tail[req], sel & sp.body[req]
    excl = f.excl.astype(np.float64)
    tail = np.bincount(f.name[t], weights=excl[t], minlength=k) / sp.tail.sum()
    body = np.bincount(f.name[b], weights=excl[b], minlength=k) / sp.body.sum()
    return (tail - body) / sp.excess_ns


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _numbers(values: np.ndarray) -> np.ndarray:
    """Floats of attribute values (strings from the store): one C-level pass, per value only where
    some value is not a number."""
    try:
        return np.asarray(values, dtype=str).astype(np.float64)
    except ValueError:
        return np.array([_num(v) for v in values], np.float64)


def _setup(ctx: Context, word: str) -> str | None:
    for k, v in ctx.frame.setup.items():
        if word in k.lower():
            return v
    return None


def not_waited_for(f, spans: np.ndarray, abandoned: np.ndarray | None) -> np.ndarray:
    """Per span: the time the request did not wait for it: all of it under an `abandoned` attempt,
    else the time it ran on after its nearest CLIENT ancestor ended (0 without one)."""
    given_up = np.zeros(len(f), dtype=bool)
    if abandoned is not None:
        given_up[abandoned] = True
    cur = spans.copy()
    caller = np.full(len(spans), -1)
    dropped = given_up[spans].copy()
    for _ in range(32):
        open_ = cur >= 0
        if not open_.any():
            break
        dropped |= open_ & given_up[np.maximum(cur, 0)]
        hit = open_ & (caller < 0) & (cur != spans) & (f.kind[np.maximum(cur, 0)] == KIND_CLIENT)
        caller[hit] = cur[hit]
        cur[open_] = f.parent[cur[open_]]
    late = np.zeros(len(spans))
    has = caller >= 0
    late[has] = np.maximum(f.end[spans[has]] - np.maximum(f.end[caller[has]], f.start[spans[has]]), 0)
    return np.where(dropped, f.dur[spans].astype(np.float64), late)


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if len(f.requests) < 50:
        return []
    fwd = ctx.span_stage_mask("model_forward") & (f.request >= 0)
    if fwd.sum() < 20:
        return []
    fw = np.nonzero(fwd)[0]
    waited = f.excl.astype(np.float64)
    waited[fw] = np.maximum(waited[fw] - not_waited_for(f, fw, ctx.notes.get("abandoned_attempts")), 0)
    share = base = ctx.share_of(fwd, waited)
    # time the forward spent frozen in a process-wide pause is the gc_pause finding's, not compute's
    stalled = 0.0
    episodes = unreported_stops_left_out(ctx, ctx.notes.get("gc_episodes"))
    if episodes is not None:
        from tailscope.analysis.diagnosis.long_stalls import stall_overlap

        ov = np.zeros(len(f))
        ov[fw] = stall_overlap(f.instance[fw], f.start[fw], f.end[fw], *episodes)
        own = np.maximum(waited - ov, 0)
        stalled = share - ctx.share_of(fwd, own)
        share -= stalled
    # and the forward time of warm-up requests is the cold_start finding's (first calls are slow)
    warming = 0.0
    warm = ctx.notes.get("warm_up_requests")
    if warm is not None and warm.any():
        in_warm = fwd & warm[np.maximum(f.request, 0)] & (f.request >= 0)
        settled = float(np.median(f.excl[fwd & ~in_warm])) if (fwd & ~in_warm).any() else 0.0
        adjusted = np.where(in_warm, np.minimum(f.excl, settled), f.excl)
        warming = ctx.share_of(fwd) - ctx.share_of(fwd, adjusted)
        warming = max(0.0, min(warming, share))
        share -= warming
    # where a client (a gateway, a load generator) sees each request, its latency is what the user
    # waits for: time added outside the request (a paused gateway, the wire) can make that tail, and
    # the forward (less the parts above) is then a smaller part of it
    client = f.requests.client_latency
    if np.isfinite(client).mean() >= 0.9 and base > 0:
        seen = tail_split(np.nan_to_num(client, nan=np.nanmedian(client)))
        share = min(share, excess_share(ctx.per_request(fwd, waited), seen) * share / base)
    waiting = _busy_wait_share(ctx, fwd, waited)
    share = min(1.0, share + waiting)
    spans = np.nonzero(fwd)[0]
    d = f.dur[spans].astype(np.float64)
    p50, p99 = float(np.median(d)), float(np.quantile(d, 0.99))
    body_share = float(
        ctx.per_request(fwd)[ctx.split.body].mean() / max(f.requests.latency[ctx.split.body].mean(), 1)
    )
    sizes, size_source = _batch_sizes(ctx, spans)
    ok = np.isfinite(sizes)
    slope, intercept = theil_sen(sizes[ok], d[ok], ctx.rng) if ok.sum() > 10 else (0.0, p50)
    mean_b = float(np.nanmean(sizes)) if ok.any() else 1.0
    fixed_part = intercept / max(intercept + slope * mean_b, 1.0)
    device = _setup(ctx, "device")
    dtype = _setup(ctx, "dtype")
    levers = []
    if device and "cpu" in device.lower():
        levers.append(
            "the forward pass runs on CPU: a GPU (or a CPU inference runtime such as ONNX "
            "Runtime/OpenVINO) is the biggest lever"
        )
    if dtype and any(t in dtype.lower() for t in ("32", "float", "full")) and "16" not in dtype:
        levers.append(
            f"it runs in {dtype}: bf16/fp16 (autocast) on GPU or int8 dynamic quantization on CPU cuts "
            "the per-item cost"
        )
    if fixed_part > 0.6 and np.nanmax(sizes, initial=1) > 1:
        levers.append(
            f"{fixed_part:.0%} of a forward is fixed per call ({ms(intercept):.1f} ms): larger batches "
            "amortise it, and CUDA graphs/torch.compile cut launch overhead"
        )
    elif slope > 0:
        levers.append(
            f"each extra item costs {ms(slope):.2f} ms: quantization, a distilled/smaller model or "
            "faster hardware reduce it; cap the batch size where the p99 target needs it"
        )
    if p99 > 2.5 * p50:
        levers.append(
            f"the forward itself has a tail (p99 {ms(p99):.1f} ms vs p50 {ms(p50):.1f} ms): look for "
            "variable input lengths (bucket or pad to fixed shapes) and recompilation"
        )
    advice = (
        "The model's forward pass carries the tail, so compute is the lever here. "
        + _sentence("; ".join(levers or [PROFILE_ADVICE]))
    )
    confidence = logistic(share, 0.5, 0.1)
    # a model server busy nearly all the time, whose forward is most of a typical request: every request
    # pays for the forward, and the waits before it (in the model server, for the batch in progress)
    # are its cost too, not a burst's (a queueing finding that follows the arrivals claims those)
    busy, wait_share = _saturated(ctx, spans)
    heavy = 0.0
    if ctx.notes.get("queueing_confidence", 0.0) < 0.3:
        heavy = 0.9 * logistic(body_share, 0.4, 0.04) * logistic(busy, 0.8, 0.03)
        if heavy >= 0.5:
            share = min(1.0, share + max(wait_share, 0.0))
    confidence = max(confidence, heavy)
    top_name, by_name = _split_by_name(ctx, fwd)
    summary = (
        f"model_forward carries {share:.0%} of the tail excess and {body_share:.0%} of a typical "
        "request"
        + (f" ({by_name})" if by_name else "")
        + "; forward "
        f"p50 {ms(p50):.1f} ms, p99 {ms(p99):.1f} ms; vs batch size ({size_source}): "
        f"{ms(intercept):.2f} ms per call + "
        f"{ms(slope):.2f} ms per item"
        + (f"; the model is busy {busy:.0%} of the time and requests wait for it before their forward "
           f"(that wait carries {wait_share:.0%} of the tail excess)" if heavy >= 0.5 else "")
        + (f"; device {device}" if device else "")
        + (f", dtype {dtype}" if dtype else "")
        + "."
    )
    stats = {
        "tail_excess_share": round(share, 3),
        "tail_excess_share_in_gc_stalls": round(stalled, 3),
        "tail_excess_share_in_warm_up": round(warming, 3),
        "tail_excess_share_waiting_for_busy_consumers": round(waiting, 3),
        "model_busy": round(busy, 3),
        "tail_excess_share_waiting_for_the_model": round(wait_share, 3),
        "typical_share": round(body_share, 3),
        "forward_p50_ms": ms(p50),
        "forward_p99_ms": ms(p99),
        "per_call_ms": ms(intercept),
        "per_item_ms": ms(slope),
        "mean_batch_size": round(mean_b, 2),
        "batch_size_source": size_source,
        "device": device,
        "dtype": dtype,
    }
    pick = np.linspace(0, len(spans) - 1, min(len(spans), 3000)).astype(np.int64)
    chart = {
        "kind": "forward_vs_batch",
        "batch_size": np.nan_to_num(sizes[pick]).tolist(),
        "forward_ms": (d[pick] / 1e6).round(3).tolist(),
        "slope_ms": ms(slope),
        "intercept_ms": ms(intercept),
    }
    return [
        Finding(
            PATTERN,
            clamp01(confidence),
            "model_forward",
            top_name,
            {"summary": summary, "stats": stats, "chart": chart},
            advice,
        )
    ]


def _saturated(ctx: Context, fw: np.ndarray) -> tuple[float, float]:
    """For a forward served by a model server the request calls (its SERVER span is not the request's
    root): (how busy the busiest model instance is: the union of its forward intervals over the run's
    span, the share of the tail excess carried by the model server's time outside the forward: the
    wait for the model). (0, 0) where the forward runs in the request's own process."""
    f = ctx.frame
    fw = fw[(f.kind[fw] != KIND_SERVER) & (f.kind[fw] != KIND_CLIENT)]  # the execution, not the call
    if len(fw) == 0:
        return 0.0, 0.0
    cur = fw.copy()
    for _ in range(8):  # up to the SERVER span of the forward's own service
        up = f.parent[cur]
        move = (f.kind[cur] != KIND_SERVER) & (up >= 0)
        move[move] &= f.service[up[move]] == f.service[fw[move]]
        cur = np.where(move, up, cur)
    is_root = np.zeros(len(f), bool)
    is_root[f.requests.root] = True
    if float(((f.kind[cur] == KIND_SERVER) & ~is_root[cur]).mean()) < 0.5:
        return 0.0, 0.0  # the forward runs in the request's own process: no model server to wait for
    wait = np.maximum(f.dur[cur] - f.dur[fw], 0).astype(np.float64)
    wait_share = excess_share(np.bincount(f.request[fw], weights=wait, minlength=ctx.n_requests), ctx.split)
    # the union of the forward intervals per instance (forwards side by side count once)
    covered = 0.0
    for i in np.unique(f.instance[fw]).tolist():
        mine = fw[f.instance[fw] == i]
        order = np.argsort(f.start[mine], kind="stable")
        start, reach = f.start[mine][order], np.maximum.accumulate(f.end[mine][order])
        before = np.r_[start[0], reach[:-1]]
        covered = max(covered, float(np.maximum(reach - np.maximum(start, before), 0).sum()))
    horizon = max(float(f.end.max() - f.start.min()), 1.0)
    return float(covered / horizon), float(wait_share)


def unreported_stops_left_out(ctx: Context, episodes):
    """The stall episodes less those on an instance whose runtime reports its collections (GC events
    on it) with none reported in the episode: such a runtime's silence there is no collection, and a
    process whose every thread waits for a busy device (a co-tenant's time slices, lower clocks) is
    silent as a stopped one is: that time is the forward's. Events without a duration (a Zipkin
    annotation keeps a name and a time) still say a collection ran then. Where cpu_throttling reads
    the stalls as a CPU quota's (>= 0.3), they are stops all the same: kept."""
    f = ctx.frame
    if episodes is None or len(f.gc_time) == 0:
        return episodes
    quota = [fd for fd in ctx.notes.get("stall_findings") or [] if fd.pattern == "cpu_throttling"]
    if max((fd.confidence for fd in quota), default=0.0) >= 0.3:  # a CPU quota stops the process too
        return episodes
    ep_inst, ep_t0, ep_t1 = episodes
    reporting = np.zeros(len(f.instances), bool)
    reporting[f.gc_instance] = True
    key = f.gc_instance.astype(np.float64) * 1e18 + f.gc_time
    order = np.argsort(key)
    key = key[order]
    lo = np.searchsorted(key, ep_inst * 1e18 + ep_t0 - SLACK_NS, "left")
    hi = np.searchsorted(key, ep_inst * 1e18 + ep_t1, "right")
    keep = ~reporting[ep_inst] | (hi > lo)
    return ep_inst[keep], ep_t0[keep], ep_t1[keep]


SLACK_NS = 5_000_000  # a collection reported a little before the stall it makes is its start
BUSY = 0.3  # consumers busy at least this share of the time: messages wait for the work in progress


def _busy_wait_share(ctx: Context, fwd: np.ndarray, waited: np.ndarray) -> float:
    """A queue consumer's units (units.py) wait in the broker for a consumer to free up. Where the wait
    does not follow the arrivals (no queueing finding, no stalls, no warm-up claim it) and the
    consumers are busy (>= BUSY of the time), it is the work in progress that keeps messages waiting:
    its share of the tail excess goes to the forward pass in proportion to the forward's part of the
    consumers' processing time."""
    f = ctx.frame
    reqs = f.requests
    if reqs.queued is None or not reqs.queued.any():
        return 0.0
    claimed = (ctx.notes.get("queueing_confidence", 0.0) >= 0.3 or "gc_episodes" in ctx.notes
               or ctx.notes.get("warm_up_requests") is not None)
    if claimed:
        return 0.0
    processing = (reqs.latency - reqs.queued).astype(np.float64)
    horizon = float((reqs.start + reqs.latency).max() - reqs.start.min())
    consumers = max(int((np.bincount(reqs.instance) > 0).sum()), 1)
    busy = float(processing.sum()) / max(consumers * horizon, 1.0)
    if busy < BUSY:
        return 0.0
    part = float(ctx.per_request(fwd, waited).sum()) / max(float(processing.sum()), 1.0)
    return max(0.0, excess_share(reqs.queued.astype(np.float64), ctx.split)) * min(part, 1.0)


PROFILE_ADVICE = "profile the forward pass (torch.profiler) to find the dominant operators"


def _sentence(text: str) -> str:
    """The levers as one sentence: capitalised, with its full stop."""
    return text[:1].upper() + text[1:] + "."
