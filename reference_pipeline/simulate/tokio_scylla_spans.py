"""How the blind family `tokio-scylla` (tokio_scylla.py) is instrumented, per seed: the `tracing` crate
with tracing-opentelemetry (span names are Rust module paths), tower-http's request span, the Scylla
Rust driver's per-attempt `Request` spans and hyper-util's `resolve` / `connect` spans where the seed
exports them; instances as the OTel operator's `service.instance.id`, host.name + process.pid, or a
Zipkin endpoint; old or new semantic conventions. The tokio runtime itself emits nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.tokio_scylla_runtime import Read
from reference_pipeline.simulate.trace_table import TraceTable

API, GATEWAY = "embed-api", "search-gateway"
TOKENIZE = "embed_api::text::tokenize"
FEATURES = "embed_api::features::load"
CACHE_GET, CACHE_PUT = "embed_api::cache::multi_get", "embed_api::cache::put"
USER, ITEMS = "embed_api::features::user_features", "embed_api::features::item_vectors"
DRIVER = "Request"  # the Scylla Rust driver's span per attempt
PROVIDER = "embed_api::provider::embed"
RESOLVE, CONNECT = "resolve", "connect"  # hyper-util's connector spans
RERANK, ORT = "embed_api::rerank::score", "ort::session::run"
PROVIDER_HOST = "api.embedprovider.com"
NODES = tuple(f"10.40.2.{11 + k}" for k in range(6))
MODELS = ("ms-marco-MiniLM-L-6-v2-int8", "ms-marco-MiniLM-L-12-v2-int8")
_POD = ("7d9c5f8b6-kx2lp", "7d9c5f8b6-q8wzr", "7d9c5f8b6-m4tnd", "7d9c5f8b6-h7vcs", "7d9c5f8b6-b2jfq")


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` instance-id | host-pid | endpoint,
    `internals`: the driver's and hyper-util's spans are exported (the `tracing` filter lets them
    through), `server`: tower-http's request span name."""

    semconv: str
    ident: str
    internals: bool
    server: str

    @property
    def client(self) -> str:  # the HTTP client span name: the method (new) or "HTTP <method>" (old)
        return "POST" if self.semconv == "new" else "HTTP POST"

    @property
    def gateway(self) -> str:
        return "GET /api/search"

    def label(self, service: str, pod: int) -> str:
        """The instance as the store names it."""
        if self.ident == "instance-id":
            return f"search.{pod_name(service, pod)}.{service}"
        if self.ident == "host-pid":
            return f"{pod_name(service, pod)}:1"
        ip, port = endpoint(service, pod)
        return f"{ip}:{port}"


def pod_name(service: str, pod: int) -> str:
    return f"{service}-{_POD[pod]}" if service == API else f"{service}-5b7f9-{pod:02d}x"


def endpoint(service: str, pod: int) -> tuple[str, int]:
    return (f"10.40.7.{20 + pod}", 8080) if service == API else (f"10.40.5.{30 + pod}", 8000)


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
        lang = "rust" if service == API else "go"
        attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": lang}
        if self.style.ident == "endpoint":
            return attrs
        attrs.update({"k8s.namespace.name": "search", "k8s.pod.name": pod_name(service, pod),
                      "host.name": pod_name(service, pod), "process.pid": 1})
        if self.style.ident == "instance-id":
            attrs["service.instance.id"] = self.style.label(service, pod)
        if service == API:
            attrs.update({"service.version": "2.14.3", "process.runtime.name": "tokio",
                          "telemetry.sdk.name": "opentelemetry", "telemetry.sdk.version": "0.27.1"})
        return attrs


@dataclass
class Attempt:
    """One HTTP exchange with the provider (a hyper CLIENT span)."""

    start: float
    end: float
    status: int
    retry_after: int | None = None
    resolve: tuple[float, float] | None = None
    connect: tuple[float, float] | None = None
    syn_drops: int = 0
    dns_lost: int = 0


@dataclass
class Timeline:
    """One request as the model computed it."""

    gw_pod: int
    pod: int
    gateway: tuple[float, float]
    client: tuple[float, float]
    server: tuple[float, float]
    tokenize: tuple[float, float]
    chars: int
    tokens: int
    features: tuple[float, float]
    cache_get: tuple[float, float]
    items: int
    misses: int
    block_miss: bool
    user: Read
    user_start: float
    anonymous: bool
    item_read: Read | None
    put: tuple[float, float] | None
    provider: tuple[float, float] | None
    attempts: list[Attempt]
    rerank: tuple[float, float]
    ort: tuple[float, float]
    model: int
    inline: bool


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _cql(style: Style, statement: str, consistency: str, read: Read) -> dict[str, Any]:
    new = style.semconv == "new"
    return {("db.system.name" if new else "db.system"): "cassandra",
            ("db.namespace" if new else "db.name"): "features",
            ("db.query.text" if new else "db.statement"): statement,
            ("cassandra.consistency.level" if new else "db.cassandra.consistency_level"): consistency,
            ("cassandra.speculative_execution.count" if new else "db.cassandra.speculative_execution_count"):
                0, **_peer(style, NODES[read.attempts[0][0]], 9042)}


