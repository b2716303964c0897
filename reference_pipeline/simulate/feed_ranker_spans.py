"""How the blind family `feed-ranker` (feed_ranker.py) writes its spans: names, attributes and
resources in each seed's conventions (OTel Java agent with the new semantic conventions and
`service.instance.id`, an older agent exporting to Jaeger with `hostname` / `ip` process tags, Brave /
Sleuth to Zipkin v2 with endpoints only), the Istio sidecar's Envoy spans where they are traced, and
the JVM's GC notifications as span events, as metric deltas on the request span, or not at all."""

from __future__ import annotations

import bisect
import random
from typing import Any

from reference_pipeline.simulate.feed_ranker_model import ZONES, Call, Pause, Pod, Request
from reference_pipeline.simulate.trace_table import TraceTable

APP, SIDECAR, FEATURES, ADS = "feed-api", "feed-api.feed", "feature-store", "ads-blender"
ROOT = "GET /api/v1/feed"
CQL = "SELECT feed.candidates_by_user"
HYDRATE = "FeatureHydrator.hydrate"
FEATURE_RPC = "featurestore.v2.FeatureStore/BatchGet"
RANK = "FeedRanker.rank"
BATCH = "lightgbm.predict_batch"
ADS_SERVER = "POST /v1/blend"
INBOUND = "feed-api.feed.svc.cluster.local:8080/*"
OUTBOUND = {
    ADS: "ads-blender.ads.svc.cluster.local:8080/*",
    FEATURES: "feature-store.features.svc.cluster.local:9090/*",
}
ADS_CALL = ("POST", "HTTP POST", "post")  # new semconv names an HTTP client span by its method
PRODUCE = ("feed-impressions publish", "feed-impressions send", "send")


