"""How the blind family `scala-akka` (scala_akka.py) is instrumented, per seed: the OpenTelemetry Java
agent's spans (Akka HTTP server and client, JDBC, Lettuce, the Cassandra driver, the Kafka producer), a
manual span around the model, `ask` spans from a sharding instrumentation library on some seeds, G1
pauses as span events from a JFR bridge on some, old or new semantic conventions, and instances named
by pod, by the Akka node's host:port, or by Zipkin endpoint; and the spans of one request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.scala_akka_cluster import Recovery
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

API, TRAFFIC = "eta-api", "traffic-service"
ROUTE = "/v1/orders/{orderId}/eta"
JDBC = "SELECT eta.prep_time_stats"
SNAPSHOT, JOURNAL = "SELECT akka.snapshots", "SELECT akka.messages"
GEO, PREDICT = "GEOSEARCH", "EtaModel.predict"
TRAFFIC_SERVER = "GET /v1/speeds"
TOPIC = "eta-quotes"
_SUFFIX = ("x2k4q", "m8r7t", "b5wzn", "q9hcd", "t4vjl", "h6pfr", "c7dxs", "w3nbg", "p5tzm", "r8fkv",
           "j2lqh", "n6vcw", "f4smx", "z9gtb", "k3hwd", "v7rjc", "d5qnl", "s2mzp")
_AGENT = "io.opentelemetry."
_ANNOTATIONS = f"{_AGENT}opentelemetry-instrumentation-annotations-1.16"
CASSANDRA = "cassandra.eta.svc"
_SNAPSHOT_CQL = "SELECT * FROM akka.snapshots WHERE persistence_id = ? ORDER BY sequence_nr DESC LIMIT 1"
_JOURNAL_CQL = ("SELECT * FROM akka.messages WHERE persistence_id = ? AND partition_nr = ? "
                "AND sequence_nr >= ? AND sequence_nr <= ?")
_JDBC_SQL = ("SELECT avg(prep_seconds), stddev(prep_seconds) FROM prep_time_stats WHERE restaurant_id = ? "
             "AND hour_of_week = ?")


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` pod | hostport | endpoint, `asks`: the
    sharding library's ask spans exported, `gc_events`: G1 pauses as span events, `alb`: the ALB's
    trace header recorded on the server span."""

    semconv: str
    ident: str
    asks: bool
    gc_events: bool
    alb: bool

    @property
    def root(self) -> str:  # the agent before its route support named Akka HTTP spans generically
        return f"GET {ROUTE}" if self.semconv == "new" else "akka.request"

    @property
    def traffic_client(self) -> str:
        return "GET" if self.semconv == "new" else "HTTP GET"

    @property
    def producer(self) -> str:
        return f"{TOPIC} publish" if self.semconv == "new" else f"{TOPIC} send"

    @staticmethod
    def ask(kind: str) -> str:
        return f"ask {kind}"

    def label(self, service: str, pod: int, generation: int = 0) -> str:
        """The instance as the store names it: service.instance.id, or Zipkin's ip:port."""
        if self.ident == "pod":
            return pod_name(service, pod, generation)
        ip, port = endpoint(service, pod)
        return f"{ip}:{25520 if self.ident == 'hostport' and service == API else port}"


def pod_name(service: str, pod: int, generation: int = 0) -> str:
    if service == TRAFFIC:
        return f"traffic-service-5b7d9f-{_SUFFIX[-1 - pod]}"
    return f"eta-api-{('6d8f9c7b5', '84c5fd99b')[generation]}-{_SUFFIX[pod % len(_SUFFIX)]}"


def endpoint(service: str, pod: int) -> tuple[str, int]:
    if service == TRAFFIC:
        return f"10.4.9.{20 + pod}", 8080
    return f"10.4.1.{11 + pod}", 8080


@dataclass
class Resources:
    table: TraceTable
    style: Style
    generation: dict[int, int] = field(default_factory=dict)  # node -> deploy generation
    made: dict[tuple[str, int], int] = field(default_factory=dict)

    def get(self, service: str, pod: int) -> int:
        key = (service, pod)
        if key not in self.made:
            gen = self.generation.get(pod, 0) if service == API else 0
            attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": "java"}
            if self.style.ident != "endpoint":
                attrs.update({"service.instance.id": self.style.label(service, pod, gen),
                              "k8s.pod.name": pod_name(service, pod, gen), "k8s.namespace.name": "eta",
                              "process.runtime.name": "OpenJDK Runtime Environment",
                              "process.runtime.version": "21.0.5+11-LTS"})
                if service == API:
                    attrs["service.version"] = ("2026.11.3", "2026.11.4")[gen]
            self.made[key] = self.table.resource(attrs, *endpoint(service, pod))
        return self.made[key]


@dataclass
class Ask:
    kind: str
    entity: int
    node: int  # where the entity lives
    start: float
    end: float  # the reply received, or the timeout
    timed_out: bool
    recovery: Recovery | None


@dataclass
class Timeline:
    node: int
    order: int
    restaurant: int
    root: tuple[float, float]
    asks: list[Ask]
    jdbc: tuple[float, float]
    geo: list[tuple[float, float, int, int]]  # (start, end, radius km, members)
    traffic: tuple[float, float, bool, int, float, float] | None  # client s, e, timed out, pod, server s, e
    traffic_source: str
    predict: tuple[float, float]
    candidates: int
    produce: tuple[float, float, int]  # start, ack, partition
    pauses: list[tuple[float, float, str]]


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _db(style: Style, system: str, host: str, port: int, statement: str) -> dict[str, Any]:
    key = "db.query.text" if style.semconv == "new" else "db.statement"
    return {"db.system": system, key: statement, **_peer(style, host, port)}


