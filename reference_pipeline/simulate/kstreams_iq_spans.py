"""How the blind family `kstreams-iq` (kstreams_iq.py) is instrumented, per seed: the OpenTelemetry Java
agent's span names and new semantic conventions, or Spring's Micrometer Tracing (`http post /...`,
old tags; Brave on the Zipkin seed); instances as `service.instance.id`, host.name + process.pid, or
a Zipkin endpoint; the interactive query's forwarding hop between card-features instances traced or
excluded from tracing; BentoML's own spans (its API server and the runner call) or none; G1 pauses as
JFR-style `jdk.GarbageCollection` span events, as Micrometer-like counters on the server spans, or
not at all. `write_request` writes one request's spans from its timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.kstreams_iq_physics import GcPause, Scored
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

API, STREAMS, BENTO = "authz-api", "card-features", "fraud-scorer"
PUBLIC_ROUTE, INTERNAL_ROUTE = "/v1/cards/{cardId}/aggregates", "/internal/aggregates/{cardId}"
RUNNER_SPAN = "fraud_gbm.predict_proba"
GC_EVENT = "jdk.GarbageCollection"
_API_SUFFIX = ("x2k4p", "m8r7t", "q5z9w", "h3v6c")
_BENTO_SUFFIX = ("d4n2s", "k7w1f")
_AGENT = {"http": "io.opentelemetry.reactor-netty-1.0", "server": "io.opentelemetry.spring-webflux-5.3",
          "r2dbc": "io.opentelemetry.r2dbc-1.0",
          "method": "io.opentelemetry.opentelemetry-instrumentation-annotations-1.16",
          "tomcat": "io.opentelemetry.tomcat-10.0", "client": "io.opentelemetry.java-http-client"}
_MICROMETER = "org.springframework.boot"


def api_pod(k: int) -> str:
    return f"authz-api-7c5f9d8b6-{_API_SUFFIX[k]}"


def streams_pod(k: int) -> str:
    return f"card-features-{k}"


def bento_pod(k: int) -> str:
    return f"fraud-scorer-5b8d7c9f4-{_BENTO_SUFFIX[k]}"


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `names` agent | micrometer; `ident` pod | host | ip; `hop_traced`: the
    forwarding GET between card-features instances has spans; `bento_spans`: BentoML exports its
    server and runner-call spans; `gc` events | attrs | none."""

    names: str
    ident: str
    hop_traced: bool
    bento_spans: bool
    gc: str

    def _http(self, method: str, route: str = "") -> str:
        if self.names == "agent":
            return f"{method} {route}".strip()
        return f"http {method.lower()} {route}".strip()

    @property
    def root(self) -> str:
        return self._http("POST", "/authorize")

    @property
    def features(self) -> str:
        return "CardFeaturesClient.aggregates" if self.names == "agent" else "card.features"

    @property
    def get(self) -> str:
        return self._http("GET")

    @property
    def post(self) -> str:
        return self._http("POST")

    @property
    def public(self) -> str:
        return self._http("GET", PUBLIC_ROUTE)

    @property
    def internal(self) -> str:
        return self._http("GET", INTERNAL_ROUTE)

    @property
    def query_span(self) -> str:
        """Where a store's time shows: the owner's internal route where the hop is traced, else the
        public route of whichever instance received the query."""
        return self.internal if self.hop_traced else self.public

    @property
    def insert(self) -> str:
        return "INSERT authz.auth_decisions" if self.names == "agent" else "query"

    @property
    def bento_server(self) -> str:
        return "POST /score"

    def ip(self, service: str, k: int) -> str:
        return {API: f"10.12.{k % 3}.{40 + k}", STREAMS: f"10.12.{k % 3}.{80 + k}"}.get(
            service, f"10.12.{k % 3}.{120 + k}")

    def port(self, service: str) -> int:
        return {API: 8080, STREAMS: 7070}.get(service, 3000)

    def pod(self, service: str, k: int) -> str:
        return {API: api_pod, STREAMS: streams_pod}.get(service, bento_pod)(k)

    def label(self, service: str, k: int) -> str:
        """An instance as the store names it."""
        if self.ident == "pod":
            return self.pod(service, k)
        if self.ident == "host":
            return f"{self.pod(service, k)}:1"
        return f"{self.ip(service, k)}:{self.port(service)}"

    def http_attrs(self, method: str, url: str | None, route: str | None, status: int,
                   host: str | None = None, port: int | None = None) -> dict[str, Any]:
        if self.names == "agent":
            out: dict[str, Any] = {"http.request.method": method, "http.response.status_code": status}
            if url:
                out["url.full"] = url
            if route:
                out["http.route"] = route
            if host:
                out.update({"server.address": host, "server.port": port})
            return out
        out = {"http.method": method, "status": str(status), "outcome": "SUCCESS" if status < 400 else (
            "SERVER_ERROR" if status >= 500 else "CLIENT_ERROR")}
        if url:
            out["http.url"] = url
        if route:
            out["uri"] = route
        if host:
            out.update({"net.peer.name": host, "net.peer.port": port})
        return out


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int], int] = field(default_factory=dict)

    def get(self, service: str, k: int) -> int:
        if (service, k) not in self.made:
            st = self.style
            attrs: dict[str, Any] = {"service.name": service}
            if service == BENTO:
                attrs.update({"telemetry.sdk.language": "python", "bentoml.version": "1.2.16"})
            else:
                attrs.update({"telemetry.sdk.language": "java", "process.runtime.version": "17.0.11+9",
                              "service.version": "4.12.0" if service == API else "2.7.3"})
            if st.ident == "pod":
                attrs.update({"service.instance.id": st.pod(service, k), "k8s.pod.name": st.pod(service, k),
                              "k8s.namespace.name": "authz"})
            elif st.ident == "host":
                attrs.update({"host.name": st.pod(service, k), "process.pid": 1})
            self.made[(service, k)] = self.table.resource(attrs, st.ip(service, k), st.port(service))
        return self.made[(service, k)]


