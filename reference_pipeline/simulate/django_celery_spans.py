"""How the blind family `django-celery` (django_celery.py) is instrumented, per seed: resources and
instance identity (the OTel operator's `service.instance.id`, host.name + process.pid per gunicorn or
Celery child process, or a Zipkin endpoint), old or new semantic conventions of OTel Python's Django,
psycopg, redis, requests and celery instrumentations, whether the view's manual spans are exported,
and a collector that writes one request's spans once their times are known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import TraceTable

CALLER, EDGE, WEB, WORKER = "loan-origination", "haproxy", "credit-api", "credit-worker"
SCORE, RESCORE = "credit.tasks.score", "credit.tasks.rescore_portfolio"
LOAD_FEATURES, WAIT, COMPUTE = "credit.load_features", "score.wait", "credit.compute_limit"
MODEL_LOAD, BUILD, PREDICT = "model.load", "features.build", "xgboost.predict"
PG_HOST, REDIS_HOST, BUREAU_HOST = "pgbouncer.credit.svc.cluster.local", "redis-features.credit.svc", \
    "api.bureau-partner.example"
_WEB_SUFFIX = ("k2x9q", "m7d4r", "t8w2n", "c5v6h", "p3j8z", "f9g1s")
_WORKER_SUFFIX = (("b4n7c", "r2q8w", "x6t3m"), ("h9s2k", "v5z8d", "n1p7f"))  # before / after the deploy
_WORKER_RS = ("5b8c7d9f4", "6f9d8b7c5")
_PY = "opentelemetry.instrumentation"


def web_pod(k: int) -> str:
    return f"credit-api-7d9c5f8b6-{_WEB_SUFFIX[k]}"


def worker_pod(j: int, gen: int) -> str:
    return f"credit-worker-{_WORKER_RS[gen]}-{_WORKER_SUFFIX[gen][j]}"


def gunicorn_pid(slot: int) -> int:
    """gunicorn's master is PID 1 in the container; its first workers are 8, 9, ..."""
    return 8 + slot


