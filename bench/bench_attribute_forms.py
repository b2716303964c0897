"""How should otel_traces store attributes? Insert and query cost of each candidate form.

Builds N spans' worth of realistic attribute maps (12 resources x 9 entries; 2-6 span attributes
drawn from a few keys, some with per-span values) and, for each form, times:
  - inserting the Arrow table into a fresh DuckDB file (the attribute columns plus a few flat ones),
  - one lookup over every row (`http.route` of each span, grouped),
  - the `tailscope.stage` lookup the derivation does on every span.

Forms: MAP(VARCHAR, VARCHAR) (schema v1), JSON object text in a VARCHAR (schema v2), JSON text
dictionary-encoded in Arrow (what the fast decoders hand over: one string per distinct map).

    .venv/bin/python bench/bench_attribute_forms.py --spans 1000000
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

MAP = pa.map_(pa.string(), pa.string())


def attribute_maps(spans: int, seed: int = 7) -> tuple[list[dict[str, str]], list[int], list[dict[str, str]]]:
    rng = random.Random(seed)
    resources = [
        {
            "service.name": f"svc-{i % 4}",
            "service.instance.id": f"inst-{i}",
            "host.name": f"host-{i % 6}",
            "process.pid": str(1000 + i),
            "telemetry.sdk.name": "opentelemetry",
            "telemetry.sdk.language": "python",
            "telemetry.sdk.version": "1.30.0",
            "deployment.environment": "prod",
            "cloud.region": "eu-west-1",
        }
        for i in range(12)
    ]
    which = [rng.randrange(12) for _ in range(spans)]
    keys = ["http.route", "http.method", "cache.hit", "batch.size", "db.system", "model.name"]
    span_maps = []
    for n in range(spans):
        chosen = rng.sample(keys, rng.randint(2, 6))
        span_maps.append(
            {k: (f"/v1/r{n % 7}" if k == "http.route" else str(rng.randint(0, 40))) for k in chosen}
        )
    return resources, which, span_maps


def tables(spans: int) -> dict[str, pa.Table]:
    resources, which, span_maps = attribute_maps(spans)
    index = pa.array(which, pa.int32())
    flat = {
        "SpanId": pa.array([f"{n:016x}" for n in range(spans)]),
        "Duration": pa.array(range(spans), pa.int64()),
    }
    as_map = {
        **flat,
        "ResourceAttributes": pa.DictionaryArray.from_arrays(
            index, pa.array([list(r.items()) for r in resources], MAP)
        ),
        "SpanAttributes": pa.array([list(m.items()) for m in span_maps], MAP),
    }
    text = [orjson.dumps(m).decode() for m in span_maps]
    resource_text = pa.array([orjson.dumps(r).decode() for r in resources])
    as_json = {
        **flat,
        "ResourceAttributes": pa.DictionaryArray.from_arrays(index, resource_text).cast(pa.string()),
        "SpanAttributes": pa.array(text),
    }
    as_json_dict = {**as_json, "ResourceAttributes": pa.DictionaryArray.from_arrays(index, resource_text)}
    return {
        "MAP(VARCHAR, VARCHAR)": pa.table(as_map),
        "JSON text (VARCHAR)": pa.table(as_json),
        "JSON text, resource dictionary-encoded": pa.table(as_json_dict),
    }


QUERIES = {
    "MAP(VARCHAR, VARCHAR)": (
        "SELECT SpanAttributes['http.route'] AS r, count(*) FROM t GROUP BY r",
        "SELECT count(SpanAttributes['tailscope.stage']), count(ResourceAttributes['host.name']) FROM t",
    ),
    "JSON text": (
        "SELECT SpanAttributes->>'http.route' AS r, count(*) FROM t GROUP BY r",
        "SELECT count(SpanAttributes->>'tailscope.stage'), count(ResourceAttributes->>'host.name') FROM t",
    ),
}


def measure(name: str, table: pa.Table, folder: Path) -> tuple[float, float, float]:
    conn = duckdb.connect(str(folder / f"{abs(hash(name))}.duckdb"))
    conn.register("batch", table)
    types = "MAP(VARCHAR, VARCHAR)" if name.startswith("MAP") else "VARCHAR"
    conn.execute(
        "CREATE TABLE t (SpanId VARCHAR, Duration BIGINT,"
        f" ResourceAttributes {types}, SpanAttributes {types})"
    )
    started = time.perf_counter()
    conn.execute("INSERT INTO t SELECT SpanId, Duration, ResourceAttributes, SpanAttributes FROM batch")
    conn.execute("CHECKPOINT")
    insert = time.perf_counter() - started
    group_sql, lookup_sql = QUERIES["MAP(VARCHAR, VARCHAR)" if name.startswith("MAP") else "JSON text"]
    timings = []
    for statement in (group_sql, lookup_sql):
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            conn.execute(statement).fetchall()
            best = min(best, time.perf_counter() - started)
        timings.append(best)
    conn.close()
    return insert, timings[0], timings[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=1_000_000)
    args = parser.parse_args()
    print(f"{args.spans:,} spans; best of 3 for queries; one run for the insert (fresh file each)")
    print(f"{'form':42} {'insert + checkpoint':>20} {'group by route':>15} {'2 lookups/row':>14}")
    with tempfile.TemporaryDirectory() as folder:
        for name, table in tables(args.spans).items():
            insert, group, lookup = measure(name, table, Path(folder))
            print(f"{name:42} {insert:>18.2f} s {group * 1e3:>12.0f} ms {lookup * 1e3:>11.0f} ms")


if __name__ == "__main__":
    main()