@dataclass
class Attempt:
    """One GET of the card's aggregates: the receiving instance's server span (None when the
    connection was refused), the forwarding hop to the task's owner if any (client start/end, owner,
    owner's server start/end), the status the API saw."""

    start: float
    end: float
    status: int
    receiver: int
    server: tuple[float, float] | None
    hop: tuple[float, float, int, float, float] | None
    hop_status: int = 200


@dataclass
class Timeline:
    pod: int
    root: tuple[float, float]
    card: str
    features: tuple[float, float]
    attempts: list[Attempt]
    score: tuple[float, float]
    replica: int
    bento: tuple[float, float]
    runner: tuple[float, float]
    scored: Scored
    insert: tuple[float, float]
    decision: str


def _gc(st: Style, attrs: dict[str, Any], pauses: list[GcPause], a: float, b: float
        ) -> list[tuple[float, str, dict[str, Any]]] | None:
    """The JVM's pauses as the seed reports them on a server span [a, b): JFR-style events for the
    pauses that began in it, or the pause counters (count, total ms) as of its end."""
    if st.gc == "attrs":
        done = [g for g in pauses if g.end <= b]
        attrs.update({"jvm.gc.pause.count": len(done),
                      "jvm.gc.pause.total_ms": round(sum(g.end - g.start for g in done) / NS_PER_MS, 1)})
    inside = [g for g in pauses if a <= g.start < b]
    if st.gc != "events" or not inside:
        return None
    return [(g.start, GC_EVENT, {"jfr.gcId": g.gc_id, "jfr.name": g.name, "jfr.cause": g.cause,
                                 "jfr.duration_ms": round((g.end - g.start) / NS_PER_MS, 3)})
            for g in inside]


