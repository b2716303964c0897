"""How long `tailscope diagnose` takes per million spans of the run (targets: 2 s, issue 25; 1 s up to
10 M spans and 20 s for 100 M, issue 29, on the 2-core dev machine).

    .venv/bin/python bench/bench_diagnose.py [--spans 1000000] [--scenario gc-pressure] [--repeat 3]
        [--max-spans N (the diagnosis' sample; 0: read the whole run)] [--tiles K] [--data DIR]

`--tiles K` builds the store as K copies of a simulated run of spans/K spans laid one after another
in time (a 100 M-span run in minutes; simulating one takes hours).

Builds (once, cached under bench/data/) a store with one simulated run of about `--spans` spans,
then times the diagnosis end to end as the CLI runs it: the read of the run's spans into numpy
(`load_frame`: SQL, Arrow, dictionary encoding, request structure, exclusive times, stage mapping)
and every detector (`diagnose_frame`). Prints the best of `--repeat` runs, per phase.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tailscope.analysis.diagnosis import diagnose_frame  # noqa: E402
from tailscope.analysis.diagnosis.load import load_frame  # noqa: E402
from tailscope.analysis.diagnosis.sample import DEFAULT_MAX_SPANS  # noqa: E402
from tailscope.store.duckdb.derive import refresh_run  # noqa: E402
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


def tile(db: Path, source: Path, tiles: int) -> None:
    """A store of `tiles` copies of `source`'s run laid one after another in time (trace ids suffixed,
    span and GC event times shifted): a run `tiles` times longer from the same generator, in minutes
    where simulating it would take hours."""
    partial = db.with_name(db.name + ".partial")
    partial.unlink(missing_ok=True)
    with Store(partial).writer() as writer:
        conn = writer.cursor()
        conn.execute(f"ATTACH '{source}' AS src (READ_ONLY)")
        first, last = conn.execute(
            "SELECT epoch_ns(min(Timestamp)), epoch_ns(max(Timestamp)) FROM src.otel_traces"
        ).fetchone()
        period = (last - first) // 1_000_000_000 * 1_000_000_000 + 1_000_000_000
        columns = [
            row[0] for row in conn.execute("SELECT name FROM pragma_table_info('otel_traces')").fetchall()
        ]
        shifted = {
            "Timestamp": "make_timestamp_ns(epoch_ns(Timestamp) + $shift)",
            "TraceId": "TraceId || $suffix",
            "Events": (
                "CASE WHEN Events = '[]' THEN Events ELSE to_json(list_transform(from_json(Events, "
                '\'[{"Timestamp": "BIGINT", "Name": "VARCHAR", "Attributes": "JSON"}]\'), '
                'lambda e: struct_pack("Timestamp" := e.Timestamp + $shift, "Name" := e.Name, '
                '"Attributes" := e.Attributes)))::VARCHAR END'
            ),
        }
        select = ", ".join(shifted.get(c, c) for c in columns)
        for k in range(tiles):
            conn.execute(
                f"INSERT INTO otel_traces SELECT {select} FROM src.otel_traces",
                {"shift": k * period, "suffix": f"{k:04x}"},
            )
            print(f"tile {k + 1}/{tiles}", flush=True)
        conn.execute("DETACH src")
    partial.rename(db)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--scenario", default="gc-pressure")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--tiles",
        type=int,
        default=1,
        help="build the store as this many copies of a --spans/--tiles run in a row",
    )
    parser.add_argument(
        "--max-spans", type=int, default=None, help="the diagnosis' sample size (0: whole run)"
    )
    parser.add_argument(
        "--target", type=float, default=2.0, help="seconds per 1 M spans of the run (exit 1 above)"
    )
    parser.add_argument("--data", type=Path, default=ROOT / "bench" / "data", help="where stores are cached")
    args = parser.parse_args(argv)
    tiled = f"_x{args.tiles}" if args.tiles > 1 else ""
    db = args.data / f"diagnose_{args.scenario}_{args.spans}{tiled}.duckdb"
    db.parent.mkdir(parents=True, exist_ok=True)
    if not db.exists():
        started = time.perf_counter()
        if args.tiles > 1:
            source = args.data / f"diagnose_{args.scenario}_{args.spans // args.tiles}.duckdb"
            if not source.exists():
                build(source, args.scenario, args.spans // args.tiles)
            tile(db, source, args.tiles)
        else:
            build(db, args.scenario, args.spans)
        print(f"built {db.name} in {time.perf_counter() - started:.1f} s", flush=True)
    with Store(db).writer() as conn:
        # a store cached by an older tailscope is converted to this schema first, and a run built
        # without its derived rows (build and tile write spans only) derived once, as ingest would:
        # the diagnosis reads what a derive records (derive_state: whether the run has phase spans)
        if not conn.execute("SELECT count(*) FROM derive_state WHERE RunLabel = 'bench'").fetchall()[0][0]:
            started = time.perf_counter()
            conn.begin()
            refresh_run(conn, "bench", whole=True)
            conn.commit()
            print(f"derived the run in {time.perf_counter() - started:.1f} s", flush=True)
    best = None
    for _ in range(args.repeat):
        with Store(db).reading() as conn:
            t0, c0 = time.perf_counter(), time.process_time()
            frame = load_frame(
                conn, "bench", max_spans=DEFAULT_MAX_SPANS if args.max_spans is None else args.max_spans
            )
            t1, c1 = time.perf_counter(), time.process_time()
            result = diagnose_frame(frame)
            t2, c2 = time.perf_counter(), time.process_time()
        times = (t1 - t0, t2 - t1, t2 - t0, c1 - c0, c2 - c1)
        best = times if best is None or times[2] < best[2] else best
    load_s, detect_s, total_s, load_cpu, detect_cpu = best
    run_spans = frame.sample.spans_total if frame.sample is not None else len(frame)
    per_million = total_s / run_spans * 1e6
    top = result.findings[0] if result.findings else None
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    read = f", {len(frame):,} read ({len(frame.sample.starts)} windows)" if frame.sample is not None else ""
    print(
        f"{run_spans:,} spans{read}, {result.requests:,} requests ({args.scenario}): load {load_s:.2f} s "
        f"(CPU {load_cpu:.2f} s) + detectors {detect_s:.2f} s (CPU {detect_cpu:.2f} s) = {total_s:.2f} s -> "
        f"{per_million:.3f} s per 1 M spans; peak RSS {peak_mb:,.0f} MB; top finding "
        f"{top.pattern if top else None} {top.confidence if top else 0:.2f}"
        + (f"; sampling {result.sampling}" if result.sampling else "")
    )
    return 0 if per_million <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
