"""The calls ranker-api makes per request in the blind family `recsys-ranker` (recsys_ranker.py): to
feature-svc (a deadline and Resilience4j retries; feature-svc reads Cassandra) and to the model server
(its dynamic batcher, shared with an untraced co-tenant, and its GPU execution). `run` is the run's
RankerRun (recsys_request.py)."""

from __future__ import annotations

from typing import Any

from reference_pipeline.simulate.recsys_flow import finish, hop_ns
from reference_pipeline.simulate.trace_table import NS_PER_MS, lognormal_ms

ROOT = "GET /v2/recommendations"
FEATURE_RPC = "recsys.features.v1.FeatureService/GetFeatures"
MODEL_RPC = "inference.GRPCInferenceService/ModelInfer"
QUEUE_SPAN = "dynamic_batcher.queue"
EXECUTE = "model.execute"
FETCH, SEEN, FEATURES, SERIALIZE = (
    "CandidateService.fetchCandidates",
    "SeenItemsRepository.findRecent",
    "FeatureClient.getFeatures",
    "ResponseAssembler.serialize",
)
APP = "com.acme.recsys.ranker"
AGENT = "io.opentelemetry"
FEATURE_DEADLINE_MS, TIGHT_DEADLINE_MS, ATTEMPTS = 2000.0, 30.0, 3
SEGMENTS = 300


def ranker_ip(k: int) -> str:
    """Ranker pod k's address (pod k runs on node k % 3)."""
    return f"10.52.{k % 3}.{20 + k}"


# --- feature-svc: the deadline and retries, the Go server ---------------------------------------
def feature_call(run: Any, trace: int, root: int, p: int, g_s: float, n_cands: int, cpu: Any) -> float:
    rng, table, st, res, lossy = run.rng, run.table, run.stalls[p], run.ranker_res[p], run.lossy[p]
    wrap = table.span(trace, root, FEATURES, "Internal", res, APP, g_s, g_s, {"features.requested": n_cands})
    tight = "feature-deadline" in run.parts
    deadline = (TIGHT_DEADLINE_MS if tight else FEATURE_DEADLINE_MS) * NS_PER_MS
    heavy_tail = "slow-features" in run.parts or tight
    t = st.run(g_s, cpu(0.1))
    rpc = {
        "rpc.system": "grpc",
        "rpc.service": "recsys.features.v1.FeatureService",
        "rpc.method": "GetFeatures",
    }
    for attempt in range(1, ATTEMPTS + 1):
        a_s = st.settle(t)
        f = rng.randrange(len(run.feature_res))
        sv_s = a_s + hop_ns(rng, lossy)
        cass_s = sv_s + lognormal_ms(rng, 0.08, 0.3)
        cass = lognormal_ms(rng, 3.0 + n_cands / 500.0, 0.3)
        if rng.random() < (0.08 if heavy_tail else 0.003):  # a replica in compaction, tombstone scans
            cass += lognormal_ms(rng, 70.0, 0.6)
        cass_e = cass_s + cass
        sv_e = cass_e + lognormal_ms(rng, 0.25, 0.3)
        reply = st.settle(sv_e + hop_ns(rng, lossy))
        cut = reply > a_s + deadline
        if cut:  # the deadline travels as grpc-timeout: the Go server's context ends with it
            reply = st.settle(a_s + deadline)
            sv_e = sv_s + deadline
            cass_e = sv_e - lognormal_ms(rng, 0.03, 0.3)
        status, code = ("Error", 4) if cut else ("Unset", 0)
        client = table.span(
            trace,
            wrap,
            FEATURE_RPC,
            "Client",
            res,
            f"{AGENT}.grpc-1.6",
            a_s,
            reply,
            {
                **rpc,
                "rpc.grpc.status_code": code,
                "server.address": "feature-svc",
                "server.port": 50051,
                "recsys.attempt": attempt,
            },
            status=status,
            peer="feature-svc",
            message=f"DEADLINE_EXCEEDED: deadline exceeded after {deadline / 1e9:.9f}s" if cut else "",
        )
        server = table.span(
            trace,
            client,
            FEATURE_RPC,
            "Server",
            run.feature_res[f],
            "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc",
            sv_s,
            sv_e,
            {**rpc, "rpc.grpc.status_code": code},
            status=status,
            message="context deadline exceeded" if cut else "",
        )
        table.span(
            trace,
            server,
            "SELECT features.item_features",
            "Client",
            run.feature_res[f],
            "github.com/gocql/gocql",
            cass_s,
            cass_e,
            {
                "db.system": "cassandra",
                "db.namespace": "features",
                "db.operation.name": "SELECT",
                "db.collection.name": "item_features",
                "db.cassandra.consistency_level": "local_quorum",
                "db.cassandra.page_size": 5000,
                "server.address": f"cassandra-{rng.randrange(6)}",
            },
            status=status,
            message="context deadline exceeded" if cut else "",
        )
        t = reply
        if not cut:
            break
        t = st.settle(t + lognormal_ms(rng, 5.0, 0.2))  # Resilience4j retry wait
    else:
        t = st.run(t, cpu(0.2))  # every attempt cut: default features for the candidates
    t = st.run(t, cpu(0.3 + n_cands / 2000.0))  # decode the feature rows
    finish(table, wrap, t)
    return t


