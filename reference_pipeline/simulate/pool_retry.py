"""Blind family `pool-retry`: a Spring Boot scoring service with a JDBC connection pool and a gRPC
call under a deadline with application retries.

Shape: `claims-scorer` (Java, Spring Boot with open-session-in-view, 2-4 pods, Tomcat's 200 threads:
no thread limit matters) serves `POST /claims/{claimId}/score`: `ClaimRepository.findHistory` (its
`SELECT claims.claim_history` CLIENT span, `db.system=postgresql`), the gRPC call
`ocr.v1.DocumentModel/Extract` to `document-ocr` (Python, a GPU model; its SERVER span per attempt),
`FraudModel.predict` (XGBoost4J) and `ClaimRepository.saveScore` (`INSERT claims.claim_scores`).
OTLP/JSON lines on even seeds (resource: `host.name` + `process.pid`), Jaeger UI JSON on odd ones
(Jaeger client tags: `hostname`, `ip`). No GC is reported; the JVMs have young pauses of 5-15 ms.

Mechanisms:

- **Connection pool** (HikariCP): with open-session-in-view the request takes a pooled connection at
  its first query and holds it until the response is written, through the gRPC call and the model.
  A request that finds every connection held waits inside `ClaimRepository.findHistory`, before its
  SELECT span starts (no span for the wait). `pool-exhaustion`: a configuration change cut
  `maximumPoolSize` from 10 to 3, at the same load; the wait grows with the other requests' hold.
- **Deadline and retry** (Resilience4j around a blocking stub, 250 ms deadline, 2 attempts, 20 ms
  between): `document-ocr` slows (a median of 55 ms instead of 35, and 10 % of its calls queue behind
  a batch on its GPU: + Pareto 120 ms, alpha 1.3). An attempt still running at the deadline ends then,
  with status ERROR and `rpc.grpc.status_code=4` (DEADLINE_EXCEEDED); the next attempt is a new CLIENT
  span to the same peer. The abandoned SERVER span at the model runs to its end. Retries lengthen
  connection holds, so some pool waiting comes with them.
- Two causes: `pool-exhaustion+deadline-retry` (a pool of 5: the retries hold connections longer).

Truth: lock_contention at the pool (stage feature_hydration, span `ClaimRepository.findHistory`);
timeout_retry at claims-scorer (peer document-ocr; slow_dependency and lock_contention are side
mechanisms of it).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    WorkerPool,
    lognormal_ms,
    poisson_arrivals,
    random_pauses,
)

FAMILY = "pool-retry"
SERVICE, OCR = "claims-scorer", "document-ocr"
OCR_RPC = "ocr.v1.DocumentModel/Extract"
DEADLINE_MS = 250.0
SCENARIOS = ("healthy", "pool-exhaustion", "deadline-retry", "pool-exhaustion+deadline-retry")
PODS = (3, 4, 2)
RPS = (110.0, 150.0, 80.0)


def setup(seed: int) -> dict[str, Any]:
    return {"pods": PODS[seed % 3], "rps": RPS[seed % 3], "fmt": "otlp-json" if seed % 2 == 0 else "jaeger"}


def _pods(n: int) -> tuple[str, ...]:
    return tuple(f"claims-scorer-6b7d9-{k}" for k in range(n))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    pods = _pods(setup(seed)["pods"])
    pool = Cause("lock_contention", "feature_hydration", "ClaimRepository.findHistory", SERVICE, pods)
    retry = Cause(
        "timeout_retry", "downstream", OCR_RPC, SERVICE, pods, side=("slow_dependency", "lock_contention")
    )
    table = {
        "healthy": (),
        "pool-exhaustion": (pool,),
        "deadline-retry": (retry,),
        "pool-exhaustion+deadline-retry": (pool, retry),
    }
    if scenario not in table:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(table)}")
    return table[scenario]


def _resource(
    table: TraceTable, rng: random.Random, service: str, host: str, ip: str, port: int, jaeger: bool
) -> int:
    if jaeger:
        attrs: dict[str, Any] = {
            "service.name": service,
            "hostname": host,
            "ip": ip,
            "jaeger.version": "Java-1.8.1",
        }
    else:
        attrs = {
            "service.name": service,
            "host.name": host,
            "process.pid": rng.randrange(1, 200),
            "process.runtime.name": "OpenJDK Runtime Environment",
            "telemetry.sdk.language": "java",
        }
    return table.resource(attrs, ip, port)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+"))
    jaeger = s["fmt"] == "jaeger"
    rng = random.Random(seed * 1_000_037 + 41)
    table = TraceTable(seed, 0x9001)
    pool_size = (5 if "deadline-retry" in parts else 3) if "pool-exhaustion" in parts else 10
    slow_ocr = "deadline-retry" in parts
    arrivals = poisson_arrivals(rng, s["rps"], requests)
    horizon = arrivals[-1] + 10 * NS_PER_S
    pods = [
        _resource(table, rng, SERVICE, h, f"10.40.0.{10 + k}", 8080, jaeger)
        for k, h in enumerate(_pods(s["pods"]))
    ]
    ocr = [
        _resource(table, rng, OCR, f"document-ocr-{k}", f"10.41.0.{10 + k}", 50051, jaeger) for k in range(3)
    ]
    stalls = [Stalls(random_pauses(rng, horizon, (3.0, 8.0), (5.0, 15.0))) for _ in pods]
    pools = [WorkerPool(pool_size) for _ in pods]
    http = {
        "http.request.method": "POST",
        "http.route": "/claims/{claimId}/score",
        "http.response.status_code": 200,
    }
    rpc = {"rpc.system": "grpc", "rpc.service": "ocr.v1.DocumentModel", "rpc.method": "Extract"}
    for t0 in arrivals:
        k = rng.randrange(len(pods))
        st = stalls[k]
        trace = table.new_trace()
        root_s = st.settle(t0)
        repo_s = st.run(root_s, lognormal_ms(rng, 0.25, 0.3))
        conn = pools[k].acquire(repo_s + lognormal_ms(rng, 0.03, 0.3))
        sel_s = st.settle(conn + lognormal_ms(rng, 0.05, 0.3))
        sel_e = st.settle(sel_s + lognormal_ms(rng, 3.0, 0.4))
        repo_e = st.run(sel_e, lognormal_ms(rng, 0.15, 0.3))
        attempts = []
        t = st.run(repo_e, lognormal_ms(rng, 0.05, 0.3))
        for _attempt in range(2):
            srv_s = t + lognormal_ms(rng, 0.4, 0.3)
            own = lognormal_ms(rng, 55.0 if slow_ocr else 35.0, 0.3)
            if slow_ocr and rng.random() < 0.10:
                own += 120.0 * NS_PER_MS * rng.paretovariate(1.3)
            reply = srv_s + own + lognormal_ms(rng, 0.4, 0.3)
            deadline = t + DEADLINE_MS * NS_PER_MS
            failed = reply > deadline
            end = st.settle(deadline + lognormal_ms(rng, 0.1, 0.3) if failed else reply)
            attempts.append((t, end, failed, rng.randrange(len(ocr)), srv_s, srv_s + own))
            t = end
            if not failed:
                break
            t = st.run(t, 20 * NS_PER_MS)  # Resilience4j's wait between attempts
        pred_s = st.run(t, lognormal_ms(rng, 0.05, 0.3))
        pred_e = st.run(pred_s, lognormal_ms(rng, 8.0, 0.2))
        save_s = st.run(pred_e, lognormal_ms(rng, 0.05, 0.3))
        ins_s = st.run(save_s, lognormal_ms(rng, 0.1, 0.3))
        ins_e = st.settle(ins_s + lognormal_ms(rng, 2.0, 0.4))
        save_e = st.run(ins_e, lognormal_ms(rng, 0.1, 0.3))
        root_e = st.run(save_e, lognormal_ms(rng, 0.3, 0.3))
        pools[k].release(root_e)  # open-session-in-view: the connection goes back after the response
        ok = not attempts[-1][2]
        root = table.span(
            trace,
            None,
            "POST /claims/{claimId}/score",
            "Server",
            pods[k],
            "io.opentelemetry.spring-webmvc-6.0",
            root_s,
            root_e,
            {**http, "http.response.status_code": 200 if ok else 504},
        )
        repo = table.span(
            trace,
            root,
            "ClaimRepository.findHistory",
            "Internal",
            pods[k],
            "io.opentelemetry.spring-data-1.8",
            repo_s,
            repo_e,
        )
        db = {"db.system": "postgresql", "db.name": "claims", "server.address": "claims-db.internal"}
        table.span(
            trace,
            repo,
            "SELECT claims.claim_history",
            "Client",
            pods[k],
            "io.opentelemetry.jdbc",
            sel_s,
            sel_e,
            {
                **db,
                "db.operation": "SELECT",
                "db.sql.table": "claim_history",
                "db.statement": "select h.* from claim_history h where h.claim_id=?",
            },
            peer="claims-db",
        )
        for a_s, a_e, failed, pod, srv_s, srv_e in attempts:
            code = 4 if failed else 0
            call = table.span(
                trace,
                root,
                OCR_RPC,
                "Client",
                pods[k],
                "io.opentelemetry.grpc-1.6",
                a_s,
                a_e,
                {**rpc, "rpc.grpc.status_code": code, "net.peer.name": OCR, "net.peer.port": 50051},
                "Error" if failed else "Unset",
                "DEADLINE_EXCEEDED: deadline exceeded after 0.25s" if failed else "",
                peer=OCR,
            )
            table.span(
                trace,
                call,
                OCR_RPC,
                "Server",
                ocr[pod],
                "opentelemetry.instrumentation.grpc",
                srv_s,
                srv_e,
                {**rpc, "rpc.grpc.status_code": 0},
            )
        table.span(
            trace,
            root,
            "FraudModel.predict",
            "Internal",
            pods[k],
            "claims-scorer",
            pred_s,
            pred_e,
            {"model.name": "xgb-claims-v14"},
        )
        save = table.span(
            trace,
            root,
            "ClaimRepository.saveScore",
            "Internal",
            pods[k],
            "io.opentelemetry.spring-data-1.8",
            save_s,
            save_e,
        )
        table.span(
            trace,
            save,
            "INSERT claims.claim_scores",
            "Client",
            pods[k],
            "io.opentelemetry.jdbc",
            ins_s,
            ins_e,
            {**db, "db.operation": "INSERT", "db.sql.table": "claim_scores"},
            peer="claims-db",
        )
    return table
