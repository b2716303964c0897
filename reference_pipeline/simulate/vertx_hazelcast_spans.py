"""How the blind family `vertx-hazelcast` (vertx_hazelcast.py) is instrumented, per seed: the
OpenTelemetry Java agent's spans (Vert.x HTTP server, JDBC, gRPC client; thread details or not; old or
new semantic conventions), Hazelcast spans from the application (an `@WithSpan` method, a manual client
span, or none), Envoy's spans or none, the model server's spans and internals, how instances are named
(the agent's random service.instance.id, host.name + process.pid, a Zipkin endpoint), and ZGC's
allocation stalls as span events under a name of the seed's own, or not at all.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable
from reference_pipeline.simulate.vertx_hazelcast_physics import Inference

GATEWAY, ENVOY, MODEL = "reco-gateway", "reco-gateway-envoy", "model-server"
ROUTE, HISTORY_ROUTE = "/v1/recommendations/:userId", "/v1/users/:userId/history"
ROOT, HISTORY = f"GET {ROUTE}", f"GET {HISTORY_ROUTE}"
EVENTS_SQL = "SELECT item_id, kind, ts FROM user_events WHERE user_id = ? ORDER BY ts DESC LIMIT ?"
CONSENT_SQL = "SELECT purpose, granted FROM consent_flags WHERE user_id = ? AND region = ?"
EVENTS_SPAN, CONSENT_SPAN = "SELECT reco.user_events", "SELECT reco.consent_flags"
ASSEMBLE, BLEND = "CandidateAssembler.assemble", "RankBlender.blend"
INFER = "inference.GRPCInferenceService/ModelInfer"
COMPUTE = "compute"
MODEL_HOST = "model-server.ml.svc.cluster.local"
INGRESS = "reco-gateway.reco.svc.cluster.local:8080/*"
EGRESS = f"{MODEL_HOST}:8001/*"
AGENT = "io.opentelemetry"
_RS_OLD, _RS_NEW = ("6b7c9d8f5", "7f4d6c9b8")
_SUFFIX = (
    "x2k4q",
    "m8r7t",
    "b5wzn",
    "q9hcd",
    "t4vjl",
    "h6pfr",
    "z3npw",
    "c7gkd",
    "r2vxs",
    "w9tbf",
    "k5dmq",
    "p8hzl",
)
# the Hazelcast spans: an @WithSpan method on the app's feature store (INTERNAL), a manual CLIENT span
# per IMap call, or none
HZ_NAMES = {
    "withspan": ("UserFeatureStore.get", "ItemFeatureStore.getAll"),
    "manual": ("IMap.get", "IMap.getAll"),
}
# ZGC allocation stalls as span events: each seed that reports them names them its own way
STALL_EVENT = {"otlp": "jvm.gc.zgc.allocation_stall", "annotation": "ZGC Allocation Stall"}


@dataclass(frozen=True)
class Style:
    """One seed's conventions."""

    semconv: str  # old | new
    ident: str  # uuid | host-pid | endpoint
    envoy: bool  # Envoy's spans exported
    hz: str | None  # withspan | manual | None
    internals: bool  # the model server's compute span and batcher timestamps
    stall_events: str | None  # otlp | annotation | None
    threads: bool  # the agent's thread.name / thread.id attributes
    jit_events: bool = False  # tier-up compilations of the hot path as span events (JFR-fed)

    def hz_span(self, which: int) -> str | None:
        return HZ_NAMES[self.hz][which] if self.hz else None

    def model_span(self) -> str:
        return COMPUTE if self.internals else INFER


def pod_name(generation: int, k: int) -> str:
    return f"reco-gateway-{_RS_NEW if generation else _RS_OLD}-{_SUFFIX[k + 6 * generation]}"


def pod_ip(generation: int, k: int) -> str:
    return f"10.40.{2 + generation}.{17 + 9 * k}"


def model_name(h: int) -> str:
    return f"model-server-{h}"


def uuid(seed: int, generation: int, k: int) -> str:
    """The Java agent's default service.instance.id: a random UUID per JVM start."""
    h = f"{random.Random(seed * 7_919 + generation * 101 + k).getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