# --- model-server: the dynamic batcher, the GPU execution -----------------------------------------
def model_call(run: Any, trace: int, root: int, p: int, m_s: float, n_cands: int, cpu: Any) -> float:
    rng, table, st, lossy = run.rng, run.table, run.stalls[p], run.lossy[p]
    k = rng.randrange(len(run.model_res))
    batcher = run.batchers[k]
    rpc = {
        "rpc.system": "grpc",
        "rpc.service": "inference.GRPCInferenceService",
        "rpc.method": "ModelInfer",
    }
    sent = st.run(m_s, cpu(0.3 + n_cands / 2500.0))  # build the input tensors
    arrive = sent + hop_ns(rng, lossy) + n_cands * 256 / 1.2  # 64 float32 features per candidate
    cot, i = run.cotenant[k], run.cotenant_next[k]
    while i < len(cot) and cot[i] < arrive:
        batcher.join(cot[i], rng)
        i += 1
    run.cotenant_next[k] = i
    q_s = arrive + lognormal_ms(rng, 0.12, 0.3)
    batch = batcher.join(q_s, rng)
    sv_e = batch.end + lognormal_ms(rng, 0.1, 0.3)
    m_e = st.settle(sv_e + hop_ns(rng, lossy))
    client = table.span(
        trace,
        root,
        MODEL_RPC,
        "Client",
        run.ranker_res[p],
        f"{AGENT}.grpc-1.6",
        m_s,
        m_e,
        {**rpc, "rpc.grpc.status_code": 0, "server.address": "model-server", "server.port": 8001},
        peer="model-server",
    )
    attrs: dict[str, Any] = {
        **rpc,
        "rpc.grpc.status_code": 0,
        "inference.model.name": "ranker_dlrm",
        "inference.request.rows": n_cands,
    }
    if not run.s["queue_span"]:
        attrs["inference.queue.duration_us"] = int((batch.start - q_s) / 1000)
        attrs["inference.compute.duration_us"] = int((batch.end - batch.start) / 1000)
    server = table.span(
        trace, client, MODEL_RPC, "Server", run.model_res[k], "inference-server", arrive, sv_e, attrs
    )
    if run.s["queue_span"]:
        table.span(
            trace,
            server,
            QUEUE_SPAN,
            "Internal",
            run.model_res[k],
            "inference-server",
            q_s,
            batch.start,
            {"inference.model.name": "ranker_dlrm"},
        )
    table.span(
        trace,
        server,
        EXECUTE,
        "Internal",
        run.model_res[k],
        "inference-server",
        batch.start,
        batch.end,
        batch.attrs,
    )
    return st.run(m_e, cpu(0.2))  # read the scores, take the top items
