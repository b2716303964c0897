"""The `rails-recs` family's spans as its seeds' tracers write them (rails_recs.py): resources and
instance identity, span names, attribute conventions (old or new semantic conventions), the optional
nginx span, the queue-time attribute and the GC events a Rack middleware reports."""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.rails_recs_puma import Request, Worker
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

SERVICE, MODEL, NGINX = "recs-web", "recs-model", "ingress-nginx"
MODEL_RPC = "recs.v1.Ranker/Score"
RENDER = "render_template.action_view"
ROOTS = {
    "controller": {
        "recs": "RecommendationsController#index",
        "product": "ProductsController#show",
        "catalog": "Api::V1::CatalogController#index",
    },
    "route": {"recs": "GET /recs/:user_id", "product": "GET /products/:id", "catalog": "GET /api/v1/catalog"},
}
ROUTES = {"recs": "/recs/:user_id", "product": "/products/:id", "catalog": "/api/v1/catalog"}
DB_NAME = "recs_production"
PUMA_PORT = 3000


def db_span_name(semconv: str, table: str) -> str:
    """opentelemetry-instrumentation-pg: `SELECT recs_production` (old: operation + database) or
    `SELECT products` (new: operation + collection)."""
    return f"SELECT {DB_NAME}" if semconv == "old" else f"SELECT {table}"


def es_span_name(native: bool) -> str:
    """elasticsearch-ruby's own instrumentation names the endpoint; Net::HTTP's names the method."""
    return "search" if native else "HTTP POST"


def pod_name(pod: int) -> str:
    return f"recs-web-7f9c4d-{'xk2pq' if pod == 0 else 'b8m4t' if pod == 1 else 'r6z9w'}"


def pod_ip(pod: int) -> str:
    return f"10.12.{3 + pod}.{41 + 7 * pod}"


def identity(seed: int, pod: int, slot: int, gen: int) -> tuple[int, str]:
    """(pid, service.instance.id) of a worker process: the same for a seed every time."""
    r = random.Random(f"rails-recs/{seed}/{pod}/{slot}/{gen}")
    return 20 + slot * 3 + gen * 11 + r.randrange(0, 3), f"{r.getrandbits(128):032x}"


def instance(seed: int, style: str, pod: int, slot: int, gen: int) -> str:
    """The label of a worker the store gives it: host:pid, service.instance.id, or Zipkin's ip:port."""
    pid, uid = identity(seed, pod, slot, gen)
    return {
        "process": f"{pod_name(pod)}:{pid}",
        "instance_id": uid,
        "endpoint": f"{pod_ip(pod)}:{PUMA_PORT}",
    }[style]


