"""How the blind family `go-ray` (go_ray.py) is instrumented, per seed: resources (the OTel operator's
`service.instance.id`, host.name + process.pid, or a Zipkin endpoint), old or new semantic conventions,
gRPC or HTTP from the gateway to Ray Serve's proxy, how much of Ray's replica internals is exported;
and the spans of one request, written from its timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.go_ray_serve import Attempt, FeastCall
from reference_pipeline.simulate.trace_table import TraceTable

GW, FEAST, RANKER = "search-gw", "feature-server", "ranker"
_SUFFIX = ("k2x7p", "m9q4t", "b6wzn", "r3hcd", "t8vjl", "h5pfr")
FEAST_HOST = "feature-server.feast.svc.cluster.local"
RAY_HOST = "ranker-serve-svc.ray.svc.cluster.local"
SHARDS = tuple(f"redis-online-{k}.feast.svc.cluster.local" for k in range(3))
MATERIALIZER = "feature-materializer.feast.svc.cluster.local"
PARSE, DECODE, ENCODE = "search.parseRequest", "search.decodeRanking", "search.encodeResponse"
FEAST_ROUTE = "POST /get-online-features"
HMGET, HSET, FALLBACK = "HMGET", "HSET", "feast.materialize_missing"
REPLICA = "Ranker.__call__ ray.remote_worker"
BATCH, FORWARD = "Ranker.rank_batch", "CrossEncoder.forward"
GRPC = "ranker.v1.Ranker/Rank"
_GO = "go.opentelemetry.io/contrib/instrumentation"


def gw_pod(k: int) -> str:
    return f"search-gw-6b7f9d8c4-{_SUFFIX[k]}"


def feast_pod(m: int) -> str:
    return f"feature-server-5c6d7f8b9-{_SUFFIX[m]}"


def ray_node(n: int) -> str:
    return f"ray-ranker-gpu-worker-{n}"


def replica_id(j: int) -> str:
    return "".join("abcdefghjkmnpqrstuvwxyz23456789"[(j * 7919 + 104729 * i + 13 * i * i + 11) % 31]
                   for i in range(8))


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` instance-id | host-pid | endpoint,
    `transport` grpc | http, `internals` full | batch | none (Ray replica spans below __call__)."""

    semconv: str
    ident: str
    transport: str
    internals: str

    @property
    def root(self) -> str:  # otelhttp: the new naming is method + route, the old the handler's name
        return "POST /v1/search" if self.semconv == "new" else "/v1/search"

    @property
    def feast_client(self) -> str:
        return "POST" if self.semconv == "new" else "POST /get-online-features"

    @property
    def proxy(self) -> str:
        return GRPC if self.transport == "grpc" else "POST /rank"

    @property
    def ranker_client(self) -> str:
        return GRPC if self.transport == "grpc" else "POST /rank"

    def compute_span(self) -> str:
        """Where a batch's model time shows: the forward span, the batch span, or only the replica's."""
        return {"full": FORWARD, "batch": BATCH, "none": REPLICA}[self.internals]

    def label(self, service: str, k: int, node: int = 0) -> str:
        """The instance as the store names it (service.instance.id, host.name:process.pid, ip:port);
        for the ranker, k < 0 is node -k-1's proxy, k >= 0 replica k (on `node`)."""
        if self.ident == "endpoint":
            ip, port = endpoint(service, k, node, self.transport)
            return f"{ip}:{port}"
        if self.ident == "instance-id":
            if service == GW:
                return f"search.{gw_pod(k)}.gateway"
            if service == FEAST:
                return f"feast.{feast_pod(k)}.feature-server"
            return f"ray.{ray_node(-k - 1)}.proxy" if k < 0 else f"ray.ranker#Ranker#{replica_id(k)}"
        host, pid = host_pid(service, k, node)
        return f"{host}:{pid}"


def host_pid(service: str, k: int, node: int) -> tuple[str, int]:
    if service == GW:
        return gw_pod(k), 1
    if service == FEAST:
        return feast_pod(k), 7
    return (ray_node(-k - 1), 412) if k < 0 else (ray_node(node), 1630 + 41 * k)


