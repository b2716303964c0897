"""How the fraud-check family's services are named and described, per seed (fraud_check.py): the
span names of the scorer's own code (two naming styles), the semantic conventions of the attributes
(the 1.2x names or the older ones), the resources (per worker process, per pod, or a Zipkin
endpoint), and the spans of one request written to the table once the worker loops have run."""

from __future__ import annotations

from typing import Any

from reference_pipeline.simulate.fraud_check_loop import Request
from reference_pipeline.simulate.trace_table import TraceTable

SCORER, CALLER = "fraud-scorer", "payments-api"
ROUTE = "/v1/score"
SERVER_SPAN = f"POST {ROUTE}"
CALLER_ROUTE = "/v2/payments/authorize"
VENDOR_HOST = "api.riskvendor.example"
TOPIC = "fraud-decisions"
APP_NAMES = {
    "a": {
        "validate": "validate_request",
        "fetch": "fetch_features",
        "preprocess": "preprocess_history",
        "predict": "model.predict",
        "risk": "risk_vendor.check",
    },
    "b": {
        "validate": "TransactionPayload.parse",
        "fetch": "FeatureStore.get",
        "preprocess": "HistoryAggregator.summarize",
        "predict": "FraudModel.score",
        "risk": "RiskVendor.assess",
    },
}
PG_HOST, REDIS_HOST = "fraud-pg.payments.svc", "fraud-redis-master.payments.svc"
VELOCITY_SQL = (
    "SELECT count(*), coalesce(sum(amount), 0) FROM card_txn WHERE card_id = $1 "
    "AND created_at > now() - interval '1 hour'"
)
FALLBACK_SQL = {
    "card": "SELECT count(*), avg(amount), max(amount), count(DISTINCT merchant_id) FROM card_txn "
    "WHERE card_id = $1 AND created_at > now() - interval '90 days'",
    "merchant": "SELECT avg(chargeback_rate), count(*) FROM merchant_daily WHERE merchant_id = $1 "
    "AND day > current_date - 90",
    "device": "SELECT count(DISTINCT card_id), min(first_seen) FROM device_card WHERE device_id = $1",
}
INSERT_SQL = (
    "INSERT INTO decisions (request_id, card_id, score, action, model_version) VALUES ($1, $2, $3, $4, $5)"
)


def names(s: dict[str, Any]) -> dict[str, str]:
    """Every span name of the seed's conventions."""
    new = s["semconv"] == "new"
    return {
        **APP_NAMES[s["names"]],
        "server": SERVER_SPAN,
        "receive": f"{SERVER_SPAN} http receive",
        "send": f"{SERVER_SPAN} http send",
        "mget": "MGET",
        "set": "SET",
        "connect": "connect",
        "select": "SELECT fraud",
        "insert": "INSERT fraud",
        "attempt": "POST" if new else "HTTP POST",
        "publish": f"publish {TOPIC}" if new else f"{TOPIC} send",
        "caller_root": f"POST {CALLER_ROUTE}",
        "caller_call": "POST" if new else "HTTP POST",
        "caller_work": "AuthorizationService.authorize",
        "ledger": "INSERT payments.authorizations",
    }


def http_attrs(new: bool, method: str = "POST", status: int | None = 200, **extra: Any) -> dict[str, Any]:
    """HTTP attributes in the new (`http.request.method`, `url.full`, `server.address`) or the old
    (`http.method`, `http.url`, `net.peer.name`) conventions; `extra` keys are given in the new names."""
    old_names = {
        "url.full": "http.url",
        "server.address": "net.peer.name",
        "server.port": "net.peer.port",
        "http.route": "http.route",
        "url.path": "http.target",
        "http.request.body.size": "http.request_content_length",
        "error.type": "error.type",
    }
    out: dict[str, Any] = {"http.request.method" if new else "http.method": method}
    if status is not None:
        out["http.response.status_code" if new else "http.status_code"] = status
    for key, value in extra.items():
        out[key if new else old_names[key]] = value
    return out


