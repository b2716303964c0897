"""How the blind family `spring-loom` (spring_loom.py) is instrumented, per seed: resources (pod names or
ip:port as service.instance.id, or Zipkin endpoints), old or new semantic conventions, whether the
ingress exports its spans, whether the manual `features` / `rerank` spans exist, whether JFR events
(pinned virtual threads, allocation stalls) ride on the server span; and one request's spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

API, FEATURES, INGRESS = "search-api", "feature-service", "ingress-nginx"
ROOT, ROUTE = "GET /api/search", "/api/search"
GRPC = "features.v1.FeatureService/GetFeatures"
RERANK, FEATURE_SPAN = "rerank", "features"
_SUFFIX = ("x2k4q", "m8r7t", "b5wzn", "q9hcd", "t4vjl", "h6pfr")
_HASH = ("6d9c7b5f4", "84f6c9d7b")  # the ReplicaSet before and after the deploy
ES_NODES = tuple(f"es-data-{i}.search.svc" for i in range(3))
PG_HOST, KAFKA_BROKER = "pg-orders.db.internal", "kafka-0.kafka.svc:9092"
TOPIC, MODEL = "impressions", "ms-marco-MiniLM-L-6-v2.onnx"
_AGENT = "io.opentelemetry"


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` pod | ipport | endpoint, `ingress`: nginx
    exports spans, `manual`: the INTERNAL features/rerank spans exist, `jfr`: JFR events on spans."""

    semconv: str
    ident: str
    ingress: bool
    manual: bool
    jfr: bool

    @property
    def es(self) -> str:
        return "search" if self.semconv == "new" else "POST /products/_search"

    @property
    def jdbc(self) -> str:
        return "SELECT purchases" if self.semconv == "new" else "SELECT shop.purchases"

    @property
    def kafka(self) -> str:
        return f"publish {TOPIC}" if self.semconv == "new" else f"{TOPIC} send"

    @property
    def top(self) -> str:
        """The span that starts each trace."""
        return ROUTE if self.ingress else ROOT

    def rerank_span(self) -> str:
        return RERANK if self.manual else ROOT

    def features_span(self) -> str:
        return FEATURE_SPAN if self.manual else GRPC

    def label(self, service: str, k: int, gen: int = 0) -> str:
        """The instance as the store names it."""
        if self.ident == "pod":
            return pod_name(service, k, gen)
        ip, port = endpoint(service, k, gen)
        return f"{ip}:{port}"


def pod_name(service: str, k: int, gen: int = 0) -> str:
    if service == API:
        return f"search-api-{_HASH[gen]}-{_SUFFIX[k + gen] if gen else _SUFFIX[k]}"
    if service == FEATURES:
        return f"feature-service-5f7d8-{k}"
    return f"ingress-nginx-controller-{k}"


def endpoint(service: str, k: int, gen: int = 0) -> tuple[str, int]:
    if service == API:
        return f"10.8.{2 + gen}.{11 + k}", 8080
    if service == FEATURES:
        return f"10.8.5.{20 + k}", 9090
    return f"10.8.0.{5 + k}", 443


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def get(self, service: str, k: int, gen: int = 0) -> int:
        key = (service, k, gen)
        if key not in self.made:
            self.made[key] = self.table.resource(self._attrs(service, k, gen), *endpoint(service, k, gen))
        return self.made[key]

    def _attrs(self, service: str, k: int, gen: int) -> dict[str, Any]:
        lang = {API: "java", FEATURES: "go", INGRESS: "cpp"}[service]
        attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": lang}
        if self.style.ident == "endpoint":
            return attrs
        attrs.update({"k8s.pod.name": pod_name(service, k, gen),
                      "service.instance.id": self.style.label(service, k, gen)})
        if service == API:
            attrs.update({"process.runtime.name": "OpenJDK Runtime Environment",
                          "process.runtime.version": "21.0.5+11-LTS",
                          "service.version": f"2026.11.{27 + gen}"})
        return attrs


@dataclass
class Grpc:
    start: float
    end: float
    server: tuple[float, float]
    backend: int
    keys: int


