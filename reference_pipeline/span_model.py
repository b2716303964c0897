"""The span structure of one request to the reference pipeline.

Both the real service (`reference_pipeline.service`) and the discrete-event simulator
(`reference_pipeline.simulate`) emit exactly this structure, so the dashboard, the diagnosis and the
tests see the same shape from either. One trace per request:

    loadgen  "POST /v1/predict"        CLIENT  (service tailscope-loadgen; client-observed latency)
    └─ api   "POST /v1/predict"        SERVER  stage=ingress   (the request root; its self time is
       │                                                        reported as `unattributed`)
       ├─ "http.receive"               INTERNAL stage=ingress  (read and size-check the body)
       ├─ "parse_request"              INTERNAL stage=parsing  (JSON decode + validation)
       ├─ "feature_hydration"          INTERNAL stage=feature_hydration  attrs cache.hit, feature.key
       │   └─ "feature_store.get"      CLIENT   stage=feature_hydration  db.system=sqlite|redis (misses only)
       ├─ "tokenize"                   INTERNAL stage=preprocessing      attrs text.chars, tokens.count
       ├─ "batch.queue_wait"           INTERNAL stage=queue   attrs batch.size, batch.queue_depth
       ├─ "model.forward"              INTERNAL stage=model_forward  attrs batch.size, device, dtype
       │                                        (one forward serves a whole batch: every request of the
       │                                         batch gets its own span with the batch's start/end and
       │                                         a link to the batch's first request)
       ├─ "postprocess"                INTERNAL stage=postprocessing
       │   └─ "lock.wait"              INTERNAL stage=postprocessing (only where a lock is taken)
       ├─ "downstream.call"            CLIENT   stage=downstream  http.request.method, server.address,
       │   └─ downstream "POST /enrich" SERVER  (service tailscope-downstream)
       └─ "serialize_response"         INTERNAL stage=serialization

Runtime signal: each Python GC pause is recorded as a span event `python.gc` on every request root
span in flight at that moment, with attributes gc.generation, gc.duration_ns, gc.collected
(generation-0 collections under 1 ms are left out: see reference_pipeline.tracing).
"""

from __future__ import annotations

SERVICE_NAME = "tailscope-reference"
LOADGEN_SERVICE_NAME = "tailscope-loadgen"
DOWNSTREAM_SERVICE_NAME = "tailscope-downstream"
ROUTE = "/v1/predict"
ROOT_SPAN = "POST /v1/predict"
DOWNSTREAM_ROUTE = "/enrich"
# a sampling service's response header: "1" when it kept the request's spans (the client keeps its own)
SAMPLED_HEADER = "tailscope-sampled"

RECEIVE = "http.receive"
PARSE = "parse_request"
HYDRATE = "feature_hydration"
STORE_GET = "feature_store.get"
TOKENIZE = "tokenize"
QUEUE_WAIT = "batch.queue_wait"
FORWARD = "model.forward"
POSTPROCESS = "postprocess"
LOCK_WAIT = "lock.wait"
DOWNSTREAM = "downstream.call"
SERIALIZE = "serialize_response"

# span name -> canonical stage (the value of the tailscope.stage attribute it carries)
STAGE_OF: dict[str, str] = {
    ROOT_SPAN: "ingress",
    RECEIVE: "ingress",
    PARSE: "parsing",
    HYDRATE: "feature_hydration",
    STORE_GET: "feature_hydration",
    TOKENIZE: "preprocessing",
    QUEUE_WAIT: "queue",
    FORWARD: "model_forward",
    POSTPROCESS: "postprocessing",
    LOCK_WAIT: "postprocessing",
    DOWNSTREAM: "downstream",
    SERIALIZE: "serialization",
}

GC_EVENT = "python.gc"

# Resource attributes describing the setup (beside service.name, host.name, service.instance.id,
# process.pid, telemetry.sdk.*). The runs table keeps them so runs can be compared.
RESOURCE_KEYS = (
    "tailscope.scenario",
    "tailscope.device",
    "tailscope.gpu.name",
    "tailscope.torch.version",
    "tailscope.dtype",
    "tailscope.model.weights",  # "pretrained" | "random-init" | "simulated"
    "tailscope.model.executor",  # "torchscript" | "eager" | "compile" | "cuda-graphs" | "simulated"
    "tailscope.batch.max_size",
    "tailscope.batch.max_wait_ms",
    "tailscope.workers",  # model-worker threads in one service process
    "tailscope.tracing.mode",  # "spans" | "light" (reference_pipeline.request_path)
    "tailscope.sample.rate",  # head-sampling rate (1: every request traced)
    "tailscope.frontends",  # front-end processes (0: one process does everything)
)
# the simulator adds "tailscope.instances": how many server processes (instances) it simulates

SCENARIOS = (
    "steady",
    "burst",
    "gc-pressure",
    "lock-contention",
    "cold-cache",
    "key-expiry",
    "slow-downstream",
    "cold-start",
)