class Writer:
    """Resources and spans of one run in the seed's conventions."""

    def __init__(
        self,
        table: TraceTable,
        rng: random.Random,
        style: int,
        pods: list[Pod],
        sidecar_traced: bool,
        gc_report: str,
    ) -> None:
        self.table, self.style, self.gc_report = table, style, gc_report
        self.sidecar_traced = sidecar_traced
        self.app = [self._resource(APP, p.name, p.uuid, p.ip, 8080, p.zone, "java", rng) for p in pods]
        self.sidecar = (
            [self._resource(SIDECAR, p.name, p.name, p.ip, 15006, p.zone, "cpp", rng) for p in pods]
            if sidecar_traced
            else []
        )
        self.features = [
            self._resource(
                FEATURES,
                f"feature-store-5d8f7b-{k}",
                f"feature-store-5d8f7b-{k}",
                f"10.14.{k}.7",
                9090,
                ZONES[k],
                "go",
                rng,
            )
            for k in range(3)
        ]
        self.ads = [
            self._resource(
                ADS,
                f"ads-blender-84c6d-{k}",
                f"ads-blender-84c6d-{k}",
                f"10.16.{k}.9",
                8080,
                ZONES[k],
                "python",
                rng,
            )
            for k in range(3)
        ]

    def _resource(
        self,
        service: str,
        pod: str,
        instance: str,
        ip: str,
        port: int,
        zone: str,
        language: str,
        rng: random.Random,
    ) -> int:
        if self.style == 0:
            attrs: dict[str, Any] = {
                "service.name": service,
                "service.instance.id": instance,
                "k8s.pod.name": pod,
                "k8s.namespace.name": service.split("-")[0],
                "cloud.availability_zone": zone,
                "telemetry.sdk.language": language,
            }
            if language == "java":
                attrs |= {
                    "host.name": pod,
                    "process.pid": 1,
                    "process.runtime.version": "21.0.4+7-LTS",
                    "service.version": "2024.11.3",
                }
        elif self.style == 1:
            attrs = {
                "service.name": service,
                "hostname": pod,
                "ip": ip,
                "jaeger.version": "Java-1.8.1" if language == "java" else f"{language}-otel",
            }
        else:
            attrs = {"service.name": service}
        return self.table.resource(attrs, ip, port)

    def _http_server(self, method: str, route: str, status: int) -> dict[str, Any]:
        if self.style == 0:
            return {
                "http.request.method": method,
                "http.route": route,
                "url.path": route,
                "url.scheme": "http",
                "http.response.status_code": status,
            }
        if self.style == 1:
            return {
                "http.method": method,
                "http.route": route,
                "http.target": route,
                "http.status_code": status,
            }
        return {"http.method": method, "http.path": route, "mvc.controller.class": "FeedController"}

    def _envoy(
        self,
        kind: str,
        name: str,
        start: float,
        end: float,
        trace: int,
        parent: int | None,
        pod: int,
        cluster: str,
        peer: str | None,
    ) -> int:
        attrs = {
            "component": "proxy",
            "node_id": f"sidecar~{self.table.endpoints[self.app[pod]][1]}",
            "upstream_cluster": cluster,
            "http.protocol": "HTTP/1.1" if "8080" in name else "HTTP/2",
            "istio.canonical_service": APP,
            "istio.namespace": "feed",
            "http.status_code": "200",
        }
        return self.table.span(
            trace, parent, name, kind, self.sidecar[pod], "envoy", start, end, attrs, peer=peer
        )

    def _outbound(
        self,
        trace: int,
        parent: int,
        pod: int,
        call: Call,
        target: str,
        name: str,
        server_name: str,
        attrs: dict[str, Any],
        scope: str,
    ) -> None:
        resources = self.ads if target == ADS else self.features
        client = self.table.span(
            trace,
            parent,
            name,
            "Client",
            self.app[pod],
            scope,
            call.start,
            call.end,
            attrs,
            peer=target,
        )
        above = client
        if self.sidecar_traced:
            port = 8080 if target == ADS else 9090
            above = self._envoy(
                "Client",
                OUTBOUND[target],
                call.envoy_start,
                call.envoy_end,
                trace,
                client,
                pod,
                f"outbound|{port}||{OUTBOUND[target].split(':')[0]}",
                target,
            )
        server_attrs = dict(attrs)
        if target == ADS:
            server_attrs = self._http_server("POST", "/v1/blend", 200)
        self.table.span(
            trace,
            above,
            server_name,
            "Server",
            resources[call.instance],
            "opentelemetry.instrumentation" if target == ADS else "go.opentelemetry.io/grpc",
            call.server_start,
            call.server_end,
            server_attrs,
        )

    def _gc(
        self, pauses: list[Pause], ends: list[float], a: float, b: float
    ) -> tuple[dict[str, Any], list[tuple[float, str, dict[str, Any]]]]:
        """What the JVM reported about the pauses that ended while the request ran."""
        seen = pauses[bisect.bisect_left(ends, a) : bisect.bisect_right(ends, b)]
        if self.gc_report == "events":
            return {}, [
                (
                    p.end,
                    "jvm.gc",
                    {
                        "jvm.gc.name": p.name,
                        "jvm.gc.action": "end of minor GC",
                        "jvm.gc.cause": p.cause,
                        "jvm.gc.duration": round((p.end - p.start) / 1e9, 6),
                    },
                )
                for p in seen
            ]
        if self.gc_report == "metrics":
            return {
                "jvm.gc.pause.count.delta": len(seen),
                "jvm.gc.pause.time.delta_ms": round(sum(p.end - p.start for p in seen) / 1e6, 3),
            }, []
        return {}, []

    def request(self, r: Request, pauses: list[Pause], ends: list[float]) -> None:
        t, style, pod = self.table, self.style, r.pod
        trace = t.new_trace()
        parent = None
        if self.sidecar_traced:
            parent = self._envoy(
                "Server", INBOUND, r.inbound[0], r.inbound[1], trace, None, pod, "inbound|8080||", None
            )
        gc_attrs, events = self._gc(pauses, ends, *r.root)
        root_attrs = {
            **self._http_server("GET", "/api/v1/feed", 200),
            "feed.surface": r.surface,
            "feed.items.returned": r.items,
            **gc_attrs,
        }
        root = t.span(
            trace,
            parent,
            ROOT,
            "Server",
            self.app[pod],
            "io.opentelemetry.tomcat-10.0",
            *r.root,
            root_attrs,
            events=events,
        )
        cql = dict(r.cql_attrs)
        if style == 0:
            db = {
                "db.system": "cassandra",
                "db.namespace": "feed",
                "db.operation.name": "SELECT",
                "db.collection.name": "candidates_by_user",
            }
        elif style == 1:
            db = {
                "db.system": "cassandra",
                "db.name": "feed",
                "db.operation": "SELECT",
                "db.cassandra.table": "candidates_by_user",
                "db.statement": "SELECT candidate_id, score FROM feed.candidates_by_user WHERE user_id = ?",
            }
        else:
            db = {
                "cassandra.keyspace": "feed",
                "cassandra.query": "SELECT candidate_id, score FROM candidates_by_user WHERE user_id = ?",
            }
        t.span(
            trace,
            root,
            CQL,
            "Client",
            self.app[pod],
            "io.opentelemetry.cassandra-4.4",
            *r.cql,
            {**db, **cql},
            peer="cassandra",
        )
        hydrate = t.span(
            trace,
            root,
            HYDRATE,
            "Internal",
            self.app[pod],
            "feed-api",
            *r.hydrate,
            {"feature.cache.hits": r.hits, "feature.cache.misses": r.misses},
        )
        rpc = {"rpc.system": "grpc", "rpc.service": "featurestore.v2.FeatureStore", "rpc.method": "BatchGet"}
        for call in r.feature_calls:
            self._outbound(
                trace,
                hydrate,
                pod,
                call,
                FEATURES,
                FEATURE_RPC,
                FEATURE_RPC,
                {**rpc, **call.attrs, "rpc.grpc.status_code": 0},
                "io.opentelemetry.grpc-1.6",
            )
        rank = t.span(
            trace,
            root,
            RANK,
            "Internal",
            self.app[pod],
            "feed-api",
            *r.rank,
            {"feed.candidates.count": r.candidates, "model.name": "lgbm-feed-v31", "model.trees": 800},
        )
        for b0, b1, size in r.batches:
            t.span(trace, rank, BATCH, "Internal", self.app[pod], "feed-api", b0, b1, {"batch.size": size})
        if style == 0:
            http = {
                "http.request.method": "POST",
                "server.address": "ads-blender.ads",
                "server.port": 8080,
                "url.full": "http://ads-blender.ads:8080/v1/blend",
                "http.response.status_code": 200,
            }
        elif style == 1:
            http = {
                "http.method": "POST",
                "http.url": "http://ads-blender.ads:8080/v1/blend",
                "net.peer.name": "ads-blender.ads",
                "http.status_code": 200,
            }
        else:
            http = {"http.method": "POST", "http.path": "/v1/blend"}
        self._outbound(
            trace, root, pod, r.ads, ADS, ADS_CALL[style], ADS_SERVER, http, "io.opentelemetry.okhttp-3.0"
        )
        if style == 0:
            kafka = {
                "messaging.system": "kafka",
                "messaging.destination.name": "feed-impressions",
                "messaging.operation.type": "publish",
            }
        elif style == 1:
            kafka = {
                "messaging.system": "kafka",
                "messaging.destination": "feed-impressions",
                "messaging.destination_kind": "topic",
            }
        else:
            kafka = {"kafka.topic": "feed-impressions"}
        t.span(
            trace,
            root,
            PRODUCE[style],
            "Producer",
            self.app[pod],
            "io.opentelemetry.kafka-clients-2.6",
            *r.produce,
            kafka,
            peer="kafka",
        )