@dataclass
class Timeline:
    """One search request as the model computed it."""

    pod: int
    gen: int
    ingress: tuple[float, float]
    connect_ms: float
    root: tuple[float, float]
    jdbc: tuple[float, float]
    es: tuple[float, float]
    features: tuple[float, float]
    grpc: Grpc | None
    rerank: tuple[float, float]
    pinned: tuple[float, float]  # from mounting to leave the synchronized block
    kafka: tuple[float, float]
    candidates: int
    misses: int
    heavy: bool
    coordinator: int  # the ES node the client sent the query to
    stalls: list[tuple[float, float]]  # allocation stalls this request's thread sat in
    user: int


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _events(style: Style, tl: Timeline, thread: str) -> list[tuple[float, str, dict[str, Any]]]:
    """JFR events streamed onto the server span: pinned virtual threads (threshold 20 ms) and ZGC
    allocation stalls of this request's thread."""
    if not style.jfr:
        return []
    out = []
    pinned = tl.pinned[1] - tl.pinned[0]
    if pinned > 20 * NS_PER_MS:
        out.append((tl.pinned[0], "jdk.VirtualThreadPinned",
                    {"jfr.duration_ms": round(pinned / NS_PER_MS, 3), "jfr.thread": thread,
                     "jfr.stack_top": "com.shop.search.rank.OnnxScorer.score(OnnxScorer.java:58)"}))
    for a, b in tl.stalls:
        out.append((a, "jdk.ZAllocationStall", {"jfr.duration_ms": round((b - a) / NS_PER_MS, 3),
                                                "jfr.thread": thread, "gc.name": "ZGC Minor"}))
    return out


def write_request(table: TraceTable, res: Resources, tl: Timeline) -> None:
    st = res.style
    new = st.semconv == "new"
    trace = table.new_trace()
    api = res.get(API, tl.pod, tl.gen)
    body = 2400 + 900 * 24 + (60_000 if tl.heavy else 0)
    http = ({"http.request.method": "GET", "url.path": ROUTE, "http.response.status_code": 200} if new
            else {"http.method": "GET", "http.target": ROUTE, "http.status_code": 200})
    parent = None
    if st.ingress:
        ngx = res.get(INGRESS, trace % 2)
        ip, port = endpoint(API, tl.pod, tl.gen)
        parent = table.span(trace, None, ROUTE, "Server", ngx, "nginx", *tl.ingress,
                            {**http, "upstream.address": f"{ip}:{port}",
                             "nginx.upstream_connect_time": round(tl.connect_ms / 1000, 3),
                             "nginx.upstream_header_time": round((tl.root[1] - tl.ingress[0]) / 1e9, 3)})
    size = {"http.response.body.size": body} if new else {"http.response_content_length": body}
    thread = f"tomcat-handler-{tl.user % 9973}"
    root = table.span(trace, parent, ROOT, "Server", api, f"{_AGENT}.tomcat-10.0",
                      *tl.root, {**http, "http.route": ROUTE, **size,
                                 "app.query.heavy": tl.heavy, "enduser.id": f"u{tl.user}"},
                      events=_events(st, tl, thread))
    db = {"db.system": "postgresql", ("db.namespace" if new else "db.name"): "shop",
          ("db.query.text" if new else "db.statement"):
              "select p.sku, p.ts from purchases p where p.user_id=? order by p.ts desc limit ?",
          **_peer(st, PG_HOST, 5432)}
    table.span(trace, root, st.jdbc, "Client", api, f"{_AGENT}.jdbc", *tl.jdbc, db, peer="postgresql")
    es = {"db.system": "elasticsearch", **_peer(st, ES_NODES[tl.coordinator], 9200),
          ("http.request.method" if new else "http.method"): "POST", "elasticsearch.hits": tl.candidates}
    if new:
        es["db.operation.name"] = "search"
    table.span(trace, root, st.es, "Client", api, f"{_AGENT}.elasticsearch-rest-7.0", *tl.es, es,
               peer="elasticsearch")
    under = root
    if st.manual:
        under = table.span(trace, root, FEATURE_SPAN, "Internal", api, "com.shop.search", *tl.features,
                           {"features.requested": tl.candidates, "features.cache_misses": tl.misses})
    if tl.grpc is not None:
        g = tl.grpc
        rpc = {"rpc.system": "grpc", "rpc.service": "features.v1.FeatureService", "rpc.method": "GetFeatures"}
        client = table.span(trace, under, GRPC, "Client", api, f"{_AGENT}.grpc-1.6", g.start, g.end,
                            {**rpc, "rpc.grpc.status_code": 0, "app.features.keys": g.keys,
                             **_peer(st, "feature-service.search.svc", 9090)}, peer=FEATURES)
        table.span(trace, client, GRPC, "Server", res.get(FEATURES, g.backend), "go.opentelemetry.io/grpc",
                   *g.server, {**rpc, "rpc.grpc.status_code": 0})
    if st.manual:
        table.span(trace, root, RERANK, "Internal", api, "com.shop.search", *tl.rerank,
                   {"rerank.candidates": min(tl.candidates, 200), "model.name": MODEL,
                    "onnxruntime.intra_op_threads": 2})
    kafka = {"messaging.system": "kafka", ("messaging.destination.name" if new else "messaging.destination"):
             TOPIC, "messaging.message.body.size" if new else "messaging.message_payload_size_bytes": 100_000}
    if not new:
        kafka["messaging.destination_kind"] = "topic"
    table.span(trace, root, st.kafka, "Producer", api, f"{_AGENT}.kafka-clients-0.11", *tl.kafka, kafka,
               peer="kafka")
