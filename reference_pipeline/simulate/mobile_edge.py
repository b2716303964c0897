"""Blind family `mobile-edge`: a mobile app's photo-tagging feature traced end to end from the phone
(mobile_edge_net.py: the phones, their links and sessions; mobile_edge_api.py: the Go pods' CPU and GC,
TF Serving's batcher, the AWS SDK's retries; mobile_edge_spans.py: the conventions).

Shape: a user taps "tag" on a photo in the iOS (`phototag-ios`, Swift SDK) or Android
(`phototag-android`, Kotlin SDK) app. The phone's root span covers the action: compressing the photo
(self time), on a new connection a DNS lookup span and a connect span (TCP + TLS 1.3 to the edge), the
HTTP client span (the upload of a 0.2-4 MB JPEG over Wi-Fi or cellular, the server's work, the
response), and the parse span. Connections are kept while the app is in the foreground and survive a
short trip to the Camera; a long background (the OS suspends the app) or 60 s idle loses them.
`edge-proxy` (Envoy-like, in 3 regions) terminates TLS, buffers the request body, and forwards it over
pooled connections to a `tagging-api` pod of its region (Go net/http, 4-8 pods per region, CPU limit 2):
the handler reads the body, starts the S3 PUT of the original (AWS SDK v2) and meanwhile decodes the
JPEG (one goroutine) and resizes it to 299x299 (rows split over GOMAXPROCS goroutines), calls TF
Serving's Predict over gRPC (server-side batching: max_batch_size 32, batch_timeout 5 ms; 2 GPU
replicas per region; TF Serving exports no spans), waits for the S3 write, writes the tags to DynamoDB
(PutItem) and answers. The phones' clocks are their own: a phone's spans carry its offset (normally
within a few hundred ms, some phones off by up to 0.9 s), so the server spans are not always inside
the client's by timestamps; durations are right. Server times are the reference. GC is never a span.

Healthy noise: link jitter, a little loss (cellular 0.15 %, Wi-Fi 0.02 %: the odd retransmission
timeout, the odd lost SYN), DNS cache misses and resolver recursions, new connections after suspensions,
older phones' slower CPUs, Go GC cycles (GOGC=100), the odd S3 503 or DynamoDB throttle retried, the
odd slow TF Serving batch.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv (`network.connection.type`, `server.address`,
`http.request.method`), instances by `service.instance.id` (the OTel operator's; an install id on the
phones), the edge's spans, tagging-api's image spans and the AWS SDK's per-attempt HTTP spans. 1: Jaeger
JSON, old semconv (`net.host.connection.type`, `net.peer.name`, `http.method`), host.name + process.pid
on the servers, no edge spans (the edge passes the trace context on), image and attempt spans. 2: Zipkin
v2, old semconv, instances are endpoints (ip:port), the edge's spans, no image or attempt spans.

Mechanisms (scenario: truth):
- `cellular-loss`: one carrier's radio network loses 3 % of packets: its phones' uploads slow down (loss
  caps TCP's rate) and wait retransmission timeouts (200 ms floor, doubling), lost SYNs wait 1 s:
  network, stage ingress, the HTTP client span, both client services (the carrier serves both).
- `background-reconnect`: an iOS release invalidates its URLSession when the app enters the
  background; users switch to the Camera between photos, so nearly every iOS action resolves,
  connects and handshakes again: network at the iOS connect span (stage ingress).
- `dns-resolver-timeout`: one carrier's DNS-over-TLS resolver frontend drops half the queries
  Android's Private DNS (opportunistic) sends it; each waits Android's 5 s timeout and is sent again:
  timeout_retry at the Android dns span, accept network.
- `cfs-gomaxprocs`: a base-image change drops the GOMAXPROCS setting: the Go runtime sizes itself to the
  node's cores (16 or 32) under a 2-core limit; a resize's goroutines run on all of them, idle Ps'
  threads spin for work at every wake-up (CPU the quota counts, ~0.3-0.45 of the work's), the GC's
  workers take every idle P; the period's quota is gone early and every goroutine of the pod waits
  for the next period:
  cpu_throttling at tagging-api's SERVER span (side: queueing, gc_pause: the GC's idle workers burn
  quota too).
- `gomemlimit-gc`: one region's pods get GOMEMLIMIT a few MB above the live heap (8 MB of headroom
  instead of GOGC's 60): under load a cycle starts as soon as the last one ends, its workers take a
  quarter of the Ps and the decoding goroutines give a third of their CPU to mark assists: gc_pause at
  tagging-api's SERVER span, that region's pods (side: queueing, compute_bound).
- `camera-upgrade`: an iOS camera update saves ~3x larger photos, uploaded as they are: the iOS upload
  grows (large_payload at the iOS HTTP client span, side network), and so do decode and resize on the
  API (large_payload at image.resize, or tagging-api's SERVER span where image spans are not exported).
- `batch-timeout-raise`: batch_timeout_micros raised from 5000 to 150000 for throughput; at this load
  no batch fills, so every Predict waits most of the timeout: queueing at the Predict client span,
  stage queue.
- `model-rollout`: a new model version loads beside the serving one in each region in turn (the old
  version's batches slow meanwhile), then takes over: the first batch of each padded batch size pays a
  warm-up of ~0.4 s: cold_start at the Predict client span (stage model_forward; side queueing).
- `s3-slowdown`: one region's originals bucket answers 503 SlowDown to a third of the PUTs (a hot date
  prefix) from 20 % of the run; the SDK retries after full-jitter waits of up to 2 s, then 4 s:
  timeout_retry at S3.PutObject, that region's pods, accept slow_dependency.
- `dynamodb-hot-partition`: a viral shared album takes 30 % of the tag writes from 15 % of the run; its
  partition throttles (ProvisionedThroughputExceeded) and the SDK backs off the same way:
  timeout_retry at DynamoDB.PutItem, accept slow_dependency.
- Two causes: `cellular-loss+dns-resolver-timeout` (one carrier's bad day: its radio network and its
  resolvers), `cfs-gomaxprocs+model-rollout` (the ML team rolls a model out while the API runs the new
  base image), `gomemlimit-gc+s3-slowdown` (a memory setting in one region, S3 throttling in another).

Truth instances: the tagging-api pods the cause acts on as the store names them; for the phones'
causes none (every phone of the platform or carrier: a population, not a set of instances).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import mobile_edge_spans as sp
from reference_pipeline.simulate.mobile_edge_api import Batcher, GoPod, Job, aws_call
from reference_pipeline.simulate.mobile_edge_net import (
    DNS_TTL_NS,
    IDLE_TIMEOUT_NS,
    connect_ns,
    dns_ns,
    download_ns,
    sessions,
    upload_ns,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Cause, TraceTable, lognormal_ms

FAMILY = "mobile-edge"
SINGLES = ("cellular-loss", "background-reconnect", "dns-resolver-timeout", "cfs-gomaxprocs", "gomemlimit-gc",
           "camera-upgrade", "batch-timeout-raise", "model-rollout", "s3-slowdown", "dynamodb-hot-partition")
PAIRS = ("cellular-loss+dns-resolver-timeout", "cfs-gomaxprocs+model-rollout", "gomemlimit-gc+s3-slowdown")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
LOSS_CARRIER, DNS_CARRIER = 0, 1
GC_REGION, S3_REGION = 0, 1
TF_REPLICAS = 2
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "instance-id", "edge": True, "internals": True,
     "pods": (6, 4, 5), "node_cores": 16, "rps": 200.0, "wifi": 0.6},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "edge": False, "internals": True,
     "pods": (5, 6, 4), "node_cores": 32, "rps": 185.0, "wifi": 0.55},
    {"fmt": "zipkin", "semconv": "old", "ident": "endpoint", "edge": True, "internals": False,
     "pods": (4, 5, 8), "node_cores": 16, "rps": 215.0, "wifi": 0.65},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["edge"], s["internals"])


def api_instances(seed: int, regions: tuple[int, ...] = (0, 1, 2)) -> tuple[str, ...]:
    s, st = setup(seed), style(seed)
    return tuple(st.label(sp.API, r, k) for r in regions for k in range(s["pods"][r]))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    st = style(seed)
    api = api_instances(seed)
    causes: dict[str, tuple[Cause, ...]] = {
        "cellular-loss": (Cause("network", "ingress", st.http_client, sp.IOS),
                          Cause("network", "ingress", st.http_client, sp.ANDROID)),
        "background-reconnect": (Cause("network", "ingress", sp.CONNECT["ios"], sp.IOS),),
        "dns-resolver-timeout": (Cause("timeout_retry", "ingress", sp.DNS["android"], sp.ANDROID,
                                       accept=("network",)),),
        "cfs-gomaxprocs": (Cause("cpu_throttling", None, st.server, sp.API, api,
                                 side=("queueing", "gc_pause")),),
        "gomemlimit-gc": (Cause("gc_pause", None, st.server, sp.API, api_instances(seed, (GC_REGION,)),
                                side=("queueing", "compute_bound")),),
        "camera-upgrade": (Cause("large_payload", "ingress", st.http_client, sp.IOS, side=("network",)),
                           Cause("large_payload", "preprocessing", st.resize_span(), sp.API, api,
                                 side=("compute_bound", "queueing"))),
        "batch-timeout-raise": (Cause("queueing", "queue", sp.PREDICT, sp.API, api),),
        "model-rollout": (Cause("cold_start", "model_forward", sp.PREDICT, sp.API, api, side=("queueing",)),),
        "s3-slowdown": (Cause("timeout_retry", "downstream", sp.S3_PUT, sp.API,
                              api_instances(seed, (S3_REGION,)), accept=("slow_dependency",)),),
        "dynamodb-hot-partition": (Cause("timeout_retry", "downstream", sp.DDB_PUT, sp.API, api,
                                         accept=("slow_dependency",)),),
    }
    return tuple(c for part in scenario.split("+") if part != "steady" for c in causes[part])


def _stream(seed: int, action: int, purpose: int) -> random.Random:
    """One action's own random stream for one purpose: a scenario that changes one step of an action
    leaves the draws of its other steps (and of every other action) as they were in steady."""
    return random.Random((seed * 1_000_003 + action) * 16 + purpose)


def _photo(rng: random.Random, bigger: bool) -> tuple[int, int, int]:
    """(bytes, width, height) of the uploaded JPEG: the app's export (~0.28 bytes per pixel)."""
    nbytes = min(4.0e6, max(0.2e6, 0.55e6 * rng.lognormvariate(0.0, 0.38)))
    growth = 2.6 * rng.lognormvariate(0.0, 0.15)
    if bigger:  # the camera's larger originals, no longer downscaled by the app
        nbytes = min(10.0e6, nbytes * growth)
    pixels = min(24.0e6 if bigger else 12.2e6, nbytes / (0.28 * rng.lognormvariate(0.0, 0.15)))
    width = int((pixels * 4 / 3) ** 0.5)
    return int(nbytes), width, int(pixels / width)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 2929)
    table = TraceTable(seed, 0x29E)
    res = sp.Resources(table, style(seed))
    phones, actions = sessions(rng, s["rps"], requests, 3, s["wifi"])
    run_ns = requests / s["rps"] * NS_PER_S
    # --- the phones and the edge: everything up to the body's arrival at a tagging-api pod -------------
    pre: list[dict[str, Any]] = []
    for n, a in enumerate(actions):
        ph = phones[a.phone]
        r_app, r_net, r_up = (_stream(seed, n, k) for k in range(3))
        loss = 0.0015 if ph.cellular else 0.0002
        if "cellular-loss" in parts and ph.cellular and ph.carrier == LOSS_CARRIER:
            loss = 0.03
        drop = 0.002
        if "dns-resolver-timeout" in parts and ph.platform == "android" and ph.cellular and (
                ph.carrier == DNS_CARRIER):
            drop = 0.5
        nbytes, width, height = _photo(r_app, "camera-upgrade" in parts and ph.platform == "ios")
        t0 = a.at
        compress = (20.0 + 2.5 * width * height / 1e6) * NS_PER_MS * ph.slow_cpu  # the app's JPEG export
        t = t0 + compress * r_app.lognormvariate(0.0, 0.2)
        if not a.first and ph.conn_until < 0:  # its session's earlier actions were before the run
            ph.conn_until = ph.dns_until = t0 + 1.0
        suspended = a.backgrounded_ns > 25 * NS_PER_S or (
            "background-reconnect" in parts and ph.platform == "ios" and a.backgrounded_ns > 0)
        dns = connect = None
        if ph.conn_until <= t0 or suspended:
            took, sent = dns_ns(r_net, ph, ph.dns_until > t, drop)
            dns = (t, t + took, sent)
            if sent:
                ph.dns_until = t + took + DNS_TTL_NS
            t = dns[1] + lognormal_ms(r_net, 0.3, 0.3)
            took, retrans = connect_ns(r_net, ph, loss)
            connect = (t, t + took, retrans)
            t = connect[1] + lognormal_ms(r_net, 0.2, 0.3)
        # a warm iOS connection keeps its congestion window; Android's kernel (Linux) restarts slow start
        # after idle, and a new connection always starts from 10 segments
        up, _timeouts = upload_ns(r_up, ph, nbytes, loss, warm=connect is None and ph.platform == "ios")
        edge_s = t + ph.rtt_ms / 2 * NS_PER_MS * r_app.lognormvariate(0.0, 0.1)
        server_s = t + up + lognormal_ms(r_app, 0.4, 0.3)  # the edge buffered the body, then forwards it
        region = ph.region
        pod = r_app.randrange(s["pods"][region])
        read = server_s + (0.2 + nbytes / 1.2e6) * NS_PER_MS  # the body over the region's network
        pixels = width * height
        job = Job(read + lognormal_ms(r_app, 0.05, 0.3), 20.0 * pixels * r_app.lognormvariate(0.0, 0.1),
                  16.0 * pixels * r_app.lognormvariate(0.0, 0.1))
        pre.append({"a": a, "ph": ph, "loss": loss, "nbytes": nbytes, "w": width, "h": height, "dns": dns,
                    "connect": connect, "http_s": t, "edge_s": edge_s, "server_s": server_s, "read": read,
                    "region": region, "pod": pod, "edge": r_app.randrange(2), "job": job})
        ph.conn_until = t0 + IDLE_TIMEOUT_NS  # the next action (seconds later) finds it open unless suspended
    # --- the pods' CPU: decode + resize under GOMAXPROCS, the CFS quota and the GC ----------------------
    stalls = {}
    horizon = max(p["read"] for p in pre) + 10 * NS_PER_S
    for region, count in enumerate(s["pods"]):
        for k in range(count):
            procs = s["node_cores"] if "cfs-gomaxprocs" in parts else 2
            tight = "gomemlimit-gc" in parts and region == GC_REGION
            # live heap ~60 MB: GOGC=100 lets it grow 60 MB between cycles, a tight GOMEMLIMIT 8 MB; a
            # request allocates ~5.5 bytes per pixel (YCbCr planes, the RGBA the resize reads, the body)
            gopod = GoPod(procs, 2 * 100 * NS_PER_MS, 8e6 if tight else 60e6, 40 * NS_PER_MS,
                          alloc_per_ns=5.5 / 36.0, assist=0.35 if tight else 0.25, fanout=float(procs),
                          spin=min(0.45, 0.03 * (procs - 2)))
            jobs = [p["job"] for p in pre if p["region"] == region and p["pod"] == k]
            stalls[region, k] = gopod.run(random.Random(seed * 7919 + region * 97 + k), jobs, horizon)
    # --- TF Serving: each region's replicas and their batchers -------------------------------------------
    timeout = (200.0 if "batch-timeout-raise" in parts else 5.0) * NS_PER_MS
    calls: dict[tuple[int, int], list[int]] = {}
    arrive: list[float] = []
    for n, p in enumerate(pre):
        st = stalls[p["region"], p["pod"]]
        r_tf = _stream(seed, n, 6)
        p["predict_s"] = st.settle(p["job"].end + lognormal_ms(r_tf, 0.8, 0.3))  # the tensor marshalled
        arrive.append(p["predict_s"] + lognormal_ms(r_tf, 0.35, 0.3))
        calls.setdefault((p["region"], r_tf.randrange(TF_REPLICAS)), []).append(n)
    served: dict[int, tuple[float, float, int, int]] = {}
    for (region, replica), members in sorted(calls.items()):
        rollout = None
        if "model-rollout" in parts:
            load = (0.15 + 0.22 * region + 0.05 * replica) * run_ns
            rollout = (load, load + 0.08 * run_ns)
        out = Batcher(timeout, rollout=rollout).run(random.Random(seed * 7919 + region * 13 + replica + 500),
                                                    [arrive[n] for n in members])
        served.update(zip(members, out, strict=True))
    # --- the rest of each request, then its spans --------------------------------------------------------
    for n, p in enumerate(pre):
        ph, region, st = p["ph"], p["region"], stalls[p["region"], p["pod"]]
        rng, r_aws = _stream(seed, n, 4), _stream(seed, n, 5)
        _start, b_end, _size, version = served[n]
        predict_e = st.settle(b_end + lognormal_ms(rng, 0.4, 0.3))
        s3_fail = 0.002
        if "s3-slowdown" in parts and region == S3_REGION and p["read"] > 0.2 * run_ns:
            s3_fail = 0.35
        s3_ms = 14.0 + p["nbytes"] / 60e3
        s3_s = st.settle(p["read"] + lognormal_ms(rng, 0.1, 0.3))
        s3 = aws_call(r_aws, s3_s, s3_ms, s3_fail, 0.8 * s3_ms, st, (200, 503))
        joined = st.settle(max(predict_e, s3[-1].end) + lognormal_ms(rng, 0.05, 0.3))
        ddb = None
        status = 503
        if s3[-1].status == 200:
            hot = "dynamodb-hot-partition" in parts and joined > 0.15 * run_ns and r_aws.random() < 0.3
            ddb = aws_call(r_aws, joined, 5.5, 0.65 if hot else 0.001, 4.0, st, (200, 400))
            status = 200 if ddb[-1].status == 200 else 500
            joined = ddb[-1].end
        server_e = st.settle(joined + lognormal_ms(rng, 0.3, 0.3))
        edge_e = server_e + lognormal_ms(rng, 0.3, 0.3)
        tags = rng.randint(3, 12)
        http_e = edge_e + download_ns(rng, ph, 400 + 60 * tags, p["loss"])
        parse_s = http_e + lognormal_ms(rng, 0.3, 0.3)
        parse_e = parse_s + (2.0 + 0.3 * tags) * NS_PER_MS * ph.slow_cpu * rng.lognormvariate(0.0, 0.2)
        job = p["job"]
        sp.write_action(table, res, sp.Timeline(
            ph, region, p["edge"], p["pod"], (p["a"].at, parse_e + lognormal_ms(rng, 1.0, 0.4)), p["dns"],
            p["connect"], (p["http_s"], http_e), (p["edge_s"], edge_e), (p["server_s"], server_e),
            (job.start, job.decoded), (job.decoded, job.end), s3, (p["predict_s"], predict_e), version,
            ddb, (parse_s, parse_e), p["nbytes"], p["w"], p["h"], tags, status))
    return table
