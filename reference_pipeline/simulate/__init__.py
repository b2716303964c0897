"""A discrete-event simulator of the reference pipeline: the same spans, fast, without PyTorch.

`simulate_to_file(out, scenario, requests, seed, ...)` writes a run as OTLP/JSON lines (or Jaeger UI
JSON) and returns a summary; `simulate_columns(scenario, requests, seed, ...)` yields SpanColumns
batches for big test data without files. Modules, in the order data flows:

- config: the knobs (SimConfig), the scenarios that turn them, hardware setups
- processes: arrivals, load balancing, server processes and their GC pauses (process vs wall time)
- model: the per-process stage simulation (cache, batcher, lock) → per-request timings
- naming, spans: span names/attributes (reference or alt) and chunks of spans with hashed ids
- gateway: the `gateway` topology, the same model rendered as another service's traces (an API
  gateway root, a gRPC call into a model server that holds the work, deeper nesting, no queue or lock
  span, host + pid instances, GC as `GC pause` events or none): a held-out family for accuracy checks
- family, region, readthrough, queue_worker: three more held-out families on a shared FamilySource
  (a caller in another region wrapping the server; a read-through cache whose misses add a fallback
  call; request-reply through a message queue to a worker); `a+b` scenarios plant two causes
- writers: OTLP/JSON lines, Jaeger UI JSON, SpanColumns
- blind (blind.py, trace_table.py, edge_gateway, bff_fanout, pool_retry, throttled_embedder,
  kafka_scorer): five families written from real systems' mechanics by a writer who had not read the
  diagnosis (issue 25), each with its own discrete-event model (timeouts and retries, a connection
  pool, CPU quotas, payload sizes, autoscaling, a message broker), truth per planted cause, and OTLP /
  Jaeger / Zipkin v2 output; kafka_scorer is the untouched, held-out one
- api, cli: the Python API and `tailscope pipeline simulate`

This package imports only lightweight modules at import time (the CLI's --help stays fast); the API
names below load their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "simulate_columns": "api", "simulate_to_file": "api",
    "SCENARIOS": "config", "NAMINGS": "config", "FORMATS": "config", "HARDWARE": "config",
    "TOPOLOGIES": "config",
    "SimConfig": "config", "scenario_config": "config",
    "simulate": "model", "Simulation": "model",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
