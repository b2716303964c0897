"""The simulator's Python API: spans straight into SpanColumns, or a trace file with a summary."""

from __future__ import annotations

import gzip
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ingest.columns import SpanColumns
from reference_pipeline.simulate.config import FORMATS, scenario_config
from reference_pipeline.simulate.family import FamilySource
from reference_pipeline.simulate.gateway import GatewaySource
from reference_pipeline.simulate.model import Simulation, simulate
from reference_pipeline.simulate.spans import SpanSource
from reference_pipeline.simulate.writers import jaeger_json, otlp_json_lines, span_columns


def simulate_columns(scenario: str = "steady", requests: int = 4000, seed: int = 0, *,
                     naming: str = "reference", batch_requests: int = 4096, **options: Any
                     ) -> Iterator[SpanColumns]:
    """Simulated spans as SpanColumns batches (about 13 spans per request), no file in between.

    `options` are `scenario_config` keywords: `hardware`, and any SimConfig field (rps, workers,
    topology, gc_events, ...).
    """
    source = span_source(simulate(scenario_config(scenario, requests, seed, **options)), naming)
    yield from span_columns(source, batch_requests)  # type: ignore[arg-type]


def _family(topology: str) -> type[FamilySource]:
    if topology == "region":
        from reference_pipeline.simulate.region import RegionSource

        return RegionSource
    if topology == "readthrough":
        from reference_pipeline.simulate.readthrough import ReadThroughSource

        return ReadThroughSource
    from reference_pipeline.simulate.queue_worker import QueueWorkerSource

    return QueueWorkerSource


def span_source(sim: Simulation, naming: str = "reference", run_label: str | None = None
                ) -> SpanSource | GatewaySource | FamilySource:
    """The spans of a simulation in its topology: the pipeline's tree under `naming`, or another
    family's own names (`naming` and `run_label` apply to the pipeline topology only)."""
    if sim.config.topology == "gateway":
        return GatewaySource(sim)
    if sim.config.topology != "pipeline":
        return _family(sim.config.topology)(sim)
    return SpanSource(sim, naming, run_label=run_label)


def _open_for_writing(path: Path, suffix: str):
    """Plain, or compressed by the final name's suffix (.gz / .zst): the ingest reads all three."""
    if suffix == ".gz":
        return gzip.open(path, "wb", compresslevel=1)
    if suffix == ".zst":
        import zstandard

        return zstandard.ZstdCompressor(level=3).stream_writer(open(path, "wb"), closefd=True)
    return open(path, "wb", buffering=1 << 20)


def simulate_to_file(out: str | os.PathLike[str], scenario: str = "steady", requests: int = 4000,
                     seed: int = 0, *, naming: str = "reference", fmt: str = "otlp-json",
                     run_label: str | None = None, **options: Any) -> dict[str, Any]:
    """Write one simulated run to `out` (atomically: a temporary file renamed at the end).

    Returns a summary: what was written, how fast, and the run's headline numbers.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    started = time.perf_counter()
    config = scenario_config(scenario, requests, seed, **options)
    sim = simulate(config)
    source = span_source(sim, naming, run_label)
    path = Path(out)
    partial = path.with_name(path.name + ".partial")
    pieces = otlp_json_lines(source) if fmt == "otlp-json" else jaeger_json(source)  # type: ignore[arg-type]
    try:
        with _open_for_writing(partial, path.suffix) as stream:
            for piece in pieces:
                stream.write(piece)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    seconds = time.perf_counter() - started
    spans = source.span_count()
    return {
        "scenario": scenario, "topology": config.topology, "naming": source.naming, "format": fmt,
        "out": str(path), "seed": seed,
        "run_label": run_label, "requests": requests, "spans": spans, "bytes": path.stat().st_size,
        "seconds": round(seconds, 3), "spans_per_second": round(spans / seconds) if seconds > 0 else None,
        **run_figures(sim),
    }


def run_figures(sim: Simulation) -> dict[str, Any]:
    """Headline numbers of a simulated run, from the model's own arrays."""
    start, end = sim.times["client"]
    latency_ms = (end - start) / 1e6
    span_s = (start.max() - start.min()) / 1e9 if sim.n > 1 else 0.0
    return {
        "simulated_seconds": round(float(span_s), 3),
        "offered_rps": round(sim.n / span_s, 1) if span_s > 0 else None,
        "capacity_rps": round(sim.config.capacity_rps(), 1),
        "p50_ms": round(float(np.percentile(latency_ms, 50)), 2),
        "p99_ms": round(float(np.percentile(latency_ms, 99)), 2),
        "cache_hit_rate": round(float(sim.cache_hit.mean()), 4),
        "mean_batch_size": round(float(sim.batch_size.mean()), 2),
        "gc_events": sum(len(events) for events in sim.gc_events.values()),
    }
