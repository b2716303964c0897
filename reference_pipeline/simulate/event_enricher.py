"""Blind family `event-enricher`: events accepted over HTTP, published to a broker, enriched and scored
by a pool of single-threaded Python workers that pull them.

Shape: `event-intake` (Go, 3-5 pods) serves `POST /v1/events` (SERVER), validates the body
(`validate_event`) and publishes it (PRODUCER `publish <exchange>` / `send <queue>`, OpenTelemetry
messaging conventions: `messaging.system` rabbitmq, aws_sqs or gcp_pubsub by seed, destination,
message id, body size), then answers 202: the SERVER span ends right after the broker acknowledged
the publish. `enricher-worker` (CPython, 2-4 processes on each of 2-3 VMs; an instance is host.name +
process.pid, in Zipkin the endpoint's ipv4:port) pulls messages. Per seed the consumer is either
(a) single-message: its CONSUMER span `process <queue>` is the child of the PRODUCER span, in the
same trace, and starts after the producer ended (the time in the broker has no span); or (b) batch
(not in Zipkin, which has no links): one CONSUMER span per batch of up to 10-20 messages starts a new
trace with a LINK to each message's producer span and holds one `handle_event` per message. Per
message: `decode_event`, `features.lookup` with a redis `HGETALL` (and, on a miss only, a postgres
`SELECT features.user_profile`, whose result is written back), `predict` (onnxruntime or torch on
CPU; time grows with the event's feature count) and an HTTP `POST` to `profile-store`, whose SERVER
span is traced on even seeds.

Mechanisms, as the broker, the interpreter and the services produce them:

- **Consumer backlog** (`consumer-backlog`): arrivals above the pool's capacity for a while; messages
  wait in the broker, so publish end -> process start grows through the burst and drains after it.
  The worker spans themselves are unchanged.
- **Stop-the-world GC** (`worker-gc`): CPython's gen-2 collections stop the process (80-250 ms, every
  0.4-1.2 s); the message in flight is stretched (CPU steps run after the pause, I/O replies are read
  after it) and the next messages wait behind it. Reported as `gc.collection` span events
  (`gc.generation`, `gc.pause_ms`) on seeds 0, 1 (mod 4) only. Healthy runs have gen-0 pauses of ms.
- **Autoscaling during a burst** (`autoscale-burst`): a long burst backs the queue up; a new VM with
  fresh processes joins a third of the way in. Each new process loads its model on its first
  message and warms it up on the next ones (`predict` slow, decaying): cold_start on the new
  processes, queueing (the broker wait) on the old ones.
- **Slow downstream write** (`slow-write`): `profile-store` has a heavy tail (a share of its requests
  take ~100 ms): the worker's `POST` and the peer's SERVER span are slow.
- **Key-expiry wave** (`key-expiry`): most feature keys were bulk-loaded with one TTL and expire
  together mid-run; each lookup of an expired key misses and takes the postgres fallback (and
  writes the key back), so the miss rate jumps and decays as popular keys refill.
- **CPU-heavy model** (`heavy-model`): `predict` dominates every message (compute_bound).

Slow service times cut the pool's spare capacity, so the messages behind a slow one wait a little
longer in the broker: queueing is `side` for gc_pause, slow_dependency and cache_miss.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    Cause,
    Stalls,
    TraceTable,
    lognormal_ms,
    poisson_arrivals,
    random_pauses,
)

FAMILY = "event-enricher"
INTAKE, WORKER, PEER = "event-intake", "enricher-worker", "profile-store"
ROOT = "POST /v1/events"
SCENARIOS = ("steady", "consumer-backlog", "worker-gc", "autoscale-burst", "slow-write", "key-expiry",
             "heavy-model", "worker-gc+slow-write", "key-expiry+consumer-backlog")
# broker -> destination, queue (or subscription), producer operation, publish-ack ms, transit ms, batch
BROKERS: dict[str, dict[str, Any]] = {
    "rabbitmq": {"dest": "events.ingest", "queue": "enricher.events", "op": "publish",
                 "ack_ms": (1.3, 0.35), "transit_ms": (0.5, 0.3), "batch": 16,
                 "attrs": {"messaging.rabbitmq.destination.routing_key": "enrich",
                           "server.address": "rabbitmq.messaging", "server.port": 5672}},
    "aws_sqs": {"dest": "event-enrich-q", "queue": "event-enrich-q", "op": "send",
                "ack_ms": (7.0, 0.3), "transit_ms": (12.0, 0.5), "batch": 10,
                "attrs": {"server.address": "sqs.eu-west-1.amazonaws.com", "cloud.region": "eu-west-1",
                          "rpc.system": "aws-api", "rpc.service": "SQS"}},
    "gcp_pubsub": {"dest": "event-enrich", "queue": "event-enrich-sub", "op": "publish",
                   "ack_ms": (9.0, 0.35), "transit_ms": (22.0, 0.4), "batch": 20,
                   "attrs": {"server.address": "pubsub.googleapis.com", "gcp.project_id": "acme-scoring"}},
}
FORMATS = ("otlp-json", "jaeger", "zipkin")
LOADS = (0.55, 0.45, 0.6)
HOSTS = (2, 3, 2)
PROCS_PER_HOST = (3, 2, 4)
INTAKE_PODS = (3, 4, 5)
FORWARD_MS = {"onnxruntime": 9.0, "torch": 13.0}
HEAVY_MS = 60.0
WRITE_MS = 4.0
ENTITIES = 20_000
RATE_OF = "rate_of"  # option: the scenario whose work sets the arrival rate (a what-if pair's healthy run)


def setup(seed: int) -> dict[str, Any]:
    fmt = FORMATS[seed % 3]
    return {"fmt": fmt, "broker": ("aws_sqs", "rabbitmq", "gcp_pubsub")[(seed + seed // 3) % 3],
            "batch": fmt != "zipkin" and seed % 2 == 0, "load": LOADS[seed % 3], "hosts": HOSTS[seed % 3],
            "procs_per_host": PROCS_PER_HOST[seed % 3], "intake_pods": INTAKE_PODS[seed % 3],
            "runtime": "onnxruntime" if seed % 4 in (0, 3) else "torch", "gc_events": seed % 4 < 2,
            "peer_traced": seed % 2 == 0}


def _workers(seed: int, s: dict[str, Any], extra_host: bool) -> list[dict[str, Any]]:
    """Every worker process: host, pid, ipv4, port and its instance label (host:pid; Zipkin ipv4:port)."""
    rng = random.Random(seed * 7_777 + 5)
    out = []
    for h in range(s["hosts"] + (1 if extra_host else 0)):
        for k in range(s["procs_per_host"]):
            pid, ip, port = rng.randrange(2_000, 60_000), f"10.41.{h}.{11 + h}", 9100 + k
            label = f"{ip}:{port}" if s["fmt"] == "zipkin" else f"enrich-vm-{h}:{pid}"
            out.append({"host": f"enrich-vm-{h}", "pid": pid, "ip": ip, "port": port, "label": label,
                        "new": h >= s["hosts"]})
    return out


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s = setup(seed)
    procs = _workers(seed, s, "autoscale-burst" in scenario)
    old = tuple(p["label"] for p in procs if not p["new"])
    new = tuple(p["label"] for p in procs if p["new"])
    process = f"process {BROKERS[s['broker']]['queue']}"
    causes = {
        "consumer-backlog": Cause("queueing", "queue", process, WORKER, old),
        "worker-gc": Cause("gc_pause", None, process, WORKER, old, side=("queueing",)),
        "slow-write": Cause("slow_dependency", "downstream", "POST", PEER, _peers(s),
                            side=("queueing",)),
        "key-expiry": Cause("cache_miss", "feature_hydration", "features.lookup", WORKER, old,
                            side=("queueing",)),
        "heavy-model": Cause("compute_bound", "model_forward", "predict", WORKER, old),
    }
    if scenario == "steady":
        return ()
    if scenario == "autoscale-burst":
        return (causes["consumer-backlog"], Cause("cold_start", "model_forward", "predict", WORKER, new))
    return tuple(causes[part] for part in scenario.split("+"))


def _peers(s: dict[str, Any]) -> tuple[str, ...]:
    """profile-store's pods (Zipkin: their addresses); not traced on odd seeds, where only the worker's
    `POST` (server.address profile-store) shows the call."""
    zipkin = s["fmt"] == "zipkin"
    return tuple(f"10.42.0.{30 + k}:8443" if zipkin else f"profile-store-0{k}" for k in range(2))


def _service_ms(s: dict[str, Any], parts: set[str]) -> float:
    """A message's mean time on a worker (the pool is sized from it: load is a share of capacity)."""
    forward = (HEAVY_MS if "heavy-model" in parts else FORWARD_MS[s["runtime"]]) * 1.06
    write = WRITE_MS * 1.1 + 1.0 + (0.12 * 110.0 if "slow-write" in parts else 0.0)
    stalls = 1.2 if "worker-gc" in parts else 1.0
    return (0.6 + 0.8 + 0.05 * 12.0 + forward + write) * stalls


