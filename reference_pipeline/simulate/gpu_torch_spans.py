"""How the blind family `gpu-torch` (gpu_torch.py) is instrumented, per seed: resources (the OTel
operator's `service.instance.id`, host.name + process.pid, or a Zipkin endpoint), old or new semantic
conventions, fine or coarse manual spans, CUDA-event GPU times or wall time only, CPython collections
as span events or not, a traced caller or none; and the spans of one request, from its timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.gpu_torch_pod import Request
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

FE, UP, TAX = "classify-frontend", "catalog-enricher", "taxonomy-service"
DECODE, COPY, TOKENIZE, PREPROCESS = "image.decode", "image.to_device", "tokenize", "preprocess"
WAIT, FORWARD, POST = "batch.wait", "model.forward", "postprocess"
GET, SET = "GET", "SET"
RPC_SERVICE, RPC_METHOD = "classify.v1.ProductClassifier", "Classify"
TAX_ROUTE = "POST /v2/resolve"
TOPIC = "product-classifications"
REDIS_HOST, PG_HOST = "merchant-features.redis.internal", "catalog-pg.db.internal"
TAX_HOST = "taxonomy-service.catalog.svc.cluster.local"
MODEL = "prodclass-siglip-l384-v7"
_SUFFIX = ("x2k4q", "m8r7t", "b5wzn", "q9hcd", "t4vjl")
FE_PID, TAX_PID, UP_PID = 7, 1, 1
_OTEL, _SPRING = "opentelemetry.instrumentation", "io.opentelemetry.spring-webmvc-6.0"


def pod_name(service: str, j: int) -> str:
    prefix = {FE: "classify-frontend-6d8f7b9c4", UP: "catalog-enricher-5b7c9d8f6",
              TAX: "taxonomy-service-7f6d5c4b3"}
    return f"{prefix[service]}-{_SUFFIX[j]}"


def endpoint(service: str, j: int) -> tuple[str, int]:
    net = {FE: 4, UP: 2, TAX: 6}[service]
    return f"10.20.{net}.{11 + j}", {FE: 50051, UP: 8080, TAX: 8080}[service]


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` instance-id | host-pid | endpoint, `coarse`:
    one `preprocess` span instead of decode / copy / tokenise, `gpu_events`: the forward span carries
    the CUDA-event time, `gc_events`: gc.callbacks report collections, `upstream`: the caller is traced."""

    semconv: str
    ident: str
    coarse: bool
    gpu_events: bool
    gc_events: bool
    upstream: bool

    @property
    def new(self) -> bool:
        return self.semconv == "new"

    @property
    def server(self) -> str:  # grpcio's instrumentation names the span after the full method
        return f"{RPC_SERVICE}/{RPC_METHOD}" if self.new else f"/{RPC_SERVICE}/{RPC_METHOD}"

    @property
    def decode(self) -> str:
        return PREPROCESS if self.coarse else DECODE

    @property
    def copy(self) -> str:
        return PREPROCESS if self.coarse else COPY

    @property
    def query(self) -> str:
        return "SELECT merchant_features" if self.new else "SELECT"

    @property
    def taxonomy(self) -> str:  # opentelemetry-instrumentation-requests
        return "POST" if self.new else "HTTP POST"

    @property
    def producer(self) -> str:
        return f"publish {TOPIC}" if self.new else f"{TOPIC} send"

    def label(self, service: str, j: int) -> str:
        """The instance as the store names it (service.instance.id, host.name:process.pid, ip:port)."""
        if self.ident == "instance-id":
            return f"catalog.{pod_name(service, j)}.{service.split('-')[0]}"
        if self.ident == "host-pid":
            return f"{pod_name(service, j)}:{ {FE: FE_PID, UP: UP_PID, TAX: TAX_PID}[service]}"
        ip, port = endpoint(service, j)
        return f"{ip}:{port}"


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int], int] = field(default_factory=dict)

    def get(self, service: str, j: int) -> int:
        if (service, j) not in self.made:
            self.made[(service, j)] = self.table.resource(self._attrs(service, j), *endpoint(service, j))
        return self.made[(service, j)]

    def _attrs(self, service: str, j: int) -> dict[str, Any]:
        lang = {FE: "python", UP: "go", TAX: "java"}[service]
        attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": lang}
        if self.style.ident == "endpoint":
            return attrs
        attrs.update({"k8s.namespace.name": "catalog", "k8s.pod.name": pod_name(service, j)})
        if self.style.ident == "instance-id":
            attrs["service.instance.id"] = self.style.label(service, j)
        else:
            attrs.update({"host.name": pod_name(service, j),
                          "process.pid": {FE: FE_PID, UP: UP_PID, TAX: TAX_PID}[service]})
        if service == FE:
            attrs.update({"process.runtime.name": "cpython", "process.runtime.version": "3.11.9",
                          "host.arch": "amd64", "gpu.model": "NVIDIA L4"})
        return attrs


