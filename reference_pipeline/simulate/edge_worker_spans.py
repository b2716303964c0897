"""How the blind family `edge-worker` (edge_worker.py) is instrumented, per seed: where the PoP shows
(`cloud.region` beside a random `service.instance.id`, the instance's name, or a `colo` span tag beside a
Zipkin endpoint), old or new semantic conventions, KV spans with or without `db.*` attributes, the
isolate start as a span event or not at all, browser RUM roots or server-rooted traces, the ranker's
own spans (another collector: some missing) or none; and the spans of one request from its timeline.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.edge_worker_net import POPS, REGIONS, Served
from reference_pipeline.simulate.trace_table import TraceTable

WORKER, RANKER, WEB = "edge-personalize", "ranker", "storefront-web"
ROUTE, BATCH_ROUTE = "/api/personalize", "/api/personalize/batch"
RANK_HOST = "ranker.shop-ml.internal"
PARSE, PREPARE, MERGE, ONNX = "parse request", "prepare candidates", "merge ranking", "onnxruntime.run"
SCOPE = "@microlabs/otel-cf-workers"
CPU_KILLED = "Worker exceeded CPU time limit."


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` region | name | colo, `rum`: browser roots,
    `events`: the isolate start as a span event, `ranker`: the ranker's spans exported (a share
    missing), `internals`: the worker's INTERNAL spans exported, `kv_db`: db.* on KV spans."""

    semconv: str
    ident: str
    rum: bool
    events: bool
    ranker: bool
    internals: bool
    kv_db: bool
    seed: int

    @property
    def new(self) -> bool:
        return self.semconv == "new"

    def root(self, batch: bool = False) -> str:
        return f"{'POST' if batch else 'GET'} {BATCH_ROUTE if batch else ROUTE}"

    def kv(self, namespace: str) -> str:
        if self.kv_db:
            return f"get {namespace}" if self.new else "kv.get"
        return f"KV {namespace} get"

    @property
    def session(self) -> str:
        return {"region": "fetch SessionObject", "name": "DO SessionObject fetch",
                "colo": "session-object.fetch"}[self.ident]

    @property
    def rank_client(self) -> str:
        return "POST" if self.new else "HTTP POST"

    @property
    def rank_server(self) -> str:
        return "POST /v1/rank"

    def parse_span(self, batch: bool = False) -> str:
        return PARSE if self.internals else self.root(batch)

    def prepare_span(self) -> str:
        return PREPARE if self.internals else self.root()

    def label(self, service: str, index: int) -> str:
        """The instance as the store names it: service.instance.id, host.name, or a Zipkin ip:port."""
        if self.ident == "colo":
            ip, port = endpoint(service, index)
            return f"{ip}:{port}"
        if service == RANKER:
            return ranker_host(index)
        if self.ident == "region":
            return str(uuid.UUID(int=random.Random(self.seed * 131 + index).getrandbits(128), version=4))
        return f"{WORKER}@{POPS[index].code}"


def ranker_host(index: int) -> str:
    return f"ranker-{REGIONS[index % 2]}-{index // 2}"


def endpoint(service: str, index: int) -> tuple[str, int]:
    if service == RANKER:
        return f"10.90.{index % 2}.{11 + index // 2}", 8080
    if service == WEB:
        return "192.0.2.10", 443
    return f"10.{40 + index}.0.7", 8787


@dataclass
class Resources:
    table: TraceTable
    style: Style
    hosts_per_region: int
    made: dict[tuple[str, int], int] = field(default_factory=dict)

    def get(self, service: str, index: int = 0) -> int:
        key = (service, index)
        if key not in self.made:
            self.made[key] = self.table.resource(self._attrs(service, index), *endpoint(service, index))
        return self.made[key]

    def _attrs(self, service: str, index: int) -> dict[str, Any]:
        st = self.style
        if service == WEB:
            return {"service.name": WEB, "telemetry.sdk.language": "webjs", "browser.platform": "mixed"}
        if service == RANKER:  # `index` = region + 2 * host: the host's name and its region
            attrs: dict[str, Any] = {"service.name": RANKER, "telemetry.sdk.language": "python",
                                     "cloud.region": REGIONS[index % 2], "service.version": "2026.11.3"}
            if st.ident != "colo":
                attrs["host.name"] = ranker_host(index)
            return attrs
        attrs = {"service.name": WORKER, "telemetry.sdk.language": "js", "cloud.provider": "cloudflare",
                 "faas.name": WORKER}
        if st.ident == "region":
            attrs.update({"cloud.region": POPS[index].code, "service.instance.id": st.label(WORKER, index)})
        elif st.ident == "name":
            attrs["service.instance.id"] = st.label(WORKER, index)
        return attrs


