"""How the blind family `feast-redis` (feast_redis.py) is instrumented, per seed: resources (pod names
as `service.instance.id`, node names as host.name + process.pid on host-network pods, or a Zipkin
endpoint's IP), old or new semantic conventions, redisotel's span per shard pipeline (with `redis.dial`
for new connections) or one span for the whole fan-out, `db.statement` or not, TF Serving's own server
spans or none, Go GC cycles as span events, as `runtime.go.gc.*` attributes, or not at all; and the
spans of one request, written from its timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.feast_redis_physics import Dial, Scored
from reference_pipeline.simulate.trace_table import TraceTable

SCORER, TFS = "ctr-scorer", "tf-serving"
ROOT = "ctr.v1.Scorer/Score"
FETCH = "feast.GetOnlineFeatures"
FANOUT = "feast.online_read"
PIPE, ASK_PIPE, DIAL = "redis.pipeline hmget", "redis.pipeline asking hmget", "redis.dial"
PREDICT = "tensorflow.serving.PredictionService/Predict"
TOPIC = "ctr-decisions"
GC_EVENT = "go.gc"
_SUFFIX = ("k2x9v", "p7qzm", "w4hbn", "c8rtd", "f3jls", "n6gyk")
_OTELGRPC = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
_REDISOTEL = "github.com/redis/go-redis/extra/redisotel"
_KOTEL = "github.com/twmb/franz-go/plugin/kotel"


def shard_host(shard: int) -> str:
    return f"feast-redis-{shard}.feast-redis"


def tf_host(j: int) -> str:
    return f"tfs-ctr-{j}.ml.internal"


def pod_name(k: int) -> str:
    return f"ctr-scorer-7f9c8d6b4-{_SUFFIX[k]}"


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new; `ident` pod | node | ip; `redis` pipelines (a span
    per shard pipeline, `redis.dial` under it) | fanout (one span for the whole read); `statements`:
    db.statement recorded; `tf_spans`: TF Serving exports its server spans (with the batch queue
    time); `gc` events | attrs | none; `nodes`: each pod's node."""

    semconv: str
    ident: str
    redis: str
    statements: bool
    tf_spans: bool
    gc: str
    nodes: tuple[int, ...]

    def node_name(self, node: int) -> str:
        return f"ip-10-40-{node + 1}-{17 + 9 * node}.ec2.internal"

    def pod_ip(self, k: int) -> str:
        if self.ident == "node":  # host network: the node's address
            return f"10.40.{self.nodes[k] + 1}.{100 + k}"
        return f"10.42.{self.nodes[k]}.{30 + k}"

    def label(self, k: int) -> str:
        """A ctr-scorer pod as the store names it."""
        if self.ident == "pod":
            return pod_name(k)
        if self.ident == "node":
            return f"{self.node_name(self.nodes[k])}:1"
        return f"{self.pod_ip(k)}:8080"

    def tf_label(self, j: int) -> str:
        return f"tfs-ctr-{j}"

    @property
    def fetch_span(self) -> str:
        """Where a shard's time shows: its pipeline span, or the one span of the whole fan-out."""
        return PIPE if self.redis == "pipelines" else FANOUT

    @property
    def dial_span(self) -> str:
        return DIAL if self.redis == "pipelines" else FANOUT

    @property
    def produce(self) -> str:
        return f"{TOPIC} publish" if self.semconv == "new" else f"{TOPIC} send"

    def peer(self, host: str, port: int) -> dict[str, Any]:
        if self.semconv == "new":
            return {"server.address": host, "server.port": port}
        return {"net.peer.name": host, "net.peer.port": port}


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int], int] = field(default_factory=dict)

    def get(self, service: str, k: int) -> int:
        if (service, k) not in self.made:
            st = self.style
            if service == SCORER:
                attrs: dict[str, Any] = {"service.name": SCORER, "telemetry.sdk.language": "go",
                                         "service.version": "2.31.0"}
                if st.ident == "pod":
                    attrs.update({"service.instance.id": pod_name(k), "k8s.pod.name": pod_name(k),
                                  "k8s.node.name": st.node_name(st.nodes[k]), "k8s.namespace.name": "ads"})
                elif st.ident == "node":
                    attrs.update({"host.name": st.node_name(st.nodes[k]), "process.pid": 1,
                                  "process.runtime.name": "go", "process.runtime.version": "go1.22.5"})
                if st.gc == "attrs":
                    attrs["runtime.go.gc.gogc"] = 100
                ip, port = st.pod_ip(k), 8080
            else:
                attrs = {"service.name": TFS, "service.instance.id": st.tf_label(k), "host.name": tf_host(k),
                         "telemetry.sdk.language": "cpp", "tfs.model.name": "ctr_dnn",
                         "tfs.model.version": 41}
                ip, port = f"10.40.20.{11 + k}", 8500
            self.made[(service, k)] = self.table.resource(attrs, ip, port)
        return self.made[(service, k)]


