"""Generate a realistic OTLP trace export for the ingest benchmark (Collector file-exporter style).

Each output record is one ExportTraceServiceRequest of about `--per-request` spans from several
resources (services on a few hosts), traces of 8-10 spans (an inference request: ingress, queue,
parse, features, preprocess, forward, postprocess, downstream, serialize), 4-8 attributes per span,
some events and links. Formats: OTLP JSON lines (default) or length-prefixed protobuf (--proto).

    python bench/gen_otlp.py --spans 1000000                 # bench/data/otlp_1m.jsonl
    python bench/gen_otlp.py --spans 1000000 --proto         # bench/data/otlp_1m.pb
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import orjson

STAGES = (
    ("http.request", "ingress", 2),
    ("batch.queue_wait", "queue", 1),
    ("request.parse", "parsing", 1),
    ("features.fetch", "feature_hydration", 3),
    ("preprocess", "preprocessing", 1),
    ("model.forward", "model_forward", 1),
    ("postprocess", "postprocessing", 1),
    ("downstream.call", "downstream", 3),
    ("response.serialize", "serialization", 1),
)
SERVICES = ("inference-api", "feature-store", "ranker", "postproc")
HOSTS = ("gpu-node-1", "gpu-node-2", "cpu-node-1")


def _kv(key: str, value: object) -> dict:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def _resource(service: str, host: str) -> dict:
    return {
        "attributes": [
            _kv("service.name", service),
            _kv("host.name", host),
            _kv("service.version", "1.4.2"),
            _kv("telemetry.sdk.language", "python"),
            _kv("telemetry.sdk.name", "opentelemetry"),
            _kv("telemetry.sdk.version", "1.27.0"),
            _kv("tailscope.device", "cuda:0" if host.startswith("gpu") else "cpu"),
            _kv("tailscope.dtype", "float16"),
            _kv("tailscope.batch.max_size", 32),
        ]
    }


def _trace(rng: random.Random, t0: int) -> list[dict]:
    trace_id = rng.getrandbits(128).to_bytes(16, "big").hex()
    root_id = rng.getrandbits(64).to_bytes(8, "big").hex()
    duration = rng.randint(5_000_000, 80_000_000)
    spans = []
    n_children = rng.randint(7, 9)
    cursor = t0 + 100_000
    for i, (name, stage, kind) in enumerate(STAGES[: n_children + 1]):
        is_root = i == 0
        span_id = root_id if is_root else rng.getrandbits(64).to_bytes(8, "big").hex()
        length = duration if is_root else rng.randint(200_000, max(300_000, duration // n_children))
        start = t0 if is_root else cursor
        if not is_root:
            cursor += length
        attributes = [_kv("tailscope.stage", stage)]
        if kind == 2:
            attributes += [
                _kv("http.request.method", "POST"),
                _kv("http.route", "/v1/predict"),
                _kv("http.response.status_code", 200),
                _kv("url.scheme", "http"),
            ]
        elif kind == 3:
            attributes += [_kv("server.address", "features.internal"), _kv("rpc.system", "grpc")]
        if stage in ("queue", "model_forward"):
            attributes += [
                _kv("batch.size", rng.randint(1, 32)),
                _kv("batch.queue_depth", rng.randint(0, 64)),
            ]
        if stage == "model_forward":
            attributes += [_kv("device", "cuda:0"), _kv("gpu.utilization", round(rng.random(), 3))]
        span = {
            "traceId": trace_id,
            "spanId": span_id,
            "parentSpanId": "" if is_root else root_id,
            "name": name,
            "kind": kind,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + length),
            "attributes": attributes,
            "status": {"code": 2, "message": "deadline exceeded"} if rng.random() < 0.01 else {},
        }
        if rng.random() < 0.1:
            span["events"] = [
                {
                    "timeUnixNano": str(start + 1000),
                    "name": "python.gc",
                    "attributes": [_kv("gc.generation", 2)],
                }
            ]
        if stage == "model_forward" and rng.random() < 0.2:
            span["links"] = [
                {"traceId": trace_id, "spanId": root_id, "attributes": [_kv("batch.first", True)]}
            ]
        spans.append(span)
    return spans


START_NS = 1_763_700_000_000_000_000


def requests(total_spans: int, per_request: int, seed: int = 7, start_ns: int = START_NS):
    """Yield OTLP/JSON request dicts until `total_spans` spans have been produced; traces start
    0.1-2 ms apart from `start_ns` on."""
    rng = random.Random(seed)
    resources = [_resource(s, h) for s in SERVICES for h in HOSTS]
    produced = 0
    t0 = start_ns
    while produced < total_spans:
        by_resource: dict[int, list[dict]] = {}
        count = 0
        while count < per_request and produced + count < total_spans:
            t0 += rng.randint(100_000, 2_000_000)
            spans = _trace(rng, t0)
            by_resource.setdefault(rng.randrange(len(resources)), []).extend(spans)
            count += len(spans)
        produced += count
        yield {
            "resourceSpans": [
                {
                    "resource": resources[r],
                    "scopeSpans": [{"scope": {"name": "tailscope.bench", "version": "0.1"}, "spans": spans}],
                }
                for r, spans in by_resource.items()
            ]
        }


def _set_value(target: object, value: dict) -> None:
    ((kind, inner),) = value.items()
    if kind == "intValue":
        target.int_value = int(inner)
    elif kind == "stringValue":
        target.string_value = inner
    elif kind == "boolValue":
        target.bool_value = inner
    else:
        target.double_value = inner


def _set_attributes(target: object, attributes: list) -> None:
    for kv in attributes:
        item = target.add()
        item.key = kv["key"]
        _set_value(item.value, kv["value"])


def to_proto(request: dict) -> object:
    """The same request as a protobuf TracesData (hex ids → bytes)."""
    from opentelemetry.proto.trace.v1 import trace_pb2

    message = trace_pb2.TracesData()
    for rs in request["resourceSpans"]:
        resource_spans = message.resource_spans.add()
        _set_attributes(resource_spans.resource.attributes, rs["resource"]["attributes"])
        for ss in rs["scopeSpans"]:
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = ss["scope"]["name"]
            scope_spans.scope.version = ss["scope"]["version"]
            for sp in ss["spans"]:
                span = scope_spans.spans.add()
                span.trace_id = bytes.fromhex(sp["traceId"])
                span.span_id = bytes.fromhex(sp["spanId"])
                span.parent_span_id = bytes.fromhex(sp["parentSpanId"])
                span.name = sp["name"]
                span.kind = sp["kind"]
                span.start_time_unix_nano = int(sp["startTimeUnixNano"])
                span.end_time_unix_nano = int(sp["endTimeUnixNano"])
                _set_attributes(span.attributes, sp["attributes"])
                if sp["status"]:
                    span.status.code = sp["status"]["code"]
                    span.status.message = sp["status"]["message"]
                for ev in sp.get("events", ()):
                    event = span.events.add()
                    event.time_unix_nano = int(ev["timeUnixNano"])
                    event.name = ev["name"]
                    _set_attributes(event.attributes, ev["attributes"])
                for lk in sp.get("links", ()):
                    link = span.links.add()
                    link.trace_id = bytes.fromhex(lk["traceId"])
                    link.span_id = bytes.fromhex(lk["spanId"])
                    _set_attributes(link.attributes, lk["attributes"])
    return message


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--per-request", type=int, default=300)
    parser.add_argument("--proto", action="store_true", help="length-prefixed protobuf instead of JSON lines")
    parser.add_argument("--out", type=Path, help="output file (default bench/data/otlp_<N>.jsonl|.pb)")
    args = parser.parse_args()
    suffix = "pb" if args.proto else "jsonl"
    out = args.out or Path(__file__).parent / "data" / f"otlp_{args.spans}.{suffix}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        for request in requests(args.spans, args.per_request):
            if args.proto:
                data = to_proto(request).SerializeToString()
                f.write(len(data).to_bytes(4, "big") + data)
            else:
                f.write(orjson.dumps(request) + b"\n")
    print(f"{out}: {out.stat().st_size / 2**20:,.1f} MiB, {args.spans:,} spans")


if __name__ == "__main__":
    main()
