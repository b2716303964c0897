"""Where each finding acts: the service and the instances, named in its evidence.

A detector that knows where its mechanism acts says so itself (`stats.service` / `stats.services`
and `stats.instances`: gc_pause's stalled instances, a retried call's caller, a payload stage's
service). For the others the place is read from the spans the finding names: the service that runs
the span name and the instances whose spans of it carry most of the tail excess (tail requests'
time minus the body's, per instance); a finding without a span (a queue before the work) acts on
the instances that do the requests' work.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.model import Context, Finding

TOP = 4


def locate(ctx: Context, findings: list[Finding]) -> None:
    """Add `service` and `instances` to the stats (and a clause to the summary) of every finding
    that does not name them yet."""
    f = ctx.frame
    for fd in findings:
        stats = fd.evidence.setdefault("stats", {})
        if stats.get("instances") and (stats.get("service") or stats.get("services")):
            continue
        code = f.names.index(fd.span_name) if fd.span_name in f.names else -1
        services, instances = _place(ctx, code)
        if not instances:
            continue
        stats.setdefault("service", services[0] if len(services) == 1 else ", ".join(services))
        stats["instances"] = instances
        fd.evidence["summary"] = fd.evidence.get("summary", "").rstrip() + (
            f" Where: {', '.join(services)} ({', '.join(instances)})."
        )


def _place(ctx: Context, code: int) -> tuple[list[str], list[str]]:
    f = ctx.frame
    sp = ctx.split
    if code >= 0:
        spans = np.nonzero((f.name == code) & (f.request >= 0))[0]
        inst, weight = f.instance[spans], f.excl[spans].astype(np.float64)
        req = f.request[spans]
        service = f.service[spans]
    else:
        reqs = f.requests
        inst, weight = reqs.instance, reqs.latency.astype(np.float64)
        req = np.arange(len(reqs))
        service = f.service[reqs.root]
    if len(inst) == 0:
        return [], []
    k = len(f.instances)
    tail = sp.tail[req] if len(sp.tail) else np.zeros(len(req), bool)
    body = sp.body[req] if len(sp.body) else np.zeros(len(req), bool)
    score = np.bincount(inst[tail], weights=weight[tail], minlength=k) - np.bincount(
        inst[body], weights=weight[body], minlength=k
    ) * (tail.sum() / max(body.sum(), 1))
    if not (score > 0).any():
        score = np.bincount(inst, weights=weight, minlength=k)
    order = [int(i) for i in np.argsort(-score)[:TOP] if score[i] > 0]
    names = sorted({f.services[int(s)] for s in np.unique(service)})
    return names, [f.instances[i] for i in order]


def busiest(frame: Any, instance_codes: np.ndarray, weights: np.ndarray | None = None) -> list[str]:
    """The (at most TOP) instances that carry most of a finding's spans (or of `weights` per span),
    most first: where a detector says its mechanism acts."""
    counts = np.bincount(instance_codes, weights=weights, minlength=len(frame.instances))
    return [frame.instances[i] for i in np.argsort(-counts)[:TOP] if counts[i] > 0]


def main_service(frame: Any, spans: np.ndarray) -> str:
    """The service that runs most of `spans`."""
    return frame.services[int(np.bincount(frame.service[spans]).argmax())]