@dataclass
class Resources:
    """The run's resources, made when first used: a pod replaced by a rolling deploy is a new one."""

    table: TraceTable
    style: Style
    seed: int
    made: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def label(self, service: str, generation: int, k: int) -> str:
        """The instance as the store names it."""
        if self.style.ident == "endpoint":
            ip, port = self._endpoint(service, generation, k)
            return f"{ip}:{port}"
        if service == GATEWAY and self.style.ident == "uuid":
            return uuid(self.seed, generation, k)
        host = model_name(k) if service == MODEL else pod_name(generation, k)
        return f"{host}:1"

    def _endpoint(self, service: str, generation: int, k: int) -> tuple[str, int]:
        if service == MODEL:
            return f"10.44.0.{30 + k}", 8001
        return pod_ip(generation, k), 15006 if service == ENVOY else 8080

    def get(self, service: str, generation: int, k: int) -> int:
        key = (service, generation, k)
        if key not in self.made:
            self.made[key] = self.table.resource(
                self._attrs(service, generation, k), *self._endpoint(service, generation, k)
            )
        return self.made[key]

    def _attrs(self, service: str, generation: int, k: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {"service.name": service}
        if self.style.ident == "endpoint":
            return attrs
        host = model_name(k) if service == MODEL else pod_name(generation, k)
        attrs.update(
            {
                "host.name": host,
                "process.pid": 1,
                "k8s.pod.name": host,
                "k8s.namespace.name": "ml" if service == MODEL else "reco",
            }
        )
        if service == GATEWAY:
            attrs.update(
                {
                    "telemetry.sdk.language": "java",
                    "process.runtime.name": "OpenJDK Runtime Environment",
                    "process.runtime.version": "21.0.5+11-LTS",
                    "telemetry.distro.name": "opentelemetry-java-instrumentation",
                }
            )
            if self.style.ident == "uuid":
                attrs["service.instance.id"] = uuid(self.seed, generation, k)
        elif service == ENVOY:
            attrs["envoy.version"] = "1.31.2"
        else:
            attrs["triton.version"] = "2.51.0"
        return attrs


@dataclass
class Attempt:
    """One gRPC call to the model server through Envoy: UO (the breaker rejected it), a 5xx from a
    broken host, or a scored reply."""

    start: float
    end: float
    outcome: str  # ok | overflow | internal
    host: int = -1
    envoy: tuple[float, float] | None = None
    served: Inference | None = None
    server: tuple[float, float] | None = None


@dataclass
class Request:
    """One recommendation request, as the model computed it."""

    generation: int
    pod: int
    loop: int
    envoy: tuple[float, float]
    root: tuple[float, float]
    consent: tuple[float, float] | None
    user_get: tuple[float, float]
    events: tuple[float, float]
    worker: int
    items: tuple[float, float]
    item_keys: int
    misses: int
    retries: int
    assemble: tuple[float, float]
    candidates: int
    attempts: list[Attempt]
    blend: tuple[float, float]
    user: int
    stalls: list[tuple[float, float]] = field(default_factory=list)
    version: int = 3
    user_retries: int = 0
    jit: int | None = None  # the tier the pod's hot path was compiled to just before (3 C1, 4 C2)


def stall_events(style: Style, stalls: list[tuple[float, float]]) -> list[tuple[float, str, dict[str, Any]]]:
    if style.stall_events is None:
        return []
    name = STALL_EVENT[style.stall_events]
    return [
        (
            a,
            name,
            {
                "jvm.gc.name": "ZGC",
                "jvm.gc.cause": "Allocation Stall",
                "duration_ms": round((b - a) / NS_PER_MS, 3),
            },
        )
        for a, b in stalls
    ]


def jit_events(style: Style, r: Request) -> list[tuple[float, str, dict[str, Any]]]:
    """A new JVM compiling its hot path, C1 then C2, as events on the span that ran it (seed 0)."""
    if not style.jit_events or not r.jit:
        return []
    attrs = {
        "jit.compiler": "C1" if r.jit == 3 else "C2",
        "jit.tier": r.jit,
        "jit.method": "com.shop.reco.CandidateAssembler::assemble",
    }
    return [(r.assemble[0], "jvm.jit.compilation", attrs)]