def _resources(table: TraceTable, rng: random.Random, s: dict[str, Any], procs: list[dict[str, Any]]
               ) -> tuple[list[int], list[int], list[int]]:
    sdk = {"telemetry.sdk.name": "opentelemetry"}
    intake = [table.resource({"service.name": INTAKE, "k8s.pod.name": f"event-intake-5d8f7-{k}",
                              "host.name": f"gke-node-{rng.randrange(30)}", "process.pid": 1,
                              "telemetry.sdk.language": "go", "service.version": "2.14.1", **sdk},
                             f"10.40.0.{10 + k}", 8080) for k in range(s["intake_pods"])]
    workers = [table.resource({"service.name": WORKER, "host.name": p["host"], "process.pid": p["pid"],
                               "process.runtime.name": "cpython", "process.runtime.version": "3.11.9",
                               "telemetry.sdk.language": "python", **sdk}, p["ip"], p["port"])
               for p in procs]
    peers = [table.resource({"service.name": PEER, "k8s.pod.name": f"profile-store-0{k}",
                             "telemetry.sdk.language": "java", **sdk}, f"10.42.0.{30 + k}", 8443)
             for k in range(2)]
    return intake, workers, peers


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+"))
    backlog, autoscale = "consumer-backlog" in parts, "autoscale-burst" in parts
    rng = random.Random(seed * 1_000_033 + 25)
    table = TraceTable(seed, 0xE7E7)
    broker = BROKERS[s["broker"]]
    procs = _workers(seed, s, autoscale)
    n_old = s["hosts"] * s["procs_per_host"]
    rps = s["load"] * n_old * 1000.0 / _service_ms(s, set(s.get(RATE_OF, scenario).split("+")))
    nominal = requests / rps
    bursts: tuple[tuple[float, float, float], ...] = ()
    if backlog:
        bursts = ((0.3 * nominal, 0.1 * nominal, 1.8 / s["load"]),
                  (0.7 * nominal, 0.05 * nominal, 1.6 / s["load"]))
    if autoscale:
        bursts = ((0.25 * nominal, 0.3 * nominal, 1.5 / s["load"]),)
    arrivals = poisson_arrivals(rng, rps, requests, bursts)
    horizon = arrivals[-1] + 30 * NS_PER_MS * 1000
    intake_res, worker_res, peer_res = _resources(table, rng, s, procs)
    pauses = []
    for _ in procs:
        small = random_pauses(rng, horizon, (0.2, 0.9), (0.4, 3.0))
        big = random_pauses(rng, horizon, (0.4, 1.2), (80.0, 250.0)) if "worker-gc" in parts else []
        merged: list[tuple[float, float]] = []
        for a, b in sorted(small + big):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        pauses.append(merged)
    stalls = [Stalls(p) for p in pauses]

    # --- intake: one trace per event, ending at the publish ack -------------------------------------
    messages = []  # (available at, trace, producer span, message id, feature count, entity)
    dest_attrs = {"messaging.system": s["broker"], "messaging.destination.name": broker["dest"],
                  "messaging.operation.type": "send" if broker["op"] == "send" else "publish",
                  "messaging.operation.name": broker["op"], **broker["attrs"]}
    for t0 in arrivals:
        trace = table.new_trace()
        g = rng.randrange(s["intake_pods"])
        size = rng.randint(400, 6_000)
        v_s = t0 + lognormal_ms(rng, 0.05, 0.4)
        v_e = v_s + lognormal_ms(rng, 0.12, 0.3) + size * 20.0
        p_s = v_e + lognormal_ms(rng, 0.03, 0.4)
        p_e = p_s + lognormal_ms(rng, *broker["ack_ms"])
        end = p_e + lognormal_ms(rng, 0.06, 0.3)
        root = table.span(trace, None, ROOT, "Server", intake_res[g], "otelhttp", t0, end,
                          {"http.request.method": "POST", "http.route": "/v1/events",
                           "url.path": "/v1/events", "http.response.status_code": 202,
                           "http.request.body.size": size})
        table.span(trace, root, "validate_event", "Internal", intake_res[g], "event-intake", v_s, v_e,
                   {"event.schema": "enrich.v3"})
        mid = f"{rng.getrandbits(64):016x}"
        producer = table.span(trace, root, f"{broker['op']} {broker['dest']}", "Producer", intake_res[g],
                              "event-intake/publisher", p_s, p_e,
                              {**dest_attrs, "messaging.message.id": mid,
                               "messaging.message.body.size": size},
                              peer=s["broker"])
        entity = int(ENTITIES * rng.random() ** 3)  # a few users send most events
        messages.append((p_e + lognormal_ms(rng, *broker["transit_ms"]), trace, producer, mid,
                         rng.randint(20, 120), entity))
    messages.sort()
    _consume(table, rng, s, parts, messages, procs, worker_res, peer_res, stalls, arrivals, bursts)
    return table


