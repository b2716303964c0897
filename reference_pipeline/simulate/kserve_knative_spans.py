"""How the blind family `kserve-knative` (kserve_knative.py) is instrumented, per seed: pod names as
`service.instance.id`, host.name + process.pid per worker process, or a Zipkin endpoint's IP; old or
new HTTP semconv; KServe's own `preprocess` / `predict` / `postprocess` spans or semconv-style
`{operation} {model}` names; Knative's `activator_proxy` / `throttler_try` / `queue_proxy` spans or
none; the Istio ingress gateway's span or none; the feature service's server span or none; CPython
collections as span events, as counters or not at all; G1 pauses as JFR-style events or nothing; and
the spans of one request, written from its record.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import TraceTable

API, GATEWAY = "payments-api", "istio-ingressgateway"
TRANSFORMER, FEATURES = "fraud-xgb-transformer", "feature-service"
ACTIVATOR, QUEUE, PREDICTOR = "activator", "queue-proxy", "fraud-xgb-predictor"
AUTHORIZE, RESCORE = "POST /v1/payments/authorize", "POST /v1/merchants/{merchantId}/rescore"
GATEWAY_SPAN = "fraud-xgb.risk.svc.cluster.local:80/*"
GET_FEATURES = "feature.v1.FeatureService/GetOnlineFeatures"
ACTIVATOR_PROXY, THROTTLER_TRY, QUEUE_PROXY = "activator_proxy", "throttler_try", "queue_proxy"
INSERT = "INSERT payments.authorizations"
PY_GC_EVENT, JVM_GC_EVENT = "python.gc", "jdk.GarbageCollection"
MODEL = "fraud-xgb"


def pod_name(prefix: str, k: int) -> str:
    rng = random.Random(f"{prefix}/{k}")
    return f"{prefix}-{''.join(rng.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(5))}"


API_PODS = "payments-api-6c9d7b5f4"
GATEWAY_PODS = "istio-ingressgateway-7b9c6d8f5"
TRANSFORMER_PODS = "fraud-xgb-transformer-00007-deployment-5d7f9c8b6"
FEATURE_PODS = "feature-service-8d6f5c7b9"
ACTIVATOR_PODS = "activator-7c8b9d6f5"
STABLE, CANARY = "fraud-xgb-predictor-00007", "fraud-xgb-predictor-00008"


def predictor_pods(revision: str) -> str:
    return f"{revision}-deployment-{'6f8d9c7b5' if revision == STABLE else '84c6d9f7b'}"


@dataclass(frozen=True)
class Style:
    """One seed's conventions."""

    semconv: str  # old | new
    ident: str  # pod | pid | ip
    names: str  # kserve | semconv
    protocol: str  # v1 | v2
    knative: bool  # the activator's and queue-proxy's spans exported
    gateway: bool  # the ingress gateway's span exported
    feature_spans: bool
    py_gc: str  # events | attrs | none
    jvm_gc: str  # events | none

    @property
    def route(self) -> str:
        return (f"POST /v2/models/{MODEL}/infer" if self.protocol == "v2"
                else f"POST /v1/models/{MODEL}:predict")

    @property
    def path(self) -> str:
        return self.route.split(" ", 1)[1]

    def step(self, op: str) -> str:
        return op if self.names == "kserve" else f"{op} {MODEL}"

    @property
    def http_client(self) -> str:
        return "POST" if self.semconv == "new" else "HTTP POST"

    def label(self, pod: str, pid: int = 1) -> str:
        """An instance as the store names it."""
        if self.ident == "pod":
            return pod
        if self.ident == "pid":
            return f"{pod}:{pid}"
        return f"{ip_of(pod)}:{port_of(pod)}"

    def http(self, method: str, path: str, status: int, size: int | None = None) -> dict[str, Any]:
        if self.semconv == "new":
            out: dict[str, Any] = {"http.request.method": method, "url.path": path,
                                   "http.response.status_code": status}
            if size is not None:
                out["http.request.body.size"] = size
        else:
            out = {"http.method": method, "http.target": path, "http.status_code": status}
            if size is not None:
                out["http.request_content_length"] = size
        return out

    def peer(self, host: str, port: int) -> dict[str, Any]:
        if self.semconv == "new":
            return {"server.address": host, "server.port": port}
        return {"net.peer.name": host, "net.peer.port": port}


def ip_of(pod: str) -> str:
    h = random.Random(pod).getrandbits(24)
    return f"10.{44 + h % 3}.{(h >> 2) % 256}.{10 + (h >> 10) % 240}"