class Writer:
    """Turns the simulated requests into one TraceTable with the seed's conventions (setup dict)."""

    def __init__(self, table: TraceTable, s: dict[str, Any], seed: int) -> None:
        self.table, self.s, self.seed = table, s, seed
        self.resources: dict[tuple[int, int, int], int] = {}
        style = s["identity"]
        self.model = [
            self._resource(
                MODEL,
                f"recs-model-5c7b8-{k}",
                f"10.14.0.{21 + k}",
                50051,
                {"process.pid": 1, "service.instance.id": f"recs-model-5c7b8-{k}"},
                style,
                "python",
            )
            for k in range(s["model_pods"])
        ]
        self.nginx = (
            self._resource(
                NGINX,
                "ingress-nginx-controller-6d4f8-jq9vx",
                "10.12.0.7",
                443,
                {"process.pid": 7, "service.instance.id": "ingress-nginx-jq9vx"},
                style,
                "cpp",
            )
            if s["nginx"]
            else -1
        )

    def _resource(
        self, service: str, host: str, ip: str, port: int, ids: dict[str, Any], style: str, language: str
    ) -> int:
        attrs: dict[str, Any] = {
            "service.name": service,
            "host.name": host,
            "k8s.namespace.name": "recs",
            "deployment.environment": "production",
            "telemetry.sdk.language": language,
        }
        if style == "process":
            attrs["process.pid"] = ids["process.pid"]
        elif style == "instance_id":
            attrs["service.instance.id"] = ids["service.instance.id"]
        return self.table.resource(attrs, ip, port)

    def worker(self, w: Worker) -> int:
        key = (w.pod, w.slot, w.gen)
        if key not in self.resources:
            pid, uid = identity(self.seed, *key)
            res = self._resource(
                SERVICE,
                pod_name(w.pod),
                pod_ip(w.pod),
                PUMA_PORT,
                {"process.pid": pid, "service.instance.id": uid},
                self.s["identity"],
                "ruby",
            )
            self.table.resources[res].update(
                {"process.runtime.name": "ruby", "process.runtime.version": "3.3.5"}
            )
            self.resources[key] = res
        return self.resources[key]

    # --- attributes -------------------------------------------------------------------------------

    def _http(self, req: Request, status: int, target: str) -> dict[str, Any]:
        if self.s["semconv"] == "old":
            return {
                "http.method": "GET",
                "http.target": target,
                "http.route": ROUTES[req.kind],
                "http.scheme": "https",
                "http.status_code": status,
                "http.user_agent": "RecsApp/5.2 (iOS)",
            }
        return {
            "http.request.method": "GET",
            "url.path": target.split("?")[0],
            "url.query": target.partition("?")[2],
            "http.route": ROUTES[req.kind],
            "url.scheme": "https",
            "http.response.status_code": status,
            "user_agent.original": "RecsApp/5.2 (iOS)",
        }

    def _db(self, a: dict[str, Any]) -> dict[str, Any]:
        if self.s["semconv"] == "old":
            return {
                "db.system": "postgresql",
                "db.name": DB_NAME,
                "db.user": "recs",
                "db.statement": a["statement"],
                "net.peer.name": "recs-pg.internal",
                "net.peer.port": 5432,
            }
        return {
            "db.system": "postgresql",
            "db.namespace": DB_NAME,
            "db.query.text": a["statement"],
            "db.operation.name": "SELECT",
            "db.collection.name": a["table"],
            "server.address": "recs-pg.internal",
            "server.port": 5432,
        }

    def _es(self, a: dict[str, Any]) -> dict[str, Any]:
        if self.s["es_native"]:
            key = "url.full" if self.s["semconv"] == "new" else "http.url"
            return {
                "db.system": "elasticsearch",
                "db.operation": "search",
                "http.request.method": "POST",
                "db.elasticsearch.path_parts.index": "products",
                key: "https://es-products.internal:9200/products/_search",
                "server.address": "es-products.internal",
                "server.port": 9200,
            }
        return {
            "http.method": "POST",
            "http.scheme": "https",
            "http.target": "/products/_search",
            "net.peer.name": "es-products.internal",
            "net.peer.port": 9200,
            "http.status_code": 200,
        }

    def _memcached(self, op: str, a: dict[str, Any]) -> dict[str, Any]:
        statement = f"{op} views/products/card/v4 ({a['keys']} keys)"
        peer = (
            {"net.peer.name": "memcached-recs.internal", "net.peer.port": 11211}
            if self.s["semconv"] == "old"
            else {"server.address": "memcached-recs.internal", "server.port": 11211}
        )
        return {"db.system": "memcached", "db.operation": op, "db.statement": statement, **peer}

    def _rpc(self) -> dict[str, Any]:
        peer = (
            {"net.peer.name": "recs-model.ml.svc.cluster.local", "net.peer.port": 50051}
            if self.s["semconv"] == "old"
            else {"server.address": "recs-model.ml.svc.cluster.local", "server.port": 50051}
        )
        return {
            "rpc.system": "grpc",
            "rpc.service": "recs.v1.Ranker",
            "rpc.method": "Score",
            "rpc.grpc.status_code": 0,
            **peer,
        }

    # --- one request ------------------------------------------------------------------------------

    def request(self, req: Request, gc_pauses: list[tuple[float, float, bool]]) -> None:
        """Add the request's spans: nginx first when it is traced, then the Rails spans."""
        assert req.worker is not None
        table, s = self.table, self.s
        trace = table.new_trace()
        res = self.worker(req.worker)
        root_rec = req.spans[0]
        status = int(root_rec[4]["status"])
        target = {
            "recs": f"/recs/{req.params['user']}?limit={req.params.get('items', 0)}",
            "product": f"/products/{req.params['user']}",
            "catalog": f"/api/v1/catalog?page=1&per_page={req.params.get('per_page', 0)}",
        }[req.kind]
        parent = None
        stamped = req.arrival + 0.1 * NS_PER_MS  # nginx reads the request and stamps X-Request-Start
        if self.nginx >= 0:
            parent = table.span(
                trace,
                None,
                "@puma",
                "Server",
                self.nginx,
                "nginx",
                req.arrival,
                root_rec[3] + 0.35 * NS_PER_MS,
                {
                    "http.method": "GET",
                    "http.target": target,
                    "http.status_code": status,
                    "net.sock.peer.addr": "10.12.0.1",
                    "upstream.address": f"{pod_ip(req.pod)}:3000",
                },
                "Error" if status >= 500 else "Unset",
            )
        index: dict[int, int] = {}
        for i, (role, par, start, end, a, st, msg, server, events) in enumerate(req.spans):
            up = parent if par < 0 else index[par]
            if role == "cache.read_multi" and not s["cache_attrs"]:
                index[i] = up  # no ActiveSupport instrumentation: dalli's span hangs from the render
                continue
            evs = list(events)
            if role == "root":
                attrs = self._root_attrs(req, status, target, a, start - stamped)
                if s["gc_events"]:
                    evs += [
                        self._gc_event(a0, b0, major)
                        for a0, b0, major in gc_pauses
                        if a0 < end and b0 > start
                    ]
            else:
                attrs = self._attrs(role, a)
            name, kind, scope, peer = self._shape(role, req.kind, a)
            on = self.model[server] if role.startswith("model.") and role != "model.client" else res
            evs.sort(key=lambda e: e[0])
            index[i] = table.span(trace, up, name, kind, on, scope, start, end, attrs, st, msg, evs, peer)

    def _root_attrs(
        self, req: Request, status: int, target: str, a: dict[str, Any], queue: float
    ) -> dict[str, Any]:
        attrs = self._http(req, status, target)
        if req.kind == "recs":
            attrs["recs.items_count"] = a["items"]
        if self.s["queue_attr"] == "request.queue_time_ms":
            attrs["request.queue_time_ms"] = round(queue / NS_PER_MS, 3)
        elif self.s["queue_attr"]:
            attrs[self.s["queue_attr"]] = int(queue // 1000)
        return attrs

    @staticmethod
    def _gc_event(a0: float, b0: float, major: bool) -> tuple[float, str, dict[str, Any]]:
        """What the GC middleware reports from GC::Profiler: when a collection began and how long."""
        return (
            a0,
            "ruby.gc.major" if major else "ruby.gc.minor",
            {
                "ruby.gc.pause_ms": round((b0 - a0) / NS_PER_MS, 2),
                "ruby.gc.major_by": "oldmalloc" if major else "",
            },
        )

    def _attrs(self, role: str, a: dict[str, Any]) -> dict[str, Any]:
        if role == "db":
            return self._db(a)
        if role == "es":
            return self._es(a)
        if role == "model.client":
            return self._rpc()
        if role == "model.server":
            return {k: v for k, v in self._rpc().items() if not k.startswith(("net.", "server."))}
        if role == "model.run":
            return {"onnx.model": "ranker-v7.onnx", "batch.size": a["batch"]}
        if role == "render":
            return {"identifier": a["template"]}
        if role == "cache.read_multi":
            return {
                "rails.cache.store": "mem_cache_store",
                "rails.cache.key_count": a["keys"],
                "rails.cache.hit_count": a["hits"],
            }
        if role.startswith("memcached."):
            return self._memcached(role.split(".", 1)[1], a)
        raise ValueError(f"unknown span role {role!r}")

    def _shape(self, role: str, kind: str, a: dict[str, Any]) -> tuple[str, str, str, str | None]:
        """(name, kind, instrumentation scope, Zipkin peer) of a role's span under the seed's tracers."""
        s = self.s
        if role == "root":
            return ROOTS[s["naming"]][kind], "Server", "OpenTelemetry::Instrumentation::Rack", None
        if role == "db":
            return (
                db_span_name(s["semconv"], a["table"]),
                "Client",
                "OpenTelemetry::Instrumentation::PG",
                "postgres",
            )
        if role == "es":
            scope = "elasticsearch-api" if s["es_native"] else "OpenTelemetry::Instrumentation::Net::HTTP"
            return es_span_name(s["es_native"]), "Client", scope, "elasticsearch"
        if role == "model.client":
            return MODEL_RPC, "Client", "OpenTelemetry::Instrumentation::GRPC", MODEL
        if role == "model.server":
            return MODEL_RPC, "Server", "opentelemetry.instrumentation.grpc", None
        if role == "model.run":
            return "onnxruntime.InferenceSession.run", "Internal", "recs_model.serving", None
        if role == "render":
            return RENDER, "Internal", "OpenTelemetry::Instrumentation::ActionView", None
        if role == "cache.read_multi":
            return (
                "cache_read_multi.active_support",
                "Internal",
                "OpenTelemetry::Instrumentation::ActiveSupport",
                None,
            )
        return role.split(".", 1)[1], "Client", "OpenTelemetry::Instrumentation::Dalli", "memcached"