@dataclass
class Pipe:
    shard: int
    start: float
    end: float
    commands: int
    dial: Dial | None
    ask: bool = False  # the ASK round: ASKING + the commands for keys already moved, to the target


@dataclass
class Timeline:
    pod: int
    root: tuple[float, float]
    candidates: int
    features: int
    fetch: tuple[float, float]
    pipes: list[Pipe]
    predict: tuple[float, float] | None
    tf: int
    scored: Scored | None
    produce: tuple[float, float] | None
    deadline: bool
    gc_cycles: list[tuple[float, int, int, float]]
    gc_counters: tuple[int, float]
    user: int


def _statement(p: Pipe, user: int) -> str:
    first = (f"hmget fv:user:{user} ctr_7d ctr_30d ..." if p.shard == user % 6
             else f"hmget fv:ad:{user % 9973} ...")
    return ("asking " if p.ask else "") + first + (f" [{p.commands - 1} more]" if p.commands > 1 else "")


def write_request(table: TraceTable, res: Resources, tl: Timeline) -> None:
    st = res.style
    trace = table.new_trace()
    me = res.get(SCORER, tl.pod)
    grpc = {"rpc.system": "grpc", "rpc.service": "ctr.v1.Scorer", "rpc.method": "Score",
            "rpc.grpc.status_code": 4 if tl.deadline else 0, "ctr.candidates": tl.candidates,
            "ctr.features.requested": tl.features}
    events = None
    if st.gc == "attrs":
        grpc.update({"runtime.go.gc.count": tl.gc_counters[0],
                     "runtime.go.gc.pause_total_ns": int(tl.gc_counters[1])})
    elif st.gc == "events":
        events = [(t, GC_EVENT, {"go.gc.cycle": n, "go.gc.heap.live_bytes": live,
                                 "go.gc.pause_ns": int(pause)}) for t, n, live, pause in tl.gc_cycles]
    root = table.span(trace, None, ROOT, "Server", me, _OTELGRPC, *tl.root, grpc,
                      "Error" if tl.deadline else "Unset", "context deadline exceeded" if tl.deadline else "",
                      events=events)
    keys = sum(p.commands for p in tl.pipes if not p.ask)
    if st.redis == "pipelines":
        fetch = table.span(trace, root, FETCH, "Internal", me, "feast-go", *tl.fetch,
                           {"feast.project": "ads_ctr", "feast.entity_rows": keys,
                            "feast.features": tl.features})
        for p in tl.pipes:
            attrs = {"db.system": "redis", "db.redis.num_cmd": p.commands + (1 if p.ask else 0),
                     **st.peer(shard_host(p.shard), 6379)}
            if st.statements:
                attrs["db.statement"] = _statement(p, tl.user)
            span = table.span(trace, fetch, ASK_PIPE if p.ask else PIPE, "Client", me, _REDISOTEL,
                              p.start, p.end, attrs, peer="redis")
            if p.dial is not None:
                table.span(trace, span, DIAL, "Client", me, _REDISOTEL, p.dial.start, p.dial.end,
                           {"db.system": "redis", "network.transport": "tcp",
                            **st.peer(shard_host(p.shard), 6379)}, peer="redis")
    else:
        table.span(trace, root, FANOUT, "Client", me, "feast-go", *tl.fetch,
                   {"db.system": "redis", "feast.project": "ads_ctr", "feast.entity_rows": keys,
                    "db.redis.shards": len({p.shard for p in tl.pipes})}, peer="redis")
    if tl.predict is not None and tl.scored is not None:
        rpc = {"rpc.system": "grpc", "rpc.service": "tensorflow.serving.PredictionService",
               "rpc.method": "Predict", "rpc.grpc.status_code": 0}
        client = table.span(trace, root, PREDICT, "Client", me, _OTELGRPC, *tl.predict,
                            {**rpc, **st.peer(tf_host(tl.tf), 8500), "tfs.request.examples": tl.candidates},
                            peer=TFS)
        if st.tf_spans:
            s = tl.scored
            table.span(trace, client, PREDICT, "Server", res.get(TFS, tl.tf), "tensorflow_serving",
                       s.arrive, s.end + 40_000.0,
                       {**rpc, "tfs.batching.queue_time_us": int((s.start - s.arrive) / 1000),
                        "tfs.batch.examples": s.batch_examples, "tfs.request.examples": tl.candidates})
    if tl.produce is not None:
        if st.semconv == "new":
            msg = {"messaging.system": "kafka", "messaging.destination.name": TOPIC,
                   "messaging.operation.type": "publish"}
        else:
            msg = {"messaging.system": "kafka", "messaging.destination": TOPIC,
                   "messaging.operation": "publish"}
        table.span(trace, root, st.produce, "Producer", me, _KOTEL, *tl.produce, msg, peer="kafka")
