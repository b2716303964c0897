"""What the simulated spans are called: the reference pipeline's names, or a foreign service's.

`reference` is span_model's structure exactly: its service, span names, `tailscope.stage` attributes
and the setup resource attributes (`tailscope.*`). `alt` renders the same model the way another team's
service might be instrumented: other service and span names, semantic-convention attributes
(`db.system=redis`, `http.*`), several instrumentation scopes, and no `tailscope.*` attribute at all,
so an analysis that works on it cannot lean on our names.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from reference_pipeline import span_model as sm
from reference_pipeline.simulate.config import NAMINGS, SimConfig
from reference_pipeline.simulate.model import ROLES, Simulation

SDK = {"telemetry.sdk.name": "opentelemetry", "telemetry.sdk.language": "python",
       "telemetry.sdk.version": "1.38.0"}


@dataclass(frozen=True)
class RoleSpec:
    role: str
    parent: str | None  # role of the parent span; None for the trace root
    kind: str  # SpanColumns spelling: Internal | Server | Client
    side: str  # whose resource: client | server | downstream
    name: str
    scope: str
    static: tuple[tuple[str, Any], ...]  # attributes every span of the role carries


# role -> (parent, kind, side)
_SHAPE = {
    "client": (None, "Client", "client"),
    "root": ("client", "Server", "server"),
    "receive": ("root", "Internal", "server"),
    "parse": ("root", "Internal", "server"),
    "hydrate": ("root", "Internal", "server"),
    "store_get": ("hydrate", "Client", "server"),
    "tokenize": ("root", "Internal", "server"),
    "queue": ("root", "Internal", "server"),
    "forward": ("root", "Internal", "server"),
    "postprocess": ("root", "Internal", "server"),
    "lock_wait": ("postprocess", "Internal", "server"),
    "downstream": ("root", "Client", "server"),
    "ds_server": ("downstream", "Server", "downstream"),
    "serialize": ("root", "Internal", "server"),
}

_REFERENCE_NAMES = {
    "client": sm.ROOT_SPAN, "root": sm.ROOT_SPAN, "receive": sm.RECEIVE, "parse": sm.PARSE,
    "hydrate": sm.HYDRATE, "store_get": sm.STORE_GET, "tokenize": sm.TOKENIZE, "queue": sm.QUEUE_WAIT,
    "forward": sm.FORWARD, "postprocess": sm.POSTPROCESS, "lock_wait": sm.LOCK_WAIT,
    "downstream": sm.DOWNSTREAM, "ds_server": f"POST {sm.DOWNSTREAM_ROUTE}", "serialize": sm.SERIALIZE,
}

_ALT_NAMES = {
    "client": "HTTP POST", "root": "POST /score", "receive": "read_body", "parse": "validate_payload",
    "hydrate": "get_features", "store_get": "redis GET", "tokenize": "embed_tokens",
    "queue": "wait_for_batch", "forward": "infer", "postprocess": "decode_scores",
    "lock_wait": "acquire_mutex", "downstream": "call-risk-api", "ds_server": "POST /v2/risk",
    "serialize": "encode_response",
}


def _http(method: str, url: str, address: str, port: int) -> tuple[tuple[str, Any], ...]:
    return (("http.request.method", method), ("url.full", url), ("server.address", address),
            ("server.port", port), ("http.response.status_code", 200))


def role_specs(naming: str, config: SimConfig) -> dict[str, RoleSpec]:
    if naming not in NAMINGS:
        raise ValueError(f"unknown naming {naming!r}; one of {', '.join(NAMINGS)}")
    reference = naming == "reference"
    if reference:
        static: dict[str, tuple] = {
            "client": _http("POST", f"http://{sm.SERVICE_NAME}:8000{sm.ROUTE}", sm.SERVICE_NAME, 8000),
            "root": (("http.request.method", "POST"), ("http.route", sm.ROUTE), ("url.path", sm.ROUTE),
                     ("http.response.status_code", 200)),
            "store_get": (("db.system", "sqlite"), ("db.operation.name", "SELECT")),
            "forward": (("device", config.device), ("dtype", config.dtype)),
            "lock_wait": (("lock.name", "score_monitor"),),
            "downstream": _http("POST", f"http://{sm.DOWNSTREAM_SERVICE_NAME}:8001{sm.DOWNSTREAM_ROUTE}",
                                sm.DOWNSTREAM_SERVICE_NAME, 8001),
            "ds_server": (("http.request.method", "POST"), ("http.route", sm.DOWNSTREAM_ROUTE),
                          ("http.response.status_code", 200)),
        }
        names = dict(_REFERENCE_NAMES)
        scopes = {"client": "tailscope.loadgen", "ds_server": "tailscope.downstream"}
        default_scope = "tailscope.reference_pipeline"
    else:
        static = {
            "client": _http("POST", "http://scoring-api:8080/score", "scoring-api", 8080),
            "root": (("http.request.method", "POST"), ("http.route", "/score"), ("url.path", "/score"),
                     ("url.scheme", "http"), ("http.response.status_code", 200)),
            "store_get": (("db.system", "redis"), ("db.operation.name", "GET"),
                          ("server.address", "features-redis"), ("server.port", 6379)),
            "forward": (("model.device", config.device), ("model.dtype", config.dtype)),
            "lock_wait": (("mutex", "stats"),),
            "downstream": _http("POST", "http://risk-api:8080/v2/risk", "risk-api", 8080),
            "ds_server": (("http.request.method", "POST"), ("http.route", "/v2/risk"),
                          ("http.response.status_code", 200)),
        }
        names = dict(_ALT_NAMES)
        scopes = {"client": "k6", "root": "opentelemetry.instrumentation.asgi",
                  "store_get": "opentelemetry.instrumentation.redis",
                  "downstream": "opentelemetry.instrumentation.httpx",
                  "ds_server": "opentelemetry.instrumentation.flask"}
        default_scope = "scoring_api"
    specs = {}
    for role in ROLES:
        parent, kind, side = _SHAPE[role]
        attrs = tuple(static.get(role, ()))
        if reference and side == "server":
            attrs = (("tailscope.stage", sm.STAGE_OF[names[role]]), *attrs)
        specs[role] = RoleSpec(role, parent, kind, side, names[role], scopes.get(role, default_scope), attrs)
    return specs


def dynamic_attributes(sim: Simulation, role: str, naming: str) -> list[tuple[str, str, np.ndarray]]:
    """(key, type, per-request values) of the attributes that vary per span; type: int | bool | entity."""
    batch = "batch.size" if naming == "reference" else "batch_size"
    table = {
        "receive": [("http.request.body.size", "int", sim.body_bytes)],
        "hydrate": [("cache.hit", "bool", sim.cache_hit), ("feature.key", "entity", sim.entity)],
        "store_get": [("feature.key", "entity", sim.entity)],
        "tokenize": [("text.chars", "int", sim.chars), ("tokens.count", "int", sim.tokens)],
        "queue": [(batch, "int", sim.batch_size), ("batch.queue_depth", "int", sim.queue_depth)],
        "forward": [(batch, "int", sim.batch_size)],
    }
    return table.get(role, [])


def present(sim: Simulation, role: str) -> np.ndarray | None:
    """Which requests have a span of this role (None: all of them)."""
    if role == "store_get":
        return ~sim.cache_hit
    if role in ("downstream", "ds_server"):
        return sim.has_downstream
    return None


def entity_key(index: int) -> str:
    return f"ent-{index:06d}"


def resources(sim: Simulation, naming: str, run_label: str | None = None
              ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """Every resource's attributes (typed values) and, per side, each request's resource index.
    With the reference naming, `run_label` is recorded as tailscope.run.label."""
    c = sim.config
    reference = naming == "reference"
    rng = np.random.default_rng([c.seed, 7])
    services = ((sm.LOADGEN_SERVICE_NAME, sm.SERVICE_NAME, sm.DOWNSTREAM_SERVICE_NAME) if reference
                else ("load-generator", "scoring-api", "risk-api"))
    setup: dict[str, Any] = {}
    if reference:
        setup = {
            "tailscope.scenario": c.scenario, "tailscope.device": c.device,
            "tailscope.gpu.name": c.gpu_name or None, "tailscope.torch.version": c.torch_version,
            "tailscope.dtype": c.dtype, "tailscope.model.weights": "simulated",
            "tailscope.model.executor": "simulated",
            "tailscope.batch.max_size": c.max_batch, "tailscope.batch.max_wait_ms": c.max_wait_ms,
            # tailscope.workers means what it means in the real service: model-worker threads per
            # process (one here); the simulator's `workers` setting counts instances (processes)
            "tailscope.workers": 1, "tailscope.instances": c.workers, "tailscope.run.label": run_label,
            "tailscope.tracing.mode": "spans", "tailscope.sample.rate": 1.0, "tailscope.frontends": 0,
        }
        setup = {k: v for k, v in setup.items() if v is not None}

    def resource(service: str, host: str) -> dict[str, Any]:
        instance = str(uuid.UUID(bytes=rng.bytes(16), version=4))
        return {"service.name": service, "service.instance.id": instance, "host.name": host,
                "process.pid": int(rng.integers(1000, 60000)), **SDK, **setup}

    hosts = ("loadgen", "inference", "enrich") if reference else ("k6-runner", "scoring-api", "risk-api")
    out = [resource(services[0], f"{hosts[0]}-{k}") for k in range(c.clients)]
    out += [resource(services[1], f"{hosts[1]}-{p.instance}") for p in sim.processes]
    out += [resource(services[2], f"{hosts[2]}-{k}") for k in range(c.downstream_instances)]
    index = {
        "client": sim.client,
        "server": c.clients + sim.process,
        "downstream": c.clients + len(sim.processes) + sim.ds_instance,
    }
    return out, index
