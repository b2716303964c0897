"""How `vision-moderation` (vision_moderation.py) writes its spans: names, attributes and resources
per seed (new or old semantic conventions, the instance identity, whether Triton and the Go runtime
report anything)."""

from __future__ import annotations

from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

GATEWAY, TRITON = "moderation-gateway", "triton-inference-server"
ENSEMBLE, EMBEDDER, HEAD = "moderation_ensemble", "vit_embedder", "safety_head"
MODEL_INFER = "inference.GRPCInferenceService/ModelInfer"
S3_GET = "S3.GetObject"
BEGIN, INSERT, COMMIT = "BEGIN", "INSERT moderation.verdicts", "COMMIT"


def names(setup: dict[str, Any]) -> dict[str, str]:
    """The span names of a seed's run."""
    grpc = setup["api"] == "grpc"
    return {
        "root": "moderation.v1.Moderation/Check" if grpc else "POST /v1/moderate",
        "limit": "ratelimit.Allow", "redis": "EVALSHA", "fetch": "blob.Fetch", "s3": S3_GET,
        "decode": "image.Decode", "resize": "image.Resize", "infer": MODEL_INFER,
        "save": "verdicts.Save", "begin": BEGIN, "insert": INSERT, "commit": COMMIT,
        "publish": "publish moderation-audit" if setup["semconv"] == "new" else "moderation-audit send",
    }


def instance_label(setup: dict[str, Any], attrs: dict[str, Any], ip: str, port: int) -> str:
    """The instance as the store's readers derive it for this seed's resources."""
    if setup["fmt"] == "zipkin":
        return f"{ip}:{port}"
    return str(attrs.get("service.instance.id") or attrs.get("hostname"))


def resource(table: TraceTable, setup: dict[str, Any], service: str, pod: str, uid: str, ip: str,
             port: int, node: str) -> int:
    if setup["fmt"] == "jaeger":
        attrs: dict[str, Any] = {"service.name": service, "hostname": pod, "ip": ip,
                                 "jaeger.version": "Go-2.30.0"}
    else:
        attrs = {"service.name": service, "k8s.pod.name": pod, "k8s.node.name": node,
                 "k8s.namespace.name": "trust-safety", "telemetry.sdk.name": "opentelemetry"}
        if setup["fmt"] == "otlp-json":
            attrs["service.instance.id"] = uid
        attrs["telemetry.sdk.language"] = "go" if service == GATEWAY else "cpp"
        if service == GATEWAY:
            attrs["process.runtime.name"] = "go"
            attrs["process.runtime.version"] = "go1.22.5"
    return table.resource(attrs, ip, port)


def http_server(setup: dict[str, Any], status: int) -> dict[str, Any]:
    if setup["api"] == "grpc":
        return {"rpc.system": "grpc", "rpc.service": "moderation.v1.Moderation", "rpc.method": "Check",
                "rpc.grpc.status_code": 0 if status < 500 else 14}
    if setup["semconv"] == "new":
        return {"http.request.method": "POST", "http.route": "/v1/moderate", "url.scheme": "https",
                "http.response.status_code": status, "network.protocol.version": "1.1"}
    return {"http.method": "POST", "http.route": "/v1/moderate", "http.scheme": "https",
            "http.status_code": status, "http.flavor": "1.1"}


def peer(setup: dict[str, Any], host: str, port: int) -> dict[str, Any]:
    if setup["semconv"] == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def redis_attrs(setup: dict[str, Any]) -> dict[str, Any]:
    if setup["semconv"] == "new":
        return {"db.system": "redis", "db.operation.name": "EVALSHA", **peer(setup, "ratelimit-redis", 6379)}
    return {"db.system": "redis", "db.statement": "evalsha 9f3c1e 1 ratelimit:{key}",
            **peer(setup, "ratelimit-redis", 6379)}


def s3_attrs(setup: dict[str, Any], region: str, bucket: str, size: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {"rpc.system": "aws-api", "rpc.service": "S3", "rpc.method": "GetObject",
                             "aws.s3.bucket": bucket}
    attrs.update(peer(setup, f"s3.{region}.amazonaws.com", 443))
    if setup["semconv"] == "new":
        attrs.update({"cloud.region": region, "http.response.status_code": 200,
                      "http.response.body.size": size})
    else:
        attrs.update({"aws.region": region, "http.status_code": 200, "http.response_content_length": size})
    return attrs


def db_attrs(setup: dict[str, Any], operation: str) -> dict[str, Any]:
    if setup["semconv"] == "new":
        attrs = {"db.system": "postgresql", "db.namespace": "moderation", "db.operation.name": operation,
                 **peer(setup, "pgbouncer.trust-safety.svc", 6432)}
        if operation == "INSERT":
            attrs["db.collection.name"] = "verdicts"
        return attrs
    statement = {"BEGIN": "begin", "COMMIT": "commit",
                 "INSERT": "insert into moderation.verdicts (image_id, labels, score) values ($1, $2, $3)"}
    return {"db.system": "postgresql", "db.name": "moderation", "db.statement": statement[operation],
            **peer(setup, "pgbouncer.trust-safety.svc", 6432)}


def grpc_client(setup: dict[str, Any], address: str, code: int) -> dict[str, Any]:
    return {"rpc.system": "grpc", "rpc.service": "inference.GRPCInferenceService", "rpc.method": "ModelInfer",
            "rpc.grpc.status_code": code, **peer(setup, address, 8001)}


def publish_attrs(setup: dict[str, Any]) -> dict[str, Any]:
    if setup["semconv"] == "new":
        return {"messaging.system": "kafka", "messaging.destination.name": "moderation-audit",
                "messaging.operation.type": "publish"}
    return {"messaging.system": "kafka", "messaging.destination": "moderation-audit",
            "messaging.destination_kind": "topic"}


def gc_event(cycle: Any) -> tuple[float, str, dict[str, Any]]:
    """A GC cycle as the gateway's runtime hook reports it on the spans in flight (seeds that report the
    runtime): its two stop-the-world phases, the concurrent mark's wall time and the CPU the
    background workers and the assists spent (the numbers of a gctrace line)."""
    end = cycle.mark_end + cycle.mark_term_ns
    return (end, "go.gc", {
        "go.gc.cycle": cycle.number,
        "go.gc.stw.sweep_termination_us": round(cycle.sweep_term_ns / 1000.0, 1),
        "go.gc.mark_ms": round((cycle.mark_end - cycle.start - cycle.sweep_term_ns) / NS_PER_MS, 2),
        "go.gc.stw.mark_termination_us": round(cycle.mark_term_ns / 1000.0, 1),
        "go.gc.cpu.background_ms": round(cycle.background_cpu_ms, 2),
        "go.gc.cpu.assist_ms": round(cycle.assist_cpu_ms, 2),
        "go.gc.heap_goal_mb": round(cycle.heap_goal_mb, 1),
    })