def port_of(pod: str) -> int:
    return 8080 if pod.startswith(("payments", "fraud", "feature")) else 8012 if "activator" in pod else 8443


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, str, int], int] = field(default_factory=dict)

    def get(self, service: str, pod: str, pid: int = 1, revision: str = "") -> int:
        key = (service, pod, pid)
        if key not in self.made:
            st = self.style
            lang = {API: "java", TRANSFORMER: "python", PREDICTOR: "python"}.get(service, "go")
            attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": lang}
            if st.ident == "pod":
                attrs.update({"service.instance.id": pod, "k8s.pod.name": pod, "k8s.namespace.name":
                              "knative-serving" if service == ACTIVATOR else "risk"})
            elif st.ident == "pid":
                attrs.update({"host.name": pod, "process.pid": pid})
            if revision:
                attrs["service.version"] = revision
                if st.ident != "ip":
                    attrs["serving.knative.dev/revision"] = revision
            self.made[key] = self.table.resource(attrs, ip_of(pod), port_of(pod))
        return self.made[key]


Events = list[tuple[float, str, dict[str, Any]]]


def _gc_events(st: Style, kind: str, pauses: list[tuple[float, float]]) -> Events | None:
    if kind == "py" and st.py_gc == "events":
        return [(a, PY_GC_EVENT, {"gc.generation": 2, "gc.duration_ms": round((b - a) / 1e6, 3)})
                for a, b in pauses]
    if kind == "jvm" and st.jvm_gc == "events":
        return [(a, JVM_GC_EVENT, {"jvm.gc.name": "G1 Full" if b - a > 250e6 else "G1 Young Generation",
                                   "jvm.gc.duration_ms": round((b - a) / 1e6, 3)}) for a, b in pauses]
    return None


@dataclass
class PredictorVisit:
    """One call through the activator to a predictor pod."""

    activator: str
    act: tuple[float, float]
    thr: tuple[float, float]
    pod: str
    revision: str
    pid: int
    qp: tuple[float, float]
    srv: tuple[float, float]
    compute: tuple[float, float]
    rows: int


@dataclass
class TransformerVisit:
    """One request's attempt that a transformer process answered."""

    pod: str
    pid: int
    qp: tuple[float, float]
    srv: tuple[float, float]
    pre: tuple[float, float]
    feat: tuple[float, float]
    feat_srv: tuple[str, float, float, int] | None  # (pod, start, end, keys missed in Redis)
    pred: tuple[float, float]
    call: tuple[float, float]
    visit: PredictorVisit
    post: tuple[float, float]
    gc: list[tuple[float, float]]
    gc_count: tuple[int, float]


@dataclass
class Record:
    """One payments-api request: its root, the call to the InferenceService and the ledger insert."""

    api_pod: str
    rows: int
    size: int
    root: tuple[float, float] = (0.0, 0.0)
    client: tuple[float, float] = (0.0, 0.0)
    gateway: tuple[str, float, float] | None = None
    attempts: int = 0
    failed: int = 0
    tv: TransformerVisit | None = None
    db: tuple[float, float] | None = None
    jvm_gc: list[tuple[float, float]] = field(default_factory=list)


_KTOR, _KTOR_CLIENT = "io.opentelemetry.ktor-2.0", "io.opentelemetry.ktor-client-2.0"
_JDBC, _FASTAPI, _GRPC_PY, _HTTPX = "io.opentelemetry.jdbc", "opentelemetry.instrumentation.fastapi", (
    "opentelemetry.instrumentation.grpc"), "opentelemetry.instrumentation.httpx"
_KSERVE, _KNATIVE, _ENVOY = "kserve", "knative.dev/serving", "envoy"
_UPSTREAM = "outbound|80||fraud-xgb-transformer-00007.risk.svc.cluster.local"


