"""How the blind family `dotnet-onnx` (dotnet_onnx.py) is instrumented, per seed: OpenTelemetry .NET's
AspNetCore, HttpClient, SqlClient and StackExchange.Redis instrumentations with the old or the new
semantic conventions, instances named by the SDK's generated `service.instance.id`, by host.name +
process.pid, or by a Zipkin endpoint; whether the app's manual FeatureStore / DecisionStore spans are
exported; and whether runtime events (GC pauses, thread-pool injections) are added to the server span
as span events.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import TraceTable

API, GATEWAY, RISK = "fraud-api", "payments-api", "card-risk"
REDIS_HOST = "fraud-features.redis.cache.windows.net"
SQL_HOST = "fraud-sql.database.windows.net"
RISK_HOST = "risk.cardnetwork.example"
DB = "FraudDb"
TOKENIZE, ONNX = "MerchantText.Tokenize", "onnx.inference"
FEATURES, DECISION = "FeatureStore.Get", "DecisionStore.Save"
REDIS_GET = "GET"
_SUFFIX = ("7xk2p", "b9mqz", "c4wtn", "d8rjl", "f2hvs", "g6npq", "h3zkd", "j5tbx", "k7mwc", "l9qfr", "m2dsv")
GATEWAY_PODS = 3
MODEL = "fraud-gbm+merchant-minilm"
ASP, HTTP_SCOPE = "Microsoft.AspNetCore", "System.Net.Http"
_SQL, _REDIS = "OpenTelemetry.Instrumentation.SqlClient", "OpenTelemetry.Instrumentation.StackExchangeRedis"
_APP = "FraudApi"


def pod_name(service: str, k: int) -> str:
    stem = "fraud-api-6d8f9c7b54" if service == API else "payments-api-5b7c8d9f6"
    return f"{stem}-{_SUFFIX[k % len(_SUFFIX)]}"


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` instance-id | host-pid | endpoint,
    `internals`: the manual FeatureStore / DecisionStore spans are exported, `runtime_events`: GC and
    thread-pool events on the server span."""

    seed: int
    semconv: str
    ident: str
    internals: bool
    runtime_events: bool

    @property
    def root(self) -> str:
        return "POST /v1/score" if self.semconv == "new" else "v1/score"

    @property
    def gateway_root(self) -> str:
        return "POST /v1/payments/authorize" if self.semconv == "new" else "v1/payments/authorize"

    @property
    def http_client(self) -> str:
        return "POST" if self.semconv == "new" else "HTTP POST"

    def label(self, service: str, k: int) -> str:
        """The instance as the store names it."""
        if self.ident == "instance-id":
            return str(uuid.UUID(int=hash_words(self.seed, service, k), version=4))
        if self.ident == "host-pid":
            return f"{pod_name(service, k)}:1"
        ip, port = endpoint(service, k)
        return f"{ip}:{port}"


def hash_words(seed: int, service: str, k: int) -> int:
    import random

    return random.Random(f"{seed}/{service}/{k}").getrandbits(128)


def endpoint(service: str, k: int) -> tuple[str, int]:
    return (f"10.40.2.{10 + k}", 8080) if service == API else (f"10.40.1.{10 + k}", 8080)


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int], int] = field(default_factory=dict)

    def get(self, service: str, k: int) -> int:
        if (service, k) not in self.made:
            self.made[(service, k)] = self.table.resource(self._attrs(service, k), *endpoint(service, k))
        return self.made[(service, k)]

    def _attrs(self, service: str, k: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": "dotnet",
                                 "telemetry.sdk.name": "opentelemetry", "telemetry.sdk.version": "1.9.0"}
        if self.style.ident == "endpoint":
            return attrs
        attrs.update({"k8s.namespace.name": "payments", "k8s.pod.name": pod_name(service, k),
                      "process.runtime.name": ".NET", "process.runtime.version": "8.0.11"})
        if self.style.ident == "instance-id":
            attrs["service.instance.id"] = self.style.label(service, k)
        else:
            attrs.update({"host.name": pod_name(service, k), "process.pid": 1})
        return attrs


@dataclass
class Rec:
    """One span of a request, recorded by the model: `parent` is another Rec's position in the
    request's list (-1: the fraud-api server span's parent, the gateway's client span)."""

    name: str
    kind: str
    start: float
    end: float
    attrs: dict[str, Any]
    parent: int = 0
    status: str = "Unset"
    message: str = ""
    scope: str = _APP
    peer: str | None = None
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)


def peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def redis_rec(style: Style, parent: int, start: float, sent: float, received: float) -> Rec:
    """StackExchange.Redis' instrumentation: a span per command from the multiplexer's profiler, with
    its Enqueued / Sent / ResponseReceived timings as events."""
    attrs = {"db.system": "redis", "db.redis.flags": "DemandMaster", "db.redis.database_index": 0,
             ("db.query.text" if style.semconv == "new" else "db.statement"): "GET",
             **peer(style, REDIS_HOST, 6380)}
    events = [(start, "Enqueued", {}), (sent, "Sent", {}), (received, "ResponseReceived", {})]
    return Rec(REDIS_GET, "Client", start, received, attrs, parent, scope=_REDIS, peer="redis",
               events=events)


def sql_rec(style: Style, parent: int, start: float, end: float, statement: str) -> Rec:
    new = style.semconv == "new"
    attrs: dict[str, Any] = {"db.system": "microsoft.sql_server" if new else "mssql",
                             ("db.namespace" if new else "db.name"): DB,
                             ("db.query.text" if new else "db.statement"): statement,
                             **peer(style, SQL_HOST, 1433)}
    return Rec(DB, "Client", start, end, attrs, parent, scope=_SQL, peer="mssql")


def risk_rec(style: Style, parent: int, start: float, end: float, status: int | None, resend: int) -> Rec:
    new = style.semconv == "new"
    url = f"https://{RISK_HOST}/v2/risk/score"
    attrs: dict[str, Any] = ({"http.request.method": "POST", "url.full": url} if new
                             else {"http.method": "POST", "http.url": url})
    attrs.update(peer(style, RISK_HOST, 443))
    if status is not None:
        attrs["http.response.status_code" if new else "http.status_code"] = status
    elif new:
        attrs["error.type"] = "System.Threading.Tasks.TaskCanceledException"
    if resend and new:
        attrs["http.request.resend_count"] = resend
    failed = status is None
    return Rec(style.http_client, "Client", start, end, attrs, parent, "Error" if failed else "Unset",
               "The operation was canceled." if failed else "", scope=HTTP_SCOPE, peer=RISK)


def server_attrs(style: Style, route: str, status: int, extra: dict[str, Any]) -> dict[str, Any]:
    if style.semconv == "new":
        return {"http.request.method": "POST", "url.path": route, "url.scheme": "http",
                "http.route": route, "http.response.status_code": status,
                "network.protocol.version": "1.1", **extra}
    return {"http.method": "POST", "http.target": route, "http.route": route.lstrip("/"),
            "http.scheme": "http", "http.status_code": status, "http.flavor": "1.1", **extra}


def write_request(table: TraceTable, res: Resources, gw_pod: int, pod: int, sent: float, arrive_end: float,
                  recs: list[Rec]) -> None:
    """The gateway's server and client spans around the fraud-api's spans (recs[0] is its server span)."""
    style = res.style
    trace = table.new_trace()
    gw, api = res.get(GATEWAY, gw_pod), res.get(API, pod)
    root = recs[0]
    top = table.span(trace, None, style.gateway_root, "Server", gw, ASP, sent - 0.9e6, arrive_end + 0.6e6,
                     server_attrs(style, "/v1/payments/authorize", 200, {}))
    client_attrs = ({"http.request.method": "POST", "url.full": "http://fraud-api.payments.svc:8080/v1/score"}
                    if style.semconv == "new" else
                    {"http.method": "POST", "http.url": "http://fraud-api.payments.svc:8080/v1/score"})
    status = "http.response.status_code" if style.semconv == "new" else "http.status_code"
    client_attrs.update({**peer(style, "fraud-api.payments.svc", 8080), status: 200})
    client = table.span(trace, top, style.http_client, "Client", gw, HTTP_SCOPE, sent, arrive_end,
                        client_attrs, peer=API)
    index: list[int] = []
    for rec in recs:
        parent = client if rec is root else index[rec.parent]
        events = rec.events if (rec is not root or style.runtime_events) else []
        index.append(table.span(trace, parent, rec.name, rec.kind, api, rec.scope, rec.start, rec.end,
                                rec.attrs, rec.status, rec.message, events, rec.peer))
