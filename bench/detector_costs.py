"""What some of the diagnosis' helpers cost inside a whole diagnosis of blind-family runs.

    .venv/bin/python bench/detector_costs.py [--runs llm-agent:steady:0,llm-agent:steady:1]
        [--cache /tmp/acccache] [--repeat 3]

Each run is loaded as bench/accuracy.py loads it (bench/run_cache.py), read whole into a frame, and
diagnosed `--repeat` times; prints the best diagnosis time and the time spent in each timed helper
(the calls of that diagnosis): miss_mix.tail_miss_shares and extra_calls.waited_before (cache_miss),
size_spread.tail_of_size (slow_dependency).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run_cache import loaded_run  # noqa: E402
from tailscope.analysis.diagnosis import (  # noqa: E402
    cache_miss,
    diagnose_frame,
    extra_calls,
    miss_mix,
    size_spread,
    slow_dependency,
)
from tailscope.analysis.diagnosis.load import load_frame  # noqa: E402
from tailscope.analysis.source import reading  # noqa: E402
from tailscope.store.duckdb.store import DuckDBStore  # noqa: E402

TIMED = ((miss_mix, "tail_miss_shares", cache_miss), (extra_calls, "waited_before", cache_miss),
         (size_spread, "tail_of_size", slow_dependency))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="llm-agent:steady:0,llm-agent:steady:1,llm-agent:replica-lag:2")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/acccache"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    spent: dict[str, float] = {}

    def timed(fn, name):
        def inner(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t
        return inner

    for module, name, user in TIMED:
        setattr(user, name, timed(getattr(module, name), name))
    for run in args.runs.split(","):
        family, scenario, seed = run.split(":")
        run_db = loaded_run(family, scenario, 2000, int(seed), args.cache)
        with run_db as (db, _summary), reading(DuckDBStore(db)) as conn:
            frame = load_frame(conn, "run", max_spans=0)
        best, parts = float("inf"), {}
        for _ in range(args.repeat):
            spent.clear()
            t = time.perf_counter()
            diagnose_frame(frame)
            if time.perf_counter() - t < best:
                best, parts = time.perf_counter() - t, dict(spent)
        print(f"{family} {scenario} s{seed}: {len(frame):,} spans, diagnosis {best:.2f} s "
              f"(best of {args.repeat}); " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in parts.items()),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
