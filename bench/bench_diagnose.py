"""How long `tailscope diagnose` takes per million spans (target: 5 s on the 2-core dev machine).

    .venv/bin/python bench/bench_diagnose.py [--spans 1000000] [--scenario gc-pressure] [--repeat 3]

Builds (once, cached under bench/data/) a store with one simulated run of about `--spans` spans,
then times the diagnosis end to end as the CLI runs it: the read of the run's spans into numpy
(`load_frame`: SQL, Arrow, dictionary encoding, request structure, exclusive times, stage mapping)
and every detector (`diagnose_frame`). Prints the best of `--repeat` runs, per phase.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tailscope.analysis.diagnosis import diagnose_frame  # noqa: E402
from tailscope.analysis.diagnosis.load import load_frame  # noqa: E402
from tailscope.store.duckdb.store import DuckDBStore as Store  # noqa: E402

SPANS_PER_REQUEST = 13


def build(db: Path, scenario: str, spans: int) -> None:
    from reference_pipeline.simulate.api import simulate_columns

    requests = max(100, spans // SPANS_PER_REQUEST)
    partial = db.with_name(db.name + ".partial")
    partial.unlink(missing_ok=True)
    with Store(partial).writer() as writer:
        conn = writer.cursor()
        for batch in simulate_columns(scenario, requests, 1, batch_requests=8192):
            conn.register("bench_batch", batch.to_arrow())
            conn.execute("INSERT INTO otel_traces SELECT *, 'bench' FROM bench_batch").fetchall()
            conn.unregister("bench_batch")
    partial.rename(db)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--scenario", default="gc-pressure")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=ROOT / "bench" / "data", help="where stores are cached")
    args = parser.parse_args(argv)
    db = args.data / f"diagnose_{args.scenario}_{args.spans}.duckdb"
    db.parent.mkdir(parents=True, exist_ok=True)
    if not db.exists():
        started = time.perf_counter()
        build(db, args.scenario, args.spans)
        print(f"built {db.name} in {time.perf_counter() - started:.1f} s", flush=True)
    best = None
    for _ in range(args.repeat):
        with Store(db).reading() as conn:
            t0 = time.perf_counter()
            frame = load_frame(conn, "bench")
            t1 = time.perf_counter()
            result = diagnose_frame(frame)
            t2 = time.perf_counter()
        times = (t1 - t0, t2 - t1, t2 - t0)
        best = times if best is None or times[2] < best[2] else best
    load_s, detect_s, total_s = best
    n = len(frame)
    per_million = total_s / n * 1e6
    top = result.findings[0] if result.findings else None
    print(
        f"{n:,} spans, {result.requests:,} requests ({args.scenario}): load {load_s:.2f} s + detectors "
        f"{detect_s:.2f} s = {total_s:.2f} s -> {per_million:.2f} s per 1 M spans; top finding "
        f"{top.pattern if top else None} {top.confidence if top else 0:.2f}"
    )
    return 0 if per_million <= 5.0 else 1


if __name__ == "__main__":
    sys.exit(main())
