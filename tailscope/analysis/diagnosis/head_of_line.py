"""lock_contention on a multiplexed connection: calls that wait behind an earlier call's reply.

Mechanism. Some clients send every command of a process over one connection and read the replies in
the order the commands were written (StackExchange.Redis' multiplexer, an HTTP/1.1 pipeline, one
AMQP channel): a reply is complete only after every earlier reply on the connection, so one long
reply (a multi-megabyte value) holds up every command queued behind it in that process. The
connection is the shared resource the calls queue for. Signature, for a CLIENT span name whose
callee is not traced: its long calls (over LONG x its median and 1 ms) end just after (within
`window`: the call's usual round trip, at least 1 ms) another call to the same peer from the same
process that was sent before it and was still running when it was sent: the ends bunch behind a
leader. Three other mechanisms bunch ends too, and are tested against:
- chance: the calls of a busy process end close together anyway: the same test with the long
  calls' ends moved a few windows earlier gives the share a bunch reaches by chance;
- a peer that stalls (a slow node moment, a blocking command) delays the calls of every process
  in flight at once: the same test against the other processes' calls gives that share, and only
  what the calls' own process adds beyond it is head-of-line;
- a caller process that stops (a GC pause, a CPU quota) reads the replies that came meanwhile
  at once: long calls that overlap a known stall of their process (gc_pause's episodes, the
  runtime's reported pauses) are left out;
- a callee that batches (a model server's dynamic batcher) ends every call of a batch together,
  one just after another sent earlier: there the wait is the callee's own, inside its traced span
  (its queue), where a wait on the caller's connection lies outside it. Where the callee is traced,
  the confidence is scaled by the share of the long calls' time outside the callee's span.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.pool_release import peer_of
from tailscope.analysis.diagnosis.stats import clamp01, logistic, material_weight, ms

PATTERN = "lock_contention"
ADVICE = (
    "Calls to {peer} from one process queue behind an earlier call's reply on a shared, multiplexed "
    "connection: one long reply (a large value) holds up every command written after it. Keep large "
    "values off the shared connection (split them, compress them, or read them over a connection of "
    "their own), give bulky reads a dedicated client, or spread the process's commands over several "
    "connections; set a size budget for cached values."
)

LONG = 5.0
MIN_WAITS = 20
SHIFTS = (3, 5, 7)  # windows earlier: the chance of a bunch at a moment unrelated to the call
MAX_BUNCH = 64  # calls ending in one window that are looked at


def detect(ctx: Context) -> list[Finding]:
    """A lock_contention finding per call name whose long calls mostly end behind an earlier reply of
    their own process (see the module's docstring); `ctx.notes["behind_reply_names"]` for
    slow_dependency, which leaves such a call to this finding."""
    f = ctx.frame
    if len(f.requests) < 50:
        return []
    findings = []
    for code in ctx.client_names.tolist():
        spans = np.nonzero((f.name == code) & (f.request >= 0))[0]
        if len(spans) < MIN_WAITS:
            continue
        share = ctx.share_of(f.name == code, f.dur)
        if share < 0.05:
            continue
        behind = behind_earlier_reply(ctx, code, spans)
        if np.isnan(behind) or behind < 0.3:
            continue
        confidence = 0.95 * logistic(behind, 0.5, 0.1) * material_weight(share)
        confidence *= 1.0 - inside_callee(f, spans)
        if confidence < 0.05:
            continue
        ctx.notes.setdefault("behind_reply_names", {})[code] = confidence
        name, peer = f.names[code], peer_of(ctx, code)
        d = f.dur[spans].astype(np.float64)
        summary = (
            f"'{name}' (calls to {peer or 'its peer'}) has long calls (p50 {ms(np.median(d)):.2f} ms, p99 "
            f"{ms(np.quantile(d, 0.99)):.1f} ms) that carry {share:.0%} of the tail excess; {behind:.0%} of "
            "them (beyond chance, and beyond what the other processes' calls show) end just after an "
            "earlier call of their own process to the same peer: they waited behind that call's reply on "
            "a shared connection (head-of-line blocking), not for the peer's work, which would delay "
            "every process's calls alike."
        )
        stats = {"behind_earlier_reply": round(behind, 3), "tail_excess_share": round(share, 3),
                 "p50_ms": ms(np.median(d)), "p99_ms": ms(np.quantile(d, 0.99)), "peer": peer}
        findings.append(Finding(PATTERN, clamp01(confidence), ctx.stage_of_name(code), name,
                                {"summary": summary, "stats": stats},
                                ADVICE.format(peer=peer or f"'{name}'")))
    findings.sort(key=lambda x: -x.confidence)
    return findings[:1]


def behind_earlier_reply(ctx: Context, code: int, spans: np.ndarray) -> float:
    """Share (beyond chance and beyond the other processes' calls) of the long calls among `spans`
    (of name `code`) that end just after an earlier-sent call of their own process to the same peer
    that was in flight when they were sent; NaN where the spans are no calls or too few are long."""
    f = ctx.frame
    if len(spans) < MIN_WAITS or float((f.kind[spans] == KIND_CLIENT).mean()) < 0.5:
        return float("nan")
    d = f.dur[spans].astype(np.float64)
    median = float(np.median(d))
    long = spans[d > max(LONG * median, 1e6)]
    long = long[~_in_stalls(ctx, long)]
    if len(long) < MIN_WAITS:
        return float("nan")
    peer = peer_of(ctx, code)
    client = np.nonzero((f.kind == KIND_CLIENT) & (f.request >= 0))[0]
    if peer is None:
        calls = client[f.name[client] == code]
    else:
        names = [c for c in np.unique(f.name[client]).tolist() if peer_of(ctx, c) == peer]
        calls = client[np.isin(f.name[client], names)]
    window = max(median, 1e6)
    same = _behind(f, long, calls, window, same_instance=True)
    other = _behind(f, long, calls, window, same_instance=False)
    return clamp01(same - max(other, 0.0))


def _behind(f, long: np.ndarray, calls: np.ndarray, window: float, same_instance: bool) -> float:
    """(observed - chance) / (1 - chance) for: a call of the group (same process, or another one) that
    started before the long call and ended within `window` before the long call's end; chance: the
    same with the long call's end moved SHIFTS windows earlier."""
    scale = int(f.end.max()) + 2
    inst = f.instance[calls].astype(np.int64)
    key = (inst * scale if same_instance else 0 * inst) + f.end[calls]
    order = np.argsort(key, kind="stable")
    keys, ordered = key[order], calls[order]
    base = f.instance[long].astype(np.int64) * scale if same_instance else np.zeros(len(long), np.int64)

    def hits(end_at: np.ndarray) -> np.ndarray:
        lo = np.searchsorted(keys, base + end_at - int(window), side="left")
        hi = np.searchsorted(keys, base + end_at, side="left")  # strictly before the call's end
        out = np.zeros(len(long), bool)
        for k in range(int(min((hi - lo).max(initial=0), MAX_BUNCH))):
            at = lo + k
            live = at < hi
            c = ordered[np.minimum(at, len(ordered) - 1)]
            ok = live & (c != long) & (f.start[c] < f.start[long])
            if not same_instance:
                ok &= f.instance[c] != f.instance[long]
            out |= ok
        return out

    observed = float(hits(f.end[long]).mean())
    chance = float(np.mean([hits(f.end[long] - k * int(window)).mean() for k in SHIFTS]))
    return (observed - chance) / max(1.0 - chance, 1e-9)


def inside_callee(f, spans: np.ndarray) -> float:
    """The median share of a long call's time that its traced far side (the callee's SERVER span, or a
    sidecar's outbound span) covers, over the long calls among `spans` that have one; 0 where fewer
    than half of the calls have a far side (an untraced callee: nothing is known to be the callee's)."""
    from tailscope.analysis.diagnosis.slow_dependency import far_side, server_children

    far = far_side(f, spans, server_children(f, spans))
    if far is None:
        return 0.0
    d = f.dur[spans].astype(np.float64)
    long = spans[d > max(LONG * float(np.median(d)), 1e6)]
    covered = np.zeros(len(f), np.int64)
    np.maximum.at(covered, f.parent[far[0]], f.dur[far[0]])
    has = long[covered[long] > 0]
    if len(has) < MIN_WAITS:
        return 0.0
    return float(np.clip(np.median(covered[has] / np.maximum(f.dur[has], 1)), 0.0, 1.0))


def _in_stalls(ctx: Context, spans: np.ndarray) -> np.ndarray:
    """Whether each span overlaps a known stall of its own process by at least half its length."""
    from tailscope.analysis.diagnosis.long_stalls import stall_overlap

    f = ctx.frame
    out = np.zeros(len(spans), bool)
    for pauses in (ctx.notes.get("gc_episodes"), ctx.reported_pauses if len(f.gc_time) else None):
        if pauses is not None and len(pauses[0]):
            ov = stall_overlap(f.instance[spans], f.start[spans], f.end[spans], *pauses)
            out |= ov > 0.5 * f.dur[spans]
    return out
