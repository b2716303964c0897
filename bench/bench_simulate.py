"""Simulator throughput: spans per second written as OTLP/JSON lines, as Jaeger JSON, as SpanColumns.

  .venv/bin/python bench/bench_simulate.py [--requests 50000] [--scenario gc-pressure]

Wall time and CPU time (this process) are both reported: on a shared machine the CPU figure is the
steadier one. The model alone (no spans rendered) is timed separately.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from reference_pipeline.simulate.api import simulate_to_file
from reference_pipeline.simulate.config import scenario_config
from reference_pipeline.simulate.model import simulate
from reference_pipeline.simulate.spans import SpanSource
from reference_pipeline.simulate.writers import span_columns


def timed(label: str, spans: int, work) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"| {label} | {spans:,} | {wall:.2f} s | {spans / wall:,.0f} | {spans / cpu:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--scenario", default="gc-pressure")
    args = parser.parse_args()
    config = scenario_config(args.scenario, args.requests, seed=1)
    source = SpanSource(simulate(config))
    spans = source.span_count()
    print(f"{args.scenario}, {args.requests:,} requests, {spans:,} spans\n")
    print("| what | spans | wall | spans/s (wall) | spans/s (CPU) |\n|---|---|---|---|---|")
    timed("model only (stage timings, no spans)", spans, lambda: simulate(config))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.jsonl"
        timed("simulate_to_file, OTLP/JSON lines", spans,
              lambda: simulate_to_file(out, args.scenario, args.requests, seed=1))
        small = max(args.requests // 5, 1)
        small_spans = SpanSource(simulate(scenario_config(args.scenario, small, seed=1))).span_count()
        timed("simulate_to_file, Jaeger UI JSON", small_spans,
              lambda: simulate_to_file(Path(tmp) / "run.json", args.scenario, small, seed=1, fmt="jaeger"))
    timed("SpanColumns batches (model + rendering)", spans,
          lambda: sum(len(batch) for batch in span_columns(SpanSource(simulate(config)))))


if __name__ == "__main__":
    main()
