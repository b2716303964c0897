"""How the blind family `loan-pricing` (loan_pricing.py) reports itself: resources and instance labels,
span names and attributes by seed (new or old semantic conventions, db.system or not, GC events or
not), and the spans of one request from its timings (`Timings`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.loan_pricing_runtime import Attempt, Pause
from reference_pipeline.simulate.trace_table import NS_PER_S, TraceTable

PROXY = "loan-gateway"
ROUTE = "/api/v1/loans/quote"
SQL_HOST, REDIS_HOST = "sql-loans-prod.database.windows.net", "loans-cache.redis.cache.windows.net"
BUREAU_HOST, COSMOS_HOST = "api.creditbureau.example.com", "loans-quotes.documents.azure.com"
BUS_HOST = "loans-events.servicebus.windows.net"


def names(setup: dict[str, Any]) -> dict[str, str]:
    """Span names as the seed's instrumentation writes them (Zipkin lower-cases them on the wire)."""
    new = setup["semconv"] == "new"
    out = {
        "root": f"POST {ROUTE}" if new else ROUTE.lstrip("/"),
        "redis": "GET",
        "repo": "ApplicantRepository.GetApplicant",
        "sql": "EXECUTE dbo.usp_GetApplicant" if new else "LoanDb",
        "bureau": "POST" if new else "HTTP POST",
        "score": "RiskModel.Score",
        "pricing": "PricingEngine.Price",
        "cosmos": "create_item quotes" if new else "Operation.CreateItemAsync",
        "bus": "send quote-events" if new else "ServiceBusSender.Send",
        "serialize": "QuoteResponse.Serialize",
        "proxy": "POST /api/{**catch-all}",
        "forward": "POST" if new else "HTTP POST",
    }
    if setup["fmt"] == "zipkin":
        out = {k: v.lower() for k, v in out.items()}
    return out


def instance_label(setup: dict[str, Any], attrs: dict[str, Any], ip: str, port: int) -> str:
    """The instance as the store's readers derive it for this seed's resources."""
    if setup["fmt"] == "zipkin":
        return f"{ip}:{port}"
    return str(attrs.get("service.instance.id") or attrs.get("host.name"))


def resource(table: TraceTable, setup: dict[str, Any], rng: random.Random, service: str, pod: str,
             ip: str, port: int) -> int:
    attrs: dict[str, Any] = {"service.name": service}
    if setup["identity"] == "service.instance.id":  # AddService(): a GUID per process by default
        g = f"{rng.getrandbits(128):032x}"
        attrs["service.instance.id"] = f"{g[:8]}-{g[8:12]}-4{g[13:16]}-a{g[17:20]}-{g[20:]}"
        attrs.update({"k8s.pod.name": pod, "k8s.namespace.name": "lending", "k8s.deployment.name":
                      pod.rsplit("-", 2)[0]})
    else:  # AddService(autoGenerateServiceInstanceId: false), the host detector, the pod from the env
        attrs.update({"host.name": pod, "os.type": "linux", "k8s.pod.name": pod})
    attrs.update({"telemetry.sdk.name": "opentelemetry", "telemetry.sdk.language": "dotnet",
                  "telemetry.sdk.version": "1.9.0" if setup["semconv"] == "new" else "1.4.0"})
    return table.resource(attrs, ip, port)


@dataclass
class Timings:
    """One request as the model timed it (ns from the run's start); the spans follow from it."""

    pod: int
    root: tuple[float, float]
    status: int
    body_bytes: int
    options: int
    months: int
    redis: list[tuple[float, float, float, float, str]]  # start, sent, received, end, key
    repo: tuple[float, float]
    sql: tuple[float, float] | None
    sql_error: bool
    bureau: list[Attempt]
    score: tuple[float, float] | None  # None: the request failed before (no SQL connection)
    pricing: tuple[float, float] | None
    cosmos: tuple[float, float, int, float] | None  # start, end, 429s, request charge
    bus: tuple[float, float] | None
    serialize: tuple[float, float] | None
    proxy: tuple[int, float, float, float, float] | None = None  # pod, server s/e, client s/e
    pauses: list[Pause] = field(default_factory=list)


def _root_attrs(s: dict[str, Any], status: int, size: int) -> dict[str, Any]:
    if s["semconv"] == "new":
        return {"http.request.method": "POST", "url.path": ROUTE, "url.scheme": "http",
                "http.route": ROUTE, "network.protocol.version": "1.1", "server.port": 8080,
                "http.response.status_code": status, "http.response.body.size": size}
    return {"http.method": "POST", "http.target": ROUTE, "http.scheme": "http", "http.flavor": "1.1",
            "http.route": ROUTE.lstrip("/"), "http.status_code": status, "http.response_content_length": size}


def _client_http(s: dict[str, Any], host: str, path: str, status: int, error: bool) -> dict[str, Any]:
    if s["semconv"] == "new":
        out: dict[str, Any] = {"http.request.method": "POST", "url.full": f"https://{host}{path}",
                               "server.address": host, "server.port": 443}
        if error:
            out["error.type"] = "System.Threading.Tasks.TaskCanceledException"
        else:
            out["http.response.status_code"] = status
        return out
    out = {"http.method": "POST", "http.url": f"https://{host}{path}", "net.peer.name": host,
           "http.flavor": "1.1"}
    if not error:
        out["http.status_code"] = status
    return out


