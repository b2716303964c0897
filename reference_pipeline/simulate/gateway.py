"""The `gateway` topology: the same simulated mechanisms behind another service's shape.

The discrete-event model (model.py: arrivals, load balancing, GC pauses, cache, batcher, lock) is run
unchanged; only what the traces show of it differs from the reference pipeline, in more than names:

- two tiers: an API gateway (its own service and replicas, a Go process: no GC) whose SERVER span is
  the trace root, and a gRPC CLIENT call to the model server, whose SERVER span (same name as the
  call, as gRPC instrumentation names them) holds the work; the load generator is not traced;
- deeper nesting: `preprocess` → `feature_lookup` → `redis GET` (db.system=redis), on a miss also
  `SELECT features` (db.system=postgresql) and `redis SET`; the lock is inside `postprocess` →
  `update_stats` (timing only: no lock-wait span); a gRPC call to a risk service;
- no span for the batch queue (its wait is unattributed time of the model server's span, between
  `preprocess` and `onnxruntime.run`), for receiving or for serialising; no batch attributes or links;
- instance identity only through host.name + process.pid (no service.instance.id); a restarted
  replica keeps its host and gets a new pid;
- GC pauses reported as `GC pause` events with `gc.duration_ms` on the model server's span, or not
  at all (`SimConfig.gc_events=False`); no `tailscope.*` attribute anywhere.

The gateway → model server hop is the model's client ↔ server network (so `network-jitter` puts two
of the eight gateway replicas behind a slow link).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reference_pipeline.simulate.model import Simulation
from reference_pipeline.simulate.naming import SDK, RoleSpec, entity_key
from reference_pipeline.simulate.processes import NS_PER_MS, lognormal
from reference_pipeline.simulate.spans import RequestIds, SpanGroup, _mix

SERVICE, GATEWAY, RISK = "model-server", "api-gateway", "risk-svc"
INFER_RPC = "inference.GRPCInferenceService/ModelInfer"
RISK_RPC = "risk.v1.RiskService/Check"


def _grpc(service: str, method: str, peer: str | None = None) -> tuple[tuple[str, Any], ...]:
    attrs: tuple[tuple[str, Any], ...] = (("rpc.system", "grpc"), ("rpc.service", service),
                                         ("rpc.method", method), ("rpc.grpc.status_code", 0))
    return attrs + ((("server.address", peer), ("server.port", 8001)) if peer else ())


# role -> (parent role, kind, side, name, scope, static attributes)
_LAYOUT: dict[str, tuple[str | None, str, str, str, str, tuple[tuple[str, Any], ...]]] = {
    "gw_root": (None, "Server", "gateway", "POST /api/v2/score", "net/http",
                (("http.request.method", "POST"), ("http.route", "/api/v2/score"),
                 ("url.scheme", "https"), ("http.response.status_code", 200))),
    "gw_auth": ("gw_root", "Internal", "gateway", "authz.CheckToken", "gateway/middleware", ()),
    "gw_call": ("gw_root", "Client", "gateway", INFER_RPC, "google.golang.org/grpc",
                _grpc("inference.GRPCInferenceService", "ModelInfer", SERVICE)),
    "server": ("gw_call", "Server", "server", INFER_RPC, "opentelemetry.instrumentation.grpc",
               _grpc("inference.GRPCInferenceService", "ModelInfer")),
    "preprocess": ("server", "Internal", "server", "preprocess", "model_server", ()),
    "validate": ("preprocess", "Internal", "server", "validate_input", "model_server", ()),
    "features": ("preprocess", "Internal", "server", "feature_lookup", "model_server", ()),
    "cache_get": ("features", "Client", "server", "redis GET", "opentelemetry.instrumentation.redis",
                  (("db.system", "redis"), ("db.operation.name", "GET"), ("server.address", "localhost"))),
    "db_select": ("features", "Client", "server", "SELECT features",
                  "opentelemetry.instrumentation.psycopg",
                  (("db.system", "postgresql"), ("db.operation.name", "SELECT"),
                   ("db.collection.name", "features"), ("server.address", "features-db"))),
    "cache_set": ("features", "Client", "server", "redis SET", "opentelemetry.instrumentation.redis",
                  (("db.system", "redis"), ("db.operation.name", "SET"), ("server.address", "localhost"))),
    "tokenize": ("preprocess", "Internal", "server", "tokenize", "model_server", ()),
    "infer": ("server", "Internal", "server", "onnxruntime.run", "model_server", ()),
    "postprocess": ("server", "Internal", "server", "postprocess", "model_server", ()),
    "update_stats": ("postprocess", "Internal", "server", "update_stats", "model_server", ()),
    "risk_call": ("server", "Client", "server", RISK_RPC, "opentelemetry.instrumentation.grpc",
                  _grpc("risk.v1.RiskService", "Check", RISK)),
    "risk_server": ("risk_call", "Server", "downstream", RISK_RPC, "io.grpc",
                    _grpc("risk.v1.RiskService", "Check")),
}
ROLES = tuple(_LAYOUT)
_TRACE_WORDS = (30, 31)
GC_EVENT = "GC pause"


def gateway_times(sim: Simulation) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(start, end) in wall-clock ns of every role, from the model's pipeline roles.

    The model's `client` send is when the gateway's call leaves; authorisation and the gateway's own
    gaps come before it and the response write after its end (drawn from a separate stream, so the
    model's numbers are those of the same seed in the pipeline topology)."""
    t = sim.times
    n = sim.n
    rng = np.random.default_rng([sim.config.seed, 11])
    auth = lognormal(rng, sim.config.gateway_ms, n).astype(np.int64)
    gaps = lognormal(rng, (0.02, 0.5), 2 * n).reshape(2, n).astype(np.int64)
    write = lognormal(rng, (0.04, 0.4), n).astype(np.int64)
    call_s, call_e = t["client"]
    auth_e = call_s - gaps[1]
    auth_s = auth_e - auth
    gw_s = auth_s - gaps[0]
    store_s, store_e = t["store_get"]
    miss = ~sim.cache_hit
    hyd_s, hyd_e = t["hydrate"]
    post_s, post_e = t["postprocess"]
    return {
        "gw_root": (gw_s, call_e + write), "gw_auth": (auth_s, auth_e), "gw_call": (call_s, call_e),
        "server": t["root"], "preprocess": (t["parse"][0], t["tokenize"][1]), "validate": t["parse"],
        "features": t["hydrate"], "cache_get": (hyd_s, np.where(miss, store_s, hyd_e)),
        "db_select": (store_s, store_e), "cache_set": (store_e, hyd_e), "tokenize": t["tokenize"],
        "infer": t["forward"], "postprocess": (post_s, post_e),
        "update_stats": (t["lock_wait"][0], post_e), "risk_call": t["downstream"],
        "risk_server": t["ds_server"],
    }


