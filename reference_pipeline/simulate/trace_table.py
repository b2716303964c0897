"""What the blind families share: a table of spans built span by span, and its three file formats.

The blind families (edge_gateway, bff_fanout, pool_retry, throttled_embedder, kafka_scorer) each run a
discrete-event model of their own service, not the pipeline model of model.py: their mechanisms
(client deadlines and retries, a connection pool, a CPU quota, payload sizes, an autoscaler, a
message broker) and their shapes (a variable number of spans per request: retries, fan-out, batches)
do not fit a fixed tree of roles. A family adds spans to a `TraceTable` as its model produces them
and names its truth (`Cause`); the writers render the table as OTLP/JSON lines, Jaeger UI JSON or a
Zipkin v2 JSON array, the way those exporters write them (status as an OTLP status, a Jaeger
`error` tag, or a Zipkin `error` tag; events as events, logs or annotations).

Times are float nanoseconds from the start of the run; ids come from a seeded generator, so a seed
gives the same bytes every time.
"""

from __future__ import annotations

import bisect
import heapq
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from reference_pipeline.otlp_values import key_values
from reference_pipeline.simulate.config import DEFAULT_START_NS

NS_PER_MS = 1_000_000.0
NS_PER_S = 1_000_000_000.0
BLIND_FORMATS = ("otlp-json", "jaeger", "zipkin")
_KIND_NUMBER = {"Internal": 1, "Server": 2, "Client": 3, "Producer": 4, "Consumer": 5}
_STATUS_NUMBER = {"Unset": 0, "Ok": 1, "Error": 2}


@dataclass(frozen=True)
class Cause:
    """One planted cause: the agreed pattern name, the canonical stage and span where its time shows,
    the service and instances where it acts, other pattern names that are also right for the
    mechanism (`accept`), and mechanisms the cause brings along that are present in the run but do not
    name it (`side`: reporting them is no false alarm, and never required)."""

    pattern: str
    stage: str | None
    span: str | None
    service: str
    instances: tuple[str, ...] = ()
    accept: tuple[str, ...] = ()
    side: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "stage": self.stage, "span": self.span, "service": self.service,
                "instances": list(self.instances), "accept": list(self.accept), "side": list(self.side)}


@dataclass
class TraceTable:
    """Spans of one run. `span()` returns the span's index, which children name as their parent."""

    seed: int
    key: int
    resources: list[dict[str, Any]] = field(default_factory=list)
    endpoints: list[tuple[str, str, int]] = field(default_factory=list)  # (service, ipv4, port) per resource
    rows: list[tuple] = field(default_factory=list)
    traces: int = 0
    links: dict[int, list[int]] = field(default_factory=dict)  # span -> spans it links to (no parent)

    def __post_init__(self) -> None:
        self._ids = random.Random(self.seed * 7919 + self.key)
        self.trace_ids: list[str] = []
        self.span_ids: list[str] = []

    def resource(self, attrs: dict[str, Any], ipv4: str, port: int) -> int:
        self.resources.append(attrs)
        self.endpoints.append((str(attrs["service.name"]), ipv4, port))
        return len(self.resources) - 1

    def new_trace(self) -> int:
        self.trace_ids.append(f"{self._ids.getrandbits(128):032x}")
        self.traces += 1
        return self.traces - 1

    def span(self, trace: int, parent: int | None, name: str, kind: str, resource: int, scope: str,
             start: float, end: float, attrs: dict[str, Any] | None = None, status: str = "Unset",
             message: str = "", events: list[tuple[float, str, dict[str, Any]]] | None = None,
             peer: str | None = None, links: list[int] | None = None) -> int:
        """Add one span; `peer` is the remote service a CLIENT/PRODUCER span talks to (Zipkin's
        remoteEndpoint); `links` are spans (of any trace) it links to: OTLP links, Jaeger FOLLOWS_FROM
        references (Zipkin v2 has no links: a family does not give them to a Zipkin run)."""
        self.span_ids.append(f"{self._ids.getrandbits(64) | 1:016x}")
        self.rows.append((trace, -1 if parent is None else parent, name, kind, resource, scope,
                          int(start) + DEFAULT_START_NS, max(int(end), int(start) + 1000) + DEFAULT_START_NS,
                          attrs or {}, status, message, events or [], peer))
        if links:
            self.links[len(self.rows) - 1] = list(links)
        return len(self.rows) - 1

    def by_trace(self, chunk: int) -> Iterator[list[int]]:
        """Span indexes grouped `chunk` traces at a time (in trace order)."""
        order = sorted(range(len(self.rows)), key=lambda i: self.rows[i][0])
        group: list[int] = []
        limit = chunk
        for i in order:
            if self.rows[i][0] >= limit:
                yield group
                group, limit = [], (self.rows[i][0] // chunk + 1) * chunk
            group.append(i)
        if group:
            yield group


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def otlp_json_lines(table: TraceTable, traces_per_line: int = 200) -> Iterator[bytes]:
    resources = [{"attributes": key_values(a)} for a in table.resources]
    for group in table.by_trace(traces_per_line):
        by_resource: dict[int, dict[str, list[dict[str, Any]]]] = {}
        for i in group:
            trace, parent, name, kind, res, scope, start, end, attrs, status, message, events, _ = (
                table.rows[i])
            span: dict[str, Any] = {"traceId": table.trace_ids[trace], "spanId": table.span_ids[i]}
            if parent >= 0:
                span["parentSpanId"] = table.span_ids[parent]
            span.update(name=name, kind=_KIND_NUMBER[kind], startTimeUnixNano=str(start),
                        endTimeUnixNano=str(end), attributes=key_values(attrs))
            if events:
                span["events"] = [{"timeUnixNano": str(int(ts) + DEFAULT_START_NS), "name": ev,
                                   "attributes": key_values(ea)} for ts, ev, ea in events]
            if i in table.links:
                span["links"] = [{"traceId": table.trace_ids[table.rows[j][0]], "spanId": table.span_ids[j]}
                                 for j in table.links[i]]
            span["status"] = {"code": _STATUS_NUMBER[status], **({"message": message} if message else {})}
            by_resource.setdefault(res, {}).setdefault(scope, []).append(span)
        out = {"resourceSpans": [
            {"resource": resources[res], "scopeSpans": [{"scope": {"name": scope}, "spans": spans}
                                                        for scope, spans in scopes.items()]}
            for res, scopes in by_resource.items()]}
        yield _dumps(out) + b"\n"


def _jaeger_tag(key: str, value: Any) -> dict[str, Any]:
    kind = "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else (
        "float64" if isinstance(value, float) else "string")
    return {"key": key, "type": kind, "value": value}