def celery_pid(proc: int) -> int:
    return 12 + proc


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new; `ident` instance-id | host-pid | endpoint; `edge`
    haproxy (traced) | alb (not traced); `internals`: the view's and the task's manual spans are
    exported; `linked`: a CONSUMER span starts its own trace and links to the PRODUCER; `gc_events`:
    a gc.callbacks hook adds each full collection to the span in flight."""

    semconv: str
    ident: str
    edge: str
    internals: bool
    linked: bool
    gc_events: bool

    @property
    def root(self) -> str:
        return "POST api/v1/customers/<int:customer_id>/credit-limit"

    @property
    def bureau(self) -> str:
        return "POST" if self.semconv == "new" else "HTTP POST"

    def label(self, service: str, pod: int, pid: int = 0, gen: int = 0) -> str:
        """The instance as the store names it (service.instance.id, host.name:process.pid, ip:port)."""
        name = worker_pod(pod, gen) if service == WORKER else web_pod(pod)
        if self.ident == "instance-id":
            return f"credit.{name}.{'celery' if service == WORKER else 'django'}"
        if self.ident == "host-pid":
            return f"{name}:{pid}"
        ip, port = endpoint(service, pod, gen)
        return f"{ip}:{port}"


def endpoint(service: str, pod: int, gen: int = 0) -> tuple[str, int]:
    if service == WORKER:
        return f"10.30.1.{60 + 10 * gen + pod}", 8080
    if service == WEB:
        return f"10.30.{1 + pod % 2}.{20 + pod}", 8000
    if service == EDGE:
        return "10.30.1.5", 443
    return "10.31.4.17", 8080


@dataclass
class Resources:
    """The run's resources, made when first used (a recycled gunicorn worker or a new Celery pod's
    child is a new process: on the host-pid seed, a new resource)."""

    table: TraceTable
    style: Style
    made: dict[tuple[str, int, int, int], int] = field(default_factory=dict)

    def get(self, service: str, pod: int = 0, pid: int = 0, gen: int = 0) -> int:
        key = (service, pod, pid if self.style.ident == "host-pid" else 0, gen)
        if key not in self.made:
            self.made[key] = self.table.resource(self._attrs(service, pod, pid, gen),
                                                 *endpoint(service, pod, gen))
        return self.made[key]

    def _attrs(self, service: str, pod: int, pid: int, gen: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {"service.name": service}
        if self.style.ident == "endpoint":
            return attrs
        if service in (CALLER, EDGE):
            name = "loan-origination-6c8d7-q2w4e" if service == CALLER else "haproxy-0"
            attrs.update({"host.name": name, "process.pid": 1, "telemetry.sdk.language":
                          "java" if service == CALLER else "cpp"})
            if self.style.ident == "instance-id":
                attrs["service.instance.id"] = f"lending.{name}.{service}"
            return attrs
        name = worker_pod(pod, gen) if service == WORKER else web_pod(pod)
        attrs.update({"k8s.namespace.name": "credit", "k8s.pod.name": name,
                      "telemetry.sdk.language": "python",
                      "process.runtime.name": "cpython", "process.runtime.version": "3.11.9",
                      "cloud.availability_zone": "eu-west-1a" if service == WORKER or pod % 2 == 0
                      else "eu-west-1b"})
        if self.style.ident == "instance-id":
            attrs["service.instance.id"] = self.style.label(service, pod, pid, gen)
        else:
            attrs.update({"host.name": name, "process.pid": pid})
        return attrs


# --- attributes ---------------------------------------------------------------------------------------

def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def db_attrs(style: Style, statement: str) -> dict[str, Any]:
    new = style.semconv == "new"
    return {"db.system": "postgresql", ("db.namespace" if new else "db.name"): "credit",
            ("db.query.text" if new else "db.statement"): statement, "db.user": "credit_api",
            **_peer(style, PG_HOST, 6432)}


def redis_attrs(style: Style, command: str, key: str, size: int | None = None) -> dict[str, Any]:
    new = style.semconv == "new"
    attrs: dict[str, Any] = {"db.system": "redis",
                             ("db.query.text" if new else "db.statement"): f"{command} {key}",
                             ("db.namespace" if new else "db.redis.database_index"): "0" if new else 0,
                             **_peer(style, REDIS_HOST, 6379)}
    if size is not None:
        attrs["db.response.size" if new else "redis.response.size"] = size
    return attrs


def bureau_attrs(style: Style, status: int | None, attempt: int) -> dict[str, Any]:
    url = f"https://{BUREAU_HOST}/v3/reports"
    if style.semconv == "new":
        attrs: dict[str, Any] = {"http.request.method": "POST", "url.full": url,
                                 **_peer(style, BUREAU_HOST, 443)}
        if status is None:
            attrs["error.type"] = "requests.exceptions.ReadTimeout"
        else:
            attrs["http.response.status_code"] = status
        if attempt:
            attrs["http.request.resend_count"] = attempt
        return attrs
    attrs = {"http.method": "POST", "http.url": url, **_peer(style, BUREAU_HOST, 443)}
    if status is not None:
        attrs["http.status_code"] = status
    return attrs


def celery_attrs(style: Style, action: str, task: str, message_id: str,
                 payload: int | None) -> dict[str, Any]:
    new = style.semconv == "new"
    attrs: dict[str, Any] = {"celery.action": action, "celery.task_name": task,
                             ("messaging.message.id" if new else "messaging.message_id"): message_id,
                             ("messaging.destination.name" if new else "messaging.destination"): "scoring",
                             "messaging.system": "rabbitmq"}
    if action == "run":
        attrs["celery.state"] = "SUCCESS"
    if payload is not None:
        attrs["messaging.message.body.size" if new else "messaging.message_payload_size_bytes"] = payload
    return attrs


def server_attrs(style: Style, customer: int, status: int, body: int) -> dict[str, Any]:
    path = f"/api/v1/customers/{customer}/credit-limit"
    route = "api/v1/customers/<int:customer_id>/credit-limit"
    if style.semconv == "new":
        return {"http.request.method": "POST", "url.path": path, "http.route": route, "url.scheme": "http",
                "http.response.status_code": status, "http.response.body.size": body}
    return {"http.method": "POST", "http.target": path, "http.route": route, "http.scheme": "http",
            "http.status_code": status, "http.response_content_length": body}


# --- the collector ------------------------------------------------------------------------------------

@dataclass
class Spans:
    """One request's spans, added as its model computes them (a parent before its children, its end
    set later) and written to the table at the end; `own` spans (a linked CONSUMER and its children)
    go to a trace of their own that links to their parent (the PRODUCER)."""

    rows: list[list[Any]] = field(default_factory=list)

    def add(self, parent: int | None, name: str, kind: str, resource: int, scope: str, start: float,
            end: float = 0.0, attrs: dict[str, Any] | None = None, status: str = "Unset", message: str = "",
            peer: str | None = None, own: bool = False) -> int:
        self.rows.append([parent, name, kind, resource, scope, start, end, attrs or {}, status, message, [],
                          peer, own])
        return len(self.rows) - 1

    def end(self, i: int, t: float) -> None:
        self.rows[i][6] = t

    def event(self, i: int, at: float, name: str, attrs: dict[str, Any]) -> None:
        self.rows[i][10].append((at, name, attrs))

    def write(self, table: TraceTable) -> None:
        trace = table.new_trace()
        index: dict[int, int] = {}
        for k, (parent, name, kind, res, scope, start, end, attrs, status, msg, events, peer, own) in (
                enumerate(self.rows)):
            tr, par, links = trace, None if parent is None else index[parent], None
            if own and parent is not None and not self.rows[parent][12]:
                tr, par, links = table.new_trace(), None, [index[parent]]
            elif own and parent is not None:
                tr = table.rows[index[parent]][0]
            index[k] = table.span(tr, par, name, kind, res, scope, start, end, attrs, status, msg, events,
                                  peer, links)


SCOPES = {"django": f"{_PY}.django", "psycopg": f"{_PY}.psycopg", "redis": f"{_PY}.redis",
          "requests": f"{_PY}.requests", "celery": f"{_PY}.celery", "app": "credit", "worker": "credit.tasks",
          "caller": "io.opentelemetry.spring-webmvc-6.0", "client": "io.opentelemetry.java-http-client",
          "haproxy": "haproxy-otel"}
