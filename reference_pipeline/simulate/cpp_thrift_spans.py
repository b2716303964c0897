"""How the blind family `cpp-thrift` (cpp_thrift.py) is instrumented, per seed: resources (a random
`service.instance.id` per process as the OpenTelemetry C++ SDK's resource detector leaves it,
host.name + process.pid, or a Zipkin endpoint), old or new semantic conventions, whether the ranker's
manual spans inside the handler are exported, where the candidate count is recorded, and whether a
long page-fault stall is reported as a span event; and the spans of one request from its timeline.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import TraceTable

FEED, RANKER, FEATURES, ADS = "feed-api", "ranker", "feature-service", "ads-blender"
ROOT = "FeedService/getFeed"
RANK_CLIENT, RANK = "Thrift/Client/rank", "ranker.Rank"
MULTIGET = "Memcache/Client/multiget"
GET_FEATURES, FEATURES_SERVER = "Thrift/Client/getFeatures", "FeatureService.getFeatures"
GET_EMBEDDING, EMBEDDING_SERVER = "Thrift/Client/getUserEmbedding", "FeatureService.getUserEmbedding"
LOOKUP = "EmbeddingCache::lookup"
FORWARD, RERANK = "ranking_model.forward", "rerank_model.forward"
BLEND, BLEND_SERVER = "Thrift/Client/blendAds", "AdsBlender.blend"
STATS = "ServiceStats::record"
STALL_EVENT = "process.runtime.page_fault_stall"
_SCOPE = "feed.ranker"
_PORTS = {FEED: 9090, RANKER: 9191, FEATURES: 9300, ADS: 9400}
_NET = {FEED: "10.40.1", RANKER: "10.40.2", FEATURES: "10.40.3", ADS: "10.40.4"}


def host_name(service: str, k: int) -> str:
    short = {FEED: "feedapi", RANKER: "rnk", FEATURES: "fsvc", ADS: "adsbl"}[service]
    return f"{short}{k + 1:03d}.frc3.example.net"


def pid(service: str, k: int, generation: int) -> int:
    return 3100 + 211 * k + 7 * len(service) + 40_913 * generation


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new; `ident` instance-id | host-pid | endpoint;
    `internals`: the ranker's manual spans inside the handler are exported; `count_on`: the span
    that carries the candidate count (None: nowhere); `stall_events`: long page-fault stalls are
    reported as span events; `transport` http2 | framed."""

    seed: int
    semconv: str
    ident: str
    internals: bool
    count_on: str | None
    stall_events: bool
    transport: str

    def forward_span(self) -> str:
        """Where an inference's time shows: its own span, or the handler's SERVER span."""
        return FORWARD if self.internals else RANK

    def stats_span(self) -> str:
        return STATS if self.internals else RANK

    def label(self, service: str, k: int, generation: int = 0) -> str:
        """The instance as the store names it (service.instance.id, host.name:process.pid, ip:port)."""
        if self.ident == "instance-id":
            rng = random.Random(f"{self.seed}/{service}/{k}/{generation}")
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if self.ident == "host-pid":
            return f"{host_name(service, k)}:{pid(service, k, generation)}"
        return "{}:{}".format(*endpoint(service, k))


def endpoint(service: str, k: int) -> tuple[str, int]:
    return f"{_NET[service]}.{11 + k}", _PORTS[service]


@dataclass
class Resources:
    """The run's resources, made when first used (a restarted ranker is a new process: on the
    instance-id and host-pid seeds, a new resource)."""

    table: TraceTable
    style: Style
    made: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def get(self, service: str, k: int, generation: int = 0) -> int:
        gen = generation if self.style.ident != "endpoint" else 0
        if (service, k, gen) not in self.made:
            attrs = self._attrs(service, k, gen)
            self.made[service, k, gen] = self.table.resource(attrs, *endpoint(service, k))
        return self.made[service, k, gen]

    def _attrs(self, service: str, k: int, generation: int) -> dict[str, Any]:
        lang = {FEED: "cpp", RANKER: "cpp", FEATURES: "java", ADS: "cpp"}[service]
        attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": lang,
                                 "telemetry.sdk.name": "opentelemetry"}
        if self.style.ident == "endpoint":
            return attrs
        attrs.update({"host.name": host_name(service, k), "process.pid": pid(service, k, generation)})
        if self.style.ident == "instance-id":
            attrs["service.instance.id"] = self.style.label(service, k, generation)
        if service == FEATURES:
            attrs.update({"process.runtime.name": "OpenJDK Runtime Environment",
                          "process.runtime.version": "21.0.5+11-LTS"})
        return attrs


@dataclass
class Call:
    """One Thrift call: the CLIENT span's times and outcome, and the callee's SERVER span (None:
    rejected before a handler ran)."""

    host: int
    start: float
    end: float
    error: str
    server: tuple[float, float] | None
    generation: int = 0


@dataclass
class Handler:
    """What one ranker handler did (a SERVER span and its children)."""

    host: int
    generation: int
    start: float
    end: float
    multiget: tuple[float, float, int]  # start, end, keys
    features: Call | None
    lookup: tuple[float, float, bool]  # start, end, hit
    embedding: Call | None
    forward: tuple[float, float]
    candidates: int
    rerank: tuple[float, float]
    blends: list[Call]
    fallback: bool
    stats: tuple[float, float]
    stalls: list[tuple[float, float]]  # page-fault stalls this handler's threads met, and where
    stall_span: list[str]