def _rpc(style: Style) -> dict[str, Any]:
    return {"rpc.system": "grpc", "rpc.service": RPC_SERVICE, "rpc.method": RPC_METHOD,
            "rpc.grpc.status_code": 0}


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    return {"server.address": host, "server.port": port} if style.new else {"net.peer.name": host,
                                                                            "net.peer.port": port}


def _forward_attrs(style: Style, b: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {"model.name": MODEL, "batch.size": b["size"], "batch.padded_size": b["rows"],
                             "model.seq_bucket": b["seq"], "batch.number": b["number"]}
    if style.gpu_events:
        attrs["gpu.time_ms"] = round(b["gpu_ms"], 3)
    if style.ident == "instance-id":
        attrs["torch.cuda.num_alloc_retries"] = b["retries"]
    return attrs


def write_request(table: TraceTable, res: Resources, r: Request, up_pod: int, merchant: int,
                  gc: list[tuple[float, str, dict[str, Any]]]) -> None:
    """One request's trace; `gc`: the collections to report on its server span (the thread that ran
    them was this request's)."""
    style = res.style
    new = style.new
    trace = table.new_trace()
    fe = res.get(FE, r.pod)
    parent = None
    if style.upstream:
        parent = table.span(trace, None, f"{RPC_SERVICE}/{RPC_METHOD}", "Client", res.get(UP, up_pod),
                            "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc",
                            r.send, r.end + 0.35 * NS_PER_MS, {**_rpc(style), **_peer(style, FE, 50051)},
                            peer=FE)
    root = table.span(trace, parent, style.server, "Server", fe, "opentelemetry.instrumentation.grpc",
                      r.start, r.end, {**_rpc(style), "app.merchant_id": merchant}, events=gc)
    scope = "classify.frontend"
    width = int((r.megapixels * 1e6 * 4 / 3) ** 0.5)
    image = {"image.format": "JPEG", "image.width": width, "image.height": int(width * 0.75),
             "image.bytes": int(r.megapixels * 1e6 * (0.42 if not r.heavy else 0.9)),
             "image.mode": "CMYK" if r.heavy else "RGB"}
    nbytes = int(12 * r.megapixels * 1e6)
    if style.coarse:
        table.span(trace, root, PREPROCESS, "Internal", fe, scope, r.decode[0], r.tokenize[1],
                   {**image, "h2d.bytes": nbytes, "text.tokens": r.tokens})
    else:
        table.span(trace, root, DECODE, "Internal", fe, scope, *r.decode, image)
        table.span(trace, root, COPY, "Internal", fe, scope, *r.copy,
                   {"h2d.bytes": nbytes, "h2d.pinned": False})
        table.span(trace, root, TOKENIZE, "Internal", fe, scope, *r.tokenize, {"text.tokens": r.tokens})
    key = f"merchant:{merchant}:features"
    op = "db.operation.name" if new else "db.operation"
    stmt = "db.query.text" if new else "db.statement"
    cache = {"db.system": "redis", op: "GET", stmt: f"GET {key}", **_peer(style, REDIS_HOST, 6379)}
    table.span(trace, root, GET, "Client", fe, "opentelemetry.instrumentation.redis", *r.cache_get, cache,
               peer="redis")
    if r.query is not None:
        pg = {"db.system": "postgresql", ("db.namespace" if new else "db.name"): "catalog",
              stmt: "SELECT * FROM merchant_features WHERE merchant_id = %s", **_peer(style, PG_HOST, 5432)}
        if new:
            pg.update({"db.operation.name": "SELECT", "db.collection.name": "merchant_features"})
        table.span(trace, root, style.query, "Client", fe, "opentelemetry.instrumentation.psycopg", *r.query,
                   pg, peer="postgresql")
    if r.cache_set is not None:
        table.span(trace, root, SET, "Client", fe, "opentelemetry.instrumentation.redis", *r.cache_set,
                   {**cache, op: "SET", stmt: f"SET {key} ? EX 3600"}, peer="redis")
    b = r.batch
    table.span(trace, root, WAIT, "Internal", fe, scope, r.enqueued, b["start"],
               {"batcher.max_batch": b["max_batch"], "batcher.max_wait_ms": b["max_wait_ms"]})
    events = []
    if b["recompiled"] and style.gpu_events:
        events.append((b["start"], "torch.compile.recompile",
                       {"reason": "tensor 'input_ids' size mismatch at index 1. "
                                  f"expected <= 128, actual {b['seq']}"}))
    table.span(trace, root, FORWARD, "Internal", fe, scope, b["start"], b["end"], _forward_attrs(style, b),
               events=events)
    table.span(trace, root, POST, "Internal", fe, scope, *r.post, {"classify.top_k": 5})
    for a0, a1, s0, s1, timed_out, tpod in r.attempts:
        http = ({"http.request.method": "POST", "url.full": f"http://{TAX_HOST}:8080/v2/resolve"} if new
                else {"http.method": "POST", "http.url": f"http://{TAX_HOST}:8080/v2/resolve"})
        http.update(_peer(style, TAX_HOST, 8080))
        message, ev = "", []
        if timed_out:
            message = f"HTTPConnectionPool(host='{TAX_HOST}', port=8080): Read timed out. (read timeout=0.3)"
            ev = [(a1, "exception", {"exception.type": "requests.exceptions.ReadTimeout",
                                     "exception.message": message})]
        else:
            http["http.response.status_code" if new else "http.status_code"] = 200
        client = table.span(trace, root, style.taxonomy, "Client", fe, f"{_OTEL}.requests",
                            a0, a1, http, "Error" if timed_out else "Unset", message, ev, peer=TAX)
        table.span(trace, client, TAX_ROUTE, "Server", res.get(TAX, tpod), _SPRING,
                   s0, s1, {("http.request.method" if new else "http.method"): "POST",
                            ("http.route"): "/v2/resolve",
                            ("http.response.status_code" if new else "http.status_code"): 200})
    msg = ({"messaging.system": "kafka", "messaging.destination.name": TOPIC,
            "messaging.operation.type": "send"}
           if new else {"messaging.system": "kafka", "messaging.destination": TOPIC,
                        "messaging.destination_kind": "topic"})
    table.span(trace, root, style.producer, "Producer", fe, "opentelemetry.instrumentation.confluent_kafka",
               *r.kafka, msg, peer="kafka")


def gc_event(start: float, end: float, generation: int, objects: int) -> tuple[float, str, dict[str, Any]]:
    attrs: dict[str, Any] = {"gc.generation": generation,
                             "gc.duration_ms": round((end - start) / NS_PER_MS, 3)}
    if generation == 2:
        attrs["gc.objects"] = objects
    return start, "gc.collect", attrs