def _consume(table: TraceTable, rng: random.Random, s: dict[str, Any], parts: set[str], messages: list,
             procs: list[dict[str, Any]], worker_res: list[int], peer_res: list[int], stalls: list[Stalls],
             arrivals: list[float], bursts: tuple) -> None:
    """The worker pool: each process takes the oldest waiting message (or batch) when it is free."""
    broker = BROKERS[s["broker"]]
    queue = broker["queue"]
    process_name = f"process {queue}"
    cached = _initial_cache(parts, arrivals)
    free = []
    for w, p in enumerate(procs):
        ready = 0.0
        if p["new"]:
            start, length, _ = bursts[0]
            ready = (start + 0.25 * length + rng.uniform(0.1, 0.3) * (w % s["procs_per_host"])) * 1e9
        heapq.heappush(free, (ready, w))
    served = [0] * len(procs)
    consumer_attrs = {"messaging.system": s["broker"], "messaging.destination.name": broker["dest"],
                      "messaging.operation.type": "process", "messaging.operation.name": "process",
                      "messaging.consumer.group.name": "enricher"}
    if s["broker"] == "gcp_pubsub":
        consumer_attrs["messaging.destination.subscription.name"] = queue
    scope = {"rabbitmq": "opentelemetry.instrumentation.pika",
             "aws_sqs": "opentelemetry.instrumentation.botocore",
             "gcp_pubsub": "google.cloud.pubsub_v1"}[s["broker"]]
    i = 0
    while i < len(messages):
        ready, w = heapq.heappop(free)
        st = stalls[w]
        avail = messages[i][0]
        if not s["batch"]:
            batch = [messages[i]]
            pick = st.settle(max(ready, avail) + lognormal_ms(rng, 0.3, 0.4))
        else:
            pick = max(ready, avail)
            if ready < avail:  # an idle consumer's receive returns after a short fill window
                pick += lognormal_ms(rng, 8.0, 0.4)
            j = i
            while j < len(messages) and j - i < broker["batch"] and messages[j][0] <= pick:
                j += 1
            batch = messages[i:max(j, i + 1)]
            pick = st.settle(pick)
        i += len(batch)
        if s["batch"]:
            trace = table.new_trace()
            t = pick + lognormal_ms(rng, 0.1, 0.4)
            root = table.span(trace, None, process_name, "Consumer", worker_res[w], scope, pick, pick + 1,
                              {**consumer_attrs, "messaging.batch.message_count": len(batch)},
                              links=[m[2] for m in batch])
            for m in batch:
                h_s = st.settle(t)
                h = table.span(trace, root, "handle_event", "Internal", worker_res[w], "enricher", h_s, h_s,
                               {"messaging.message.id": m[3]})
                h_e = _message_work(table, rng, s, parts, trace, h, w, h_s, m, served, stalls, worker_res,
                                    peer_res, cached)
                _finish(table, h, h_e, _gc_events(s, st, h_s, h_e))
                t = h_e + lognormal_ms(rng, 0.02, 0.5)
            end = st.settle(t + lognormal_ms(rng, 0.4, 0.4))  # ack the batch
            _finish(table, root, end, [])
        else:
            m = batch[0]
            root = table.span(m[1], m[2], process_name, "Consumer", worker_res[w], scope, pick, pick + 1,
                              {**consumer_attrs, "messaging.message.id": m[3]})
            e = _message_work(table, rng, s, parts, m[1], root, w, pick, m, served, stalls, worker_res,
                              peer_res, cached)
            end = st.settle(e + lognormal_ms(rng, 0.3, 0.4))  # ack
            _finish(table, root, end, _gc_events(s, st, pick, end))
        heapq.heappush(free, (end, w))