@dataclass
class Request:
    feed: int
    start: float
    end: float
    attempts: list[Call]  # to ranker hosts (a shed attempt has no handler)
    handler: Handler | None
    user: int


def _peer(style: Style, service: str, k: int | None) -> dict[str, Any]:
    host = f"{service}.frc3.svc" if k is None else host_name(service, k)
    port = _PORTS.get(service, 5000)
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _rpc(style: Style, service: str, method: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {"rpc.system": "apache_thrift", "rpc.service": service, "rpc.method": method}
    if style.semconv == "new":
        attrs["network.protocol.name"] = "http2" if style.transport == "http2" else "thrift"
    return attrs


def _call(table: TraceTable, res: Resources, trace: int, parent: int, me: int, name: str, callee: str,
          service: str, method: str, c: Call, extra: dict[str, Any] | None = None) -> int:
    attrs = {**_rpc(res.style, service, method), **_peer(res.style, callee, c.host), **(extra or {})}
    span = table.span(trace, parent, name, "Client", me, _SCOPE, c.start, c.end, attrs,
                      "Error" if c.error else "Unset", c.error, peer=callee)
    if c.server is not None:
        server_name = {FEATURES: f"{service}.{method}", ADS: BLEND_SERVER, RANKER: RANK}[callee]
        if callee != RANKER:
            table.span(trace, span, server_name, "Server", res.get(callee, c.host, c.generation),
                       "thrift.server", *c.server, _rpc(res.style, service, method))
    return span


def write_request(table: TraceTable, res: Resources, r: Request) -> None:
    st = res.style
    trace = table.new_trace()
    feed = res.get(FEED, r.feed)
    root = table.span(trace, None, ROOT, "Server", feed, "thrift.server", r.start, r.end,
                      {**_rpc(st, "FeedService", "getFeed"), "app.user.bucket": r.user % 64})
    for a in r.attempts:
        client = _call(table, res, trace, root, feed, RANK_CLIENT, RANKER, "ranker.Ranker", "rank", a)
        if a.server is not None and r.handler is not None and a.host == r.handler.host:
            _handler(table, res, trace, client, r.handler)


def _handler(table: TraceTable, res: Resources, trace: int, parent: int, h: Handler) -> None:
    st = res.style
    me = res.get(RANKER, h.host, h.generation)
    attrs = {**_rpc(st, "ranker.Ranker", "Rank"), "thrift.transport": st.transport}
    if st.count_on == RANK:
        attrs["app.candidates.count"] = h.candidates
    if h.fallback:
        attrs["app.ads.fallback"] = True
    events = []
    if st.stall_events:
        events = [(a, STALL_EVENT, {"process.runtime.stall.duration_ms": round((b - a) / 1e6, 1),
                                    "process.runtime.fault.kind": "page_fault"})
                  for (a, b), where in zip(h.stalls, h.stall_span, strict=True)
                  if b - a >= 20e6 and (where == RANK or not st.internals)]
    top = table.span(trace, parent, RANK, "Server", me, "thrift.server", h.start, h.end, attrs, events=events)
    mg_s, mg_e, keys = h.multiget
    mc = {"db.system": "memcached", ("db.operation.name" if st.semconv == "new" else "db.operation"): "get",
          "db.memcached.keys": keys, **_peer(st, "mcrouter", None)}
    table.span(trace, top, MULTIGET, "Client", me, _SCOPE, mg_s, mg_e, mc, peer="mcrouter")
    if h.features is not None:
        _call(table, res, trace, top, me, GET_FEATURES, FEATURES, "FeatureService", "getFeatures", h.features)
    parent = top
    if st.internals:
        parent = table.span(trace, top, LOOKUP, "Internal", me, _SCOPE, h.lookup[0], h.lookup[1],
                            {"cache.hit": h.lookup[2], "cache.name": "user_embeddings"})
    if h.embedding is not None:
        _call(table, res, trace, parent, me, GET_EMBEDDING, FEATURES, "FeatureService", "getUserEmbedding",
              h.embedding)
    if st.internals:
        fattrs: dict[str, Any] = {"model.name": "feed_rank_v41.pt", "torch.intra_op_threads": 4}
        if st.count_on == FORWARD:
            fattrs["app.candidates.count"] = h.candidates
        fev = []
        if st.stall_events:
            fev = [(a, STALL_EVENT, {"process.runtime.stall.duration_ms": round((b - a) / 1e6, 1),
                                     "process.runtime.fault.kind": "page_fault"})
                   for (a, b), where in zip(h.stalls, h.stall_span, strict=True)
                   if b - a >= 20e6 and where == FORWARD]
        table.span(trace, top, FORWARD, "Internal", me, _SCOPE, *h.forward, fattrs, events=fev)
        table.span(trace, top, RERANK, "Internal", me, _SCOPE, *h.rerank,
                   {"model.name": "feed_rerank_v9.pt", "torch.intra_op_threads": 4})
    for n, b in enumerate(h.blends):
        _call(table, res, trace, top, me, BLEND, ADS, "AdsBlender", "blendAds", b,
              {"thrift.attempt": n + 1, **({"thrift.hedged": True} if n else {})})
    if st.internals:
        table.span(trace, top, STATS, "Internal", me, _SCOPE, *h.stats, {"stats.counters": 14})
