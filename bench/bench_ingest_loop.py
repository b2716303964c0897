"""Many `tailscope ingest` runs of one parallel-decoded file, each into a fresh store: does any hang?

Issue 30: `tailscope ingest` of a 33 MB OTLP JSON lines file hung 2 times in 40 on a loaded 2-core
machine (a decode worker blocked on a queue lock its dead sibling held, `Pool.terminate()` joining
it for ever). This runs the real CLI in a loop, one fresh store per run, on DuckDB and on chdb, and
kills any run still going after --timeout seconds (a hang). Reported per engine: runs, hangs, other
failures, and the wall time of a run (median, p99, max).

By default the file is small (--lines x --per-line spans) and the CLI's thresholds are lowered in
its process (every file decoded on the workers, in --block-bytes blocks), so that each run starts
and stops the decode pool and sends it many blocks in about a second. `--real` uses the CLI as
shipped (16 MiB threshold, 8 MiB blocks) on a file over 16 MiB.

    python bench/bench_ingest_loop.py                      # 200 runs on each engine
    python bench/bench_ingest_loop.py --runs 40 --real --engines duckdb
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from machine_info import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

LOWERED = (
    "import ingest.parallel as p, ingest.loader as l;"
    "p.PARALLEL_MIN_BYTES = l.PARALLEL_MIN_BYTES = 1;"
    "p.otlp_fast.BLOCK_BYTES = {block};"
)


def command(block_bytes: int, real: bool) -> list[str]:
    prelude = "" if real else LOWERED.format(block=block_bytes)
    return [sys.executable, "-c", prelude + "from tailscope.cli.main import entrypoint; entrypoint()"]


def one_run(cli: list[str], path: Path, store: str, timeout: float) -> tuple[str, float, str]:
    """('ok' | 'hang' | 'failed', seconds, the last stderr line)."""
    started = time.monotonic()
    where = ["--db", store] if store.endswith(".duckdb") else ["--store", store]
    process = subprocess.Popen(
        [*cli, "ingest", str(path), *where, "--run", "loop"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, err = process.communicate()
        return "hang", time.monotonic() - started, (err.strip().splitlines() or [""])[-1]
    seconds = time.monotonic() - started
    outcome = "ok" if process.returncode == 0 else "failed"
    return outcome, seconds, (err.strip().splitlines() or [""])[-1] if outcome != "ok" else ""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--engines", default="duckdb,chdb")
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--per-line", type=int, default=20)
    parser.add_argument("--block-bytes", type=int, default=1 << 16)
    parser.add_argument("--real", action="store_true", help="the CLI's own thresholds, a file over 16 MiB")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds before a run counts as hung")
    args = parser.parse_args()
    from test_crash_safety import big_jsonl

    print(machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="ingest-loop-") as folder:
        path = Path(folder) / "traces.jsonl"
        lines = max(args.lines, 200) if args.real else args.lines
        per_line = 100 if args.real else args.per_line
        spans = big_jsonl(path, lines=lines, per_line=per_line)
        size = path.stat().st_size
        how = "the CLI as shipped" if args.real else f"lowered thresholds, {args.block_bytes:,}-byte blocks"
        print(f"file: {size / 2**20:.1f} MiB, {spans:,} spans; {how}")
        cli = command(args.block_bytes, args.real)
        report = {}
        for engine in args.engines.split(","):
            outcomes: Counter[str] = Counter()
            seconds: list[float] = []
            errors: Counter[str] = Counter()
            for run in range(args.runs):
                store = (
                    str(Path(folder) / f"{engine}-{run}.duckdb")
                    if engine == "duckdb"
                    else (f"chdb://{Path(folder) / f'{engine}-{run}'}")
                )
                outcome, took, error = one_run(cli, path, store, args.timeout)
                outcomes[outcome] += 1
                seconds.append(took)
                if error:
                    errors[error] += 1
                subprocess.run(["rm", "-rf", store.removeprefix("chdb://")], check=False)
                if (run + 1) % 25 == 0:
                    print(
                        f"  {engine}: {run + 1} runs, {dict(outcomes)}, load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
            seconds.sort()
            report[engine] = {
                "runs": args.runs,
                "ok": outcomes["ok"],
                "hangs": outcomes["hang"],
                "failed": outcomes["failed"],
                "median_s": round(statistics.median(seconds), 2),
                "p99_s": round(seconds[min(len(seconds) - 1, int(0.99 * len(seconds)))], 2),
                "max_s": round(seconds[-1], 2),
                "errors": dict(errors.most_common(5)),
            }
            print(json.dumps({engine: report[engine]}), flush=True)
    print(machine())


if __name__ == "__main__":
    main()
