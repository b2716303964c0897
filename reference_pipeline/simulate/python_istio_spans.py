"""How the blind family `python-istio` (python_istio.py) is instrumented, per seed: OTLP / Jaeger /
Zipkin v2, old or new semantic conventions, Istio's Envoy spans or none, the team's manual spans
(tokenize, metadata.fetch, rerank; the embedder's batch.wait and model.forward) exported or not, how
instances are named (the OTel operator's service.instance.id: one per pod container, all uvicorn
workers alike; host.name + process.pid: each worker its own; Zipkin's ip:port), and how CPython's
collections are reported (span events on the request, a `process.runtime` attribute, nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.python_istio_sim import Attempt
from reference_pipeline.simulate.trace_table import TraceTable

API, EMB, FRONT = "search-api", "embedder", "search-frontend"
MESH = {API: "search-api.search", EMB: "embedder.search"}  # Istio's service name for a sidecar
ROOT, EMBED_ROOT = "POST /v1/search", "POST /v1/embed"
TOKENIZE, META, RERANK = "tokenize", "metadata.fetch", "rerank"
GET, SET, POST, SELECT = "GET", "SET", "POST", "SELECT"
KNN = "opensearch.knn_search"
SEND = "search-events send"
FACETS = "GET /v1/facets"
WAIT, FORWARD = "batch.wait", "model.forward"
API_HOST, EMB_HOST = "search-api.search.svc.cluster.local", "embedder.search.svc.cluster.local"
REDIS_HOST, PG_HOST, OS_HOST = "redis-cache.search.svc", "pg-docs.search.svc", "opensearch-knn.search.svc"
_POD = ("7d9c5f8b6-kq2xw", "7d9c5f8b6-p4m7z", "7d9c5f8b6-wr8tn", "7d9c5f8b6-c3hvd", "7d9c5f8b6-x9bfl")
_REPLICA = (
    "5b7f9c6d4-2lqzj",
    "5b7f9c6d4-8vnkp",
    "5b7f9c6d4-hx4rt",
    "5b7f9c6d4-m6wsd",
    "5b7f9c6d4-t2cfg",
    "5b7f9c6d4-zq7ln",
    "5b7f9c6d4-b9kdm",
    "5b7f9c6d4-f3prw",
)
_OTEL = "opentelemetry.instrumentation"


def pod_name(service: str, k: int) -> str:
    return f"search-api-{_POD[k]}" if service == API else f"embedder-{_REPLICA[k]}"


def worker_pid(w: int) -> int:
    """uvicorn's supervisor is PID 1 in the container; its workers are 8, 9, ..."""
    return 8 + w


def ip(service: str, k: int) -> str:
    return f"10.44.{1 if service in (API, MESH[API]) else 2}.{11 + k}"


def endpoint(service: str, k: int) -> tuple[str, int]:
    if service == FRONT:
        return "10.44.3.10", 3000
    return ip(service, k), 8000 if service in (API, EMB) else 15006


@dataclass(frozen=True)
class Style:
    """One seed's conventions."""

    semconv: str  # old | new
    ident: str  # instance-id | host-pid | endpoint
    envoy: bool
    internals: bool
    gc: str  # events | attribute | none

    def label(self, service: str, k: int, worker: int = 0) -> str:
        """The instance as the store names it."""
        if self.ident == "instance-id":
            return f"search.{pod_name(service, k)}.{service}"
        if self.ident == "host-pid":
            return f"{pod_name(service, k)}:{worker_pid(worker) if service == API else 1}"
        return f"{ip(service, k)}:8000"

    def span_or(self, name: str, fallback: str) -> str:
        return name if self.internals else fallback


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def get(self, service: str, k: int, worker: int = 0) -> int:
        key = (service, k, worker if service == API and self.style.ident == "host-pid" else 0)
        if key not in self.made:
            self.made[key] = self.table.resource(self._attrs(service, k, worker), *endpoint(service, k))
        return self.made[key]

    def _attrs(self, service: str, k: int, worker: int) -> dict[str, Any]:
        if service == FRONT:
            return {
                "service.name": FRONT,
                "telemetry.sdk.language": "nodejs",
                "k8s.namespace.name": "web",
                "k8s.pod.name": "search-frontend-6f8d7c9b5-qz4lm",
                "host.name": "search-frontend-6f8d7c9b5-qz4lm",
                "process.pid": 1,
            }
        base = API if service == MESH[API] else EMB if service == MESH[EMB] else service
        pod = pod_name(base, k)
        if service not in (API, EMB):  # an Envoy sidecar
            return {
                "service.name": service,
                "k8s.pod.name": pod,
                "k8s.namespace.name": "search",
                "service.instance.id": f"sidecar~{ip(base, k)}~{pod}.search~search.svc.cluster.local",
            }
        attrs: dict[str, Any] = {
            "service.name": service,
            "telemetry.sdk.language": "python",
            "telemetry.sdk.name": "opentelemetry",
            "telemetry.sdk.version": "1.27.0",
        }
        if self.style.ident == "endpoint":
            return attrs
        attrs.update(
            {
                "k8s.namespace.name": "search",
                "k8s.pod.name": pod,
                "host.name": pod,
                "process.runtime.name": "cpython",
                "process.runtime.version": "3.11.9",
            }
        )
        if self.style.ident == "instance-id":
            attrs["service.instance.id"] = self.style.label(service, k)
        else:
            attrs["process.pid"] = worker_pid(worker) if service == API else 1
        return attrs