def write_request(table: TraceTable, res: Resources, tl: Timeline, gc: dict[tuple[str, int], list[GcPause]]
                  ) -> None:
    """One request's spans. `gc[(service, k)]`: the G1 pauses of that JVM (time order)."""
    st = res.style
    scope = (lambda key: _AGENT[key]) if st.names == "agent" else (lambda key: _MICROMETER)
    trace = table.new_trace()
    me = res.get(API, tl.pod)
    attrs = st.http_attrs("POST", None, "/authorize", 200)
    attrs["authz.decision"] = tl.decision
    events = _gc(st, attrs, gc[(API, tl.pod)], *tl.root)
    root = table.span(trace, None, st.root, "Server", me, scope("server"), *tl.root, attrs, events=events)
    failed = tl.attempts[-1].status != 200
    feats = table.span(trace, root, st.features, "Internal", me, scope("method"), *tl.features,
                       {"card.windows": "1m,1h,24h", "code.function": "aggregates"},
                       "Error" if failed else "Unset",
                       "InvalidStateStoreException: retries exhausted" if failed else "")
    for k, a in enumerate(tl.attempts):
        url = f"http://card-features.authz.svc:7070/v1/cards/{tl.card}/aggregates"
        ca = st.http_attrs("GET", url, None, a.status, "card-features.authz.svc", 7070)
        if k:
            ca["http.request.resend_count" if st.names == "agent" else "retry.attempt"] = k
        bad = a.status >= 500
        client = table.span(trace, feats, st.get, "Client", me, scope("http"), a.start, a.end, ca,
                            "Error" if bad else "Unset", "503 Service Unavailable" if bad else "",
                            peer=STREAMS)
        if a.server is None:
            continue
        rcv = res.get(STREAMS, a.receiver)
        sa = st.http_attrs("GET", None, PUBLIC_ROUTE, a.status)
        ev = _gc(st, sa, gc[(STREAMS, a.receiver)], *a.server)
        server = table.span(trace, client, st.public, "Server", rcv, scope("tomcat"), *a.server, sa,
                            "Error" if bad else "Unset", "InvalidStateStoreException" if bad else "",
                            events=ev)
        if a.hop is None or not st.hop_traced:
            continue
        c_s, c_e, owner, o_s, o_e = a.hop
        host = f"{streams_pod(owner)}.card-features.authz.svc"
        hop = table.span(trace, server, st.get, "Client", rcv, scope("client"), c_s, c_e,
                         st.http_attrs("GET", f"http://{host}:7070/internal/aggregates/{tl.card}", None,
                                       a.hop_status, host, 7070), "Error" if a.hop_status >= 500 else "Unset",
                         peer=STREAMS)
        if o_e > o_s:
            oa = st.http_attrs("GET", None, INTERNAL_ROUTE, a.hop_status)
            ev = _gc(st, oa, gc[(STREAMS, owner)], o_s, o_e)
            table.span(trace, hop, st.internal, "Server", res.get(STREAMS, owner), scope("tomcat"), o_s, o_e,
                       oa, "Error" if a.hop_status >= 500 else "Unset", events=ev)
    pa = st.http_attrs("POST", "http://fraud-scorer.ml.svc:3000/score", None, 200, "fraud-scorer.ml.svc",
                       3000)
    client = table.span(trace, root, st.post, "Client", me, scope("http"), *tl.score, pa, peer=BENTO)
    if st.bento_spans:
        b = res.get(BENTO, tl.replica)
        server = table.span(trace, client, st.bento_server, "Server", b, "opentelemetry.instrumentation.asgi",
                            *tl.bento, {"http.method": "POST", "http.route": "/score",
                                        "http.status_code": 200})
        s = tl.scored
        table.span(trace, server, RUNNER_SPAN, "Internal", b, "bentoml", *tl.runner,
                   {"bentoml.runner.name": "fraud_gbm", "bentoml.runner.method": "predict_proba",
                    "bentoml.adaptive_batching.batch_size": s.batch,
                    "bentoml.adaptive_batching.wait_ms": round((s.start - s.arrive) / NS_PER_MS, 3)})
    if st.names == "agent":
        da = {"db.system": "postgresql", "db.namespace": "authz", "db.operation.name": "INSERT",
              "db.collection.name": "auth_decisions", "server.address": "authz-pg.db.internal",
              "server.port": 5432}
    else:
        da = {"r2dbc.connection": "PostgreSQL",
              "r2dbc.query[0]": "INSERT INTO auth_decisions VALUES ($1, $2, $3, $4)",
              "db.name": "authz", "net.peer.name": "authz-pg.db.internal", "net.peer.port": 5432}
    table.span(trace, root, st.insert, "Client", me, scope("r2dbc"), *tl.insert, da, peer="postgresql")

