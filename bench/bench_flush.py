"""Cost of one receiver flush as the run grows: does the work per batch depend on the batch or the run?

Each flush is what `tailscope collect`'s writer does with one queue drain: open the store for writing,
`store_batches` (append, dedupe, runs row, derived rows), commit, close. The run is first grown to
each size with large flushes, then `--probes` flushes of `--batch` spans are timed there; with
--profile, the last probe at each size is broken down by SQL statement (the floor of each part).

    python bench/bench_flush.py --sizes 0,200000,1000000 --batch 2000 --probes 5 [--profile]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.gen_otlp import START_NS, requests, to_proto
from ingest import otlp_proto_fast
from tailscope import sql
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.writer import store_batches


class Clock:
    """Where the next generated traces start: a live service's spans arrive in time order, so each
    flush's spans start after the last flush's (row groups of older spans then lie outside a
    flush's time window)."""

    now = START_NS


def batches(total: int, per_request: int, seed: int) -> list[Any]:
    """Requests of about `per_request` spans, `total` spans in all (distinct ids per seed), decoded as
    the receiver decodes protobuf bodies; their traces start where the last batches' ended."""
    out = []
    for request in requests(total, per_request, seed, start_ns=Clock.now):
        Clock.now = max(
            Clock.now,
            *(
                int(span["startTimeUnixNano"])
                for rs in request["resourceSpans"]
                for ss in rs["scopeSpans"]
                for span in ss["spans"]
            ),
        )
        decoded = otlp_proto_fast.decode_request(to_proto(request).SerializeToString())
        assert decoded is not None, "the generated request should take the fast path"
        out.append(decoded)
    return out


class Timed:
    """A connection whose statements are timed by name (the tailscope/sql file, else its first words)."""

    def __init__(self, conn: Any, book: dict[str, float]) -> None:
        self.conn, self.book = conn, book
        self.names = {sql.load(p.stem): p.stem for p in Path(sql.__file__).parent.glob("*.sql")}

    def execute(self, text: str, *params: Any) -> Any:
        started = time.perf_counter()
        result = self.conn.execute(text, *params)
        name = self.names.get(text) or " ".join(text.split()[:4])
        self.book[name] += time.perf_counter() - started
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def flush(db: Path, run: str, columns: list[Any], book: dict[str, float] | None = None) -> float:
    """One writer transaction as the receiver makes it; seconds."""
    started = time.perf_counter()
    with connect_writer(db) as conn:
        conn.begin()
        store_batches(conn if book is None else Timed(conn, book), run, columns, ["bench"])
        conn.commit()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="0,200000,1000000", help="run sizes to probe at, in spans")
    parser.add_argument("--batch", type=int, default=2000, help="spans per timed flush")
    parser.add_argument("--probes", type=int, default=5, help="timed flushes per size")
    parser.add_argument("--profile", action="store_true", help="time each statement of the last probe")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    seed = 100
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "flush.duckdb"
        grown = 0
        print(f"{'run size (spans)':>18} {'flush median (ms)':>18} {'min (ms)':>9} {'max (ms)':>9}")
        for size in sizes:
            while grown < size:
                step = min(200_000, size - grown)
                seed += 1
                flush(db, "run", batches(step, 20_000, seed))
                grown += step
            times = []
            book: dict[str, float] = defaultdict(float)
            for probe_number in range(args.probes):
                seed += 1
                probe = batches(args.batch, args.batch, seed)
                profiled = args.profile and probe_number == args.probes - 1
                times.append(flush(db, "run", probe, book if profiled else None) * 1000)
                grown += sum(len(c) for c in probe)
            print(f"{size:>18,} {statistics.median(times):>18.1f} {min(times):>9.1f} {max(times):>9.1f}")
            for name, seconds in sorted(book.items(), key=lambda item: -item[1])[:8]:
                print(f"{'':>20}{seconds * 1000:8.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
