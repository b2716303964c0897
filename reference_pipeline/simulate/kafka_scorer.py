"""Blind family `kafka-scorer`: a held-out blind family of issue 25 until its honest score of session 4
(bench/RESULTS.md), an open check since.

Until then nothing in the diagnosis was tuned on this family: its final figure was reported apart from the
others (bench/RESULTS.md, "Blind families (issue 25)"), and helpers working on the diagnosis were told
not to read this module or look at its runs. It is the most different shape of the five: the request
that starts a trace returns before the work it causes is done.

Shape: `txn-ingest` (Go, 3 pods) accepts `POST /v1/transactions` (202 Accepted), runs `validate_txn`,
and hands the event to its Kafka producer without waiting: the PRODUCER span `transactions publish`
ends when the broker acknowledges the batch (linger up to 5 ms, then the broker's ack), after the
SERVER span has ended. `fraud-scorer` (Python, confluent-kafka, 2-4 pods, one consumer thread each,
12 partitions spread over them) processes each record in a CONSUMER span `transactions process`
(child of the producer's span through the record's headers), with `decode_avro`,
`SELECT fraud.profiles` (Cassandra), `xgboost.predict` (eight OpenMP threads) and a fire-and-forget
PRODUCER span `scores publish` that ends after the consumer span. Jaeger UI JSON on odd seeds,
OTLP/JSON lines on even ones. Instances: `host.name` + `process.pid` (Jaeger: `hostname`, `ip`).

Mechanisms:

- **Consumer lag** (`consumer-lag`): a merchant's bulk upload sends bursts at 2.5x the consumers'
  capacity; records wait in their partition for the pod's one consumer thread. The time from the
  producer's span to the consumer's span grows with the backlog.
- **CFS throttling** (`cpu-throttling`): the scorer pods run under a 1-CPU limit (100 ms quota per
  100 ms period); `xgboost.predict` burns CPU eight threads wide, so busy periods spend the quota and
  the whole process stops until the next period boundary (records behind it wait). No GC is
  involved: Python's collector is reported on seeds 0, 1 (mod 4) as `gc` events
  (`python.gc.generation`, `python.gc.elapsed_s`) with only short young-generation collections.
- **Payload size** (`large-payload`): producers started attaching device-fingerprint blobs, so
  `messaging.message.body.size` grows from ~1.2 kB to a heavy-tailed size (median 40 kB, up to 4 MB):
  the producer's transfer and `decode_avro` (~40 MB/s) grow with it. Slower decoding also slows the
  consumers, so some lag comes with it.
- **GC beside a heavy-tailed store** (`gc+slow-store`): the scorer's Python heap holds a large
  profile cache, so full (generation 2) collections stop it for 50-150 ms every 2-4 s, while
  Cassandra compactions make 4 % of profile reads slow (+ Pareto 20 ms, alpha 1.5). One consumer
  thread per pod: a stalled record holds up the records behind it, so lag comes with both.

Truth: queueing in the partitions (stage queue, service fraud-scorer); cpu_throttling, gc_pause on
the scorer pods; large_payload in `decode_avro` (stage parsing); slow_dependency at Cassandra.
"""

from __future__ import annotations

import math
import random
from typing import Any

from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    lognormal_ms,
    poisson_arrivals,
    random_pauses,
)

FAMILY = "kafka-scorer"
INGEST, SCORER = "txn-ingest", "fraud-scorer"
SCENARIOS = ("healthy", "consumer-lag", "cpu-throttling", "large-payload", "gc+slow-store")
PERIOD = 100 * NS_PER_MS
PARTITIONS = 12
SCORERS = (3, 4, 2)
RPS = (160.0, 220.0, 110.0)


def setup(seed: int) -> dict[str, Any]:
    return {
        "scorers": SCORERS[seed % 3],
        "rps": RPS[seed % 3],
        "gc_events": seed % 4 < 2,
        "fmt": "otlp-json" if seed % 2 == 0 else "jaeger",
    }


def _pods(n: int) -> tuple[str, ...]:
    return tuple(f"fraud-scorer-{k}" for k in range(n))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    pods = _pods(setup(seed)["scorers"])
    process = "transactions process"
    table = {
        "healthy": (),
        "consumer-lag": (Cause("queueing", "queue", process, SCORER, pods),),
        "cpu-throttling": (
            Cause("cpu_throttling", "model_forward", process, SCORER, pods, side=("queueing",)),
        ),
        "large-payload": (
            Cause("large_payload", "parsing", "decode_avro", SCORER, pods, side=("queueing",)),
        ),
        "gc+slow-store": (
            Cause("gc_pause", None, process, SCORER, pods, side=("queueing",)),
            Cause(
                "slow_dependency",
                "feature_hydration",
                "SELECT fraud.profiles",
                "cassandra",
                ("cassandra",),
                side=("queueing",),
            ),
        ),
    }
    if scenario not in table:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(table)}")
    return table[scenario]


