"""lock_contention held by transactions on other instances: a row lock, a transaction pooler's server.

Mechanism. A transaction that takes a row lock (`SELECT ... FOR UPDATE`) or, behind a transaction
pooler (PgBouncer), a server connection, holds it until it commits: until its last statement ends. A
request that needs the same row or a connection meanwhile waits inside its own call, whichever process
it runs on, and its call ends a round trip after the holder's transaction ended. lock_contention.py
sees a lock through the waiters piling up on one instance; a lock in the database is shared by every
caller, so its waiters (one customer's requests, spread over the pods) pile up nowhere in particular.
What shows is the release: the long calls end right after *another request's last call to the same
peer* ended (pool_release.release_handoff), and not after the peer's other calls ended (the
statements inside transactions, which free nothing). A queue for an untraced callee's workers is freed
by every call's end alike; a slow peer by none.

Statistic. Per CLIENT name most requests call that carries >= 5 % of the tail excess and that
lock_contention did not already name a pool wait: the hand-off share to the last calls (observed -
chance) / (1 - chance); the share of long calls whose nearest earlier release is a last call, p, over
the last calls' share of all calls, b: specific = (p - b) / (1 - b). Strength = logistic(last, 0.5,
0.1) x logistic(specific, 0.25, 0.06); confidence = 0.95 x strength x material_weight(share). The name
goes into `transaction_waits` (callee_queue.py keeps 1 - it: such waits are not a worker queue) and,
at >= 0.5, `pool_wait_names` (slow_dependency holds it below 0.5). burst_waits.py does not fold these
waits into a queue before the handler: a lock a transaction holds is not the process's capacity.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.pool_release import HANDOFF_NS, LONG, peer_of, release_handoff
from tailscope.analysis.diagnosis.stats import clamp01, logistic, material_weight
from tailscope.analysis.diagnosis.where import main_service

PATTERN = "lock_contention"
MECHANISM = "waits released by other transactions' ends"
MIN_SHARE = 0.05
ADVICE = (
    "Calls {where} wait for something another request's transaction holds until it commits: a row lock "
    "(SELECT ... FOR UPDATE on a hot key) or a server connection of a transaction pooler. Each long call "
    "ends right after another request's last statement to {peer}. Keep the transactions that hold it "
    "short (take the lock last, move work such as scoring or remote calls out of the transaction), "
    "serialise the requests for one key before they reach the database (a per-key queue, coalescing "
    "duplicate requests), use `SKIP LOCKED` / `NOWAIT` with a retry where a caller can do without, and "
    "size the pooler's server pool for the transactions in flight."
)


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if ctx.n_requests < 100:
        return []
    known = ctx.notes.get("pool_wait_names", {})
    findings = []
    for code in ctx.client_names.tolist():
        if known.get(int(code), 0.0) >= 0.5:
            continue
        spans = np.nonzero((f.name == code) & (f.request >= 0) & (f.kind == KIND_CLIENT))[0]
        if len(np.unique(f.request[spans])) < 0.5 * ctx.n_requests:
            continue
        mask = np.zeros(len(f), bool)
        mask[spans] = True
        share = ctx.share_of(mask, f.dur.astype(np.float64))
        if share < MIN_SHARE:
            continue
        last = release_handoff(ctx, int(code), spans)
        if np.isnan(last) or last < 0.3:
            continue
        nearest, base = _nearest_is_last(ctx, int(code), spans)
        if np.isnan(nearest):
            continue
        specific = (nearest - base) / max(1.0 - base, 1e-9)
        strength = logistic(last, 0.5, 0.1) * logistic(specific, 0.25, 0.06)
        confidence = 0.95 * strength * material_weight(share)
        if confidence < 0.05:
            continue
        ctx.notes.setdefault("transaction_waits", {})[int(code)] = confidence
        if confidence >= 0.5:
            ctx.notes.setdefault("pool_wait_names", {})[int(code)] = confidence
        name, peer = f.names[code], peer_of(ctx, int(code)) or "the same peer"
        service = main_service(f, spans)
        summary = (
            f"The long calls '{name}' from {service} to {peer} end right after another request's last call "
            f"to {peer} ended ({last:.0%} of them beyond chance; the nearest call to end before a long call "
            f"is a transaction's last {nearest:.0%} of the time, against {base:.0%} of the calls): each "
            "waits for something a transaction of another request holds until it commits "
            "(a row lock, a pooler's server connection), on whatever instance that request runs; the "
            f"calls carry {share:.0%} of the tail excess."
        )
        stats = {"service": service, "peer": peer, "released_by_last_calls": round(last, 3),
                 "nearest_release_is_last": round(nearest, 3),
                 "last_calls_share": round(base, 3), "tail_excess_share": round(share, 3),
                 "mechanism": MECHANISM}
        findings.append(Finding(PATTERN, clamp01(confidence), ctx.stage_of_name(int(code)), name,
                                {"summary": summary, "stats": stats},
                                ADVICE.format(where=f"'{name}' from {service}", peer=peer)))
    findings.sort(key=lambda x: -x.confidence)
    return findings[:1]


def _nearest_is_last(ctx: Context, code: int, spans: np.ndarray) -> tuple[float, float]:
    """(how often the call to the same peer that ended last before a long call's end, in another
    request, within its round trip, was its parent's last call to the peer; the share of such last
    calls among all calls to the peer). A lock or a pooled connection held to COMMIT is freed by a
    transaction's last call, a callee's worker by any call: there the nearest is a last call as often
    as last calls are. (NaN, 0) where there is nothing to judge."""
    f = ctx.frame
    peer = peer_of(ctx, code)
    d = f.dur[spans].astype(np.float64)
    median = float(np.median(d))
    waiters = spans[d > max(LONG * median, 1e6)]
    if peer is None or len(waiters) < 20:
        return float("nan"), 0.0
    client = np.nonzero((f.kind == KIND_CLIENT) & (f.request >= 0) & (f.parent >= 0))[0]
    names = [c for c in np.unique(f.name[client]).tolist() if peer_of(ctx, c) == peer]
    calls = client[np.isin(f.name[client], names)]
    order = np.lexsort((f.end[calls], f.parent[calls]))
    calls = calls[order]
    final = np.r_[f.parent[calls][1:] != f.parent[calls][:-1], True]
    by_end = np.argsort(f.end[calls], kind="stable")
    ends, is_last, owner = f.end[calls][by_end], final[by_end], f.request[calls][by_end]
    before, after = median + HANDOFF_NS, HANDOFF_NS / 2
    hits = []
    for w in waiters.tolist():
        hi = int(np.searchsorted(ends, f.end[w] + after, side="right"))
        lo = int(np.searchsorted(ends, f.end[w] - before, side="left"))
        k = hi - 1
        while k >= lo and owner[k] == f.request[w]:
            k -= 1
        if k >= lo:
            hits.append(bool(is_last[k]))
    if len(hits) < 20:
        return float("nan"), 0.0
    return float(np.mean(hits)), float(final.mean())
