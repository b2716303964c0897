"""How the blind family `node-triton` (node_triton.py) is instrumented, per seed: resources (the pod as
service.instance.id, host.name + process.pid, or a Zipkin endpoint), old or new semantic conventions,
gRPC or HTTP to Triton, Triton's own spans (composing models' queue/compute as child spans, as span
events, or not exported), @opentelemetry/instrumentation-dns and fastify's hook spans on or off, V8 GC
reported as span events or not; and the spans of one request, written from its timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.node_triton_sim import Exec
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

BFF, CALLER, TRITON = "moderation-bff", "comments-api", "triton-inference"
ROUTE = "/v1/moderate"
HANDLER, COMPRESS = "request handler - fastify", "onSend - @fastify/compress"
GET, SETEX, DNS, POOL = "get", "setex", "dns.lookup", "pg-pool.connect"
GRPC_INFER = "grpc.inference.GRPCInferenceService/ModelInfer"
INFER, COMPUTE = "InferRequest", "compute"
ENSEMBLE = {"text": "text_moderation", "image": "image_moderation"}
STEPS = {"text": ("tokenizer", "text_classifier"), "image": ("image_preprocess", "vision_classifier")}
REDIS_HOST, PG_HOST = "redis-verdicts.moderation.svc.cluster.local", "pg-audit.moderation.svc.cluster.local"
TRITON_HOST, REPUTATION_HOST = "triton.inference.svc.cluster.local", "api.trustsignals.io"
GC_EVENT = "v8.gc"
_SUFFIX = ("7xk2p", "m4q9z", "c8v5n", "t2w6h", "j9r3d", "f5b8s")
_NODE = "@opentelemetry/instrumentation-"
_AUDIT = "INSERT INTO moderation_audit (content_hash, verdict, model, ts) VALUES ($1, $2, $3, $4)"


def bff_pod(k: int) -> str:
    return f"moderation-bff-5f7d9c8b6-{_SUFFIX[k]}"


def triton_pod(j: int) -> str:
    return f"triton-inference-{j}"


def caller_pod(c: int) -> str:
    return f"comments-api-6b4f8-{_SUFFIX[-1 - c]}"


@dataclass(frozen=True)
class Style:
    """One seed's conventions: semconv old | new; ident instance-id | host-pid | endpoint; transport
    grpc | http; triton children | events | none; dns: instrumentation-dns on; hooks: fastify's hook
    spans exported; gc: V8 GC reported as span events on the server span."""

    semconv: str
    ident: str
    transport: str
    triton: str
    dns: bool
    hooks: bool
    gc: bool

    @property
    def root(self) -> str:
        return f"POST {ROUTE}"

    @property
    def infer_client(self) -> str:
        return GRPC_INFER if self.transport == "grpc" else "POST"

    @property
    def insert(self) -> str:
        return "INSERT moderation_audit" if self.semconv == "new" else "pg.query:INSERT"

    def model_span(self, kind: str) -> str:
        """Where a GPU model's queue + compute shows: its Triton span, or the BFF's client span."""
        return STEPS[kind][1] if self.triton != "none" else self.infer_client

    def label(self, service: str, pod: int) -> str:
        name = {BFF: bff_pod, TRITON: triton_pod, CALLER: caller_pod}[service](pod)
        if self.ident == "instance-id":
            return name
        if self.ident == "host-pid":
            return f"{name}:1"
        ip, port = endpoint(service, pod)
        return f"{ip}:{port}"


def endpoint(service: str, pod: int) -> tuple[str, int]:
    return {BFF: (f"10.40.1.{11 + pod}", 3000), TRITON: (f"10.40.9.{21 + pod}", 8001),
            CALLER: (f"10.40.5.{31 + pod}", 8080)}[service]


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int], int] = field(default_factory=dict)

    def get(self, service: str, pod: int) -> int:
        if (service, pod) not in self.made:
            attrs = self._attrs(service, pod)
            self.made[(service, pod)] = self.table.resource(attrs, *endpoint(service, pod))
        return self.made[(service, pod)]

    def _attrs(self, service: str, pod: int) -> dict[str, Any]:
        name = {BFF: bff_pod, TRITON: triton_pod, CALLER: caller_pod}[service](pod)
        lang = {BFF: "nodejs", TRITON: "cpp", CALLER: "go"}[service]
        attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": lang}
        if self.style.ident == "endpoint":
            return attrs
        attrs.update({"k8s.namespace.name": "moderation", "k8s.pod.name": name})
        if self.style.ident == "instance-id":
            attrs["service.instance.id"] = name
        else:
            attrs.update({"host.name": name, "process.pid": 1})
        if service == BFF:
            attrs.update({"process.runtime.name": "nodejs", "process.runtime.version": "20.18.1"})
        return attrs


@dataclass
class Attempt:
    """One try of the reputation call: its CLIENT span, whether the client's timeout cut it, and the
    dns.lookup of a new socket (None on a reused keep-alive socket)."""

    start: float
    end: float
    failed: bool
    dns: tuple[float, float] | None


@dataclass
class Infer:
    start: float
    end: float
    pod: int
    server: tuple[float, float]
    steps: list[Exec]


@dataclass
class Timeline:
    pod: int
    caller: int
    kind: str
    body: int
    response: int
    content: str
    client: tuple[float, float]
    root: tuple[float, float]
    handler: tuple[float, float]
    get: tuple[float, float]
    hit: bool
    infer: Infer | None
    attempts: list[Attempt]
    setex: tuple[float, float] | None
    pool: tuple[float, float]
    insert: tuple[float, float]
    compress: tuple[float, float]
    gcs: list[tuple[float, float, str]]


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _http_client(style: Style, method: str, url: str, host: str, port: int, status: int | None
                 ) -> dict[str, Any]:
    if style.semconv == "new":
        attrs = {"http.request.method": method, "url.full": url, **_peer(style, host, port)}
        return attrs | ({"http.response.status_code": status} if status else {})
    attrs = {"http.method": method, "http.url": url, **_peer(style, host, port)}
    return attrs | ({"http.status_code": status} if status else {})


def _triton(table: TraceTable, res: Resources, trace: int, parent: int, kind: str, inf: Infer) -> None:
    style, me = res.style, res.get(TRITON, inf.pod)
    server = table.span(trace, parent, INFER, "Server", me, "triton", *inf.server,
                        {"triton.model_name": ENSEMBLE[kind], "triton.model_version": "1"})
    ens = table.span(trace, server, ENSEMBLE[kind], "Internal", me, "triton", inf.steps[0].queued,
                     inf.steps[-1].end, {"triton.model_name": ENSEMBLE[kind], "triton.model_version": "1"})
    for name, ex in zip(STEPS[kind], inf.steps, strict=True):
        attrs = {"triton.model_name": name, "triton.model_version": str(ex.version)}
        if style.triton == "children":
            model = table.span(trace, ens, name, "Internal", me, "triton", ex.queued, ex.end, attrs,
                               events=[(ex.queued, "QUEUE_START", {})])
            table.span(trace, model, COMPUTE, "Internal", me, "triton", ex.start, ex.end, {},
                       events=[(ex.start, "COMPUTE_START", {}), (ex.end, "COMPUTE_END", {})])
        else:
            table.span(trace, ens, name, "Internal", me, "triton", ex.queued, ex.end, attrs,
                       events=[(ex.queued, "QUEUE_START", {}), (ex.start, "COMPUTE_START", {}),
                               (ex.end, "COMPUTE_END", {})])


def write_request(table: TraceTable, res: Resources, tl: Timeline) -> None:
    style = res.style
    new = style.semconv == "new"
    trace = table.new_trace()
    bff, caller = res.get(BFF, tl.pod), res.get(CALLER, tl.caller)
    host = "moderation-bff.moderation.svc.cluster.local"
    top = table.span(trace, None, "POST", "Client", caller, "go.opentelemetry.io/contrib/otelhttp",
                     *tl.client, _http_client(style, "POST", f"http://{host}{ROUTE}", host, 80, 200),
                     peer=BFF)
    if new:
        http = {"http.request.method": "POST", "url.path": ROUTE, "http.route": ROUTE,
                "http.response.status_code": 200, "http.request.body.size": tl.body,
                "http.response.body.size": tl.response}
    else:
        http = {"http.method": "POST", "http.target": ROUTE, "http.route": ROUTE, "http.status_code": 200,
                "http.request_content_length": tl.body, "http.response_content_length": tl.response}
    events = [(a, GC_EVENT, {"v8.gc.type": kind, "v8.gc.duration_ms": round((b - a) / NS_PER_MS, 2)})
              for a, b, kind in tl.gcs] if style.gc else None
    root = table.span(trace, top, style.root, "Server", bff, f"{_NODE}http", *tl.root, http, events=events)
    handler = table.span(trace, root, HANDLER, "Internal", bff, f"{_NODE}fastify", *tl.handler,
                         {"fastify.type": "request_handler", "plugin.name": "moderation-routes",
                          "http.route": ROUTE, "moderation.content.type": tl.kind,
                          "moderation.verdict.cached": tl.hit})
    redis = {"db.system": "redis", **_peer(style, REDIS_HOST, 6379)}
    stmt = "db.query.text" if new else "db.statement"
    table.span(trace, handler, GET, "Client", bff, f"{_NODE}ioredis", *tl.get,
               {**redis, stmt: f"get verdict:{tl.content}"}, peer="redis")
    if tl.infer is not None:
        inf = tl.infer
        if style.transport == "grpc":
            attrs = {"rpc.system": "grpc", "rpc.service": "inference.GRPCInferenceService",
                     "rpc.method": "ModelInfer", "rpc.grpc.status_code": 0, **_peer(style, TRITON_HOST, 8001)}
        else:
            attrs = _http_client(style, "POST", f"http://{TRITON_HOST}:8000/v2/models/{ENSEMBLE[tl.kind]}/infer",
                                 TRITON_HOST, 8000, 200)
        scope = f"{_NODE}grpc" if style.transport == "grpc" else f"{_NODE}http"
        client = table.span(trace, handler, style.infer_client, "Client", bff, scope, inf.start, inf.end,
                            attrs, peer=TRITON)
        if style.triton != "none":
            _triton(table, res, trace, client, tl.kind, inf)
    for a in tl.attempts:
        url = f"https://{REPUTATION_HOST}/v2/reputation?kind={tl.kind}"
        span = table.span(trace, handler, "GET", "Client", bff, f"{_NODE}http", a.start, a.end,
                          _http_client(style, "GET", url, REPUTATION_HOST, 443, None if a.failed else 200),
                          "Error" if a.failed else "Unset", "timeout of 250ms exceeded" if a.failed else "",
                          peer="reputation-api")
        if a.dns is not None and style.dns:
            table.span(trace, span, DNS, "Client", bff, f"{_NODE}dns", *a.dns,
                       {"peer.hostname": REPUTATION_HOST}, peer="kube-dns")
    if tl.setex is not None:
        table.span(trace, handler, SETEX, "Client", bff, f"{_NODE}ioredis", *tl.setex,
                   {**redis, stmt: f"setex verdict:{tl.content} 86400 ?"}, peer="redis")
    pg = {"db.system": "postgresql", ("db.namespace" if new else "db.name"): "moderation",
          **_peer(style, PG_HOST, 5432)}
    table.span(trace, handler, POOL, "Client", bff, f"{_NODE}pg", *tl.pool,
               {**pg, "db.postgresql.idle.timeout.millis": 10000, "db.postgresql.max.client": 10},
               peer="postgres")
    table.span(trace, handler, style.insert, "Client", bff, f"{_NODE}pg", *tl.insert,
               {**pg, stmt: _AUDIT}, peer="postgres")
    if style.hooks:
        table.span(trace, root, COMPRESS, "Internal", bff, f"{_NODE}fastify", *tl.compress,
                   {"fastify.type": "hook", "hook.name": "onSend", "plugin.name": "@fastify/compress"})