class _Cpu:
    """One process under a CFS quota (None: no limit) and stop-the-world pauses: `run` gives the wall
    time at which `cpu` ns of work on `threads` threads started at t is done; `settle` when a thread
    that wants to run at t runs."""

    def __init__(self, quota: float | None, phase: float, pauses: Stalls) -> None:
        self.quota, self.phase, self.pauses = quota, phase, pauses
        self.boundary, self.left = phase, quota or 0.0

    def _advance(self, t: float) -> None:
        if self.quota is not None and t >= self.boundary:
            self.boundary += PERIOD * math.floor((t - self.boundary) / PERIOD + 1)
            self.left = self.quota

    def settle(self, t: float) -> float:
        t = self.pauses.settle(t)
        self._advance(t)
        if self.quota is not None and self.left <= 1.0:
            t = self.pauses.settle(self.boundary)
            self._advance(t)
        return t

    def run(self, t: float, cpu: float, threads: int = 1) -> float:
        while cpu > 1.0:
            t = self.settle(t)
            stop = self.boundary if self.quota is not None else math.inf
            k = next((i for i, a in enumerate(self.pauses.starts) if a > t), None)
            if k is not None:
                stop = min(stop, self.pauses.starts[k])
            step = min(cpu / threads, stop - t, self.left / threads if self.quota is not None else math.inf)
            cpu -= step * threads
            if self.quota is not None:
                self.left -= step * threads
            t += step
        return t


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+"))
    jaeger = s["fmt"] == "jaeger"
    rng = random.Random(seed * 1_000_081 + 67)
    table = TraceTable(seed, 0xCAF4)
    n_pods = s["scorers"]
    nominal = requests / s["rps"]
    bursts = ()
    if "consumer-lag" in parts:
        capacity = n_pods * 1000.0 / 5.5
        bursts = (
            (0.3 * nominal, 0.05 * nominal, 2.5 * capacity / s["rps"]),
            (0.7 * nominal, 0.04 * nominal, 2.5 * capacity / s["rps"]),
        )
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    horizon = arrivals[-1] + 30 * NS_PER_S
    cpus = []
    for _ in range(n_pods):
        pauses = random_pauses(rng, horizon, (0.3, 1.0), (0.3, 2.0))  # young collections
        if "gc" in parts:
            pauses = sorted(pauses + random_pauses(rng, horizon, (2.0, 4.0), (50.0, 150.0)))
        quota = PERIOD if "cpu-throttling" in parts else None
        cpus.append(_Cpu(quota, rng.uniform(0, PERIOD), Stalls(pauses)))

    def resource(service: str, host: str, ip: str, language: str) -> int:
        if jaeger:
            return table.resource(
                {
                    "service.name": service,
                    "hostname": host,
                    "ip": ip,
                    "client-uuid": f"{rng.getrandbits(64):016x}",
                },
                ip,
                8080,
            )
        return table.resource(
            {
                "service.name": service,
                "host.name": host,
                "process.pid": rng.randrange(1, 300),
                "telemetry.sdk.language": language,
            },
            ip,
            8080,
        )

    ingest = [resource(INGEST, f"txn-ingest-{k}", f"10.60.0.{10 + k}", "go") for k in range(3)]
    scorers = [resource(SCORER, pod, f"10.60.1.{10 + k}", "python") for k, pod in enumerate(_pods(n_pods))]
    cassandra = resource("cassandra", "cassandra", "10.60.2.10", "java")
    free = [0.0] * n_pods
    large = "large-payload" in parts
    kafka = {"messaging.system": "kafka", "messaging.destination.name": "transactions"}
    for t0 in arrivals:
        trace = table.new_trace()
        size = int(min(4e6, 40_000 * rng.lognormvariate(0, 1.3))) if large else rng.randint(900, 1500)
        g = rng.randrange(3)
        val_s = t0 + lognormal_ms(rng, 0.08, 0.3)
        val_e = val_s + lognormal_ms(rng, 0.3, 0.3)
        send = val_e + lognormal_ms(rng, 0.04, 0.3)
        root_e = send + lognormal_ms(rng, 0.06, 0.3) + lognormal_ms(rng, 0.15, 0.3)
        appended = (
            send + rng.uniform(0, 5) * NS_PER_MS + size / 100e6 * NS_PER_S + lognormal_ms(rng, 1.2, 0.3)
        )
        ack = appended + lognormal_ms(rng, 0.4, 0.3)
        partition = rng.randrange(PARTITIONS)
        k = partition % n_pods
        cpu = cpus[k]
        start = cpu.settle(max(appended + lognormal_ms(rng, 0.5, 0.4), free[k]))
        dec_s = cpu.run(start, lognormal_ms(rng, 0.05, 0.3))
        dec_e = cpu.run(dec_s, lognormal_ms(rng, 0.15, 0.3) + size / 40e6 * NS_PER_S)
        db_s = cpu.run(dec_e, lognormal_ms(rng, 0.05, 0.3))
        own = lognormal_ms(rng, 1.6, 0.35)
        if "slow-store" in parts and rng.random() < 0.04:
            own += 20.0 * NS_PER_MS * rng.paretovariate(1.5)
        db_e = cpu.settle(db_s + own)
        pred_s = cpu.run(db_e, lognormal_ms(rng, 0.05, 0.3))
        pred_e = cpu.run(pred_s, lognormal_ms(rng, 13.0, 0.25), threads=8)
        pub_s = cpu.run(pred_e, lognormal_ms(rng, 0.05, 0.3))
        proc_e = cpu.run(pub_s, lognormal_ms(rng, 0.12, 0.3))
        pub_e = pub_s + rng.uniform(0, 5) * NS_PER_MS + lognormal_ms(rng, 1.6, 0.3)
        free[k] = proc_e
        events = []
        if s["gc_events"]:
            events = [
                (
                    b,
                    "gc",
                    {
                        "python.gc.generation": 2 if b - a > 20 * NS_PER_MS else 0,
                        "python.gc.elapsed_s": round((b - a) / NS_PER_S, 6),
                    },
                )
                for a, b in cpu.pauses.overlapping(start, proc_e)
            ]
        root = table.span(
            trace,
            None,
            "POST /v1/transactions",
            "Server",
            ingest[g],
            "otelhttp",
            t0,
            root_e,
            {
                "http.request.method": "POST",
                "http.route": "/v1/transactions",
                "http.response.status_code": 202,
            },
        )
        table.span(trace, root, "validate_txn", "Internal", ingest[g], "txn-ingest", val_s, val_e)
        producer = table.span(
            trace,
            root,
            "transactions publish",
            "Producer",
            ingest[g],
            "franz-go",
            send,
            ack,
            {
                **kafka,
                "messaging.operation": "publish",
                "messaging.message.body.size": size,
                "messaging.kafka.destination.partition": partition,
            },
            peer="kafka",
        )
        process = table.span(
            trace,
            producer,
            "transactions process",
            "Consumer",
            scorers[k],
            "opentelemetry.instrumentation.confluent_kafka",
            start,
            proc_e,
            {
                **kafka,
                "messaging.operation": "process",
                "messaging.kafka.consumer.group": "fraud",
                "messaging.kafka.source.partition": partition,
                "messaging.message.body.size": size,
            },
            events=events,
        )
        table.span(
            trace,
            process,
            "decode_avro",
            "Internal",
            scorers[k],
            "fraud_scorer",
            dec_s,
            dec_e,
            {"messaging.message.body.size": size},
        )
        table.span(
            trace,
            process,
            "SELECT fraud.profiles",
            "Client",
            scorers[k],
            "opentelemetry.instrumentation.cassandra",
            db_s,
            db_e,
            {
                "db.system": "cassandra",
                "db.name": "fraud",
                "db.operation": "SELECT",
                "db.cassandra.consistency_level": "local_one",
            },
            peer="cassandra",
        )
        table.span(
            trace,
            process,
            "xgboost.predict",
            "Internal",
            scorers[k],
            "fraud_scorer",
            pred_s,
            pred_e,
            {"model.name": "fraud-xgb-31", "omp.threads": 8},
        )
        table.span(
            trace,
            process,
            "scores publish",
            "Producer",
            scorers[k],
            "opentelemetry.instrumentation.confluent_kafka",
            pub_s,
            pub_e,
            {
                "messaging.system": "kafka",
                "messaging.destination.name": "scores",
                "messaging.operation": "publish",
            },
            peer="kafka",
        )
    del cassandra  # Cassandra's own spans are not exported (its server-side tracing is off)
    return table
