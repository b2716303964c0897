"""How the blind family `search-bff` (search_bff.py) writes its spans: the seed's conventions (old or
new semantic conventions, process- or pod-level instances, HTTP CLIENT spans or not, which backends
are traced), its resources and the spans of one request from the times the model gave it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.search_bff_backends import RerankCall, SearchReply
from reference_pipeline.simulate.trace_table import TraceTable

BFF, PERS, RERANK, ES, MEMCACHED, DB = (
    "search-bff", "personalization", "ltr-reranker", "products-es", "memcached", "catalog-db")
ROOT = "GET /api/search"
NORMALIZE = "normalizeQuery"
SERIALIZE = "serializeResponse"
PERS_SERVER = "GET /v2/profile/{userId}"
RERANK_SERVER = "POST /v1/rerank"
ES_CLIENT = "search"
GET_MULTI = "getMulti"
PERS_HOST, RERANK_HOST = "personalization.recs.svc.cluster.local", "ltr-reranker.search.svc.cluster.local"
ES_HOST = "products-es-http.search.svc.cluster.local"

# seed % 3 -> (format, semconv, instance identity, HTTP CLIENT spans, re-ranker traced, ES traced, GC events)
CONVENTIONS = (
    ("otlp-json", "new", "process", True, True, True, True),
    ("jaeger", "old", "pod", False, True, False, False),
    ("zipkin", "new", "endpoint", True, False, False, False),
)


@dataclass(frozen=True)
class Conventions:
    fmt: str
    semconv: str
    identity: str
    client_spans: bool
    reranker_traced: bool
    es_traced: bool
    gc_events: bool

    @property
    def new(self) -> bool:
        return self.semconv == "new"

    def client_name(self, method: str) -> str:
        return method if self.new else f"HTTP {method}"

    @property
    def db_span(self) -> str:
        return "SELECT catalog.products" if self.new else "pg.query:SELECT catalog"


def conventions(seed: int) -> Conventions:
    return Conventions(*CONVENTIONS[seed % 3])


def bff_pod(k: int) -> str:
    return f"search-bff-7f9c6d5b8-{'qxzrtwmkpv'[k]}{'hjgnslcfdb'[k]}"


def bff_ip(k: int) -> str:
    return f"10.12.{3 + k}.{17 + 9 * k}"


def bff_pid(pod: int, proc: int) -> int:
    return 31 + 7 * pod + proc if proc else 1  # the cluster primary is pid 1; workers fork after it


def bff_label(c: Conventions, pod: int, proc: int) -> str:
    """The instance label of one BFF process: host:pid, the pod's name, or its Zipkin endpoint."""
    if c.identity == "process":
        return f"{bff_pod(pod)}:{bff_pid(pod, proc + 1)}"
    return bff_pod(pod) if c.identity == "pod" else f"{bff_ip(pod)}:3000"


def backend_pod(service: str, k: int) -> str:
    return {RERANK: f"ltr-reranker-5d4f8b7c9-{k}x", PERS: f"personalization-64b9f-{k}p",
            ES: f"products-es-data-{k}"}[service]


_PORT = {RERANK: 8000, PERS: 8080, ES: 9200}
_SUBNET = {PERS: 14, ES: 15, RERANK: 16}


def backend_ip(service: str, k: int) -> str:
    return f"10.{_SUBNET[service]}.{k}.{40 + k}"


def backend_label(c: Conventions, service: str, k: int) -> str:
    """A backend pod's label: its name (the backends' SDKs set k8s.pod.name), or its Zipkin endpoint."""
    if c.identity == "endpoint":
        return f"{backend_ip(service, k)}:{_PORT[service]}"
    return backend_pod(service, k)


@dataclass
class Resources:
    bff: list[list[int]] = field(default_factory=list)  # [pod][proc]
    pers: list[int] = field(default_factory=list)
    rerank: dict[tuple[int, int], int] = field(default_factory=dict)  # (pod, pid) -> resource
    es: list[int] = field(default_factory=list)