@dataclass
class Attempt:
    """One invocation of the worker for a request, as the model computed it. A killed invocation
    (`killed`: the CPU limit) has no spans after the kill; `cold` is the compile it waited for."""

    pop: int
    server: tuple[float, float]
    body_bytes: int
    parse: tuple[float, float]
    cold: tuple[float, str] | None = None  # (compile ns, bundle) where this request started an isolate
    profile: tuple[float, float, bool] | None = None
    session: tuple[float, float] | None = None
    cands: tuple[float, float, bool] | None = None
    prepare: tuple[float, float] | None = None
    candidates: int = 0
    rank: tuple[float, float] | None = None
    served: Served | None = None
    rank_failed: bool = False
    fallback: tuple[float, float, bool] | None = None
    merge: tuple[float, float] | None = None
    view: tuple[float, float] | None = None
    killed: bool = False
    segment: str = "anon"
    category: str = ""
    retry: bool = False
    batch: bool = False


@dataclass
class Request:
    """A page's request: the browser's route change and fetches (RUM) around one or two invocations."""

    attempts: list[Attempt]
    nav: tuple[float, float] | None = None  # the RUM root
    fetches: list[tuple[float, float]] = field(default_factory=list)
    product: int = 0


def _peer(st: Style, host: str, port: int) -> dict[str, Any]:
    return {"server.address": host, "server.port": port} if st.new else {"net.peer.name": host,
                                                                         "net.peer.port": port}


def _kv_attrs(st: Style, namespace: str, hit: bool) -> dict[str, Any]:
    if not st.kv_db:
        return {"kv.namespace": namespace, "kv.cache_status": "HIT" if hit else "MISS"}
    if st.new:
        return {"db.system": "cloudflare_kv", "db.namespace": namespace, "db.operation.name": "get"}
    return {"db.system": "cloudflare-kv", "db.name": namespace, "db.operation": "get"}


def write_request(table: TraceTable, res: Resources, req: Request, rng: random.Random,
                  missing: float) -> None:
    st = res.style
    trace = table.new_trace()
    parent = None
    if req.nav is not None:
        web = res.get(WEB)
        parent = table.span(trace, None, "routeChange /product/:id", "Internal", web,
                            "@opentelemetry/instrumentation-user-interaction", *req.nav,
                            {"http.url": f"https://shop.example.com/product/{req.product}"})
    for k, at in enumerate(req.attempts):
        up = parent
        if req.nav is None and k > 0:  # server-rooted: the page's retry is a trace of its own
            trace = table.new_trace()
        if req.nav is not None:
            url = f"https://shop.example.com{ROUTE}?product={req.product}" + ("&lite=1" if at.retry else "")
            http = ({"http.request.method": "GET", "url.full": url} if st.new else
                    {"http.method": "GET", "http.url": url})
            status = 503 if at.killed else 200
            http["http.response.status_code" if st.new else "http.status_code"] = status
            up = table.span(trace, parent, "GET" if st.new else "HTTP GET", "Client", res.get(WEB),
                            "@opentelemetry/instrumentation-fetch", *req.fetches[k], http,
                            "Error" if at.killed else "Unset", peer=WORKER)
        _write_attempt(table, res, trace, up, at, rng, missing)