def write_request(table: TraceTable, res: Resources, tl: Timeline) -> None:
    st = res.style
    new = st.semconv == "new"
    trace = table.new_trace()
    me = res.get(API, tl.node)
    path = f"/v1/orders/{tl.order}/eta"
    http = ({"http.request.method": "GET", "url.path": path, "http.response.status_code": 200} if new
            else {"http.method": "GET", "http.target": path, "http.status_code": 200})
    attrs = {**http, "http.route": ROUTE, "eta.restaurant.id": f"r-{tl.restaurant}",
             "eta.traffic.source": tl.traffic_source}
    if st.alb:
        attrs["http.request.header.x_amzn_trace_id"] = f"Root=1-{int(tl.root[0] // 1e9) + 1764320000:08x}-" \
                                                        f"{tl.order * 2654435761 % (1 << 96):024x}"
    events = []
    if st.gc_events:
        events = [(s, "jdk.GarbageCollection",
                   {"jvm.gc.name": "G1Full" if c == "Full" else "G1New", "jvm.gc.type": c,
                    "jvm.gc.cause": "G1 Compaction Pause" if c == "Full" else "G1 Evacuation Pause",
                    "jvm.gc.duration_ms": round((e - s) / NS_PER_MS, 3)})
                  for s, e, c in tl.pauses]
    root = table.span(trace, None, st.root, "Server", me, f"{_AGENT}akka-http-10.0", *tl.root, attrs,
                      events=events)
    for ask in tl.asks:
        parent = root
        if st.asks:
            parent = table.span(trace, root, st.ask(ask.kind), "Internal", me, "akka-cluster-sharding-otel",
                                ask.start, ask.end,
                                {"akka.entity.type": ask.kind,
                                 "akka.entity.id": f"{ask.kind[0].lower()}-{ask.entity}",
                                 "akka.ask.timeout_ms": 300},
                                "Error" if ask.timed_out else "Unset",
                                f"Ask timed out on [EntityRef({ask.kind}, {ask.entity})] after [300 ms]"
                                if ask.timed_out else "")
        if ask.recovery is not None:
            home = res.get(API, ask.node)
            rec = ask.recovery
            cql = f"{_AGENT}cassandra-4.4"
            table.span(trace, parent, SNAPSHOT, "Client", home, cql, *rec.snapshot,
                       _db(st, "cassandra", CASSANDRA, 9042, _SNAPSHOT_CQL), peer="cassandra")
            for s, e, n in rec.pages:
                table.span(trace, parent, JOURNAL, "Client", home, cql, s, e,
                           {**_db(st, "cassandra", CASSANDRA, 9042, _JOURNAL_CQL),
                            "db.cassandra.page_size": 100, "db.response.returned_rows": n}, peer="cassandra")
    table.span(trace, root, JDBC, "Client", me, f"{_AGENT}jdbc", *tl.jdbc,
               {**_db(st, "postgresql", "eta-db.eta.svc", 5432, _JDBC_SQL),
                ("db.namespace" if new else "db.name"): "eta"}, peer="postgresql")
    for s, e, radius, _members in tl.geo:
        table.span(trace, root, GEO, "Client", me, f"{_AGENT}lettuce-5.1", s, e,
                   _db(st, "redis", "redis-geo.eta.svc", 6379,
                       f"GEOSEARCH couriers:active FROMLONLAT ? ? BYRADIUS {radius} km ASC WITHDIST"),
                   peer="redis")
    if tl.traffic is not None:
        cs, ce, failed, pod, ss, se = tl.traffic
        host = "traffic-service.eta.svc"
        url = f"http://{host}:8080/v1/speeds"
        cattrs: dict[str, Any] = ({"http.request.method": "GET", "url.full": url} if new
                                  else {"http.method": "GET", "http.url": url})
        cattrs.update(_peer(st, host, 8080))
        if not failed:
            cattrs["http.response.status_code" if new else "http.status_code"] = 200
        client = table.span(trace, root, st.traffic_client, "Client", me, f"{_AGENT}akka-http-10.0", cs, ce,
                            cattrs, "Error" if failed else "Unset",
                            "akka.http.scaladsl.model.RequestTimeoutException: request timed out after 250 ms"
                            if failed else "", peer=TRAFFIC)
        sattrs = ({"http.request.method": "GET", "http.route": "/v1/speeds", "http.response.status_code": 200}
                  if new else {"http.method": "GET", "http.route": "/v1/speeds", "http.status_code": 200})
        table.span(trace, client, TRAFFIC_SERVER, "Server", res.get(TRAFFIC, pod),
                   f"{_AGENT}spring-webmvc-6.0", ss, se, sattrs)
    table.span(trace, root, PREDICT, "Internal", me, _ANNOTATIONS, *tl.predict,
               {"eta.candidates.count": tl.candidates, "model.name": "eta-xgb-v41"})
    s, e, partition = tl.produce
    kafka = {"messaging.system": "kafka", "messaging.destination.name": TOPIC,
             ("messaging.operation.type" if new else "messaging.operation"): "publish" if new else "send",
             ("messaging.destination.partition.id" if new else "messaging.kafka.destination.partition"):
                 str(partition) if new else partition,
             "messaging.kafka.message.key": f"order-{tl.order}"}
    table.span(trace, root, st.producer, "Producer", me, f"{_AGENT}kafka-clients-2.6", s, e, kafka,
               peer="kafka")
