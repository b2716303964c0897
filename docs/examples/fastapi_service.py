"""A FastAPI inference service instrumented for tailscope: copy what you need.

    pip install tailscope fastapi uvicorn opentelemetry-exporter-otlp-proto-http \
        opentelemetry-instrumentation-fastapi
    tailscope collect &                                  # OTLP/HTTP receiver on 127.0.0.1:4318
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=scorer \
        uvicorn fastapi_service:app --port 8000
    curl -s localhost:8000/predict -d '{"entity_id": "e1", "text": "a short review"}' \
        -H 'content-type: application/json'
    tailscope diagnose --run live

The service keeps its own OpenTelemetry set-up (provider, exporter, FastAPI's instrumentation, which
makes the request's SERVER span); tailscope adds stage spans, GC pause events and lock waits to it.
The model is a tiny bag-of-words scorer in pure Python so the example runs anywhere; the feature
store is a deliberately simulated remote dependency (it waits, and says so).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic import BaseModel

from tailscope import instrument as ts

# --- the service's own OpenTelemetry set-up (endpoint from OTEL_EXPORTER_OTLP_ENDPOINT) -------------
provider = TracerProvider(resource=Resource.create())  # service.name from OTEL_SERVICE_NAME
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
ts.install()  # GC pauses become `python.gc` events on the spans they stretched

DIM = 64
WEIGHTS = [math.sin(i * 0.7) for i in range(DIM)]
CACHE: dict[str, list[float]] = {}
SCORE_LOG: list[float] = []
SCORE_LOCK = ts.traced_lock(threading.Lock(), "score_log")  # every wait for it becomes a span


class PredictRequest(BaseModel):
    entity_id: str
    text: str


async def feature_store_get(entity_id: str) -> list[float]:
    """A deliberately simulated remote feature store: a network round trip of ~15 ms."""
    await asyncio.sleep(0.015)
    digest = hashlib.blake2b(entity_id.encode(), digest_size=16).digest()
    return [b / 255 for b in digest]


async def hydrate(entity_id: str) -> list[float]:
    hit = entity_id in CACHE
    with ts.stage("feature_hydration", "features.get", cache_hit=hit):
        if not hit:
            CACHE[entity_id] = await feature_store_get(entity_id)
        return CACHE[entity_id]


@ts.stage("preprocessing", "tokenize")
def tokenize(text: str) -> list[int]:
    return [int.from_bytes(hashlib.blake2b(w.encode(), digest_size=2).digest()) % DIM for w in text.split()]


@ts.stage("model_forward", "model.forward")
def forward(tokens: list[int], features: list[float]) -> float:
    counts = [0.0] * DIM
    for token in tokens:
        counts[token] += 1.0
    hidden = [math.tanh(c * w) for c, w in zip(counts, WEIGHTS, strict=True)]
    logit = sum(hidden) + sum(features) / len(features)
    return 1 / (1 + math.exp(-logit))


@asynccontextmanager
async def lifespan(app: FastAPI):
    ts.freeze_after_startup()  # what start-up loaded is never traversed by the collector again
    yield
    provider.shutdown()  # flush every span before the process ends


app = FastAPI(lifespan=lifespan)
FastAPIInstrumentor.instrument_app(app, tracer_provider=provider)


@app.post("/predict")
async def predict(request: PredictRequest) -> dict[str, float | str]:
    with ts.stage("parsing", "validate"):
        if not request.text.strip():
            raise HTTPException(status_code=422, detail="empty text")
    features = await hydrate(request.entity_id)
    tokens = tokenize(request.text)
    score = forward(tokens, features)
    with ts.stage("postprocessing", "record_score"), SCORE_LOCK:
        SCORE_LOG.append(score)
    return {"entity_id": request.entity_id, "score": round(score, 6)}