def _attrs(c: Conventions, service: str, pod: str, pid: int, sdk: str,
           extra: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": sdk, **extra}
    if c.identity == "process":
        attrs.update({"host.name": pod, "process.pid": pid})
    else:
        attrs.update({"k8s.pod.name": pod, "k8s.namespace.name": "search", "host.name": pod})
    return attrs


def resources(table: TraceTable, c: Conventions, pods: int, procs: int, pers: int,
              es_nodes: int) -> Resources:
    out = Resources()
    node = {"process.runtime.name": "nodejs", "process.runtime.version": "20.11.1",
            "service.version": "4.18.2"}
    for k in range(pods):
        out.bff.append([table.resource(_attrs(c, BFF, bff_pod(k), bff_pid(k, j + 1), "nodejs", node),
                                       bff_ip(k), 3000) for j in range(procs)])
    for k in range(pers):
        attrs = _attrs(c, PERS, backend_pod(PERS, k), 1, "go", {"k8s.pod.name": backend_pod(PERS, k)})
        out.pers.append(table.resource(attrs, backend_ip(PERS, k), 8080))
    if c.es_traced:
        for k in range(es_nodes):
            attrs = {"service.version": "8.13.2", "k8s.pod.name": backend_pod(ES, k)}
            out.es.append(table.resource(_attrs(c, ES, backend_pod(ES, k), 7, "java", attrs),
                                         backend_ip(ES, k), 9200))
    return out


def rerank_resource(table: TraceTable, c: Conventions, res: Resources, pod: int, pid: int) -> int:
    """The re-ranker worker's resource: every gunicorn worker is a process with its own SDK."""
    if (pod, pid) not in res.rerank:
        attrs = _attrs(c, RERANK, backend_pod(RERANK, pod), pid, "python",
                       {"process.runtime.name": "cpython", "process.command": "gunicorn",
                        "k8s.pod.name": backend_pod(RERANK, pod)})
        res.rerank[(pod, pid)] = table.resource(attrs, backend_ip(RERANK, pod), 8000)
    return res.rerank[(pod, pid)]


def http_server(c: Conventions, method: str, route: str, status: int) -> dict[str, Any]:
    if c.new:
        return {"http.request.method": method, "http.route": route, "url.scheme": "http",
                "http.response.status_code": status}
    return {"http.method": method, "http.route": route, "http.scheme": "http", "http.status_code": status}


def http_client(c: Conventions, method: str, host: str, port: int, path: str,
                status: int | None) -> dict[str, Any]:
    url = f"http://{host}:{port}{path}"
    if c.new:
        out: dict[str, Any] = {"http.request.method": method, "url.full": url, "server.address": host,
                               "server.port": port}
        if status is not None:
            out["http.response.status_code"] = status
        else:
            out["error.type"] = "TimeoutError"
        return out
    out = {"http.method": method, "http.url": url, "net.peer.name": host, "net.peer.port": port}
    if status is not None:
        out["http.status_code"] = status
    return out


@dataclass
class Attempt:
    """One personalisation call: client span times, server times, the pod that served it."""

    start: float
    end: float
    timed_out: bool
    pod: int
    server_start: float
    server_end: float


@dataclass
class RequestTimes:
    pod: int
    proc: int
    root: tuple[float, float]
    normalize: tuple[float, float]
    query_len: int
    page: int
    attempts: list[Attempt]
    es: tuple[float, float]
    search: SearchReply
    rerank_call: tuple[float, float]
    rerank: RerankCall
    candidates: int
    mc: list[tuple[int, float, float, int, int]]  # (node, start, end, keys, misses)
    db: tuple[float, float, int] | None
    serialize: tuple[float, float]
    body_bytes: int
    gc: list[tuple[float, str, float]] = field(default_factory=list)  # (at, major/minor, ms)


def emit(table: TraceTable, c: Conventions, res: Resources, r: RequestTimes) -> None:
    trace = table.new_trace()
    me = res.bff[r.pod][r.proc]
    http = "@opentelemetry/instrumentation-http"
    size_key = "http.response.body.size" if c.new else "http.response_content_length"
    events = [(at, "gc", {"v8js.gc.type": kind, "gc.pause_ms": round(ms, 2)}) for at, kind, ms in r.gc]
    root = table.span(trace, None, ROOT, "Server", me, http, *r.root,
                      {**http_server(c, "GET", "/api/search", 200), size_key: r.body_bytes,
                       "search.page_size": r.page}, events=events if c.gc_events else None)
    table.span(trace, root, NORMALIZE, "Internal", me, "search-bff", *r.normalize,
               {"search.query.length": r.query_len})
    for a in r.attempts:
        parent = root
        if c.client_spans:
            parent = table.span(
                trace, root, c.client_name("GET"), "Client", me, http, a.start, a.end,
                http_client(c, "GET", PERS_HOST, 8080, "/v2/profile/u", None if a.timed_out else 200),
                "Error" if a.timed_out else "Unset",
                "The operation was aborted due to timeout" if a.timed_out else "", peer=PERS)
        if a.server_start < 0:  # aborted while waiting for a socket: never sent
            continue
        table.span(trace, parent, PERS_SERVER, "Server", res.pers[a.pod],
                   "go.opentelemetry.io/contrib/otelhttp", a.server_start, a.server_end,
                   http_server(c, "GET", "/v2/profile/{userId}", 200))
    db_sys = {"db.system": "elasticsearch", ("db.operation.name" if c.new else "db.operation"): "search",
              ("server.address" if c.new else "net.peer.name"): ES_HOST,
              "db.elasticsearch.path_parts.index": "products"}
    if c.new:
        db_sys["db.response.returned_rows"] = r.page
    es = table.span(trace, root, ES_CLIENT, "Client", me, "@elastic/transport", *r.es, db_sys, peer=ES)
    if c.es_traced:
        s = r.search
        coord = table.span(trace, es, "POST /{index}/_search", "Server", res.es[s.coord_node],
                           "elasticsearch", s.coord_start, s.coord_end,
                           http_server(c, "POST", "/{index}/_search", 200))
        for phase, calls in (("query", s.query), ("fetch/id", s.fetch)):
            for call in calls:
                table.span(trace, coord, f"indices:data/read/search[phase/{phase}]", "Internal",
                           res.es[call.node], "elasticsearch", call.start, call.end,
                           {"es.shard": call.shard, "es.index": "products"})
    parent = root
    if c.client_spans:
        parent = table.span(trace, root, c.client_name("POST"), "Client", me, http, *r.rerank_call,
                            http_client(c, "POST", RERANK_HOST, 8000, "/v1/rerank", 200), peer=RERANK)
    if c.reranker_traced:
        rr = r.rerank
        w = rerank_resource(table, c, res, rr.pod, rr.pid)
        srv = table.span(trace, parent, RERANK_SERVER, "Server", w, "opentelemetry.instrumentation.falcon",
                         rr.start, rr.end, {**http_server(c, "POST", "/v1/rerank", 200),
                                            "rerank.candidates": r.candidates})
        table.span(trace, srv, "build_features", "Internal", w, "ltr_service", rr.start + 50_000,
                   rr.features_end)
        table.span(trace, srv, "lightgbm.predict", "Internal", w, "ltr_service", rr.score_start,
                   rr.end - 200_000, {"model.name": "ltr-lambdamart-v31"})
    op = "db.operation.name" if c.new else "db.operation"
    for node, start, end, keys, _misses in r.mc:
        table.span(trace, root, GET_MULTI, "Client", me, "@opentelemetry/instrumentation-memcached", start,
                   end, {"db.system": "memcached", op: "getMulti",
                         ("server.address" if c.new else "net.peer.name"): f"memcached-{node}.memcached",
                         "memcached.keys": keys}, peer=MEMCACHED)
    if r.db is not None:
        start, end, missing = r.db
        key = "db.query.text" if c.new else "db.statement"
        table.span(trace, root, c.db_span, "Client", me, "@opentelemetry/instrumentation-pg", start, end,
                   {"db.system": "postgresql", key: "SELECT * FROM catalog.products WHERE id = ANY($1)",
                    ("db.namespace" if c.new else "db.name"): "catalog", "db.ids": missing}, peer=DB)
    table.span(trace, root, SERIALIZE, "Internal", me, "search-bff", *r.serialize,
               {"search.result.count": r.page, size_key: r.body_bytes})
