"""Jaeger UI JSON and Zipkin v2 JSON: decode and whole-ingest speed, with the decoders as they are
(the cyclic collector paused while they parse and walk, span_json.collector_paused) and with the
pause taken out (the code before), alternated in one process so both see the same load.

    .venv/bin/python bench/bench_json_decoders.py [--requests 2000] [--repeat 3]

The documents are a blind family's runs (recsys-ranker, steady: seed 1 writes Jaeger, seed 2
Zipkin), written once into a temporary folder. Figures are CPU seconds of this process (the
steadier figure on a shared machine), the best of --repeat, and spans per CPU second.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machine_info import machine  # noqa: E402

from ingest import jaeger, zipkin  # noqa: E402
from ingest.loader import load_paths  # noqa: E402
from reference_pipeline.simulate.blind import SUFFIX, write_run  # noqa: E402

PAUSED = {jaeger: jaeger.collector_paused, zipkin: zipkin.collector_paused}


def pause(on: bool) -> None:
    for module, paused in PAUSED.items():
        module.collector_paused = paused if on else contextlib.nullcontext


def best_cpu(work, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        cpu = time.process_time()
        work()
        times.append(time.process_time() - cpu)
    return min(times)


def measure(folder: Path, seed: int, module, requests: int, repeat: int) -> None:
    """One format's rows: its decode and its whole ingest, before and now."""
    written = write_run(folder / f"run{seed}.tmp", "recsys-ranker", "steady", requests, seed)
    path = Path(written["out"]).with_suffix(SUFFIX[written["format"]])
    Path(written["out"]).rename(path)
    data, spans = path.read_bytes(), written["spans"]
    loads = iter(range(10**6))

    def decode() -> None:
        assert sum(len(b) for b in module.decode(io.BytesIO(data), path.name)) == spans

    def ingest() -> None:
        load_paths([path], folder / f"s{next(loads)}.duckdb", "bench")

    for what, work in (("decode (parse + walk)", decode), ("ingest (load_paths, DuckDB)", ingest)):
        figures: dict[bool, list[float]] = {True: [], False: []}
        for on in (False, True, False, True):  # alternated: the same load for both
            pause(on)
            figures[on].append(best_cpu(work, repeat))
        pause(True)
        before, after = min(figures[False]), min(figures[True])
        print(
            f"| {written['format']} | {spans:,} | {len(data) / 1e6:.1f} | {what} | "
            f"{before:.3f} s ({spans / before:,.0f} spans/s) | "
            f"{after:.3f} s ({spans / after:,.0f} spans/s) | {before / after:.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    print(f"command: bench/bench_json_decoders.py --requests {args.requests} --repeat {args.repeat}\n")
    print("| format | spans | MB | what | collector on (before) | paused (now) | speed-up |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for seed, module in ((1, jaeger), (2, zipkin)):
            measure(Path(folder), seed, module, args.requests, args.repeat)


if __name__ == "__main__":
    main()