class GatewaySource(RequestIds):
    """The spans of one simulation in the gateway topology, by chunk of requests (writer-ready)."""

    roles, role_bits, trace_words = ROLES, 5, _TRACE_WORDS

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.naming = "gateway"
        self.specs = {role: RoleSpec(role, parent, kind, side, name, scope, static)
                      for role, (parent, kind, side, name, scope, static) in _LAYOUT.items()}
        self.times = gateway_times(sim)
        self.resources, self.resource_index = self._resources()
        self._key = _mix(np.array([sim.config.seed ^ 0x6A7E], dtype=np.uint64))[0]

    def _present(self, role: str) -> np.ndarray | None:
        if role in ("db_select", "cache_set"):
            return ~self.sim.cache_hit
        if role in ("risk_call", "risk_server"):
            return self.sim.has_downstream
        return None

    def _resources(self) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
        c, sim = self.sim.config, self.sim
        rng = np.random.default_rng([c.seed, 13])

        def resource(service: str, host: str, language: str) -> dict[str, Any]:
            return {"service.name": service, "host.name": host, "process.pid": int(rng.integers(2, 65000)),
                    **SDK, "telemetry.sdk.language": language, "deployment.environment.name": "prod"}

        out = [resource(GATEWAY, f"gw-{k}", "go") for k in range(c.clients)]
        out += [resource(SERVICE, f"model-server-{p.instance}", "python") for p in sim.processes]
        out += [resource(RISK, f"risk-svc-{k}", "java") for k in range(c.downstream_instances)]
        index = {"gateway": sim.client, "server": c.clients + sim.process,
                 "downstream": c.clients + len(sim.processes) + sim.ds_instance}
        return out, index

    def _group(self, spec: RoleSpec, resource: int, reqs: np.ndarray, pick: list[int],
               trace_ids: list[str], ids: dict[str, list[str]]) -> SpanGroup:
        sim = self.sim
        own, parent = ids[spec.role], ids[spec.parent] if spec.parent else None
        start, end = self.times[spec.role]
        attrs: list[tuple[str, str, list]] = []
        if spec.role in ("cache_get", "db_select"):
            keys = [entity_key(v) for v in sim.entity[reqs].tolist()]
            attrs.append(("db.query.parameter.key", "str", keys))
        elif spec.role == "tokenize":
            attrs.append(("input.length", "int", sim.chars[reqs].tolist()))
        events = None
        if spec.role == "server" and sim.config.gc_events:
            events = [[(ts, GC_EVENT, {"gc.duration_ms": round(dur / NS_PER_MS, 3), "gc.gen": gen})
                       for ts, gen, dur, _ in sim.gc_events.get(r, ())] for r in reqs.tolist()]
        return SpanGroup(
            spec=spec, resource=resource, requests=reqs,
            trace_ids=[trace_ids[k] for k in pick], span_ids=[own[k] for k in pick],
            parent_ids=[parent[k] for k in pick] if parent else None,
            start_ns=start[reqs].tolist(), end_ns=end[reqs].tolist(), attrs=attrs, events=events, links=None,
        )
