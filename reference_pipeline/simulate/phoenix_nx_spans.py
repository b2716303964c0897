"""The spans of the blind family `phoenix-nx` (see phoenix_nx.py): what opentelemetry_phoenix with
opentelemetry_bandit or opentelemetry_cowboy, opentelemetry_ecto, opentelemetry_finch,
opentelemetry_req and the service's own `OpenTelemetry.Tracer.with_span` blocks write for each request
of phoenix_nx_flow.py, in the seed's conventions (new or old HTTP / DB semconv, which Ecto timing
attributes, whether the serving's batch runs and the feature service are traced)."""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.phoenix_nx_beam import Request
from reference_pipeline.simulate.trace_table import TraceTable

ROOT = "GET /api/recs/:user_id"
RATE_LIMIT = "RecsApi.RateLimiter.check"
FLAGS = "RecsApi.FeatureFlags.variant"
ECTO = "recs_api.repo.query:candidates"
FEATURES = "RecsApi.Features.fetch"
FINCH = "HTTP GET"
FEATURE_SERVER = "GET /v1/features/{user_id}"
SERVING = "Nx.Serving.batched_run"
BATCH = "Nx.Serving.execute"
PRICES = "GET /v2/prices"
RENDER = "RecsWeb.RecsJSON.render"
SQL = ('SELECT c0."item_id", c0."score_prior", c0."category" FROM "candidates" AS c0 '
       'WHERE (c0."segment_id" = $1) ORDER BY c0."score_prior" DESC LIMIT $2')
DROPPED = ("connection not available and request was dropped from queue after 100ms. This means requests "
           "are coming in and your connection pool cannot serve them fast enough.")


def _us(ns: float) -> int:
    return int(ns / 1000)


