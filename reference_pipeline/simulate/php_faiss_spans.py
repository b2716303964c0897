"""How the blind family `php-faiss` (php_faiss.py) is instrumented, per seed: resources (the OTel
operator's `service.instance.id`, host.name + process.pid per PHP-FPM worker process, or a Zipkin
endpoint), old or new semantic conventions, gRPC or HTTP to the retrieval service, and whether the C++
side exports its manual spans; and the spans of one request, written from its timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.php_faiss_backends import Embed, Search
from reference_pipeline.simulate.trace_table import TraceTable

WEB, NGINX, ANN = "storefront", "storefront-nginx", "ann-retrieval"
_SUFFIX = ("x2k4q", "m8r7t", "b5wzn", "q9hcd", "t4vjl", "h6pfr")
REPLICAS = tuple(f"mysql-replica-{i}.db.internal" for i in range(3))
REDIS_HOST = "redis-embeddings.cache.internal"
ANN_HOST = "ann-retrieval.search.svc.cluster.local"
RERANK, RENDER = "SimilarProducts::rerank", "view.render"
FAISS, ENCODE, TRT = "faiss.search", "encode_query", "trt.enqueue"
CONNECT, EXECUTE, GET, SET = "PDO::__construct", "PDOStatement::execute", "Redis::get", "Redis::set"
GRPC_SEARCH, GRPC_EMBED = "ann.v1.Retrieval/Search", "ann.v1.Retrieval/Embed"
GUZZLE = "GuzzleHttp\\Client::send"
INDEX_OLD, INDEX_NEW = "products-ivf8192-pq64@2026-11-20", "products-ivf8192-pq64@2026-11-27"
NGINX_PID, ANN_PID = 8, 1
_PHP = "io.opentelemetry.contrib.php"


def web_pod(k: int) -> str:
    return f"storefront-7c9f6d5b8-{_SUFFIX[k]}"


def ann_pod(j: int) -> str:
    return f"ann-retrieval-{j}"


def first_pid(worker: int) -> int:
    """PHP-FPM's master is PID 1 in the container; its first workers are 7, 8, ..."""
    return 7 + worker


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` instance-id | host-pid | endpoint,
    `transport` grpc | http, `internals`: the C++ manual spans are exported."""

    semconv: str
    ident: str
    transport: str
    internals: bool

    @property
    def root(self) -> str:  # Laravel's route URI: the old instrumentation used it as is
        return "GET /products/{id}/similar" if self.semconv == "new" else "GET products/{id}/similar"

    @property
    def nginx(self) -> str:  # ngx_otel_module names the span after the location by default
        return {"instance-id": "~ \\.php$", "host-pid": "GET /index.php", "endpoint": "index.php"}[self.ident]

    def server(self, method: str) -> str:
        if self.transport == "grpc":
            return GRPC_SEARCH if method == "search" else GRPC_EMBED
        return f"POST /v1/{method}"

    def client(self, method: str) -> str:
        return self.server(method) if self.transport == "grpc" else GUZZLE

    def scan_span(self) -> str:
        """Where a search's index work shows: faiss.search, or only the SERVER span."""
        return FAISS if self.internals else self.server("search")

    def label(self, service: str, pod: int, pid: int | None = None) -> str:
        """The instance as the store names it (service.instance.id, host.name:process.pid, ip:port)."""
        name = ann_pod(pod) if service == ANN else web_pod(pod)
        if service == ANN and self.ident != "endpoint":
            return f"{name}:{ANN_PID}"
        if self.ident == "instance-id":
            return f"shop.{name}.{'nginx' if service == NGINX else 'php-fpm'}"
        if self.ident == "host-pid":
            return f"{name}:{NGINX_PID if service == NGINX else pid}"
        ip, port = endpoint(service, pod)
        return f"{ip}:{port}"


def endpoint(service: str, pod: int) -> tuple[str, int]:
    if service == ANN:
        return f"10.12.7.{10 + pod}", 50051
    return f"10.12.3.{20 + pod}", 80 if service == NGINX else 9000


@dataclass
class Resources:
    """The run's resources, made when first used (a PHP-FPM worker that replaces a recycled one is a
    new process: on the host-pid seed, a new resource)."""

    table: TraceTable
    style: Style
    made: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def get(self, service: str, pod: int, pid: int = 0) -> int:
        key = (service, pod, pid if self.style.ident == "host-pid" and service == WEB else 0)
        if key not in self.made:
            self.made[key] = self.table.resource(self._attrs(service, pod, pid), *endpoint(service, pod))
        return self.made[key]

    def _attrs(self, service: str, pod: int, pid: int) -> dict[str, Any]:
        name = ann_pod(pod) if service == ANN else web_pod(pod)
        lang = "php" if service == WEB else "cpp"
        attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": lang}
        if self.style.ident == "endpoint":
            return attrs
        attrs.update({"k8s.namespace.name": "search" if service == ANN else "shop", "k8s.pod.name": name})
        if service == ANN or self.style.ident == "host-pid":
            attrs.update({"host.name": name, "process.pid": ANN_PID if service == ANN else (
                NGINX_PID if service == NGINX else pid)})
        if service != ANN and self.style.ident == "instance-id":
            attrs["service.instance.id"] = self.style.label(service, pod)
        if service == WEB:
            attrs.update({"process.runtime.name": "php", "process.runtime.version": "8.3.14"})
        return attrs


@dataclass
class Call:
    """One call from PHP to ann-retrieval: the CLIENT span's times, whether its deadline cut it, the
    retrieval pod that served it and what happened there."""

    start: float
    end: float
    failed: bool
    pod: int
    served: Search | Embed


@dataclass
class Timeline:
    """One storefront request, as its model computed it."""

    pod: int
    pid: int
    replica: int
    nginx: tuple[float, float]
    root: tuple[float, float]
    connect: tuple[float, float]
    product_query: tuple[float, float]
    cache_get: tuple[float, float]
    embed: Call | None
    cache_set: tuple[float, float] | None
    search: Call
    nprobe: int
    k: int
    hydrate: tuple[float, float]
    rerank: tuple[float, float]
    render: tuple[float, float]
    shown: int
    candidates: int  # re-ranked: the k returned, or 24 bestsellers after a failed call
    product_id: int
    swapped: bool = False


def _db(style: Style, host: str, statement: str | None) -> dict[str, Any]:
    """A PDO span's attributes (a connect carries no statement)."""
    new = style.semconv == "new"
    attrs: dict[str, Any] = {"db.system": "mysql", ("db.namespace" if new else "db.name"): "shop",
                             **_peer(style, host, 3306)}
    if statement is not None:
        attrs["db.query.text" if new else "db.statement"] = statement
    return attrs


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _call_attrs(style: Style, method: str, failed: bool) -> tuple[dict[str, Any], str]:
    if style.transport == "grpc":
        attrs = {"rpc.system": "grpc", "rpc.service": "ann.v1.Retrieval", "rpc.method": method.title(),
                 "rpc.grpc.status_code": 4 if failed else 0, **_peer(style, ANN_HOST, 50051)}
        return attrs, "4 DEADLINE_EXCEEDED: Deadline Exceeded" if failed else ""
    attrs = {"http.method": "POST", "http.url": f"http://{ANN_HOST}:8080/v1/{method}",
             **_peer(style, ANN_HOST, 8080)}
    if not failed:
        attrs["http.status_code"] = 200
    return attrs, "cURL error 28: Operation timed out after 1000 milliseconds" if failed else ""


def _server_attrs(style: Style, method: str) -> dict[str, Any]:
    if style.transport == "grpc":
        return {"rpc.system": "grpc", "rpc.service": "ann.v1.Retrieval", "rpc.method": method.title(),
                "rpc.grpc.status_code": 0}
    return {"http.method": "POST", "http.target": f"/v1/{method}", "http.status_code": 200}


def write_search(table: TraceTable, res: Resources, trace: int, parent: int | None, pod: int, s: Search,
                 nprobe: int, k: int, swapped: bool) -> None:
    """The retrieval side of one Search (a root SERVER span when its caller is not traced)."""
    style, me = res.style, res.get(ANN, pod)
    server = table.span(trace, parent, style.server("search"), "Server", me, "ann-retrieval", s.start, s.end,
                        {**_server_attrs(style, "search"), "ann.top_k": k})
    if style.internals:
        table.span(trace, server, FAISS, "Internal", me, "ann-retrieval", s.scan_start, s.scan_end,
                   {"faiss.nprobe": nprobe, "faiss.k": k, "faiss.index": INDEX_NEW if swapped else INDEX_OLD})


def _write_embed(table: TraceTable, res: Resources, trace: int, parent: int, pod: int, e: Embed) -> None:
    style, me = res.style, res.get(ANN, pod)
    server = table.span(trace, parent, style.server("embed"), "Server", me, "ann-retrieval", e.start, e.end,
                        _server_attrs(style, "embed"))
    if style.internals:
        enc = table.span(trace, server, ENCODE, "Internal", me, "ann-retrieval", e.start, e.trt_end,
                         {"model.name": "product-encoder-v3", "model.max_seq_len": 512})
        table.span(trace, enc, TRT, "Internal", me, "ann-retrieval", e.tokenize_end, e.trt_end,
                   {"trt.batch.size": e.batch, "trt.engine": "product-encoder-v3.fp16.plan"})


def write_request(table: TraceTable, res: Resources, tl: Timeline) -> None:
    style = res.style
    trace = table.new_trace()
    web, ngx = res.get(WEB, tl.pod, tl.pid), res.get(NGINX, tl.pod)
    new = style.semconv == "new"
    path = f"/products/{tl.product_id}/similar"
    ok = 200
    body = 1800 + 950 * tl.shown
    http = ({"http.request.method": "GET", "url.path": path, "http.response.status_code": ok} if new
            else {"http.method": "GET", "http.target": path, "http.status_code": ok})
    top = table.span(trace, None, style.nginx, "Server", ngx, "nginx", *tl.nginx, http)
    route = "/products/{id}/similar" if new else "products/{id}/similar"
    size = {"http.response.body.size": body} if new else {"http.response_content_length": body}
    root = table.span(trace, top, style.root, "Server", web, f"{_PHP}.laravel", *tl.root,
                      {**http, "http.route": route, **size})
    host = REPLICAS[tl.replica]
    table.span(trace, root, CONNECT, "Client", web, f"{_PHP}.pdo", *tl.connect, _db(style, host, None),
               peer="mysql")
    table.span(trace, root, EXECUTE, "Client", web, f"{_PHP}.pdo", *tl.product_query,
               _db(style, host, "select * from `products` where `id` = ? limit 1"), peer="mysql")
    cache = {"db.system": "redis", ("db.operation.name" if new else "db.operation"): "GET",
             **_peer(style, REDIS_HOST, 6379)}
    table.span(trace, root, GET, "Client", web, f"{_PHP}.redis", *tl.cache_get, cache, peer="redis")
    for method, call in (("embed", tl.embed), ("search", tl.search)):
        if call is None:
            continue
        attrs, message = _call_attrs(style, method, call.failed)
        if method == "search":
            attrs["ann.top_k"] = tl.k
        scope = f"{_PHP}.grpc" if style.transport == "grpc" else f"{_PHP}.guzzle"
        client = table.span(trace, root, style.client(method), "Client", web, scope, call.start, call.end,
                            attrs, "Error" if call.failed else "Unset", message, peer=ANN)
        if isinstance(call.served, Embed):
            _write_embed(table, res, trace, client, call.pod, call.served)
            if tl.cache_set is not None:
                table.span(trace, root, SET, "Client", web, f"{_PHP}.redis", *tl.cache_set,
                           {**cache, ("db.operation.name" if new else "db.operation"): "SET"}, peer="redis")
        else:
            write_search(table, res, trace, client, call.pod, call.served, tl.nprobe, tl.k, tl.swapped)
    table.span(trace, root, EXECUTE, "Client", web, f"{_PHP}.pdo", *tl.hydrate,
               _db(style, host, "select * from `products` where `id` in (?, ...) and `in_stock` = 1"),
               peer="mysql")
    table.span(trace, root, RERANK, "Internal", web, "storefront", *tl.rerank,
               {"app.candidates.count": tl.candidates})
    table.span(trace, root, RENDER, "Internal", web, "storefront", *tl.render,
               {"view.name": "products.similar", "app.items.rendered": tl.shown})
