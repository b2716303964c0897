"""Where a view's time goes: each view of one run, best of N after a warm-up, with the wall and CPU
time of every statement it ran on the DuckDB connection (bench/RESULTS.md, "Scale: the stage
breakdown from the derive's SpanTimes").

    PYTHONPATH=. .venv/bin/python bench/bench_view_statements.py STORE.duckdb RUN \
        [--views breakdown breakdown_p90 tail gantt heatmap] [--repeat 3]

Run it with another checkout's tailscope (PYTHONPATH=that checkout) on a copy of the same store
for an A/B. CPU is the process's (every DuckDB thread)."""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Callable
from typing import Any


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class TimedConnection:
    """A DuckDB connection that adds each statement's wall and CPU time to `stats`."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.stats: dict[str, list[float]] = {}

    def execute(self, text: str, *params: Any) -> Any:
        cpu0, wall0 = cpu_s(), time.perf_counter()
        result = self.conn.execute(text, *params)
        key = " ".join(text.split())[:70]
        entry = self.stats.setdefault(key, [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += time.perf_counter() - wall0
        entry[2] += cpu_s() - cpu0
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("run")
    parser.add_argument(
        "--views", nargs="+", default=["breakdown", "breakdown_p90", "tail", "gantt", "heatmap"]
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from tailscope.analysis import Filter, heatmap, slowest_traces, stage_breakdown, tail_vs_body, trace_gantt
    from tailscope.store.duckdb.store import DuckDBStore

    with DuckDBStore(args.store).reading() as reader:
        timed = TimedConnection(reader.conn)
        reader.conn = timed
        one = Filter(run=args.run)
        trace_id = slowest_traces(reader, one, 1)["trace_id"][0]
        views: dict[str, Callable[[], object]] = {
            "breakdown": lambda: stage_breakdown(reader, one, "p99"),
            "breakdown_p90": lambda: stage_breakdown(reader, one, "p90"),
            "tail": lambda: tail_vs_body(reader, one),
            "gantt": lambda: trace_gantt(reader, trace_id, args.run),
            "heatmap": lambda: heatmap(reader, one),
        }
        for name in args.views:
            views[name]()  # warm-up
            best: tuple[float, float, dict[str, list[float]]] | None = None
            for _ in range(args.repeat):
                timed.stats = {}
                cpu0, wall0 = cpu_s(), time.perf_counter()
                views[name]()
                wall, cpu = time.perf_counter() - wall0, cpu_s() - cpu0
                if best is None or cpu < best[1]:
                    best = (wall, cpu, timed.stats)
            assert best is not None
            load = os.getloadavg()[0]
            print(f"{name:14s} wall {best[0] * 1000:6.0f} ms  cpu {best[1] * 1000:6.0f} ms  load {load:.1f}")
            for key, (count, wall, cpu) in sorted(best[2].items(), key=lambda kv: -kv[1][2])[:6]:
                print(f"    {count:.0f}x wall {wall * 1000:6.0f} cpu {cpu * 1000:6.0f}  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
