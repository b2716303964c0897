"""The traces the engine-parity tests load into DuckDB and into chdb: hand-built traces whose
branches run in parallel or overlap (every path of the span tree, the sweep included), serving
frameworks' phases (vLLM, Triton, TGI), a queue-fed batch consumer with span links, and simulated
runs of the reference pipeline."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from analysis_spans import S, add_trace

from ingest.columns import SpanColumns

# run label -> (scenario, requests, seed, options)
SIMULATED: dict[str, tuple[str, int, int, dict[str, Any]]] = {
    "steady": ("steady", 600, 1, {}),
    "burst": ("burst", 600, 2, {}),
    "lock": ("lock-contention", 600, 3, {}),
    "gateway": ("steady", 400, 4, {"topology": "gateway"}),
    "alt-slow": ("slow-downstream", 400, 5, {"naming": "alt"}),
}


# runs derived on ClickHouse in time windows of this many spans (hand: 6 windows, burst: 4, frameworks:
# 2). Each window costs ~0.9 s of CPU (a dozen chdb statements): burst's 16 windows of 500 spans took a
# third of the store pair's build; its 3 inner edges in a bursty run check the same cut as 15 did, and
# the hand run's 5 edges fall between traces of every shape.
WINDOWED = {"hand": 50, "burst": 2000, "frameworks": 100}


# runtime GC pauses as span events, durations under the conventions diagnosis_gc_events.sql reads
GC_EVENTS = [
    [(10, "v8js.gc", {"v8js.gc.type": "major", "v8js.gc.duration": "0.0125"})],
    [(12, "jvm.gc", {"jvm.gc.duration": "0.2"})],
    [(14, "gc", {"gc.duration_ms": "3.5"}), (60, "python.gc", {"gc.duration_ns": "700000"})],
    [(20, "runtime.gc", {"runtime.gc.pause_us": "1500"})],  # a key naming a pause, its unit the suffix
    [],
]


def _hand_built() -> list[pa.Table]:
    """Traces whose branches run in parallel or overlap, nest, outlast their parent, or carry an
    explicit stage: every path of the span tree, the sweep included."""
    cols = SpanColumns()
    for i in range(40):
        jitter = (i % 7) * 1.5
        add_trace(
            cols,
            S(
                "POST /predict",
                0,
                100 + jitter,
                kind="Server",
                attrs={"http.route": "/predict", "http.status_code": "503" if i % 9 == 0 else "200"},
                events=GC_EVENTS[i % len(GC_EVENTS)],
                children=[
                    S("feature lookup", 5, 30, kind="Client", attrs={"db.system": "redis"}),
                    S("embed", 20, 45 + jitter),  # overlaps the lookup
                    S("model.forward", 40, 90, children=[S("onnx run", 45, 95 + jitter)]),  # outlasts
                    S("custom", 60, 70, stage="serialization"),
                    S("helper", 92, 99),  # no rule: a direct child of the root
                ],
            ),
            i + 1,
            offset_ms=i * 50,
        )
    return [cols.to_arrow()]


def _frameworks() -> list[pa.Table]:
    """Serving frameworks' self-reported phases (the phase rules): vLLM duration attributes, Triton
    events on one span and over a model span and its compute child, TGI text durations whose
    children cover part of them, and a vLLM span nested under a gateway's client call."""
    from test_phases import triton_otel_request, triton_request, vllm_request

    cols = SpanColumns()
    for i in range(12):
        add_trace(cols, vllm_request(0.002 * i, 0.025 + 0.001 * i, 0.040), 100 + i, offset_ms=i * 300)
        add_trace(cols, triton_request(queue_ms=1.0 + i, infer_ms=20.0 + 0.5 * i), 200 + i, offset_ms=i * 300)
        top = triton_otel_request(output_start_ms=33 - i * 0.25)
        add_trace(cols, top, 300 + i, offset_ms=i * 300)
        tgi = {"validation_time": f"{2 + i * 0.1:.1f}ms", "queue_time": "11ms", "inference_time": "0.03s"}
        generate = S(
            "generate",
            0,
            43,
            attrs=tgi,
            children=[S("validate", 0, 2), S("queued", 3, 13), S("infer", 13, 21), S("infer", 21, 43)],
        )
        add_trace(
            cols, S("POST /generate", 0, 44, kind="Server", children=[generate]), 400 + i, offset_ms=i * 300
        )
        vllm = vllm_request(0.003, 0.03, 0.05)
        vllm.start, vllm.end = vllm.start + 6, vllm.end + 6
        gateway = S(
            "POST /v1/completions",
            0,
            120,
            kind="Server",
            children=[S("vllm call", 5, 115, kind="Client", children=[vllm])],
        )
        add_trace(cols, gateway, 500 + i, offset_ms=i * 300)
    return [cols.to_arrow()]


def _async_built() -> list[pa.Table]:
    """Queue-fed work (tests/mechanism_async.py): an API publishes, a batch consumer reads up to 16
    messages a trace, its CONSUMER span linking to each message's PRODUCER span; bursts back it up."""
    from tests.mechanism_async import async_builder, to_columns

    builder, _ = async_builder(5, style="batch", burst=True, seconds=8.0)
    # ids of its own (the hand-built run counts from 1 too): the Gantt test finds a trace's run from
    # its id; runs sharing trace ids are tests/test_clickhouse_shared_ids.py's
    return [to_columns(builder, trace_base=0xA5 << 112).to_arrow()]


def _simulated(scenario: str, requests: int, seed: int, options: dict[str, Any]) -> list[pa.Table]:
    from reference_pipeline.simulate.api import simulate_columns

    naming = options.pop("naming", "reference")
    batches = simulate_columns(scenario, requests, seed, naming=naming, **options)
    return [batch.to_arrow() for batch in batches]
