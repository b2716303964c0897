"""The store's floor under a file ingest: everything but the decode, against the targets' budgets.

Decodes the file once, untimed, into the Arrow batches the loader stores (the fast decoder, in this
process), then times the loader's store side on them in a fresh DuckDB file, as `tailscope ingest`
runs it (`ingest.loader.store_batches` inside one transaction, then the commit): append, duplicate
check, runs row, derived rows, checkpoint. Decoding is free here, so no ingest of that file through
this store can finish faster than this. In the same run it times the baselines of issue 12's
targets: bare `orjson.loads` of every line (JSON lines, 1.5x budget) or bare
`TracesData.ParseFromString` of every message (protobuf, 4x budget), and prints the floor as a multiple.

    .venv/bin/python bench/ingest_floor.py bench/data/otlp_1000000.jsonl
    .venv/bin/python bench/ingest_floor.py bench/data/otlp_1000000.pb
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import loader, otlp_fast, otlp_proto_fast  # noqa: E402
from tailscope.store.duckdb.connection import connect_writer  # noqa: E402

BUDGETS = {
    ".jsonl": ("orjson.loads of every line", 1.5),
    ".pb": ("TracesData.ParseFromString of every message", 4.0),
}


# bench_ingest.py's own bare decode, in a process that imports nothing else (this one's imports make
# orjson's cyclic GC passes ~1.7x longer): the baseline its ratios use.
BASELINE = """
import sys
from pathlib import Path
import bench_ingest
path = Path(sys.argv[1])
if path.suffix == ".jsonl":
    print(bench_ingest.bare_json_decode(path)["orjson.loads (gc on)"])
else:
    print(bench_ingest.bare_proto_parse(path))
"""


def baseline(path: Path) -> float:
    """Seconds of the bare decode the target is measured against (bench_ingest.py's)."""
    done = subprocess.run(
        [sys.executable, "-c", BASELINE, str(path.resolve())],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent,
    )
    return float(done.stdout)


def decoded(path: Path) -> list:
    decode = otlp_fast.decode if path.suffix == ".jsonl" else otlp_proto_fast.decode
    with open(path, "rb", buffering=1 << 20) as f:
        return list(decode(f, str(path), None))


def store_side(batches: list, folder: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, spans stored) of store_batches + commit into a fresh file."""
    with connect_writer(folder / "floor.duckdb") as conn:
        conn.execute(loader.sql.load("ingest_writer_memory"))
        cpu, started = time.process_time(), time.perf_counter()
        conn.begin()
        stats = loader.store_batches(conn, "floor", iter(batches), ["floor"])
        conn.commit()
        return time.perf_counter() - started, time.process_time() - cpu, stats.spans_stored


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--repeat", type=int, default=3, help="store-side runs (best is reported)")
    args = parser.parse_args()
    what, factor = BUDGETS[args.path.suffix]
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"date:    {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    base = baseline(args.path)
    batches = decoded(args.path)
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as folder:
            runs.append(store_side(batches, Path(folder)))
    wall, cpu, spans = min(runs)
    print(f"{args.path.name}: {spans:,} spans stored")
    print(f"  bare {what}: {base:.2f} s; target {factor}x = {base * factor:.2f} s for the whole ingest")
    print(f"  store side alone, decoding free (best of {args.repeat}): {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"  = {wall / base:.2f}x the bare decode before a single span is decoded")


if __name__ == "__main__":
    main()