def db_attrs(new: bool, system: str, namespace: str, host: str, statement: str) -> dict[str, Any]:
    if new:
        return {
            "db.system": system,
            "db.namespace": namespace,
            "server.address": host,
            "db.query.text": statement,
        }
    return {"db.system": system, "db.name": namespace, "net.peer.name": host, "db.statement": statement}


def scorer_resource(table: TraceTable, s: dict[str, Any], pod: str, pid: int, ip: str) -> int:
    """A worker process: `host.name` (the pod) + `process.pid` in OTLP; the Operator's per-pod
    `service.instance.id` in Jaeger; only the pod's endpoint in Zipkin."""
    attrs: dict[str, Any] = {
        "service.name": SCORER,
        "host.name": pod,
        "process.pid": pid,
        "k8s.pod.name": pod,
        "k8s.namespace.name": "payments",
        "process.runtime.name": "cpython",
        "process.runtime.version": "3.11.9",
        "telemetry.sdk.language": "python",
        "service.version": "4.18.2",
    }
    if s["fmt"] == "jaeger":
        attrs["service.instance.id"] = f"payments.{pod}.fraud-scorer"
    return table.resource(attrs, ip, 8000)


def scorer_label(s: dict[str, Any], pod: str, pid: int, ip: str) -> str:
    """The instance a run's reader can tell apart: a worker process, or a whole pod."""
    if s["fmt"] == "zipkin":
        return f"{ip}:8000"
    if s["fmt"] == "jaeger":
        return f"payments.{pod}.fraud-scorer"
    return f"{pod}:{pid}"


def caller_resource(table: TraceTable, s: dict[str, Any], k: int, instance_id: str) -> int:
    pod = f"payments-api-5c8d7f-{k:02d}"
    if s["caller"] == "java":
        attrs: dict[str, Any] = {
            "service.name": CALLER,
            "service.instance.id": instance_id,
            "k8s.pod.name": pod,
            "telemetry.sdk.language": "java",
            "process.runtime.name": "OpenJDK Runtime Environment",
        }
    else:
        attrs = {"service.name": CALLER, "host.name": pod, "process.pid": 1, "telemetry.sdk.language": "go"}
    return table.resource(attrs, f"10.52.0.{10 + k}", 8080)


