"""The `readthrough` family: a recommendation API with a read-through Redis cache in front of MySQL.

The model runs unchanged; its traces look like an asyncio Python service under current
OpenTelemetry conventions (`http.request.method`, `db.system.name`, `db.query.text`, client spans
named after the command or the method alone):

- the request root is the API's SERVER span (the caller is not traced); every request asks Redis
  first (`GET`, always, a network round trip) and, on a miss only, falls back to MySQL (`SELECT
  user_features`) and writes the answer back (`SET`): the fallback is a sibling of the lookup, after
  it, not a child of a feature span (there is none);
- the batch queue has a span whose name says nothing a rule knows (`collect_batch`); the model's work
  is `ranker.predict`; the lock is taken inside `apply_business_rules` (timing only: the span starts
  where the lock is requested, the post-processing before it has no span); the downstream call is a
  CLIENT span named `POST` to `inventory`;
- GC pauses are reported as `gc` events with `gc.duration_ms` on the root span;
- instances are host.name + process.pid.

The network between the untraced caller and the API is invisible here, so `network-jitter` has no
signature in this family (accuracy.py does not run it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reference_pipeline.simulate.family import FamilySource, Layout, Times, gc_event_lists, resource
from reference_pipeline.simulate.naming import entity_key

SERVICE, INVENTORY = "recs-api", "inventory"


def _redis(op: str) -> tuple[tuple[str, Any], ...]:
    return (
        ("db.system.name", "redis"),
        ("db.operation.name", op),
        ("server.address", "recs-cache"),
        ("server.port", 6379),
    )


LAYOUT: Layout = {
    "root": (
        None,
        "Server",
        "server",
        "GET /v1/recommendations/{user_id}",
        "opentelemetry.instrumentation.aiohttp_server",
        (
            ("http.request.method", "GET"),
            ("http.route", "/v1/recommendations/{user_id}"),
            ("url.scheme", "http"),
            ("http.response.status_code", 200),
        ),
    ),
    "auth": ("root", "Internal", "server", "check_api_key", "recs", ()),
    "cache_get": ("root", "Client", "server", "GET", "opentelemetry.instrumentation.redis", _redis("GET")),
    "fallback": (
        "root",
        "Client",
        "server",
        "SELECT user_features",
        "opentelemetry.instrumentation.aiomysql",
        (
            ("db.system.name", "mysql"),
            ("db.collection.name", "user_features"),
            ("db.operation.name", "SELECT"),
            ("server.address", "recs-db"),
            ("db.query.text", "SELECT * FROM user_features WHERE user_id = %s"),
        ),
    ),
    "cache_set": ("root", "Client", "server", "SET", "opentelemetry.instrumentation.redis", _redis("SET")),
    "embed": ("root", "Internal", "server", "embed_history", "recs", ()),
    "collect": ("root", "Internal", "server", "collect_batch", "recs", ()),
    "rank": ("root", "Internal", "server", "ranker.predict", "recs", ()),
    "rules": ("root", "Internal", "server", "apply_business_rules", "recs", ()),
    "stock_call": (
        "root",
        "Client",
        "server",
        "POST",
        "opentelemetry.instrumentation.aiohttp_client",
        (
            ("http.request.method", "POST"),
            ("url.full", "http://inventory:8080/v1/stock"),
            ("server.address", "inventory"),
            ("server.port", 8080),
            ("http.response.status_code", 200),
        ),
    ),
    "stock_server": (
        "stock_call",
        "Server",
        "downstream",
        "POST /v1/stock",
        "io.opentelemetry.undertow-1.4",
        (("http.request.method", "POST"), ("http.route", "/v1/stock"), ("http.response.status_code", 200)),
    ),
    "render": ("root", "Internal", "server", "render_json", "recs", ()),
}


class ReadThroughSource(FamilySource):
    LAYOUT, NAMING, KEY = LAYOUT, "readthrough", 0x2EAD7

    def role_times(self) -> Times:
        t, miss = self.sim.times, ~self.sim.cache_hit
        hyd_s, hyd_e = t["hydrate"]
        store_s, store_e = t["store_get"]
        return {
            "root": t["root"],
            "auth": t["receive"],
            "cache_get": (hyd_s, np.where(miss, store_s, hyd_e)),
            "fallback": (store_s, store_e),
            "cache_set": (store_e, hyd_e),
            "embed": t["tokenize"],
            "collect": t["queue"],
            "rank": t["forward"],
            "rules": (t["lock_wait"][0], t["postprocess"][1]),
            "stock_call": t["downstream"],
            "stock_server": t["ds_server"],
            "render": t["serialize"],
        }

    def present(self, role: str) -> np.ndarray | None:
        if role in ("fallback", "cache_set"):
            return ~self.sim.cache_hit
        if role in ("stock_call", "stock_server"):
            return self.sim.has_downstream
        return None

    def attributes(self, role: str, reqs: np.ndarray) -> list[tuple[str, str, list]]:
        sim = self.sim
        if role in ("cache_get", "fallback"):
            return [("db.query.parameter.0", "str", [entity_key(v) for v in sim.entity[reqs].tolist()])]
        if role == "collect":
            return [("batch.pending", "int", sim.queue_depth[reqs].tolist())]
        if role == "embed":
            return [("history.items", "int", sim.tokens[reqs].tolist())]
        return []

    def events(self, role: str, reqs: np.ndarray) -> list | None:
        if role == "root" and self.sim.config.gc_events:
            return gc_event_lists(self.sim, reqs, "gc", "ms")
        return None

    def resource_list(self) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
        c, sim = self.sim.config, self.sim
        rng = np.random.default_rng([c.seed, 19])
        out = [resource(rng, SERVICE, f"recs-{p.instance}", "python") for p in sim.processes]
        out += [resource(rng, INVENTORY, f"inventory-{k}", "java") for k in range(c.downstream_instances)]
        index = {"server": sim.process, "downstream": len(sim.processes) + sim.ds_instance}
        return out, index
