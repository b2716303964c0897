"""TorchServe's per-request metrics log (`model_metrics.log`, or the `ts_log.log` lines it copies) →
SpanColumns, one span per request.

TorchServe traces nothing, but in its default `log` metrics mode the backend writes, for every
request, StatsD-like lines keyed by the request id (pytorch/serve docs/metrics.md "Default backend
metrics"; frontend/server/.../metrics/Metric.java parses the same shape):

    2022-08-26T03:42:59,892 [INFO ] W-9001-resnet-18_1.0-stdout MODEL_METRICS -
        HandlerTime.Milliseconds:12.95|#ModelName:resnet-18,Level:Model|#hostname:ip-1,requestID:a93c…,timestamp:1661485379

(one line; newer versions write the unit as `ms`). HandlerTime is the handler's own time
(preprocess + inference + postprocess), PredictionTime the backend's whole prediction around it;
custom metrics added per request carry the same requestID; with batching, a line lists the ids of
every request in the batch (each waited for the whole batch). Each request becomes a SERVER span named
after its model, ending at the line's time (epoch seconds from `timestamp:`, milliseconds from the
log prefix) and lasting its PredictionTime (else HandlerTime); every metric of the request is a
`torchserve.<Metric>` attribute in ms, and a phase rule places HandlerTime as model_forward at the
end of the span. TorchServe's QueueTime and WorkerThreadTime are logged per host without a request
id (ts_metrics.log), so a request's queue wait cannot be told from these lines.

A line that looks like a metric but does not parse is reported as "line N"; other log lines are
skipped (the file is a log).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from ingest.columns import SpanColumns
from ingest.errors import DecodeError, report
from ingest.span_json import BATCH_SPANS

SERVICE = "torchserve"
METRIC = re.compile(
    r"(?P<name>[A-Za-z_][\w]*)\.(?P<unit>[A-Za-z]+):(?P<value>[-+0-9.eE]+)\|#(?P<dims>[^|]*)\|#(?P<host>.*)$"
)
PREFIX_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:(?P<s>\d\d)[,.](?P<ms>\d{3})")
TO_MS = {"ms": 1.0, "milliseconds": 1.0, "s": 1000.0, "seconds": 1000.0, "microseconds": 0.001, "us": 0.001}


@dataclass
class _Request:
    end_ms: float = 0.0
    dims: dict[str, str] = field(default_factory=dict)
    host: str = ""
    times_ms: dict[str, float] = field(default_factory=dict)
    other: dict[str, str] = field(default_factory=dict)


def _pairs(text: str) -> dict[str, str]:
    return dict(part.split(":", 1) for part in text.split(",") if ":" in part)


def _request_ids(host: str) -> list[str]:
    """The request ids of a metric line: one, or a batch's, comma-separated after `requestID:`."""
    parts = host.split(",")
    for i, part in enumerate(parts):
        if part.startswith("requestID:"):
            ids = [part[len("requestID:") :]]
            for p in parts[i + 1 :]:
                if ":" in p:
                    break
                ids.append(p)
            return [r for r in ids if r]
    return []


def decode(
    stream: BinaryIO, source: str, on_bad: Callable[[DecodeError], None] | None = None
) -> Iterator[SpanColumns]:
    """Decode a TorchServe metrics log: one span per request id, in order of first appearance."""
    requests: dict[str, _Request] = {}
    for number, raw in enumerate(stream, 1):
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        at = line.find("|#")
        if at < 0 or "requestID:" not in line:
            continue  # not a per-request metric line
        start = line.rfind(" ", 0, at) + 1
        match = METRIC.match(line[start:].removeprefix("[METRICS]").removeprefix("result=[METRICS]"))
        if match is None:
            report(DecodeError(source, f"line {number}", "a metric line that does not parse"), on_bad)
            continue
        host = _pairs(match["host"])
        seconds = host.get("timestamp", "")
        if not seconds.isdigit():
            report(DecodeError(source, f"line {number}", "metric line without a timestamp"), on_bad)
            continue
        # a batch's line names every request of the batch: each waited for the whole batch
        for request_id in _request_ids(match["host"]):
            _record(requests.setdefault(request_id, _Request()), match, host, _end_ms(int(seconds), line))
    batch = SpanColumns()
    for request_id, request in requests.items():
        if request_id and request.times_ms:
            _append(batch, request_id, request)
        if len(batch) >= BATCH_SPANS:
            yield batch
            batch = SpanColumns()
    if len(batch):
        yield batch


def _record(request: _Request, match: re.Match[str], host: dict[str, str], end_ms: float) -> None:
    request.end_ms = max(request.end_ms, end_ms)
    request.dims, request.host = _pairs(match["dims"]), host.get("hostname", "")
    factor = TO_MS.get(match["unit"].lower())
    if factor is None:
        request.other[match["name"]] = f"{match['value']} {match['unit']}"
    else:
        request.times_ms[match["name"]] = float(match["value"]) * factor


def _end_ms(epoch_s: int, line: str) -> float:
    """The line's time in ms: the metric's epoch seconds, with the log prefix's milliseconds when the
    prefix is in the same second (the prefix is local time, so only its seconds field is compared)."""
    prefix = PREFIX_MS.match(line)
    if prefix and int(prefix["s"]) == epoch_s % 60:
        return epoch_s * 1000.0 + int(prefix["ms"])
    return epoch_s * 1000.0


def _trace_id(request_id: str) -> str:
    """TorchServe's request ids are UUIDs: their 32 hex digits are the trace id (searchable as is)."""
    digits = request_id.replace("-", "").lower()
    if len(digits) == 32 and all(c in "0123456789abcdef" for c in digits):
        return digits
    return hashlib.sha256(f"torchserve:{request_id}".encode()).hexdigest()[:32]


def _append(batch: SpanColumns, request_id: str, request: _Request) -> None:
    total = request.times_ms.get("PredictionTime", request.times_ms.get("HandlerTime", 0.0))
    model = request.dims.get("ModelName", "model")
    attributes = {f"torchserve.{name}": repr(round(ms, 6)) for name, ms in request.times_ms.items()}
    attributes.update({f"torchserve.{name}": value for name, value in request.other.items()})
    attributes.update({"model_name": model, "request_id": request_id})
    end_ns = int(request.end_ms * 1e6)
    batch.append(
        timestamp_ns=end_ns - int(total * 1e6),
        trace_id=_trace_id(request_id),
        span_id=hashlib.sha256(f"torchserve:{request_id}".encode()).hexdigest()[:16],
        parent_span_id="",
        span_name=model,
        duration_ns=int(total * 1e6),
        service_name=SERVICE,
        span_kind="Server",
        resource_attributes={"service.name": SERVICE, "host.name": request.host},
        span_attributes=attributes,
    )