def emit_scorer(
    table: TraceTable, s: dict[str, Any], trace: int, parent: int, res: int, req: Request, score: float
) -> int:
    """The scorer's spans of one request under the caller's CLIENT span; returns the SERVER span."""
    n = names(s)
    new = s["semconv"] == "new"
    sp, rep = req.spans, req.repeated
    events = dict(req.events) if s["gc_events"] else {}
    if not s["asgi_spans"]:  # untraced receive/send: a collection there lands on the SERVER span
        events["server"] = [*events.get("server", []), *events.pop("receive", []), *events.pop("send", [])]

    def add(
        key: str,
        parent_span: int,
        kind: str,
        scope: str,
        attrs: dict[str, Any] | None = None,
        peer: str | None = None,
    ) -> int:
        a, b = sp[key]
        return table.span(
            trace, parent_span, n[key], kind, res, scope, a, b, attrs, events=events.get(key), peer=peer
        )

    server = add(
        "server",
        parent,
        "Server",
        "opentelemetry.instrumentation.fastapi",
        http_attrs(new, **{"http.route": ROUTE, "url.path": ROUTE, "http.request.body.size": req.body_bytes}),
    )
    if s["asgi_spans"]:
        add(
            "receive",
            server,
            "Internal",
            "opentelemetry.instrumentation.asgi",
            {"asgi.event.type": "http.request"},
        )
    items_key = "fraud.history.items" if s["names"] == "a" else "txn.history.count"
    add("validate", server, "Internal", "fraud_scorer", {items_key: req.items})
    fetch = add(
        "fetch", server, "Internal", "fraud_scorer", {"features.keys": 3, "features.missing": len(req.misses)}
    )
    redis = "opentelemetry.instrumentation.redis"
    sql = "opentelemetry.instrumentation.sqlalchemy"
    add(
        "mget",
        fetch,
        "Client",
        redis,
        {**db_attrs(new, "redis", "0", REDIS_HOST, "MGET ? ? ?"), "db.redis.database_index": 0},
        peer="redis",
    )
    if "connect" in sp:
        add(
            "connect",
            fetch,
            "Client",
            sql,
            db_attrs(new, "postgresql", "fraud", PG_HOST, "connect"),
            peer="postgresql",
        )
    add(
        "select",
        fetch,
        "Client",
        sql,
        db_attrs(new, "postgresql", "fraud", PG_HOST, VELOCITY_SQL),
        peer="postgresql",
    )
    for (a, b), key in zip(rep.get("fallback", []), req.misses, strict=True):
        table.span(
            trace,
            fetch,
            n["select"],
            "Client",
            res,
            sql,
            a,
            b,
            db_attrs(new, "postgresql", "fraud", PG_HOST, FALLBACK_SQL[key]),
            peer="postgresql",
        )
    for a, b in rep.get("set", []):
        table.span(
            trace,
            fetch,
            n["set"],
            "Client",
            res,
            redis,
            a,
            b,
            {**db_attrs(new, "redis", "0", REDIS_HOST, "SET ? ? EX ?"), "db.redis.database_index": 0},
            peer="redis",
        )
    add("preprocess", server, "Internal", "fraud_scorer", {items_key: req.items})
    framework = "lightgbm" if s["model"] == "lightgbm" else "onnxruntime"
    add(
        "predict",
        server,
        "Internal",
        "fraud_scorer",
        {
            "model.name": "card-fraud",
            "model.version": "2026.11.2",
            "model.framework": framework,
            "fraud.score": round(score, 4),
        },
    )
    if req.grey:
        answered = not req.timed_out[-1]
        risk = add(
            "risk",
            server,
            "Internal",
            "fraud_scorer",
            {
                "risk.vendor.attempts": len(req.timed_out),
                "risk.vendor.outcome": "answered" if answered else "unavailable",
            },
        )
        for (a, b), timed_out in zip(rep["attempt"], req.timed_out, strict=True):
            extra: dict[str, Any] = {
                "url.full": f"https://{VENDOR_HOST}/v3/assess",
                "server.address": VENDOR_HOST,
                "server.port": 443,
            }
            if timed_out and new:
                extra["error.type"] = "httpx.ReadTimeout"
            ev = (
                [
                    (
                        b,
                        "exception",
                        {
                            "exception.type": "httpx.ReadTimeout",
                            "exception.message": "The read operation timed out",
                        },
                    )
                ]
                if timed_out
                else []
            )
            table.span(
                trace,
                risk,
                n["attempt"],
                "Client",
                res,
                "opentelemetry.instrumentation.httpx",
                a,
                b,
                http_attrs(new, status=None if timed_out else 200, **extra),
                "Error" if timed_out else "Unset",
                "The read operation timed out" if timed_out else "",
                events=ev,
                peer=VENDOR_HOST,
            )
    add(
        "insert",
        server,
        "Client",
        sql,
        db_attrs(new, "postgresql", "fraud", PG_HOST, INSERT_SQL),
        peer="postgresql",
    )
    if s["asgi_spans"]:
        add(
            "send",
            server,
            "Internal",
            "opentelemetry.instrumentation.asgi",
            {
                "asgi.event.type": "http.response.start",
                "http.response.status_code" if new else "http.status_code": 200,
            },
        )
    destination = "messaging.destination.name" if new else "messaging.destination"
    add(
        "publish",
        server,
        "Producer",
        "opentelemetry.instrumentation.aiokafka",
        {
            "messaging.system": "kafka",
            destination: TOPIC,
            "messaging.operation": "publish",
            "messaging.kafka.destination.partition": req.index % 12,
        },
        peer="kafka",
    )
    return server