def _finish(table: TraceTable, span: int, end: float, events: list) -> None:
    """Set a span's end (and events) once its children are known."""
    from reference_pipeline.simulate.config import DEFAULT_START_NS

    row = list(table.rows[span])
    row[7] = max(int(end), int(row[6] - DEFAULT_START_NS) + 1000) + DEFAULT_START_NS
    row[11] = events
    table.rows[span] = tuple(row)


def _gc_events(s: dict[str, Any], st: Stalls, a: float, b: float) -> list[tuple[float, str, dict[str, Any]]]:
    if not s["gc_events"]:
        return []
    out = []
    for p, q in st.overlapping(a, b):
        ms = (q - p) / NS_PER_MS
        out.append((q, "gc.collection", {"gc.generation": 2 if ms > 40 else 0, "gc.pause_ms": round(ms, 3),
                                         "gc.collected": int(ms * 900)}))
    return out


def _initial_cache(parts: set[str], arrivals: list[float]) -> dict[int, float]:
    """Cached feature keys -> expiry (ns): the feature store materialises every user's keys but the
    newest 0.5 % (about 0.2 % of lookups miss, too few to make a healthy run's tail); with a
    key-expiry wave most of them share one TTL that runs out a third of the way into the run."""
    wave = arrivals[len(arrivals) // 3] if "key-expiry" in parts else float("inf")
    rng = random.Random(len(arrivals) * 13 + 1)
    return {e: (wave if rng.random() < 0.8 else float("inf")) for e in range(int(ENTITIES * 0.995))}


def _message_work(table: TraceTable, rng: random.Random, s: dict[str, Any], parts: set[str], trace: int,
                  parent: int, w: int, t: float, m: tuple, served: list[int], stalls: list[Stalls],
                  worker_res: list[int], peer_res: list[int], cached: dict[int, float]) -> float:
    """One message's spans on process `w` from t: CPU steps run around the process's pauses, I/O replies
    are read when it runs. Returns when the message's work ended."""
    st, res = stalls[w], worker_res[w]
    gap = lambda: lognormal_ms(rng, 0.02, 0.5)  # noqa: E731
    d_s = st.settle(t + gap())
    d_e = st.run(d_s, lognormal_ms(rng, 0.35, 0.3) + m[4] * 2_000.0)
    table.span(trace, parent, "decode_event", "Internal", res, "enricher", d_s, d_e, {"event.features": m[4]})
    l_s = st.settle(d_e + gap())
    look = table.span(trace, parent, "features.lookup", "Internal", res, "enricher", l_s, l_s,
                      {"feature.entity_id": f"u{m[5]:06d}"})
    r_s = l_s + lognormal_ms(rng, 0.03, 0.4)
    r_e = st.settle(r_s + lognormal_ms(rng, 0.55, 0.35))
    table.span(trace, look, "HGETALL", "Client", res, "opentelemetry.instrumentation.redis", r_s, r_e,
               {"db.system": "redis", "db.operation.name": "HGETALL", "server.address": "features-cache",
                "server.port": 6379, "db.namespace": "0"}, peer="features-cache")
    l_e = r_e + lognormal_ms(rng, 0.02, 0.4)
    if cached.get(m[5], -1.0) <= r_s:  # a miss: read the profile from postgres, write it back
        q_s = st.settle(r_e + gap())
        q_e = st.settle(q_s + lognormal_ms(rng, 12.0, 0.4))
        table.span(trace, look, "SELECT features.user_profile", "Client", res,
                   "opentelemetry.instrumentation.psycopg", q_s, q_e,
                   {"db.system": "postgresql", "db.operation.name": "SELECT",
                    "db.collection.name": "features.user_profile", "server.address": "features-pg",
                    "server.port": 5432}, peer="features-pg")
        cached[m[5]] = float("inf")
        l_e = st.settle(q_e + lognormal_ms(rng, 0.3, 0.3))  # HSET back (pipelined, no span)
    _finish(table, look, l_e, [])
    p_s = st.settle(l_e + gap())
    base = HEAVY_MS if "heavy-model" in parts else FORWARD_MS[s["runtime"]]
    work = lognormal_ms(rng, base * (0.7 + m[4] / 200.0), 0.12)
    if "autoscale-burst" in parts and _is_new(s, w):
        k = served[w]
        work += (900.0 * 0.3 ** k + 250.0 * 0.75 ** k) * NS_PER_MS  # model load, then warm-up
    served[w] += 1
    p_e = st.run(p_s, work)
    table.span(trace, parent, "predict", "Internal", res, "enricher", p_s, p_e,
               {"ml.model.name": "fraud-enricher", "ml.model.runtime": s["runtime"], "ml.device": "cpu",
                "event.features": m[4]})
    c_s = st.settle(p_e + gap())
    net = lognormal_ms(rng, 0.4, 0.3)
    body = lognormal_ms(rng, WRITE_MS, 0.35)
    if "slow-write" in parts and rng.random() < 0.12:
        body += lognormal_ms(rng, 100.0, 0.5)  # the peer's heavy tail
    k = rng.randrange(len(peer_res))
    c_e = st.settle(c_s + 2 * net + body)
    url = f"http://profile-store:8443/v1/profiles/u{m[5]:06d}/signals"
    call = table.span(trace, parent, "POST", "Client", res, "opentelemetry.instrumentation.httpx", c_s, c_e,
                      {"http.request.method": "POST", "url.full": url, "server.address": PEER,
                       "server.port": 8443, "http.response.status_code": 201}, peer=PEER)
    if s["peer_traced"]:
        table.span(trace, call, "POST /v1/profiles/{id}/signals", "Server", peer_res[k],
                   "io.opentelemetry.spring-webmvc-6.0", c_s + net, c_s + net + body,
                   {"http.request.method": "POST", "http.route": "/v1/profiles/{id}/signals",
                    "http.response.status_code": 201})
    return c_e


def _is_new(s: dict[str, Any], w: int) -> bool:
    return w >= s["hosts"] * s["procs_per_host"]
