"""The load spread over several processes, for services faster than one Python load generator.

One load-generator process (httpx, a CLIENT span per request) spends ~4 ms of CPU per request: on a
GPU machine it saturates a core at ~250 requests/s before the service does (bench/RESULTS.md,
"Reference pipeline (GPU)"). `drive_in_processes` splits the load shape into `n` shares — the
closed loop's clients divided among the processes, or the open loop's rate divided (independent
Poisson streams of rate r/n add up to one of rate r, bursts included) — runs each share in its own
process (`python -m reference_pipeline.loadgen_pool`, like the service: it does not depend on how
the calling process was started) with its own tracer writing its own file, and merges what they
measured. The share files are concatenated into the one trace file the caller asked for. A worker
that fails is reported with its exit code and the end of its output; stopping the caller (SIGTERM,
Ctrl-C) ends the workers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from reference_pipeline import span_model as sm
from reference_pipeline.children import child_env
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


def _worker_command(
    url: str, shape: LoadShape, setup: dict, part: Path, result: Path, **options
) -> list[str]:
    job = {"url": url, "shape": asdict(shape), "setup": setup, "part": str(part), **options}
    return [sys.executable, "-m", "reference_pipeline.loadgen_pool", json.dumps(job), str(result)]


def _stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _result_of(index: int, worker: subprocess.Popen[bytes], log: Path, result: Path) -> LoadResult:
    if worker.wait() != 0 or not result.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"load process {index} exited with {worker.returncode}:\n{tail}")
    return LoadResult(**json.loads(result.read_text()))


def _share_files(part: Path, index: int) -> tuple[Path, Path, Path]:
    """Beside `part`: a share's trace file, its result (JSON) and its output log."""
    stem = f"{part.stem}-{index}"
    return (
        part.with_name(stem + part.suffix),
        part.with_name(stem + ".result.json"),
        part.with_name(stem + ".log"),
    )


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
    files = [_share_files(part, i) for i in range(n)]
    env = child_env()
    workers: list[subprocess.Popen[bytes]] = []
    try:
        for i, (share, (trace_file, result_file, log_file)) in enumerate(
            zip(split_shape(shape, n), files, strict=True)
        ):
            job = {"otlp_endpoint": otlp_endpoint, "n_entities": n_entities, "seed": seed + SEED_STRIDE * i}
            command = _worker_command(url, share, setup, trace_file, result_file, **job)
            with open(log_file, "wb") as log:
                workers.append(
                    subprocess.Popen(
                        command, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent
                    )
                )
        results = [_result_of(i, w, f[2], f[1]) for i, (w, f) in enumerate(zip(workers, files, strict=True))]
        with open(part, "ab") as out:
            for trace_file, _, _ in files:
                if trace_file.exists():
                    with open(trace_file, "rb") as src:
                        shutil.copyfileobj(src, out)
    finally:
        _stop(workers)
        for leftover in (path for trio in files for path in trio):
            leftover.unlink(missing_ok=True)
    return merge_results(results)


def drive_here(
    url: str,
    shape: LoadShape,
    *,
    setup: dict,
    part: Path,
    otlp_endpoint: str | None,
    n_entities: int,
    seed: int,
    cpu_from: float | None = None,
) -> LoadResult:
    """The load in this process, its client spans traced to `part`; its CPU counted from `cpu_from`
    (process time; None: from this call)."""
    started = time.process_time() if cpu_from is None else cpu_from
    # a sampling service says per response whether it kept the trace; the client span follows it
    rate = float(setup.get("tailscope.sample.rate") or 1.0)
    provider = make_provider(sm.LOADGEN_SERVICE_NAME, setup, part, otlp_endpoint, sample_rate=rate)
    try:
        tracer = provider.get_tracer("tailscope.loadgen")
        result = asyncio.run(run_load(url, shape, tracer, n_entities=n_entities, seed=seed))
    finally:
        provider.shutdown()
    result.cpu_s = time.process_time() - started
    return result


def _drive_share(job: dict) -> LoadResult:
    """One share of the load, in a worker process: its CPU is the whole process's (imports too)."""
    shape = LoadShape(**{**job["shape"], "bursts": [tuple(b) for b in job["shape"]["bursts"]]})
    return drive_here(
        job["url"],
        shape,
        setup=job["setup"],
        part=Path(job["part"]),
        otlp_endpoint=job["otlp_endpoint"],
        n_entities=job["n_entities"],
        seed=job["seed"],
        cpu_from=0.0,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference_pipeline.loadgen_pool")
    parser.add_argument("job", help="the share as JSON (drive_in_processes writes it)")
    parser.add_argument("result", type=Path, help="where to write the share's LoadResult as JSON")
    args = parser.parse_args(argv)
    result = _drive_share(json.loads(args.job))
    scratch = args.result.with_suffix(".tmp")
    scratch.write_text(json.dumps(asdict(result)))
    scratch.replace(args.result)  # whole or absent
    return 0


if __name__ == "__main__":
    from reference_pipeline.serving import run_until_stopped

    run_until_stopped(main)