@dataclass
class Embed:
    start: float  # httpx's CLIENT span
    end: float
    status: int
    attempts: list[Attempt]
    tokens: int


@dataclass
class Timeline:
    pod: int
    worker: int
    inbound: tuple[float, float]
    root: tuple[float, float]
    status: int
    cache_hit: bool
    tokenize: tuple[float, float, int, str]
    get: tuple[float, float]
    embed: Embed | None
    knn: tuple[float, float, float, str] | None  # start, end, took, mode
    cache_set: tuple[float, float] | None
    sync: tuple[float, float] | None  # a psycopg2 call made on the loop
    meta: tuple[float, float, float, float, bool]  # fetch start/end, query start/end, filtered
    rerank: tuple[float, float, int]
    send: tuple[float, float]
    gc: list[tuple[float, float, int, int]]


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _db(style: Style, system: str, host: str, port: int, name: str, text: str) -> dict[str, Any]:
    new = style.semconv == "new"
    return {
        "db.system": system,
        ("db.namespace" if new else "db.name"): name,
        ("db.query.text" if new else "db.statement"): text,
        **_peer(style, host, port),
    }


def _envoy(host: str, path: str, cluster: str, status: int, flags: str, pod_ip: str) -> dict[str, Any]:
    return {
        "component": "proxy",
        "http.method": "POST",
        "http.url": f"http://{host}:8000{path}",
        "http.protocol": "HTTP/2" if cluster.startswith("outbound") else "HTTP/1.1",
        "upstream_cluster": cluster,
        "upstream_cluster.name": cluster,
        "http.status_code": str(status),
        "response_flags": flags,
        "peer.address": pod_ip,
        "istio.mesh_id": "cluster.local",
        "istio.namespace": "search",
    }


def write_facets(
    table: TraceTable,
    res: Resources,
    pod: int,
    worker: int,
    root: tuple[float, float],
    queries: list[tuple[float, float]],
    inbound: tuple[float, float],
) -> None:
    """The dashboard's facet counts: two aggregates over `documents`, gathered concurrently."""
    style = res.style
    trace = table.new_trace()
    me = res.get(API, pod, worker)
    new = style.semconv == "new"
    top = None
    if style.envoy:
        top = table.span(
            trace,
            None,
            f"{API_HOST}:8000/v1/facets",
            "Server",
            res.get(MESH[API], pod),
            "envoy",
            *inbound,
            {**_envoy(API_HOST, "/v1/facets", "inbound|8000||", 200, "-", "10.44.0.9"), "http.method": "GET"},
        )
    http = (
        {"http.request.method": "GET", "http.route": "/v1/facets", "http.response.status_code": 200}
        if new
        else {"http.method": "GET", "http.route": "/v1/facets", "http.status_code": 200}
    )
    span = table.span(trace, top, FACETS, "Server", me, f"{_OTEL}.fastapi", *root, http)
    for column, (qs, qe) in zip(("lang", "tag"), queries, strict=True):
        text = f"SELECT {column}, count(*) FROM documents WHERE tags @> $1 GROUP BY {column}"
        table.span(
            trace,
            span,
            SELECT,
            "Client",
            me,
            f"{_OTEL}.asyncpg",
            qs,
            qe,
            {**_db(style, "postgresql", PG_HOST, 5432, "docs", text), "db.user": "search"},
            peer="postgresql",
        )
