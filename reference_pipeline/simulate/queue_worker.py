"""The `queue-worker` family: an intake API hands each job to a scoring worker through Kafka.

The model runs unchanged; its traces look like request-reply over a message queue under the
OpenTelemetry messaging conventions:

- the intake API (a Node.js service, eight replicas, no GC reported) receives the request (its
  SERVER span is the request root; the caller is not traced), publishes it (`send score-requests`, a
  PRODUCER span with `messaging.*` attributes) and waits for the reply; its span ends when the
  reply is back;
- the worker's CONSUMER span (`process score-requests`) is a child of the PRODUCER span but starts
  after it has ended: the broker's hand-off sits between them with no span, and so does any time the
  message waits for a paused worker; the worker's micro-batcher leaves no span either (time of the
  CONSUMER span between `tokenize` and `onnx_session.run`);
- the worker's work: `decode_message`, `load_features` (an in-process cache; a Cassandra read as a
  child on a miss), `tokenize`, `onnx_session.run`, `postprocess_scores` (with the lock
  inside a `metrics.observe` child, timing only), a
  gRPC call to `enricher`, and a PRODUCER span that sends the reply (`send score-results`);
- the request's root is on an API replica, its work on a worker: GC pauses and restarts happen on
  the worker, whose instances (host.name + process.pid) are not the root's.

The caller is not traced, so `network-jitter` has no signature in this family.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reference_pipeline.simulate.family import FamilySource, Layout, Times, drawn, resource

API, WORKER, ENRICHER = "intake-api", "scoring-worker", "enricher"


def _kafka(topic: str, operation: str, **extra: Any) -> tuple[tuple[str, Any], ...]:
    return (
        ("messaging.system", "kafka"),
        ("messaging.destination.name", topic),
        ("messaging.operation.type", operation),
        *extra.items(),
    )


LAYOUT: Layout = {
    "api": (
        None,
        "Server",
        "api",
        "POST /v1/jobs/score",
        "@opentelemetry/instrumentation-http",
        (
            ("http.request.method", "POST"),
            ("http.route", "/v1/jobs/score"),
            ("http.response.status_code", 200),
        ),
    ),
    "enqueue": (
        "api",
        "Producer",
        "api",
        "send score-requests",
        "@opentelemetry/instrumentation-kafkajs",
        _kafka("score-requests", "send"),
    ),
    "process": (
        "enqueue",
        "Consumer",
        "worker",
        "process score-requests",
        "opentelemetry.instrumentation.confluent_kafka",
        _kafka("score-requests", "process", **{"messaging.consumer.group.name": "scorers"}),
    ),
    "decode": ("process", "Internal", "worker", "decode_message", "scoring_worker", ()),
    "features": ("process", "Internal", "worker", "load_features", "scoring_worker", ()),
    "store": (
        "features",
        "Client",
        "worker",
        "SELECT features.by_user",
        "opentelemetry.instrumentation.cassandra",
        (
            ("db.system", "cassandra"),
            ("db.operation.name", "SELECT"),
            ("db.collection.name", "by_user"),
            ("db.namespace", "features"),
        ),
    ),
    "tokenize": ("process", "Internal", "worker", "tokenize", "scoring_worker", ()),
    "predict": ("process", "Internal", "worker", "onnx_session.run", "scoring_worker", ()),
    "post": ("process", "Internal", "worker", "postprocess_scores", "scoring_worker", ()),
    "observe": ("post", "Internal", "worker", "metrics.observe", "scoring_worker", ()),
    "enrich": (
        "process",
        "Client",
        "worker",
        "enrich.v1.Enricher/Enrich",
        "opentelemetry.instrumentation.grpc",
        (
            ("rpc.system", "grpc"),
            ("rpc.service", "enrich.v1.Enricher"),
            ("rpc.method", "Enrich"),
            ("server.address", "enricher"),
            ("rpc.grpc.status_code", 0),
        ),
    ),
    "enrich_server": (
        "enrich",
        "Server",
        "downstream",
        "enrich.v1.Enricher/Enrich",
        "io.grpc",
        (("rpc.system", "grpc"), ("rpc.service", "enrich.v1.Enricher"), ("rpc.method", "Enrich")),
    ),
    "reply": (
        "process",
        "Producer",
        "worker",
        "send score-results",
        "opentelemetry.instrumentation.confluent_kafka",
        _kafka("score-results", "send"),
    ),
}


class QueueWorkerSource(FamilySource):
    LAYOUT, NAMING, KEY = LAYOUT, "queue-worker", 0x9E0E

    def role_times(self) -> Times:
        sim = self.sim
        t = sim.times
        send = t["client"][0]
        arrive = t["root"][0]  # the worker takes the message (after a pause, when one was under way)
        # the API's own work before publishing, and the publish call: within the broker's hand-off
        hand_off = np.maximum(arrive - send, 3)
        auth = np.minimum(drawn(sim, 23, (0.05, 0.4)), hand_off // 3)
        publish = np.minimum(drawn(sim, 29, (0.08, 0.4)), hand_off // 3)
        reply_back = drawn(sim, 31, sim.config.net_ms)
        root_e = t["root"][1]
        ser_s, ser_e = t["serialize"]
        return {
            "api": (send, root_e + reply_back),
            "enqueue": (send + auth, send + auth + publish),
            "process": (arrive, root_e),
            "decode": (t["receive"][0], t["parse"][1]),
            "features": t["hydrate"],
            "store": t["store_get"],
            "tokenize": t["tokenize"],
            "predict": t["forward"],
            "post": t["postprocess"],
            "observe": (t["lock_wait"][0], t["postprocess"][1]),
            "enrich": t["downstream"],
            "enrich_server": t["ds_server"],
            "reply": (ser_s, ser_e),
        }

    def present(self, role: str) -> np.ndarray | None:
        if role == "store":
            return ~self.sim.cache_hit
        if role in ("enrich", "enrich_server"):
            return self.sim.has_downstream
        return None

    def attributes(self, role: str, reqs: np.ndarray) -> list[tuple[str, str, list]]:
        sim = self.sim
        if role == "features":
            return [("features.cached", "bool", sim.cache_hit[reqs].tolist())]
        if role == "predict":
            return [("onnx.batch", "int", sim.batch_size[reqs].tolist())]
        if role == "decode":
            return [("messaging.message.body.size", "int", sim.body_bytes[reqs].tolist())]
        return []

    def resource_list(self) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
        c, sim = self.sim.config, self.sim
        rng = np.random.default_rng([c.seed, 37])
        out = [resource(rng, API, f"intake-{k}", "nodejs") for k in range(c.clients)]
        out += [resource(rng, WORKER, f"scorer-{p.instance}", "python") for p in sim.processes]
        out += [resource(rng, ENRICHER, f"enricher-{k}", "go") for k in range(c.downstream_instances)]
        index = {
            "api": sim.client,
            "worker": c.clients + sim.process,
            "downstream": c.clients + len(sim.processes) + sim.ds_instance,
        }
        return out, index