def write_request(table: TraceTable, res: Resources, rec: Record) -> None:
    st = res.style
    trace = table.new_trace()
    api = res.get(API, rec.api_pod, 1)
    route = RESCORE if rec.rows > 1 else AUTHORIZE
    path = "/v1/merchants/m-20931/rescore" if rec.rows > 1 else "/v1/payments/authorize"
    tv = rec.tv
    status = 200 if tv is not None else 503
    root = table.span(trace, None, route, "Server", api, _KTOR, *rec.root,
                      {**st.http("POST", path, status), "http.route": route.split(" ", 1)[1]},
                      "Unset" if tv else "Error", events=_gc_events(st, "jvm", rec.jvm_gc))
    host = "fraud-xgb.risk.example.internal"
    client = table.span(trace, root, st.http_client, "Client", api, _KTOR_CLIENT, *rec.client,
                        {**st.http("POST", st.path, status, rec.size), **st.peer(host, 443)},
                        "Unset" if tv else "Error", peer=GATEWAY if st.gateway else TRANSFORMER)
    parent = client
    if st.gateway and rec.gateway is not None:
        gw_pod, a, b = rec.gateway
        flags = "-" if tv else "UF,URX"
        parent = table.span(trace, client, GATEWAY_SPAN, "Client", res.get(GATEWAY, gw_pod), _ENVOY, a, b,
                            {**st.http("POST", st.path, status),
                             "upstream_cluster": _UPSTREAM,
                             "response_flags": flags, "component": "proxy"}, "Unset" if tv else "Error",
                            peer=TRANSFORMER)
    if rec.db is not None:
        table.span(trace, root, INSERT, "Client", api, _JDBC, *rec.db,
                   {"db.system": "postgresql", "db.name": "payments", "db.operation": "INSERT",
                    "db.sql.table": "authorizations", **st.peer("payments-db.risk", 5432)}, peer="postgresql")
    if tv is None:
        return
    if st.knative:
        parent = table.span(trace, parent, QUEUE_PROXY, "Server", res.get(QUEUE, tv.pod), _KNATIVE, *tv.qp,
                            {**st.http("POST", st.path, 200),
                             "serving.knative.dev/revision": "fraud-xgb-transformer-00007"})
    me = res.get(TRANSFORMER, tv.pod, tv.pid)
    attrs = {**st.http("POST", st.path, 200, rec.size), "http.route": st.path,
             "kserve.model.name": MODEL, "kserve.instances": max(rec.rows, 1)}
    if st.py_gc == "attrs":
        attrs.update({"process.runtime.cpython.gc_count.gen2": tv.gc_count[0],
                      "process.runtime.cpython.gc_time_ms": round(tv.gc_count[1] / 1e6, 1)})
    srv = table.span(trace, parent, st.route, "Server", me, _FASTAPI, *tv.srv, attrs,
                     events=_gc_events(st, "py", tv.gc))
    step = {"kserve.model.name": MODEL} if st.names == "kserve" else {"ml.model.name": MODEL,
                                                                       "openinference.span.kind": "CHAIN"}
    pre = table.span(trace, srv, st.step("preprocess"), "Internal", me, _KSERVE, *tv.pre, step)
    rpc = {"rpc.system": "grpc", "rpc.service": "feature.v1.FeatureService",
           "rpc.method": "GetOnlineFeatures", "rpc.grpc.status_code": 0}
    fc = table.span(trace, pre, GET_FEATURES, "Client", me, _GRPC_PY, *tv.feat,
                    {**rpc, **st.peer("feature-service.features.svc.cluster.local", 6566)}, peer=FEATURES)
    if st.feature_spans and tv.feat_srv is not None:
        fpod, a, b, misses = tv.feat_srv
        table.span(trace, fc, GET_FEATURES, "Server", res.get(FEATURES, fpod), "go.opentelemetry.io/otelgrpc",
                   a, b, {**rpc, "feature.entity_rows": 3 * max(rec.rows, 1), "feature.redis.misses": misses})
    pred = table.span(trace, srv, st.step("predict"), "Internal", me, _KSERVE, *tv.pred, step)
    v = tv.visit
    call = table.span(trace, pred, st.http_client, "Client", me, _HTTPX, *tv.call,
                      {**st.http("POST", st.path, 200),
                       **st.peer("fraud-xgb-predictor.risk.svc.cluster.local", 80)},
                      peer=ACTIVATOR if st.knative else PREDICTOR)
    up = call
    if st.knative:
        act = res.get(ACTIVATOR, v.activator)
        up = table.span(trace, call, ACTIVATOR_PROXY, "Server", act, _KNATIVE, *v.act,
                        {"serving.knative.dev/revision": v.revision})
        table.span(trace, up, THROTTLER_TRY, "Internal", act, _KNATIVE, *v.thr,
                   {"serving.knative.dev/revision": v.revision})
        up = table.span(trace, up, QUEUE_PROXY, "Server", res.get(QUEUE, v.pod), _KNATIVE, *v.qp,
                        {**st.http("POST", st.path, 200),
                         "serving.knative.dev/revision": v.revision})
    pme = res.get(PREDICTOR, v.pod, v.pid, v.revision)
    psrv = table.span(trace, up, st.route, "Server", pme, _FASTAPI, *v.srv,
                      {**st.http("POST", st.path, 200), "http.route": st.path,
                       "kserve.model.name": MODEL, "kserve.instances": max(rec.rows, 1)})
    table.span(trace, psrv, st.step("predict"), "Internal", pme, _KSERVE, *v.compute,
               {**step, "kserve.model.version": v.revision.rsplit("-", 1)[1]})
    table.span(trace, srv, st.step("postprocess"), "Internal", me, _KSERVE, *tv.post, step)