def jaeger_json(table: TraceTable, traces_per_piece: int = 200) -> Iterator[bytes]:
    """{"data": [trace, ...]}: µs times, CHILD_OF references, `error`/`otel.status_code` tags, logs."""
    processes = [{"serviceName": a["service.name"],
                  "tags": [_jaeger_tag(k, v) for k, v in a.items() if k != "service.name"]}
                 for a in table.resources]
    yield b'{"data":['
    first = True
    for group in table.by_trace(traces_per_piece):
        traces: dict[int, dict[str, Any]] = {}
        for i in group:
            trace, parent, name, kind, res, scope, start, end, attrs, status, message, events, _ = (
                table.rows[i])
            tid = table.trace_ids[trace]
            doc = traces.setdefault(trace, {"traceID": tid, "spans": [], "processes": {}, "warnings": None})
            tags = [_jaeger_tag(k, v) for k, v in attrs.items()]
            tags += [_jaeger_tag("span.kind", kind.lower()), _jaeger_tag("otel.scope.name", scope)]
            if status == "Error":
                tags += [_jaeger_tag("error", True), _jaeger_tag("otel.status_code", "ERROR")]
                if message:
                    tags.append(_jaeger_tag("otel.status_description", message))
            refs = ([{"refType": "CHILD_OF", "traceID": tid, "spanID": table.span_ids[parent]}]
                    if parent >= 0 else [])
            refs += [{"refType": "FOLLOWS_FROM", "traceID": table.trace_ids[table.rows[j][0]],
                      "spanID": table.span_ids[j]} for j in table.links.get(i, ())]
            logs = [{"timestamp": (int(ts) + DEFAULT_START_NS) // 1000,
                     "fields": [_jaeger_tag("event", ev), *(_jaeger_tag(k, v) for k, v in ea.items())]}
                    for ts, ev, ea in events]
            doc["processes"][f"p{res}"] = processes[res]
            doc["spans"].append({"traceID": tid, "spanID": table.span_ids[i], "operationName": name,
                                 "references": refs, "startTime": start // 1000,
                                 "duration": max((end - start) // 1000, 1), "tags": tags, "logs": logs,
                                 "processID": f"p{res}", "warnings": None})
        for _, doc in sorted(traces.items()):
            yield (b"" if first else b",") + _dumps(doc)
            first = False
    yield b"]}\n"


def zipkin_json(table: TraceTable) -> Iterator[bytes]:
    """A Zipkin v2 span array, as Brave's reporter POSTs it: lower-case names, µs times, string tags,
    an `error` tag on failed spans, annotations for events, local and remote endpoints."""
    ports = {service: port for service, _ip, port in table.endpoints}
    yield b"["
    first = True
    for group in table.by_trace(200):
        for i in group:
            trace, parent, name, kind, res, _scope, start, end, attrs, status, message, events, peer = (
                table.rows[i])
            service, ipv4, port = table.endpoints[res]
            span: dict[str, Any] = {"traceId": table.trace_ids[trace], "id": table.span_ids[i]}
            if parent >= 0:
                span["parentId"] = table.span_ids[parent]
            if kind != "Internal":
                span["kind"] = kind.upper()
            span.update(name=name.lower(), timestamp=start // 1000, duration=max((end - start) // 1000, 1),
                        localEndpoint={"serviceName": service, "ipv4": ipv4, "port": port})
            if peer is not None:
                span["remoteEndpoint"] = {"serviceName": peer, "port": ports.get(peer, 443)}
            tags = {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in attrs.items()}
            if status == "Error":
                tags["error"] = message or "true"
            if tags:
                span["tags"] = tags
            if events:
                span["annotations"] = [{"timestamp": (int(ts) + DEFAULT_START_NS) // 1000, "value": ev}
                                       for ts, ev, _ in events]
            yield (b"" if first else b",") + _dumps(span)
            first = False
    yield b"]\n"


def write_table(table: TraceTable, out: str | os.PathLike[str], fmt: str) -> int:
    """Write the table to `out` atomically (a temporary file renamed at the end); returns bytes."""
    if fmt not in BLIND_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(BLIND_FORMATS)}")
    pieces = {"otlp-json": otlp_json_lines, "jaeger": jaeger_json, "zipkin": zipkin_json}[fmt](table)
    path = Path(out)
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb", buffering=1 << 20) as stream:
            for piece in pieces:
                stream.write(piece)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path.stat().st_size


# --- mechanisms every family's model uses -----------------------------------------------------------

def lognormal_ms(rng: random.Random, median_ms: float, sigma: float) -> float:
    """One log-normal duration in ns from its median (ms) and the sd of its logarithm."""
    return median_ms * NS_PER_MS * rng.lognormvariate(0.0, sigma)


def poisson_arrivals(rng: random.Random, rps: float, n: int,
                     bursts: tuple[tuple[float, float, float], ...] = ()) -> list[float]:
    """`n` open-loop Poisson send times (ns): rate `rps`, times `multiple` inside each burst
    (start s, length s, multiple), by thinning a process at the peak rate."""
    peak = rps * max([m for _, _, m in bursts] + [1.0])
    out: list[float] = []
    t = 0.0
    while len(out) < n:
        t += rng.expovariate(peak)
        rate = rps
        for start, length, multiple in bursts:
            if start <= t < start + length:
                rate = rps * multiple
        if rng.random() * peak < rate:
            out.append(t * NS_PER_S)
    return out


def merge_intervals(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping or touching intervals as one, sorted (a GC pause inside a throttled period)."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class Stalls:
    """Intervals (wall ns) during which a whole process runs nothing: stop-the-world pauses, or a
    cgroup's throttled time. Work started at t needs `work` ns of running time; every thread's
    timestamps (a span's start or end as the thread records it) fall outside the stalls."""

    def __init__(self, intervals: list[tuple[float, float]]) -> None:
        intervals = sorted(intervals)
        self.starts = [a for a, _ in intervals]
        self.ends = [b for _, b in intervals]

    def settle(self, t: float) -> float:
        """When a thread that wants to run at t can run: t, or the end of the stall holding it."""
        k = bisect.bisect_right(self.starts, t) - 1
        return self.ends[k] if k >= 0 and t < self.ends[k] else t

    def run(self, t: float, work: float) -> float:
        """Wall time at which `work` ns of progress started at t is done."""
        t = self.settle(t)
        k = bisect.bisect_right(self.starts, t)
        while k < len(self.starts) and self.starts[k] < t + work:
            work -= self.starts[k] - t
            t = self.ends[k]
            k += 1
        return t + work

    def overlapping(self, a: float, b: float) -> list[tuple[float, float]]:
        """The stalls (start, end) that overlap [a, b), in time order: the pauses a span can report."""
        return [(s, e) for s, e in zip(self.starts, self.ends, strict=True) if s < b and e > a]

    def inside(self, a: float, b: float) -> float:
        """Stalled time within [a, b)."""
        k = max(bisect.bisect_right(self.starts, a) - 1, 0)
        total = 0.0
        while k < len(self.starts) and self.starts[k] < b:
            total += max(0.0, min(b, self.ends[k]) - max(a, self.starts[k]))
            k += 1
        return total


def random_pauses(rng: random.Random, horizon_ns: float, every_s: tuple[float, float],
                  length_ms: tuple[float, float]) -> list[tuple[float, float]]:
    """Pauses at uniformly spaced random gaps (`every_s` range) with uniform lengths (`length_ms`)."""
    out = []
    t = rng.uniform(0.0, every_s[1]) * NS_PER_S
    while t < horizon_ns:
        length = rng.uniform(*length_ms) * NS_PER_MS
        out.append((t, t + length))
        t += length + rng.uniform(*every_s) * NS_PER_S
    return out


class WorkerPool:
    """`slots` workers (or connections) taken first-come first-served: `take(t, hold)` returns when
    the caller got one; it is busy until that time + hold (or until `release` is called)."""

    def __init__(self, slots: int) -> None:
        self.free = [0.0] * slots
        heapq.heapify(self.free)

    def acquire(self, t: float) -> float:
        return max(t, heapq.heappop(self.free))

    def release(self, t: float) -> None:
        heapq.heappush(self.free, t)
