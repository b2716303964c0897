"""Head sampling after the fact: an OTLP/JSON lines file (the simulator's, or the service's with
every request traced) reduced to what `tailscope.instrument.sampling.SamplingProcessor` would have
exported at `rate` with its always-keep rule: a request's trace kept whole when its id is
head-sampled or its root span failed or took at least `keep_slower_than_ms`, its request spans (the
root and every SERVER span: what the processor marks in each process) carrying
`tailscope.sample.weight` (sampling.request_weight: 1 / rate, or 1 when the rule kept it).

Lets a test or the accuracy bench compare a sampled run with the whole run it was drawn from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tailscope.instrument.sampling import WEIGHT, request_weight

_ERROR = 2  # OTLP's STATUS_CODE_ERROR
_SERVER = 2  # OTLP's SPAN_KIND_SERVER


def _spans(line: dict[str, Any]):
    for resource in line.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            yield from scope.get("spans", [])


def _weights(path: Path, rate: float, slow_ns: int | None) -> dict[str, float]:
    """trace id (hex) -> weight, for the traces kept; read from their root spans."""
    kept: dict[str, float] = {}
    with path.open("rb") as lines:
        for raw in lines:
            if not raw.strip():
                continue
            for span in _spans(orjson.loads(raw)):
                if span.get("parentSpanId"):
                    continue
                duration = int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])
                failed = (span.get("status") or {}).get("code") == _ERROR
                ruled = failed or (slow_ns is not None and duration >= slow_ns)
                weight = request_weight(int(span["traceId"], 16), rate, ruled)
                if weight is not None:
                    kept[span["traceId"]] = weight
    return kept


def sample_file(source: Path, target: Path, rate: float, keep_slower_than_ms: float | None = None) -> dict:
    """Write the sampled `source` to `target`; counts of traces kept (by head sample and by rule)
    and spans written."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"sampling rate must be in (0, 1], got {rate}")
    slow_ns = None if keep_slower_than_ms is None else int(keep_slower_than_ms * 1e6)
    kept = _weights(source, rate, slow_ns)
    spans = 0
    with source.open("rb") as lines, target.open("wb") as out:
        for raw in lines:
            if not raw.strip():
                continue
            line = orjson.loads(raw)
            for resource in line.get("resourceSpans", []):
                for scope in resource.get("scopeSpans", []):
                    scope["spans"] = [s for s in scope.get("spans", []) if s["traceId"] in kept]
                    for span in scope["spans"]:
                        if not span.get("parentSpanId") or span.get("kind") == _SERVER:
                            value = {"doubleValue": kept[span["traceId"]]}
                            span.setdefault("attributes", []).append({"key": WEIGHT, "value": value})
                    spans += len(scope["spans"])
                resource["scopeSpans"] = [s for s in resource.get("scopeSpans", []) if s["spans"]]
            line["resourceSpans"] = [r for r in line.get("resourceSpans", []) if r["scopeSpans"]]
            if line["resourceSpans"]:
                out.write(orjson.dumps(line) + b"\n")
    by_rule = sum(1 for w in kept.values() if w == 1.0) if rate < 1.0 else 0
    return {"traces": len(kept), "by_rule": by_rule, "by_head": len(kept) - by_rule, "spans": spans}
