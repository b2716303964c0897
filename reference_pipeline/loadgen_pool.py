"""The load spread over several processes, for services faster than one Python load generator.

One load-generator process (httpx, a CLIENT span per request) spends ~4 ms of CPU per request: on a
GPU machine it saturates a core at ~250 requests/s before the service does (bench/RESULTS.md,
"Reference pipeline (GPU)"). `drive_in_processes` splits the load shape into `n` shares — the
closed loop's clients divided among the processes, or the open loop's rate divided (independent
Poisson streams of rate r/n add up to one of rate r, bursts included) — runs each share in its own
process with its own tracer writing its own file, and merges what they measured. The share files are
concatenated into the one trace file the caller asked for.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import shutil
import time
from dataclasses import replace
from pathlib import Path

from reference_pipeline import span_model as sm
from reference_pipeline.loadgen import LoadResult, run_load
from reference_pipeline.scenarios import LoadShape
from reference_pipeline.tracing import make_provider
from tailscope.cli.signals import die_with_parent

SEED_STRIDE = 1_000  # each share draws its own arrivals and payloads


def split_shape(shape: LoadShape, n: int) -> list[LoadShape]:
    """`n` shares that together make `shape`: clients divided as evenly as they go, or the rate."""
    if n < 1:
        raise ValueError(f"load processes must be at least 1, got {n}")
    if shape.concurrency > 0:
        if shape.concurrency < n:
            raise ValueError(f"{shape.concurrency} closed-loop clients cannot be split over {n} processes")
        base, extra = divmod(shape.concurrency, n)
        return [replace(shape, concurrency=base + (i < extra)) for i in range(n)]
    return [replace(shape, rps=shape.rps / n) for _ in range(n)]


def merge_results(results: list[LoadResult]) -> LoadResult:
    """One result for the whole load: latencies pooled, counts added, the longest share's wall time."""
    merged = LoadResult()
    for result in results:
        merged.latencies_ms += result.latencies_ms
        merged.statuses += result.statuses
        merged.sent += result.sent
        merged.errors += result.errors
        merged.wall_s = max(merged.wall_s, result.wall_s)
        merged.cpu_s += result.cpu_s
    return merged


def _drive_share(
    url: str,
    shape: LoadShape,
    setup: dict,
    part: str,
    otlp_endpoint: str | None,
    n_entities: int,
    seed: int,
) -> LoadResult:
    """One share of the load, in a worker process, traced to its own file."""
    provider = make_provider(sm.LOADGEN_SERVICE_NAME, setup, Path(part), otlp_endpoint)
    try:
        tracer = provider.get_tracer("tailscope.loadgen")
        result = asyncio.run(run_load(url, shape, tracer, n_entities=n_entities, seed=seed))
    finally:
        provider.shutdown()
    result.cpu_s = time.process_time()  # the whole worker process: imports and span export too
    return result


def drive_in_processes(
    url: str,
    shape: LoadShape,
    n: int,
    *,
    setup: dict,
    part: Path,
    otlp_endpoint: str | None,
    n_entities: int,
    seed: int,
) -> LoadResult:
    """Run `shape` as `n` processes' shares; their spans end up in `part`, their results merged."""
    shares = split_shape(shape, n)
    share_parts = [part.with_name(f"{part.stem}-{i}{part.suffix}") for i in range(n)]
    context = multiprocessing.get_context("spawn")  # no forked copy of the caller's threads or tracer
    jobs = [
        (url, share, setup, str(p), otlp_endpoint, n_entities, seed + SEED_STRIDE * i)
        for i, (share, p) in enumerate(zip(shares, share_parts, strict=True))
    ]
    # leaving the block terminates the workers: at once when the caller is stopped (SIGTERM, Ctrl-C
    # raise here), after their results otherwise
    with context.Pool(n, initializer=die_with_parent) as pool:
        results = pool.starmap(_drive_share, jobs)
    with open(part, "ab") as out:
        for share_part in share_parts:
            if share_part.exists():
                with open(share_part, "rb") as src:
                    shutil.copyfileobj(src, out)
                share_part.unlink()
    return merge_results(results)