def _db(s: dict[str, Any], system: str, host: str, port: int, namespace: str) -> dict[str, Any]:
    carries = s["redis_db_system"] if system == "redis" else s["sql_db_system"]
    out: dict[str, Any] = {"db.system": system} if carries else {}
    if s["semconv"] == "new":
        out.update({"server.address": host, "server.port": port, "db.namespace": namespace})
    else:
        out.update({"net.peer.name": host, "net.peer.port": port, "db.name": namespace})
    return out


def _gc_events(s: dict[str, Any], pauses: list[Pause], a: float, b: float) -> list[tuple[float, str, dict]]:
    """An EventListener on the runtime's GC events adds one event, when the pause ends, to the
    server spans in flight (seeds that export them)."""
    if not s["gc_events"]:
        return []
    return [(p.end, "dotnet.gc.pause", {"gc.heap.generation": f"gen{p.generation}", "gc.type": p.kind,
                                        "gc.reason": p.reason,
                                        "dotnet.gc.pause.time": round((p.end - p.start) / NS_PER_S, 6)})
            for p in pauses if a <= p.end <= b]


def emit(table: TraceTable, s: dict[str, Any], n: dict[str, str], api: list[int], proxies: list[int],
         service: str, r: Timings) -> None:
    """The spans of one request (one new trace)."""
    trace = table.new_trace()
    parent = None
    if r.proxy is not None:
        px, ps, pe, cs, ce = r.proxy
        srv = table.span(trace, None, n["proxy"], "Server", proxies[px], "Microsoft.AspNetCore", ps, pe,
                         _root_attrs(s, r.status, r.body_bytes) | {"http.route": "/api/{**catch-all}"})
        parent = table.span(trace, srv, n["forward"], "Client", proxies[px], "System.Net.Http", cs, ce,
                            _client_http(s, f"{service}.lending.svc", ROUTE, r.status, False), peer=service)
    res = api[r.pod]
    root = table.span(trace, parent, n["root"], "Server", res, "Microsoft.AspNetCore", *r.root,
                      _root_attrs(s, r.status, r.body_bytes), "Error" if r.status >= 500 else "Unset",
                      events=_gc_events(s, r.pauses, *r.root))
    for start, sent, received, end, _key in r.redis:
        attrs = _db(s, "redis", REDIS_HOST, 6380, "0") | {"db.statement": "GET", "db.redis.flags": "None"}
        table.span(trace, root, n["redis"], "Client", res, "OpenTelemetry.Instrumentation.StackExchangeRedis",
                   start, end, attrs, peer="loans-cache",
                   events=[(start, "Enqueued", {}), (sent, "Sent", {}), (received, "ResponseReceived", {})])
    repo = table.span(trace, root, n["repo"], "Internal", res, "LoanPricing.Api", *r.repo,
                      {"applicant.source": "sql"}, "Error" if r.sql_error else "Unset",
                      "Timeout expired. The timeout period elapsed prior to obtaining a connection from "
                      "the pool." if r.sql_error else "")
    if r.sql is not None:
        sql = _db(s, "mssql", SQL_HOST, 1433, "LoanDb")
        sql["db.query.text" if s["semconv"] == "new" else "db.statement"] = "dbo.usp_GetApplicant"
        table.span(trace, repo, n["sql"], "Client", res, "OpenTelemetry.Instrumentation.SqlClient", *r.sql,
                   sql, peer="loans-sql")
    for a in r.bureau:
        failed = a.timed_out or a.status >= 500
        table.span(trace, root, n["bureau"], "Client", res, "System.Net.Http", a.start, a.end,
                   _client_http(s, BUREAU_HOST, "/v2/reports/soft-pull", a.status, a.timed_out),
                   "Error" if failed else "Unset",
                   "The operation was canceled." if a.timed_out else "", peer="credit-bureau")
    if r.score is None or r.pricing is None or r.cosmos is None or r.bus is None or r.serialize is None:
        return
    table.span(trace, root, n["score"], "Internal", res, "LoanPricing.Scoring", *r.score,
               {"model.name": "pd-gbm-2024q3.onnx", "model.runtime": "onnxruntime", "features.count": 212})
    table.span(trace, root, n["pricing"], "Internal", res, "LoanPricing.Api", *r.pricing,
               {"quote.rate_options": r.options})
    c_s, c_e, throttled, charge = r.cosmos
    cosmos = {"db.system": "cosmosdb", "db.cosmosdb.container": "quotes", "db.operation": "CreateItemAsync",
              "db.cosmosdb.status_code": 201, "db.cosmosdb.request_charge": round(charge, 2),
              "db.cosmosdb.connection_mode": "direct", "db.cosmosdb.regions_contacted": "West Europe"}
    cosmos["server.address" if s["semconv"] == "new" else "net.peer.name"] = COSMOS_HOST
    if throttled:
        cosmos["db.cosmosdb.sub_status_code"] = 3200  # the last 429's: RU budget exceeded
    table.span(trace, root, n["cosmos"], "Client", res, "Azure.Cosmos.Operation", c_s, c_e, cosmos,
               peer="cosmos-quotes")
    table.span(trace, root, n["bus"], "Producer", res, "Azure.Messaging.ServiceBus", *r.bus,
               {"messaging.system": "servicebus", "messaging.destination.name": "quote-events",
                "az.namespace": "Microsoft.ServiceBus", "server.address": BUS_HOST}, peer="quote-events")
    table.span(trace, root, n["serialize"], "Internal", res, "LoanPricing.Api", *r.serialize,
               {"quote.rate_options": r.options, "quote.schedule_rows": r.options * r.months,
                "quote.payload_bytes": r.body_bytes})
