"""A call that waits in its callee's accept queue is no lock in the caller (runs after the detectors).

Mechanism. Calls to a server whose workers are all busy wait in its listen backlog before its
handler starts (accept_queue.py names that queue where the callee's SERVER span is traced: the large
client-server gaps are before the handler and grow with the calls the instance is already running).
Seen from the caller, the CLIENT span of such a call lasts longer the more calls of its name the
caller has in flight (they are all in the same backlog): lock_contention's statistic, without any
lock in the caller. A lock (or a client pool) in the caller holds the call *before it is sent*,
which shows the same way, so the call is the queue's only where the queue is named and the slow
calls' extra time is mostly the wait before the callee's handler started, at a callee instance that
runs several calls at once (one that runs one at a time reads exactly as a lock on the caller's
connection).

Rule: a lock_contention finding at >= 0.5 on a CLIENT span name, in a run with an accept-queue
queueing finding at >= 0.5 whose calls are mostly that name's, where the slow calls (over twice the
name's median) spend >= half of their extra time before the callee's SERVER span: part of that queue,
at most 0.45, where the callee's instance runs >= 2 calls at the 90th percentile of the sends.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.accept_queue import running_at
from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.diagnosis.model import NAMED, Context, Finding
from tailscope.analysis.diagnosis.stats import slow_spans

CAP = 0.45


def settle(ctx: Context, findings: list[Finding]) -> list[Finding]:
    queue = ctx.notes.get("accept_queue")
    named = any(fd.pattern == "queueing" and fd.confidence >= NAMED
                and "wait_before_handler_p50_ms" in fd.evidence.get("stats", {}) for fd in findings)
    if queue is None or not named:
        return findings
    f = ctx.frame
    cli, srv, _big = queue
    for fd in findings:
        if fd.pattern != "lock_contention" or fd.confidence < NAMED or fd.span_name not in f.names:
            continue
        code = f.names.index(fd.span_name)
        calls = np.nonzero((f.name == code) & (f.request >= 0))[0]
        mine = f.name[cli] == code
        client = float((f.kind[calls] == KIND_CLIENT).mean()) if len(calls) else 0.0
        if client < 0.5 or mine.sum() < 0.5 * len(calls):
            continue
        # a callee that runs one call at a time cannot be told from a lock on the caller's connection
        if float(np.quantile(running_at(f, srv[mine], f.start[cli[mine]]), 0.9)) < 2:
            continue
        d = f.dur[cli[mine]].astype(np.float64)
        pre = np.maximum(f.start[srv[mine]] - f.start[cli[mine]], 0).astype(np.float64)
        slow = slow_spans(d)
        if slow.sum() < 10 or slow.all():
            continue
        extra = float(d[slow].mean() - d[~slow].mean())
        before = float(pre[slow].mean() - pre[~slow].mean()) / max(extra, 1.0)
        if before < 0.5:
            continue
        fd.confidence = min(fd.confidence, CAP)
        stats = fd.evidence.setdefault("stats", {})
        stats["part_of"] = "queueing"
        stats["extra_time_before_callee_handler"] = round(min(before, 1.0), 3)
        fd.evidence["summary"] = fd.evidence.get("summary", "").rstrip(".") + (
            f"; but {min(before, 1.0):.0%} of its slow calls' extra time passes before the callee's handler "
            "starts, in the callee's accept queue (see queueing): the calls wait for the callee's workers, "
            "not for a lock in this process."
        )
    return findings
