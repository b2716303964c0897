"""DuckDB vs chdb on the same simulated trace file: ingest, derive, the dashboard's view queries, diagnosis.

    PYTHONPATH=. .venv/bin/python bench/bench_clickhouse.py [--requests 77000] [--work /tmp/bench_ch]

One OTLP JSON-lines file of the reference pipeline's steady scenario (about 13 spans per request:
77,000 requests ~ 1 M spans), written once (not timed). Then, for each engine (wall seconds):
- ingest: `tailscope ingest` on that file (decode, store, derive the run's requests), and for chdb the
  derive alone again (ch_write.refresh_run);
- views: overview, waterfall p99 (bands, shares and stage percentiles), compare against itself
  (bootstrap 1000), heatmap, slowest traces, tail vs body, LLM latency, stage mapping (the sample
  of 2000 traces), the p99 stage breakdown, the slowest trace's Gantt, each the best of 3 after a warm-up
  (`--only WORD`: the views whose name contains it; `--engine`: one engine);
- diagnose: the run's diagnosis (load + detectors), best of 2.
`--reuse` times the views on the stores already in --work (no file written, no ingest);
`--reuse-file` keeps an existing trace file in the work folder; `--ingest-only N` times only the
ingest, N times per engine, alternately. Prints one line per figure. Keep it modest: 2 shared cores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine_info import cpu_seconds
from tailscope.analysis import (
    Filter,
    compare,
    heatmap,
    llm_latency,
    overview,
    slowest_traces,
    stage_breakdown,
    stage_mapping,
    tail_vs_body,
    trace_gantt,
    waterfall,
)
from tailscope.analysis.diagnosis import diagnose
from tailscope.cli.main import main
from tailscope.store.clickhouse import write as ch_write
from tailscope.store.engine import open_store


def best(fn: Callable[[], object], runs: int = 3) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def views_line(engine: str, name: str, fn: Callable[[], object]) -> None:
    print(f"{engine:6} {name:33} {best(fn):7.3f} s")


def views(store: object) -> dict[str, Callable[[], object]]:
    """The dashboard's views on run "r", by the name each line prints."""
    flt = Filter(run="r")
    slowest = str(slowest_traces(store, flt, limit=1)["trace_id"].iloc[0])
    return {
        "overview": lambda: overview(store, flt),
        "waterfall p99 (+ percentiles)": lambda: waterfall(store, flt, "p99"),
        "compare r r (1000 resamples)": lambda: compare(store, "r", "r"),
        "heatmap (60 time bins)": lambda: heatmap(store, flt),
        "slowest traces (50)": lambda: slowest_traces(store, flt),
        "tail vs body (p99, sample 1000)": lambda: tail_vs_body(store, flt),
        "LLM latency": lambda: llm_latency(store, flt),
        "stage mapping (2000 traces)": lambda: stage_mapping(store, "r"),
        "stage breakdown p99 (sample 500)": lambda: stage_breakdown(store, flt, "p99"),
        "trace Gantt (the slowest trace)": lambda: trace_gantt(store, slowest, run="r"),
    }


def bench(
    url: str,
    trace_file: Path,
    engine: str,
    diagnosis: bool = True,
    ingest: bool = True,
    only: list[str] | None = None,
) -> None:
    if ingest:
        seconds = timed(lambda: main(["ingest", str(trace_file), "--store", url, "--run", "r", "--json"]))
        print(f"{engine:6} ingest (decode + store + derive)   {seconds:7.2f} s")
    store = open_store(url)
    if engine == "chdb":  # as every command opens it: tailscope's tables made (a store made before
        # tailscope_span_durations existed gets its runs' durations here, once)
        print(f"{engine:6} open (tables, migration)          {timed(store.prepare):7.2f} s")
    if engine == "chdb" and ingest:
        derive = timed(lambda: ch_write.refresh_run(store, "r"))
        print(f"{engine:6} derive alone                      {derive:7.2f} s")
    for name, fn in views(store).items():
        if only is None or any(word in name for word in only):
            views_line(engine, name, fn)
    if diagnosis:
        seconds = best(lambda: diagnose(store, "r"), runs=2)
        print(f"{engine:6} diagnose                          {seconds:7.2f} s")
    close = getattr(store, "close", None)
    if close is not None:
        close()


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=77_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_ch"))
    parser.add_argument("--no-diagnose", action="store_true", help="skip the diagnosis (10 M spans)")
    parser.add_argument(
        "--reuse-file", action="store_true", help="keep the work folder's trace file when it exists"
    )
    parser.add_argument(
        "--ingest-only",
        type=int,
        metavar="N",
        help="time only the ingest, N times per engine, alternating DuckDB and chdb (fresh stores)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="time the views on the stores already in --work (no file, no ingest)",
    )
    parser.add_argument("--engine", choices=["duckdb", "chdb"], action="append", help="only this engine")
    parser.add_argument("--only", action="append", help="only the views whose name contains this")
    args = parser.parse_args()
    engines = args.engine or ["duckdb", "chdb"]
    stored = args.reuse and (args.work / "s.duckdb").exists() and (args.work / "chdb").exists()
    if stored:
        trace_file = args.work / "steady.jsonl"
    else:
        trace_file = prepare_file(args.work, args.requests, args.reuse_file)
    if args.ingest_only:
        ingest_only(args.work, trace_file, args.ingest_only)
        return
    urls = {"duckdb": str(args.work / "s.duckdb"), "chdb": f"chdb://{args.work / 'chdb'}"}
    for engine in engines:
        bench(urls[engine], trace_file, engine, not args.no_diagnose, not stored, args.only)


def prepare_file(work: Path, requests: int, reuse: bool) -> Path:
    """The steady scenario's trace file in `work` (written again unless `reuse` and it exists); the
    rest of `work` (the stores) is emptied."""
    trace_file = work / "steady.jsonl"
    if reuse and trace_file.exists():
        for child in work.iterdir():
            if child != trace_file:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        print(f"file: {trace_file} (reused), {trace_file.stat().st_size / 2**20:,.0f} MiB")
        return trace_file
    from reference_pipeline.simulate.api import simulate_to_file

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    summary = simulate_to_file(trace_file, "steady", requests, 1)
    print(f"file: {summary['spans']:,} spans, {summary['bytes'] / 2**20:,.0f} MiB")
    return trace_file


def ingest_only(work: Path, trace_file: Path, times: int) -> None:
    """`tailscope ingest` into a fresh DuckDB file and a fresh chdb folder, alternately, `times` each
    (wall and CPU seconds: the machine's 2 cores are shared, CPU seconds vary less with the load)."""
    for i in range(times):
        for engine in ("duckdb", "chdb"):
            target = work / ("s.duckdb" if engine == "duckdb" else "chdb")
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
            url = str(target) if engine == "duckdb" else f"chdb://{target}"
            argv = ["ingest", str(trace_file), "--store", url, "--run", "r", "--json"]
            spent = cpu_seconds()
            with contextlib.redirect_stdout(io.StringIO()):
                seconds = timed(lambda argv=argv: main(argv))
            spent = cpu_seconds() - spent
            print(
                f"{engine:6} ingest #{i + 1} (decode + store + derive) {seconds:7.2f} s, cpu {spent:6.2f} s"
            )


if __name__ == "__main__":
    run()