def endpoint(service: str, k: int, node: int, transport: str) -> tuple[str, int]:
    if service == GW:
        return f"10.40.1.{10 + k}", 8080
    if service == FEAST:
        return f"10.40.2.{10 + k}", 6566
    if k < 0:
        return f"10.40.3.{10 - k - 1}", 9000 if transport == "grpc" else 8000
    return f"10.40.3.{10 + node}", 10002 + k


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int], int] = field(default_factory=dict)

    def get(self, service: str, k: int, node: int = 0) -> int:
        if (service, k) not in self.made:
            attrs = self._attrs(service, k, node)
            where = endpoint(service, k, node, self.style.transport)
            self.made[(service, k)] = self.table.resource(attrs, *where)
        return self.made[(service, k)]

    def _attrs(self, service: str, k: int, node: int) -> dict[str, Any]:
        lang = "go" if service == GW else "python"
        attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": lang}
        if self.style.ident == "endpoint":
            return attrs
        host, pid = host_pid(service, k, node)
        attrs.update({"k8s.namespace.name": {GW: "search", FEAST: "feast", RANKER: "ray"}[service],
                      "k8s.pod.name": host})
        if self.style.ident == "host-pid":
            attrs.update({"host.name": host, "process.pid": pid})
        else:
            attrs["service.instance.id"] = self.style.label(service, k, node)
        if service == GW:
            attrs.update({"process.runtime.name": "go", "process.runtime.version": "go1.24.9"})
        elif service == RANKER:
            attrs["ray.actor.class"] = "ProxyActor" if k < 0 else "ServeReplica:ranker:Ranker"
        return attrs


@dataclass
class Timeline:
    """One search request, as its model computed it."""

    pod: int
    root: tuple[float, float]
    parse: tuple[float, float]
    feast_client: tuple[float, float]
    feast: FeastCall
    attempts: list[Attempt]
    decode: tuple[float, float]
    encode: tuple[float, float]
    top_k: int
    kb: float
    degraded: bool


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


_GRPC_CODE = {"OK": 0, "DEADLINE_EXCEEDED": 4, "UNAVAILABLE": 14}
_MESSAGE = {"DEADLINE_EXCEEDED": "rpc error: code = DeadlineExceeded desc = context deadline exceeded",
            "UNAVAILABLE": "rpc error: code = Unavailable desc = proxy is draining"}


def _client_attrs(style: Style, a: Attempt, top_k: int) -> tuple[dict[str, Any], str]:
    if style.transport == "grpc":
        attrs: dict[str, Any] = {"rpc.system": "grpc", "rpc.service": "ranker.v1.Ranker",
                                 "rpc.method": "Rank", "rpc.grpc.status_code": _GRPC_CODE[a.status],
                                 **_peer(style, RAY_HOST, 9000)}
        message = _MESSAGE.get(a.status, "")
    else:
        attrs = {"http.method": "POST", "http.url": f"http://{RAY_HOST}:8000/rank",
                 **_peer(style, RAY_HOST, 8000)}
        if a.status == "UNAVAILABLE":
            attrs["http.status_code"] = 503
        elif a.status == "OK":
            attrs["http.status_code"] = 200
        message = {"DEADLINE_EXCEEDED": 'Post "http://ranker-serve-svc:8000/rank": context deadline exceeded',
                   "UNAVAILABLE": "503 Service Unavailable"}.get(a.status, "")
    attrs["app.ranker.top_k"] = top_k
    if a.status == "OK":
        attrs["app.ranker.response_bytes"] = int(a.kb * 1024)
    return attrs, message


def _proxy_attrs(style: Style, a: Attempt) -> dict[str, Any]:
    if style.transport == "grpc":
        return {"rpc.system": "grpc", "rpc.service": "ranker.v1.Ranker", "rpc.method": "Rank",
                "rpc.grpc.status_code": _GRPC_CODE["UNAVAILABLE" if a.status == "UNAVAILABLE" else "OK"]}
    code = 503 if a.status == "UNAVAILABLE" else 200
    if style.semconv == "new":
        return {"http.request.method": "POST", "http.route": "/rank", "http.response.status_code": code}
    return {"http.method": "POST", "http.target": "/rank", "http.status_code": code}