def _read(table: TraceTable, me: int, trace: int, parent: int, style: Style, name: str, statement: str,
          consistency: str, read: Read, start: float, fields: dict[str, Any]) -> None:
    """Our #[instrument] span around a read (a CLIENT span), or, where the driver's spans are exported,
    an INTERNAL one with the driver's `Request` span per attempt."""
    attrs = _cql(style, statement, consistency, read)
    if not style.internals:
        table.span(trace, parent, name, "Client", me, "embed_api", start, read.end, {**attrs, **fields},
                   peer="scylla")
        return
    own = table.span(trace, parent, name, "Internal", me, "embed_api", start, read.end, fields)
    for node, a, b in read.attempts:
        table.span(trace, own, DRIVER, "Client", me, "scylla", a, b,
                   {**attrs, **_peer(style, NODES[node], 9042)}, peer="scylla")


def write_request(table: TraceTable, res: Resources, tl: Timeline, consistency: str) -> None:
    style = res.style
    new = style.semconv == "new"
    trace = table.new_trace()
    gw, me = res.get(GATEWAY, tl.gw_pod), res.get(API, tl.pod)
    top = table.span(trace, None, style.gateway, "Server", gw, "go.opentelemetry.io/otel/http", *tl.gateway,
                     {"http.request.method" if new else "http.method": "GET", "http.route": "/api/search",
                      ("http.response.status_code" if new else "http.status_code"): 200})
    url = f"http://{API}.search.svc.cluster.local:8080/v1/rerank"
    call = table.span(trace, top, style.client, "Client", gw, "go.opentelemetry.io/otel/http", *tl.client,
                      {("url.full" if new else "http.url"): url, **_peer(style, f"{API}.search", 8080),
                       ("http.response.status_code" if new else "http.status_code"): 200}, peer=API)
    http = ({"http.request.method": "POST", "http.route": "/v1/rerank", "http.response.status_code": 200}
            if new else {"http.method": "POST", "http.target": "/v1/rerank", "http.status_code": 200})
    root = table.span(trace, call, style.server, "Server", me, "tower_http::trace", *tl.server, http)
    table.span(trace, root, TOKENIZE, "Internal", me, "embed_api", *tl.tokenize,
               {"text.chars": tl.chars, "tokens.count": tl.tokens})
    feats = table.span(trace, root, FEATURES, "Internal", me, "embed_api", *tl.features,
                       {"items.count": tl.items})
    table.span(trace, feats, CACHE_GET, "Internal", me, "embed_api", *tl.cache_get,
               {"cache.items": tl.items, "cache.misses": tl.misses,
                "rocksdb.block_cache_miss": tl.block_miss})
    stmt = "SELECT features FROM features.user_features WHERE user_id = ?"
    _read(table, me, trace, feats, style, USER, stmt, consistency, tl.user, tl.user_start,
          {"user.anonymous": tl.anonymous})
    if tl.item_read is not None:
        stmt = "SELECT item_id, vector FROM features.item_vectors WHERE item_id IN ?"
        _read(table, me, trace, feats, style, ITEMS, stmt, consistency, tl.item_read, tl.cache_get[1],
              {"items.missing": tl.misses})
    if tl.put is not None:
        table.span(trace, feats, CACHE_PUT, "Internal", me, "embed_api", *tl.put, {"cache.items": tl.misses})
    if tl.provider is not None:
        prov = table.span(trace, root, PROVIDER, "Internal", me, "embed_api", *tl.provider,
                          {"provider.model": "text-embedding-3-small", "attempts": len(tl.attempts)})
        for k, a in enumerate(tl.attempts):
            status, message = ("Error", "429 Too Many Requests") if a.status == 429 else ("Unset", "")
            attrs = {("http.request.method" if new else "http.method"): "POST",
                     ("url.full" if new else "http.url"): f"https://{PROVIDER_HOST}/v1/embeddings",
                     **_peer(style, PROVIDER_HOST, 443),
                     ("http.response.status_code" if new else "http.status_code"): a.status}
            if new and k:
                attrs["http.request.resend_count"] = k
            events = []
            if a.retry_after is not None:
                events.append((a.end, "rate limited, backing off", {"retry_after_s": a.retry_after}))
            span = table.span(trace, prov, style.client, "Client", me, "reqwest", a.start, a.end, attrs,
                              status, message, events, peer="embedding-provider")
            if style.internals and a.resolve is not None and a.connect is not None:
                table.span(trace, span, RESOLVE, "Internal", me, "hyper_util::client::legacy::connect::dns",
                           *a.resolve, {"host": PROVIDER_HOST})
                table.span(trace, span, CONNECT, "Internal", me, "hyper_util::client::legacy::connect::http",
                           *a.connect, {"addr": "104.18.6.192:443", "tls": "rustls"})
    rr = table.span(trace, root, RERANK, "Internal", me, "embed_api", *tl.rerank,
                    {"rerank.candidates": tl.items, "rerank.inline": tl.inline})
    table.span(trace, rr, ORT, "Internal", me, "ort", *tl.ort,
               {"model.name": MODELS[tl.model], "rerank.candidates": tl.items,
                "onnxruntime.intra_op_threads": 1})
