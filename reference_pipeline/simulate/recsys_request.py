"""One request of the blind family `recsys-ranker` through ingress, ranker-api, feature-svc and the model
server, as spans (see recsys_ranker.py for the system and its mechanisms; recsys_flow.py for the
batcher, the cache, the GC reports and the network)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.config import DEFAULT_START_NS
from reference_pipeline.simulate.recsys_calls import (
    AGENT,
    APP,
    FETCH,
    ROOT,
    SEEN,
    SEGMENTS,
    SERIALIZE,
    feature_call,
    model_call,
    ranker_ip,
)
from reference_pipeline.simulate.recsys_flow import (
    Batcher,
    CandidateCache,
    finish,
    gc_reports,
    hop_ns,
    segment_of,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, Stalls, TraceTable, WorkerPool, lognormal_ms


@dataclass
class RankerRun:
    """The state one run's requests share: resources, per-pod stalls, Tomcat and Hikari pools, the
    cache, the model server's batchers and the untraced co-tenant's arrivals at each of them."""

    table: TraceTable
    rng: random.Random
    s: dict[str, Any]
    parts: set[str]
    envoy_res: list[int]
    ranker_res: list[int]
    feature_res: list[int]
    model_res: list[int]
    stalls: list[Stalls]
    tomcat: list[WorkerPool]
    hikari: list[WorkerPool]
    ready: list[float]
    lossy: list[bool]
    cache: CandidateCache
    batchers: list[Batcher]
    cotenant: list[list[float]]
    large_share: Any  # t (ns) -> share of requests from the client that asks for long pages
    served: list[int] = field(default_factory=list)
    cotenant_next: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.served = [0] * len(self.ranker_res)
        self.cotenant_next = [0] * len(self.batchers)

    # --- ranker-api ---------------------------------------------------------------------------------
    def request(self, t0: float) -> None:
        rng, table, parts = self.rng, self.table, self.parts
        trace = table.new_trace()
        p = rng.choice([k for k in range(len(self.ranker_res)) if self.ready[k] <= t0])
        st, res, lossy = self.stalls[p], self.ranker_res[p], self.lossy[p]
        # a pod's first requests run interpreted and C1-compiled code (and lazily initialised beans)
        k = self.served[p]
        self.served[p] += 1
        slow = 1.0 + (25.0 * 0.96**k if p >= self.s["pods"] else 0.0)
        lazy_init = (600.0 * 0.2**k) * NS_PER_MS if p >= self.s["pods"] else 0.0

        def cpu(ms: float, sigma: float = 0.3) -> float:
            return lognormal_ms(rng, ms, sigma) * slow

        def gap() -> float:
            return lognormal_ms(rng, 0.02, 0.5)

        arrive = t0 + hop_ns(rng, lossy)
        handler = self.tomcat[p].acquire(arrive)  # waits in Tomcat's accept queue for a worker thread
        srv_s = st.settle(handler + lognormal_ms(rng, 0.04, 0.4))
        envoy = None
        if self.s["ingress_traced"]:
            envoy = table.span(
                trace,
                None,
                "router ranker-api egress",
                "Client",
                self.envoy_res[rng.randrange(2)],
                "envoy",
                t0,
                t0,
                {
                    "component": "proxy",
                    "upstream_cluster": "ranker-api",
                    "http.method": "GET",
                    "http.protocol": "HTTP/1.1",
                    "http.url": "http://ranker-api.recsys:8080/v2/recommendations",
                    "upstream_address": f"{ranker_ip(p)}:8080",
                    "response_flags": "-",
                },
                peer="ranker-api",
            )
        limit = rng.choice((20, 24, 30, 50))
        if rng.random() < self.large_share(t0):
            limit = rng.choice((200, 300, 500))  # the new app version's "load everything" page
        root_attrs: dict[str, Any] = {
            "http.request.method": "GET",
            "http.route": "/v2/recommendations",
            "url.path": "/v2/recommendations",
            "url.scheme": "http",
            "http.response.status_code": 200,
            "recsys.request.limit": limit,
        }
        if not self.s["ingress_traced"]:  # the ingress' X-Request-Start, captured as a request header
            root_attrs["http.request.header.x-request-start"] = f"t={(DEFAULT_START_NS + t0) / 1e9:.3f}"
        root = table.span(trace, envoy, ROOT, "Server", res, f"{AGENT}.tomcat-10.0", srv_s, srv_s, root_attrs)
        t = st.run(srv_s, cpu(0.15) + lazy_init)  # filters, DispatcherServlet, argument binding
        held: list[float] = []  # open-session-in-view: the connection taken first is kept to the end
        osiv = "pool-exhaustion" in parts

        def connection(at: float) -> float:
            if held:
                return at
            got = max(at, self.hikari[p].acquire(at))
            if osiv:
                held.append(got)
            return got

        def done_with(at: float) -> None:
            if not osiv:
                self.hikari[p].release(at)

        # candidates: Caffeine, then Redis, then Postgres
        c_s = st.settle(t + gap())
        segment, n_cands = segment_of(rng, SEGMENTS), rng.randint(400, 1000)
        c_attrs: dict[str, Any] = {
            "cache.name": "candidates",
            "candidates.segment": f"seg-{segment:04d}",
            "candidates.count": n_cands,
        }
        fetch = table.span(trace, root, FETCH, "Internal", res, APP, c_s, c_s, c_attrs)
        t = st.run(c_s, cpu(0.04))
        source = "caffeine"
        if not self.cache.in_local(p, segment, t):
            r_s = t
            r_e = st.settle(r_s + hop_ns(rng, lossy) + lognormal_ms(rng, 0.25, 0.3) + hop_ns(rng, lossy))
            table.span(
                trace,
                fetch,
                "GET",
                "Client",
                res,
                f"{AGENT}.lettuce-5.1",
                r_s,
                r_e,
                _redis("GET", segment, r_s >= self.cache.refresh_at),
                peer="candidates-redis",
            )
            source = "redis"
            t = r_e
            if not self.cache.in_redis(segment, r_s):
                source = "postgres"
                q_s = st.settle(connection(r_e) + lognormal_ms(rng, 0.03, 0.4))
                pg = self.cache.postgres_ms(q_s, rng)
                q_e = st.settle(q_s + hop_ns(rng, lossy) + pg + hop_ns(rng, lossy))
                self.cache.query_done(q_e)
                done_with(q_e)
                table.span(
                    trace,
                    fetch,
                    "SELECT recsys.candidates",
                    "Client",
                    res,
                    f"{AGENT}.jdbc",
                    q_s,
                    q_e,
                    _postgres("SELECT", "candidates"),
                    peer="recsys-pg",
                )
                w_s = st.run(q_e, cpu(0.3))
                w_e = st.settle(w_s + hop_ns(rng, lossy) + lognormal_ms(rng, 0.2, 0.3) + hop_ns(rng, lossy))
                table.span(
                    trace,
                    fetch,
                    "SET",
                    "Client",
                    res,
                    f"{AGENT}.lettuce-5.1",
                    w_s,
                    w_e,
                    _redis("SET", segment, w_s >= self.cache.refresh_at),
                    peer="candidates-redis",
                )
                if not self.cache.in_redis(segment, w_e):
                    self.cache.redis[segment] = w_e
                t = w_e
            t = st.run(t, cpu(0.35))  # deserialise the candidate list
            if not self.cache.in_local(p, segment, t):
                self.cache.local[p][segment] = t
        t = st.run(t, cpu(0.05))
        finish(table, fetch, t, attrs={"candidates.source": source})

        # items the user has already seen (JPA repository, JDBC through HikariCP)
        f_s = st.settle(t + gap())
        seen = table.span(trace, root, SEEN, "Internal", res, f"{AGENT}.spring-data-1.8", f_s, f_s)
        q_s = st.settle(connection(f_s) + lognormal_ms(rng, 0.03, 0.4))  # getConnection() may wait
        q_e = st.settle(q_s + hop_ns(rng, lossy) + lognormal_ms(rng, 0.8, 0.35) + hop_ns(rng, lossy))
        done_with(q_e)
        table.span(
            trace,
            seen,
            "SELECT recsys.seen_items",
            "Client",
            res,
            f"{AGENT}.jdbc",
            q_s,
            q_e,
            _postgres("SELECT", "seen_items"),
            peer="recsys-pg",
        )
        t = st.run(q_e, cpu(0.1))
        finish(table, seen, t)

        t = feature_call(self, trace, root, p, st.settle(t + gap()), n_cands, cpu)
        t = model_call(self, trace, root, p, st.settle(t + gap()), n_cands, cpu)

        # the response: Jackson writes one DTO per item, Tomcat gzips it (time and bytes grow with items)
        z_s = st.settle(t + gap())
        body = limit * rng.randint(1300, 1700) + 600
        z_e = st.run(z_s, cpu(0.25 + 0.035 * limit, 0.15))
        table.span(
            trace,
            root,
            SERIALIZE,
            "Internal",
            res,
            APP,
            z_s,
            z_e,
            {"recsys.response.items": limit, "serialized.bytes": body},
        )
        srv_e = st.run(z_e, body / 1.0 + lognormal_ms(rng, 0.05, 0.3))  # socket writes, ~1 GB/s
        self.tomcat[p].release(srv_e)
        if held:
            self.hikari[p].release(srv_e)
        events, jmx = gc_reports(self.s["gc_style"], st, srv_s, srv_e)
        finish(table, root, srv_e, events, {"http.response.body.size": body, **jmx})
        if envoy is not None:
            finish(table, envoy, srv_e + hop_ns(rng, lossy) + body / 1.2, attrs={"http.status_code": "200"})


def _redis(op: str, segment: int, bumped: bool) -> dict[str, Any]:
    version = 8 if bumped else 7  # the refresh bumps the key version: the new keys start empty
    return {
        "db.system": "redis",
        "db.operation.name": op,
        "db.namespace": "0",
        "db.query.text": f"{op} cand:v{version}:seg-{segment:04d}",
        "server.address": "candidates-redis",
        "server.port": 6379,
    }


def _postgres(op: str, table: str) -> dict[str, Any]:
    return {
        "db.system": "postgresql",
        "db.operation.name": op,
        "db.namespace": "recsys",
        "db.collection.name": table,
        "server.address": "recsys-pg",
        "server.port": 5432,
    }