class SpanWriter:
    """Adds one request's spans to the table in the seed's conventions."""

    def __init__(self, table: TraceTable, s: dict[str, Any], api: list[int], features: int | None,
                 pricing: list[int], node_of_pod0: str, rng: random.Random) -> None:
        self.t, self.s, self.api, self.features, self.pricing = table, s, api, features, pricing
        self.new = s["semconv"] == "new"
        self.node0, self.rng = node_of_pod0, rng
        self.server_scope = "opentelemetry_bandit" if s["server"] == "bandit" else "opentelemetry_cowboy"

    def _http_server(self, path: str, status: int, body: int) -> dict[str, Any]:
        if self.new:
            return {"http.request.method": "GET", "http.route": "/api/recs/:user_id", "url.path": path,
                    "url.scheme": "http", "network.protocol.version": "1.1",
                    "http.response.status_code": status, "http.response.body.size": body}
        return {"http.method": "GET", "http.route": "/api/recs/:user_id", "http.target": path,
                "http.scheme": "http", "http.flavor": "1.1", "http.status_code": status,
                "http.response_content_length": body}

    def _http_client(self, url: str, host: str, status: int | None) -> dict[str, Any]:
        if self.new:
            out: dict[str, Any] = {"http.request.method": "GET", "url.full": url, "server.address": host,
                                   "server.port": 80}
            if status is not None:
                out["http.response.status_code"] = status
            return out
        out = {"http.method": "GET", "http.url": url, "net.peer.name": host, "net.peer.port": 80}
        if status is not None:
            out["http.status_code"] = status
        return out

    def _ecto_attrs(self, r: Request) -> dict[str, Any]:
        out: dict[str, Any] = {"db.system": "postgresql", "source": "candidates"}
        if self.new:
            out.update({"db.namespace": "recs_prod", "db.query.text": SQL, "db.operation.name": "SELECT"})
        else:
            out.update({"db.instance": "recs_prod", "db.statement": SQL, "db.type": "sql",
                        "db.url": "ecto://recs-db.recs.svc:5432"})
        total = r.ecto_queue + (0.0 if r.dropped else r.ecto_query + r.ecto_decode)
        if self.s["ecto_times"] == "all":
            out["queue_time_microseconds"] = _us(r.ecto_queue)
            out["idle_time_microseconds"] = _us(r.ecto_idle)
            if not r.dropped:
                out["query_time_microseconds"] = _us(r.ecto_query)
                out["decode_time_microseconds"] = _us(r.ecto_decode)
        if self.s["ecto_times"] in ("all", "total"):
            out["total_time_microseconds"] = _us(total)
        return out

    def write(self, r: Request) -> None:
        t, pod, rng = self.t, self.api[r.pod], self.rng
        trace = t.new_trace()
        status = 500 if r.dropped else 200
        body = 96 if r.dropped else 180 + 1100 * r.items
        root_attrs = {**self._http_server(f"/api/recs/{r.user}", status, body),
                      "phoenix.plug": "Elixir.RecsWeb.RecsController", "phoenix.action": "show"}
        root = t.span(trace, None, ROOT, "Server", pod, self.server_scope, r.root_s, r.root_e, root_attrs,
                      "Error" if r.dropped else "Unset")
        t.span(trace, root, RATE_LIMIT, "Internal", pod, "recs_api", r.rl[0], r.rl[1],
               {"genserver.name": "{:global, RecsApi.RateLimiter}", "genserver.node": self.node0,
                "rate_limit.bucket": "api:user"})
        t.span(trace, root, FLAGS, "Internal", pod, "recs_api", r.flags[0], r.flags[1],
               {"genserver.name": "RecsApi.FeatureFlags", "flag.key": "ranker_v7_rollout"})
        db_status, db_msg = ("Error", DROPPED) if r.dropped else ("Unset", "")
        events = [(r.ecto[1], "exception", {"exception.type": "DBConnection.ConnectionError",
                                            "exception.message": DROPPED})] if r.dropped else None
        t.span(trace, root, ECTO, "Client", pod, "opentelemetry_ecto", r.ecto[0], r.ecto[1],
               self._ecto_attrs(r), db_status, db_msg, events, peer="postgresql")
        if not r.dropped or r.feat[1] <= r.root_e:  # a crashed controller's linked task dies unexported
            self._features(trace, root, pod, r)
        if r.dropped:
            return
        self._serving(trace, root, pod, r)
        for n, (c_s, srv_s, srv_e, c_e, failed) in enumerate(r.pricing):
            attrs = self._http_client(f"http://pricing-svc.pricing.svc/v2/prices?items={r.items}",
                                      "pricing-svc.pricing.svc", None if failed else 200)
            if n and self.new:
                attrs["http.request.resend_count"] = n
            ev = [(c_e, "exception", {"exception.type": "Mint.TransportError",
                                      "exception.message": "timeout"})] if failed else None
            call = t.span(trace, root, PRICES, "Client", pod, "opentelemetry_req", c_s, c_e, attrs,
                          "Error" if failed else "Unset", "%Mint.TransportError{reason: :timeout}" if failed
                          else "", ev, peer="pricing-svc")
            srv = {"http.method": "GET", "http.route": "/v2/prices", "http.status_code": 200}
            t.span(trace, call, PRICES, "Server", self.pricing[rng.randrange(len(self.pricing))],
                   "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp", srv_s, srv_e, srv)
        t.span(trace, root, RENDER, "Internal", pod, "recs_api", r.json[0], r.json[1],
               {"recs.items": r.items, "json.bytes": body})

    def _features(self, trace: int, root: int, pod: int, r: Request) -> None:
        t = self.t
        hit = r.miss is None
        attrs: dict[str, Any] = {"cachex.cache": "features"}
        if self.s["cache_attr"] == "result":
            attrs["cachex.result"] = "ok" if hit else "commit"
        else:
            attrs["cache.hit"] = hit
        fetch = t.span(trace, root, FEATURES, "Internal", pod, "recs_api", r.feat[0], r.feat[1], attrs)
        if r.miss is None:
            return
        c_s, srv_s, srv_e, c_e = r.miss
        call = t.span(trace, fetch, FINCH, "Client", pod, "opentelemetry_finch", c_s, c_e,
                      self._http_client(f"http://feature-svc.features.svc/v1/features/{r.user}",
                                        "feature-svc.features.svc", 200), peer="feature-svc")
        if self.features is not None:
            t.span(trace, call, FEATURE_SERVER, "Server", self.features,
                   "opentelemetry.instrumentation.fastapi", srv_s, srv_e,
                   {"http.method": "GET", "http.route": "/v1/features/{user_id}", "http.status_code": 200})

    def _serving(self, trace: int, root: int, pod: int, r: Request) -> None:
        s = self.s
        run = self.t.span(trace, root, SERVING, "Internal", pod, "recs_api", r.nx[0], r.nx[1],
                          {"nx.serving.name": "RecsApi.Ranker", "nx.serving.batch_size": s["batch_size"],
                           "nx.serving.batch_timeout_ms": s["batch_timeout_ms"], "recs.candidates": r.items})
        if not s["trace_batches"]:
            return
        for b_s, b_e, rows, part in r.chunks:
            self.t.span(trace, run, BATCH, "Internal", pod, "recs_api", b_s, b_e,
                        {"nx.batch.rows": rows, "nx.serving.partition": part,
                         "exla.client": "cuda" if s["partitions"] > 1 else "host"})