def write_ranker(table: TraceTable, res: Resources, trace: int, parent: int | None, a: Attempt,
                 nodes: list[int], max_batch: int, wait_s: float) -> None:
    """The ranker's side of one attempt: the proxy's SERVER span (the router's wait inside it), the
    replica's span from the moment its loop took the call, and the batch / forward spans."""
    style = res.style
    proxy = res.get(RANKER, -a.proxy - 1)
    status = "Error" if a.status == "UNAVAILABLE" else "Unset"
    top = table.span(trace, parent, style.proxy, "Server", proxy, "ray.serve", a.proxy_start, a.proxy_end,
                     {**_proxy_attrs(style, a), "ray.serve.app": "ranker"}, status,
                     "proxy is draining" if status == "Error" else "")
    if a.replica < 0:
        return
    me = res.get(RANKER, a.replica, nodes[a.replica])
    rep = table.span(trace, top, REPLICA, "Consumer", me, "ray.serve", a.rep_start, a.rep_end,
                     {"ray.serve.deployment": "Ranker",
                      "ray.serve.replica": f"ranker#Ranker#{replica_id(a.replica)}",
                      "ray.serve.request.pairs": a.pairs})
    if style.internals == "none":
        return
    b_start, b_end, size = a.batch
    batch = table.span(trace, rep, BATCH, "Internal", me, "ray.serve", b_start, b_end,
                       {"serve.batch.size": size, "serve.batch.max_size": max_batch,
                        "serve.batch.wait_timeout_s": wait_s, "serve.batch.index": a.batch_index})
    if style.internals == "full":
        forward_start = b_start + (b_end - b_start) * 0.12
        table.span(trace, batch, FORWARD, "Internal", me, "torch", forward_start, b_end,
                   {"model.name": "cross-encoder-minilm-l12", "model.device": "cuda:0",
                    "model.pairs": size * a.pairs})


def write_request(table: TraceTable, res: Resources, tl: Timeline, nodes: list[int], max_batch: int,
                  wait_s: float) -> None:
    style = res.style
    trace = table.new_trace()
    gw = res.get(GW, tl.pod)
    new = style.semconv == "new"
    body = int(tl.kb * 1024)
    http = ({"http.request.method": "POST", "url.path": "/v1/search", "http.route": "/v1/search",
             "http.response.status_code": 200, "http.response.body.size": body} if new
            else {"http.method": "POST", "http.target": "/v1/search", "http.status_code": 200,
                  "http.response_content_length": body})
    root = table.span(trace, None, style.root, "Server", gw, f"{_GO}/net/http/otelhttp", *tl.root,
                      {**http, "app.top_k": tl.top_k, "app.degraded": tl.degraded})
    table.span(trace, root, PARSE, "Internal", gw, "search-gw", *tl.parse, {"app.top_k": tl.top_k})
    f = tl.feast
    method = {"http.request.method": "POST"} if new else {"http.method": "POST"}
    client = table.span(trace, root, style.feast_client, "Client", gw, f"{_GO}/net/http/otelhttp",
                        *tl.feast_client, {**method, **_peer(style, FEAST_HOST, 6566),
                         ("http.response.status_code" if new else "http.status_code"): 200}, peer=FEAST)
    fs = res.get(FEAST, f.pod)
    server = table.span(trace, client, FEAST_ROUTE, "Server", fs, "opentelemetry.instrumentation.fastapi",
                        *f.server, {**method, "http.route": "/get-online-features",
                                    "feast.entities.missing": f.missing})
    db_op = "db.operation.name" if new else "db.operation"
    for shard, start, end, keys in f.reads:
        table.span(trace, server, HMGET, "Client", fs, "opentelemetry.instrumentation.redis", start, end,
                   {"db.system": "redis", db_op: "HMGET", "db.redis.pipeline_length": keys,
                    **_peer(style, SHARDS[shard], 6379)}, peer="redis")
    if f.fallback is not None:
        fb = table.span(trace, server, FALLBACK, "Internal", fs, "feast", *f.fallback,
                        {"feast.entities.missing": f.missing, "feast.online_store": "redis"})
        table.span(trace, fb, "POST", "Client", fs, "opentelemetry.instrumentation.httpx",
                   f.fallback[0] + 50_000, f.fallback[1] - 30_000,
                   {**method, **_peer(style, MATERIALIZER, 8080)}, peer="feature-materializer")
    if f.writeback is not None:
        shard, start, end = f.writeback
        table.span(trace, server, HSET, "Client", fs, "opentelemetry.instrumentation.redis", start, end,
                   {"db.system": "redis", db_op: "HSET", **_peer(style, SHARDS[shard], 6379)}, peer="redis")
    scope = f"{_GO}/google.golang.org/grpc/otelgrpc" if style.transport == "grpc" else (
        f"{_GO}/net/http/otelhttp")
    for a in tl.attempts:
        attrs, message = _client_attrs(style, a, tl.top_k)
        call = table.span(trace, root, style.ranker_client, "Client", gw, scope, a.send, a.end, attrs,
                          "Error" if a.status != "OK" else "Unset", message, peer=RANKER)
        write_ranker(table, res, trace, call, a, nodes, max_batch, wait_s)
    if tl.decode[1] > tl.decode[0]:
        table.span(trace, root, DECODE, "Internal", gw, "search-gw", *tl.decode,
                   {"app.ranker.response_bytes": body, "app.items": tl.top_k})
    table.span(trace, root, ENCODE, "Internal", gw, "search-gw", *tl.encode, {"app.items": tl.top_k})
