"""The `region` family: a client in another region calls the service over a long, steady WAN link.

The model runs unchanged; its traces look like a JVM service's under the OpenTelemetry Java agent's
older HTTP conventions (`http.method`, `http.url`, `http.status_code`, `net.peer.name`, client spans
named `HTTP POST`):

- the caller is traced: `checkout-web` in eu-west-1 (eight hosts) makes a CLIENT call that wraps the
  server's SERVER span in us-east-1; the one-way trip is ~38 ms with little jitter
  (config.TOPOLOGY_CHANGES), so the client sees about 80 ms more than the server, nearly constant;
- the server's work sits one level down, in a controller span (`ScoreController.score`), with
  Java-style method names; the feature profile comes from an in-process cache whose misses show only
  as a PostgreSQL child span (`SELECT fraud.profiles`, `db.statement`), with a `profile.source`
  attribute (`memory` or `postgres`);
- no span for receiving, the batch queue (time of the controller span between the encoder and the
  predictor), the rule engine's lock (taken after the engine's own work, inside `RuleEngine.apply`)
  or serialising; the downstream call is to `link-graph`;
- GC is not reported (a JVM without runtime events in its traces): only timing shows pauses;
- instances are host.name + process.pid; a restarted replica keeps its host and gets a new pid.

`network-jitter` puts two of the eight caller hosts behind a worse link (`slow_net_ms`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reference_pipeline.simulate.family import FamilySource, Layout, Times, resource

SERVER, CALLER, GRAPH = "fraud-scoring", "checkout-web", "link-graph"
_URL = "https://fraud-scoring.us-east-1.internal:8443/v1/score"

LAYOUT: Layout = {
    "call": (
        None,
        "Client",
        "client",
        "HTTP POST",
        "io.opentelemetry.okhttp-3.0",
        (
            ("http.method", "POST"),
            ("http.url", _URL),
            ("net.peer.name", "fraud-scoring.us-east-1.internal"),
            ("net.peer.port", 8443),
            ("http.status_code", 200),
        ),
    ),
    "server": (
        "call",
        "Server",
        "server",
        "POST /v1/score",
        "io.opentelemetry.tomcat-10.0",
        (
            ("http.method", "POST"),
            ("http.target", "/v1/score"),
            ("http.route", "/v1/score"),
            ("http.scheme", "https"),
            ("http.status_code", 200),
            ("net.host.name", "fraud-scoring"),
        ),
    ),
    "handler": (
        "server",
        "Internal",
        "server",
        "ScoreController.score",
        "io.opentelemetry.spring-webmvc-6.0",
        (),
    ),
    "validate": ("handler", "Internal", "server", "RequestValidator.validate", "com.example.fraud", ()),
    "profile": ("handler", "Internal", "server", "ProfileService.load", "com.example.fraud", ()),
    "profile_db": (
        "profile",
        "Client",
        "server",
        "SELECT fraud.profiles",
        "io.opentelemetry.jdbc",
        (
            ("db.system", "postgresql"),
            ("db.name", "fraud"),
            ("db.operation", "SELECT"),
            ("db.sql.table", "profiles"),
            ("db.statement", "SELECT * FROM profiles WHERE account_id = ?"),
        ),
    ),
    "encode": ("handler", "Internal", "server", "FeatureEncoder.encode", "com.example.fraud", ()),
    "predict": ("handler", "Internal", "server", "GbdtModel.predict", "com.example.fraud", ()),
    "rules": ("handler", "Internal", "server", "RuleEngine.apply", "com.example.fraud", ()),
    "graph_call": (
        "handler",
        "Client",
        "server",
        "HTTP POST",
        "io.opentelemetry.java-http-client",
        (
            ("http.method", "POST"),
            ("http.url", "http://link-graph:9000/graph/score"),
            ("net.peer.name", "link-graph"),
            ("http.status_code", 200),
        ),
    ),
    "graph_server": (
        "graph_call",
        "Server",
        "downstream",
        "POST /graph/score",
        "io.opentelemetry.netty-4.1",
        (("http.method", "POST"), ("http.route", "/graph/score"), ("http.status_code", 200)),
    ),
}


class RegionSource(FamilySource):
    LAYOUT, NAMING, KEY = LAYOUT, "region", 0x5E610

    def role_times(self) -> Times:
        t = self.sim.times
        return {
            "call": t["client"],
            "server": t["root"],
            "handler": (t["parse"][0], t["serialize"][1]),
            "validate": t["parse"],
            "profile": t["hydrate"],
            "profile_db": t["store_get"],
            "encode": t["tokenize"],
            "predict": t["forward"],
            "rules": t["postprocess"],
            "graph_call": t["downstream"],
            "graph_server": t["ds_server"],
        }

    def present(self, role: str) -> np.ndarray | None:
        if role == "profile_db":
            return ~self.sim.cache_hit
        if role in ("graph_call", "graph_server"):
            return self.sim.has_downstream
        return None

    def attributes(self, role: str, reqs: np.ndarray) -> list[tuple[str, str, list]]:
        sim = self.sim
        if role == "profile":
            source = np.where(sim.cache_hit[reqs], "memory", "postgres").tolist()
            return [("profile.source", "str", source), ("account.id", "int", sim.entity[reqs].tolist())]
        if role == "validate":
            return [("payload.bytes", "int", sim.body_bytes[reqs].tolist())]
        return []

    def resource_list(self) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
        c, sim = self.sim.config, self.sim
        rng = np.random.default_rng([c.seed, 17])
        out = [
            resource(rng, CALLER, f"web-euw1-{k}", "java", **{"cloud.region": "eu-west-1"})
            for k in range(c.clients)
        ]
        out += [
            resource(rng, SERVER, f"fraud-{p.instance}", "java", **{"cloud.region": "us-east-1"})
            for p in sim.processes
        ]
        out += [
            resource(rng, GRAPH, f"graph-{k}", "go", **{"cloud.region": "us-east-1"})
            for k in range(c.downstream_instances)
        ]
        index = {
            "client": sim.client,
            "server": c.clients + sim.process,
            "downstream": c.clients + len(sim.processes) + sim.ds_instance,
        }
        return out, index
