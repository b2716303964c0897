"""Generate demo traces of every scenario, load them into a demo store, open the dashboard.

Each scenario of the reference pipeline is simulated (no PyTorch needed) and loaded as its own run
(demo-steady, demo-burst, ...), through the same front door as any trace file; two hardware setups
(demo-cpu-fp32, demo-gpu-bf16) at the same load feed the compare view, and demo-foreign-names is a
run whose services and spans are named the way another team would name them. Re-running reuses the
runs already in the store: only missing ones are generated (--fresh starts over).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_DB = "tailscope-demo.duckdb"
DEFAULT_REQUESTS = 2000
HARDWARE_RPS = 300.0  # both hardware runs see the same load, so they compare like for like


@dataclass(frozen=True)
class DemoRun:
    label: str
    scenario: str
    seed: int
    options: dict = field(default_factory=dict)
    naming: str = "reference"


def demo_runs() -> list[DemoRun]:
    from reference_pipeline.simulate.config import SCENARIOS

    runs = [DemoRun(f"demo-{scenario}", scenario, seed) for seed, scenario in enumerate(SCENARIOS, start=1)]
    runs += [
        DemoRun("demo-cpu-fp32", "steady", 101, {"hardware": "cpu-fp32", "rps": HARDWARE_RPS}),
        DemoRun("demo-gpu-bf16", "steady", 102, {"hardware": "gpu-bf16", "rps": HARDWARE_RPS}),
        DemoRun("demo-foreign-names", "slow-downstream", 103, naming="alt"),
    ]
    return runs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", metavar="FILE", default=DEFAULT_DB, help=f"demo store (default ./{DEFAULT_DB})"
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        help="load the demo runs into this store instead (a ClickHouse one: chdb:///folder or "
        "clickhouse://...; the dashboard is not opened there, the reports are)",
    )
    parser.add_argument("--port", type=int, default=8501, help="dashboard port (default 8501)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--requests",
        type=int,
        default=DEFAULT_REQUESTS,
        help=f"simulated requests per run (default {DEFAULT_REQUESTS})",
    )
    parser.add_argument(
        "--no-serve", action="store_true", help="load the demo data, do not open the dashboard"
    )
    parser.add_argument("--fresh", action="store_true", help="delete the demo store first and regenerate")


def load_demo(db: Path | Any, requests: int, out=None) -> list[str]:
    """Generate and load every demo run missing from `db` (a DuckDB file, or a Store); returns the
    labels it loaded. Progress goes to `out` (default stdout)."""
    from ingest.loader import load_paths
    from reference_pipeline.simulate.api import simulate_to_file
    from tailscope.analysis.runs import runs_with_spans
    from tailscope.store.engine import open_store

    out = out or sys.stdout
    store = open_store(db) if isinstance(db, str | Path) else db
    with store.reading() as reader:
        have = set(runs_with_spans(reader))
    where = store.name

    def load(path: Path, label: str) -> Any:
        return load_paths([path], store, label)

    missing = [run for run in demo_runs() if run.label not in have]
    if not missing:
        print(
            f"tailscope demo: reusing the {len(have)} runs already in {where} (--fresh regenerates)", file=out
        )
        return []
    print(
        f"tailscope demo: simulating {len(missing)} runs ({requests} requests each) into {where}",
        file=out,
        flush=True,
    )
    loaded = []
    with tempfile.TemporaryDirectory(prefix="tailscope-demo-") as tmp:
        for run in missing:
            started = time.perf_counter()
            path = Path(tmp) / f"{run.label}.jsonl"
            summary = simulate_to_file(
                path, run.scenario, requests, run.seed, naming=run.naming, run_label=run.label, **run.options
            )
            result = load(path, run.label)
            path.unlink()
            if result.failed:
                raise RuntimeError(f"loading {run.label} failed: {result.failed[0].error}")
            loaded.append(run.label)
            print(
                f"  {run.label:22s} {run.scenario:16s} {result.spans:>7} spans  {result.traces:>5} traces  "
                f"client p50 {summary['p50_ms']:7.1f} ms  p99 {summary['p99_ms']:7.1f} ms  "
                f"({time.perf_counter() - started:.1f} s)",
                file=out,
                flush=True,
            )
    return loaded


def run(args: argparse.Namespace) -> int:
    from tailscope.store.engine import open_store
    from tailscope.store.errors import UnsupportedError
    from tailscope.store.url import parse_store_url

    if args.requests < 100:
        print("tailscope demo: --requests must be at least 100", file=sys.stderr)
        return 2
    try:
        store = open_store(parse_store_url(args.store or args.db))
    except ValueError as error:
        print(f"tailscope demo: {error}", file=sys.stderr)
        return 2
    if store.file is not None:
        store = open_store(store.file.resolve())  # named by its full path, here and to the dashboard
    if args.fresh:
        try:
            store.delete()
        except UnsupportedError:
            print(
                "tailscope demo: --fresh deletes a DuckDB demo file; it does not clear a ClickHouse store",
                file=sys.stderr,
            )
            return 2
    store.prepare(writing=True)
    started = time.perf_counter()
    loaded = load_demo(store, args.requests)
    if loaded:
        print(f"tailscope demo: loaded {len(loaded)} runs in {time.perf_counter() - started:.1f} s")
    if store.file is not None:
        where = argparse.Namespace(db=str(store.file), store=str(store.file))
        return _open_dashboard(args, where, f"--db {store.file}")
    shown = store.name  # a URL never shows the password
    print(f"tailscope demo: read the runs with e.g.: tailscope waterfall --store {shown} --run demo-steady")
    store.close()  # a chdb folder is held by one process at a time: the dashboard's, from here on
    return _open_dashboard(args, argparse.Namespace(db=None, store=args.store), f"--store {shown}")


def _open_dashboard(args: argparse.Namespace, where: argparse.Namespace, shown: str) -> int:
    """The dashboard on the demo's store (`where`: serve's db and store), or how to open it: with
    --no-serve, or where the dashboard is not part of this build. `shown`: the store as an option."""
    if args.no_serve:
        print(f"tailscope demo: open the dashboard with: tailscope serve {shown}")
        return 0
    try:
        from tailscope.cli import serve_cmd
    except ImportError:
        print(f"tailscope demo: the dashboard is not part of this build; run: tailscope serve {shown}")
        return 0
    return serve_cmd.run(argparse.Namespace(**vars(where), port=args.port, host=args.host))
