"""What phase rules cost the derive: a run without any framework phases, and an LLM server's run.

    .venv/bin/python bench/bench_phases.py [--spans 1000000] [--llm-requests 200000] [--repeat 3]

1. The cached 1 M-span gc-pressure store of bench/bench_diagnose.py (no phase-carrying span): the
   whole-run span walk (span_tree.sql, requests output) with no phase rules and with the defaults,
   interleaved `--repeat` times; the difference is the phases' substring scan.
2. A vLLM-shaped run (reference_pipeline/simulate/llm_server.py, one span per request, every span
   a carrier): the same walk with and without the rules, and how many phase spans it makes.
Prints the best of each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from machine_info import machine  # noqa: E402

from tailscope.analysis.phases import default_phase_rules  # noqa: E402
from tailscope.analysis.stages import default_rules  # noqa: E402
from tailscope.store.duckdb.connection import connect_reader  # noqa: E402
from tailscope.store.duckdb.statements import phase_spans_query, span_tree_query  # noqa: E402
from tailscope.store.duckdb.store import DuckDBStore as Store  # noqa: E402


def walk_seconds(db: Path, run: str, repeat: int) -> dict[str, float]:
    best = {"without phase rules": float("inf"), "with the default phase rules": float("inf")}
    with connect_reader(db) as conn:
        for _ in range(repeat):
            for label, rules in (
                ("without phase rules", []),
                ("with the default phase rules", default_phase_rules()),
            ):
                text, params = span_tree_query(
                    default_rules(), "run", run, output="requests", phase_rules=rules
                )
                started = time.perf_counter()
                conn.execute(text, params).fetchall()
                best[label] = min(best[label], time.perf_counter() - started)
        text, params = phase_spans_query(default_phase_rules(), "run", run)
        best["phase spans made"] = float(len(conn.execute(text, params).fetchall()))
    return best


def llm_store(tmp: Path, requests: int) -> Path:
    from reference_pipeline.simulate.llm_server import LlmServerConfig, simulate_llm_server
    from tailscope.store.duckdb.writer import append_batch

    db = tmp / "llm.duckdb"
    cols = simulate_llm_server(LlmServerConfig(requests=requests, seed=1, scenario="steady"))
    with Store(db).writer() as conn:
        append_batch(conn, "llm", cols.to_arrow())
    return db


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--llm-requests", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    plain = ROOT / "bench" / "data" / f"diagnose_gc-pressure_{args.spans}.duckdb"
    if not plain.exists():
        print(f"{plain} is missing: run bench/bench_diagnose.py --spans {args.spans} first", file=sys.stderr)
        return 2
    for name, (db, run) in {
        f"{args.spans:,} spans, no framework phases": (plain, "bench"),
    }.items():
        print(name)
        for label, value in walk_seconds(db, run, args.repeat).items():
            print(f"  {label}: {value:.0f}" if label.startswith("phase") else f"  {label}: {value:.2f} s")
    with tempfile.TemporaryDirectory() as tmp:
        db = llm_store(Path(tmp), args.llm_requests)
        print(f"{args.llm_requests:,} vLLM-shaped requests (one span each)")
        for label, value in walk_seconds(db, "llm", args.repeat).items():
            print(f"  {label}: {value:.0f}" if label.startswith("phase") else f"  {label}: {value:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