def _write_attempt(table: TraceTable, res: Resources, trace: int, up: int | None, at: Attempt,
                   rng: random.Random, missing: float) -> None:
    st = res.style
    me = res.get(WORKER, at.pop)
    route = BATCH_ROUTE if at.batch else ROUTE
    http: dict[str, Any] = ({"http.request.method": "POST" if at.batch else "GET", "http.route": route,
                             "http.response.status_code": 503 if at.killed else 200,
                             "http.request.body.size": at.body_bytes} if st.new else
                            {"http.method": "POST" if at.batch else "GET", "http.route": route,
                             "http.status_code": 503 if at.killed else 200,
                             "http.request_content_length": at.body_bytes})
    http["faas.trigger"] = "http"
    if st.ident == "colo":
        http["colo"] = POPS[at.pop].code.upper()
    events = []
    if at.cold is not None and st.events:
        events.append((at.server[0], "isolate.start", {"isolate.compile_ms": round(at.cold[0] / 1e6, 2),
                                                       "script.version": at.cold[1]}))
    root = table.span(trace, up, st.root(at.batch), "Server", me, SCOPE, *at.server, http,
                      "Error" if at.killed else "Unset", CPU_KILLED if at.killed else "", events)
    if st.internals:
        table.span(trace, root, PARSE, "Internal", me, WORKER, *at.parse,
                   {"http.request.body.size": at.body_bytes})
    if at.profile is not None:
        s, e, hit = at.profile
        table.span(trace, root, st.kv("PROFILES"), "Client", me, SCOPE, s, e, _kv_attrs(st, "PROFILES", hit),
                   peer="workers-kv")
    if at.session is not None:
        table.span(trace, root, st.session, "Client", me, SCOPE, *at.session,
                   {"do.class": "SessionObject", "do.method": "POST /sync" if at.batch else "GET /session"},
                   peer="session-object")
    if at.cands is not None:
        s, e, hit = at.cands
        table.span(trace, root, st.kv("CANDIDATES"), "Client", me, SCOPE, s, e,
                   {**_kv_attrs(st, "CANDIDATES", hit), "app.segment": at.segment}, peer="workers-kv")
    if at.prepare is not None and st.internals:
        table.span(trace, root, PREPARE, "Internal", me, WORKER, *at.prepare,
                   {"app.candidates.count": at.candidates}, "Error" if at.killed else "Unset",
                   CPU_KILLED if at.killed else "")
    if at.rank is not None:
        url = f"https://{RANK_HOST}/v1/rank"
        method, status = ("http.request.method", "http.response.status_code") if st.new else (
            "http.method", "http.status_code")
        attrs = {method: "POST", ("url.full" if st.new else "http.url"): url, **_peer(st, RANK_HOST, 443),
                 status: 503 if at.rank_failed else 200, "app.candidates.count": at.candidates}
        client = table.span(trace, root, st.rank_client, "Client", me, SCOPE, *at.rank, attrs,
                            "Error" if at.rank_failed else "Unset", peer=RANKER)
        sv = at.served
        if st.ranker and sv is not None and rng.random() >= missing:
            host = res.get(RANKER, sv.host)
            code = 503 if sv.failed else 200
            server = table.span(trace, client, st.rank_server, "Server", host,
                                "opentelemetry.instrumentation.fastapi", sv.start, sv.end,
                                {method: "POST", "http.route": "/v1/rank", status: code,
                                 "app.candidates.count": at.candidates}, "Error" if sv.failed else "Unset")
            table.span(trace, server, ONNX, "Internal", host, "ranker", sv.infer_start, sv.infer_end,
                       {"model.name": "gbdt-ranker", "onnx.batch": at.candidates})
    if at.fallback is not None:
        s, e, hit = at.fallback
        table.span(trace, root, st.kv("POPULAR"), "Client", me, SCOPE, s, e, _kv_attrs(st, "POPULAR", hit),
                   peer="workers-kv")
    if at.merge is not None and st.internals:
        table.span(trace, root, MERGE, "Internal", me, WORKER, *at.merge, {"app.items.returned": 8})
    if at.view is not None:
        table.span(trace, root, st.session, "Client", me, SCOPE, *at.view,
                   {"do.class": "SessionObject", "do.method": "POST /view"}, peer="session-object")
