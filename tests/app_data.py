"""Small hand-built stores for the dashboard tests: the reference pipeline's span shape, seeded.

`build_store(path)` writes two runs of a few hundred requests each, where requests that miss the
feature cache are slow (so the tail has a cause to find); `one_span_store` and `no_root_store` are the
degenerate cases the views must explain instead of failing on.
"""

from __future__ import annotations

import random
from pathlib import Path

from ingest.columns import SpanColumns
from reference_pipeline import span_model as sm
from tailscope.store.duckdb import histogram as store_histogram
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.writer import store_batches
from tailscope.vocabulary import STAGE_ATTRIBUTE

START_NS = 1_763_700_000_000_000_000  # 2025-11-21T04:40:00Z
MS = 1_000_000


def _hex(rng: random.Random, chars: int) -> str:
    return f"{rng.getrandbits(chars * 4):0{chars}x}"


def _resource(run: str, device: str) -> dict[str, str]:
    return {
        "service.name": sm.SERVICE_NAME,
        "host.name": "test-host",
        "tailscope.scenario": "cold-cache",
        "tailscope.device": device,
        "tailscope.dtype": "fp32" if device == "cpu" else "bf16",
        "tailscope.batch.max_size": "8",
        "tailscope.batch.max_wait_ms": "5",
        "tailscope.model.weights": "simulated",
        "tailscope.run": run,
    }


def request_spans(
    columns: SpanColumns, rng: random.Random, start_ns: int, resource: dict[str, str], slow_model: float
) -> None:
    """Append one request's spans, children back to back under the root."""
    trace_id = _hex(rng, 32)
    root_id = _hex(rng, 16)
    cache_hit = rng.random() > 0.08
    error = rng.random() < 0.01
    durations = [
        (sm.RECEIVE, rng.lognormvariate(-1.0, 0.3) * MS, {}),
        (sm.PARSE, rng.lognormvariate(-0.5, 0.3) * MS, {}),
        (
            sm.HYDRATE,
            (rng.lognormvariate(0.0, 0.3) + (0 if cache_hit else rng.uniform(60, 140))) * MS,
            {"cache.hit": "true" if cache_hit else "false", "feature.key": f"user:{rng.randint(1, 40)}"},
        ),
        (sm.TOKENIZE, rng.lognormvariate(0.3, 0.2) * MS, {"tokens.count": str(rng.randint(8, 64))}),
        (sm.QUEUE_WAIT, rng.expovariate(1 / 3.0) * MS, {"batch.size": str(rng.randint(1, 8))}),
        (
            sm.FORWARD,
            rng.lognormvariate(2.5, 0.15) * slow_model * MS,
            {"device": resource["tailscope.device"]},
        ),
        (sm.POSTPROCESS, rng.lognormvariate(-0.3, 0.3) * MS, {}),
        (sm.DOWNSTREAM, rng.lognormvariate(1.5, 0.4) * MS, {"http.request.method": "POST"}),
        (sm.SERIALIZE, rng.lognormvariate(-1.2, 0.3) * MS, {}),
    ]
    cursor = start_ns + int(0.2 * MS)
    children = []
    for name, duration, attrs in durations:
        span_id = _hex(rng, 16)
        children.append((name, span_id, cursor, int(duration), attrs))
        if name == sm.HYDRATE and not cache_hit:
            store_get = {"_parent": span_id, "db.system": "sqlite"}
            children.append(
                (sm.STORE_GET, _hex(rng, 16), cursor + int(0.5 * MS), int(duration - MS), store_get)
            )
        cursor += int(duration) + int(0.05 * MS)
    root_duration = cursor - start_ns + int(0.1 * MS)
    columns.append(
        timestamp_ns=start_ns,
        trace_id=trace_id,
        span_id=root_id,
        parent_span_id="",
        span_name=sm.ROOT_SPAN,
        span_kind="Server",
        duration_ns=root_duration,
        service_name=sm.SERVICE_NAME,
        resource_attributes=resource,
        span_attributes={
            "http.route": sm.ROUTE,
            "http.request.method": "POST",
            "http.response.status_code": "500" if error else "200",
            STAGE_ATTRIBUTE: "ingress",
        },
        status_code="Error" if error else "Unset",
        status_message="internal error" if error else "",
    )
    for name, span_id, begin, duration, attrs in children:
        parent = attrs.pop("_parent", root_id)
        columns.append(
            timestamp_ns=begin,
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent,
            span_name=name,
            span_kind="Client" if name in (sm.STORE_GET, sm.DOWNSTREAM) else "Internal",
            duration_ns=duration,
            service_name=sm.SERVICE_NAME,
            resource_attributes=resource,
            span_attributes={**attrs, STAGE_ATTRIBUTE: sm.STAGE_OF[name]},
        )


def write_run(db_path: Path, run_label: str, columns: SpanColumns, source: str = "test") -> None:
    """Store one run's spans the way the ingest loader does (one transaction, derived tables included)."""
    with connect_writer(db_path) as conn:
        conn.execute("BEGIN TRANSACTION")
        store_batches(conn, run_label, [columns], [source])
        conn.execute("COMMIT")


def build_store(db_path: Path, requests: int = 400, seed: int = 7) -> Path:
    """Two runs ('cpu-fp32', 'gpu-bf16') of `requests` requests each, 20 req/s."""
    rng = random.Random(seed)
    for run, device, slow in (("cpu-fp32", "cpu", 1.0), ("gpu-bf16", "cuda", 0.35)):
        columns = SpanColumns()
        resource = _resource(run, device)
        for i in range(requests):
            request_spans(columns, rng, START_NS + i * 50 * MS + rng.randint(0, 20 * MS), resource, slow)
        write_run(db_path, run, columns)
    return db_path


def one_span_store(db_path: Path) -> Path:
    columns = SpanColumns()
    columns.append(
        timestamp_ns=START_NS,
        trace_id="0" * 31 + "1",
        span_id="0" * 15 + "1",
        parent_span_id="",
        span_name="GET /",
        span_kind="Server",
        duration_ns=12 * MS,
        service_name="solo",
        span_attributes={"http.route": "/"},
    )
    write_run(db_path, "one-span", columns)
    return db_path


def no_root_store(db_path: Path) -> Path:
    """A run with spans but no request root: in every trace the two spans name each other as parent."""
    columns = SpanColumns()
    for i in range(3):
        first, second = f"{2 * i + 100:016x}", f"{2 * i + 101:016x}"
        for span_id, parent in ((first, second), (second, first)):
            columns.append(
                timestamp_ns=START_NS + i * MS,
                trace_id=f"{i + 1:032x}",
                span_id=span_id,
                parent_span_id=parent,
                span_name=sm.FORWARD,
                span_kind="Internal",
                duration_ns=(5 + i) * MS,
                service_name=sm.SERVICE_NAME,
            )
    write_run(db_path, "no-roots", columns)
    return db_path


def simulated_store(db_path: Path, requests: int = 800) -> Path | None:
    """Runs of the reference pipeline's simulator (a bursty one, and CPU vs GPU at the same load),
    or None when the simulator is not part of this build."""
    try:
        from reference_pipeline.simulate.api import simulate_columns
    except ImportError:
        return None
    runs = (
        ("sim-burst", "burst", 1, {}),
        ("sim-cpu-fp32", "steady", 2, {"hardware": "cpu-fp32", "rps": 300.0}),
        ("sim-gpu-bf16", "steady", 3, {"hardware": "gpu-bf16", "rps": 300.0}),
    )
    for label, scenario, seed, options in runs:
        with connect_writer(db_path) as conn:
            conn.execute("BEGIN TRANSACTION")
            store_batches(
                conn, label, simulate_columns(scenario, requests, seed, **options), [f"simulated {scenario}"]
            )
            conn.execute("COMMIT")
    return db_path


def raw_simulated_store(db_path: Path, runs: list[tuple[str, str, int, int]]) -> Path:
    """The simulator's runs, each (label, scenario, requests, seed), inserted into otel_traces as they are
    (no derive: the spans the diagnosis reads)."""
    from reference_pipeline.simulate.api import simulate_columns

    with connect_writer(db_path) as writer:
        conn = writer.cursor()
        for label, scenario, requests, seed in runs:
            for batch in simulate_columns(scenario, requests, seed):
                conn.register("raw_batch", batch.to_arrow())
                conn.execute("INSERT INTO otel_traces SELECT *, ? FROM raw_batch", [label]).fetchall()
                conn.unregister("raw_batch")
    return db_path


def split_in_two_parts(path: Path) -> tuple[Path, Path]:
    """`path`'s lines written again as two files beside it, `a1.json` (the first 90 %) and `a2.json` (the
    rest): the traces at the cut have spans in both parts, as a refresh's delta does."""
    lines = path.read_bytes().splitlines(keepends=True)
    cut = len(lines) * 9 // 10
    first, second = path.parent / "a1.json", path.parent / "a2.json"
    first.write_bytes(b"".join(lines[:cut]))
    second.write_bytes(b"".join(lines[cut:]))
    return first, second


def weighted_copy(source: Path, target: Path, run: str) -> Path:
    """A copy of the store at `source` in which the faster half of `run`'s requests stands for four
    requests each (a head-sampled run's weights), its pre-aggregates rebuilt: the weighted case of the
    pre-aggregate tests (histograms, heatmap)."""
    target.write_bytes(source.read_bytes())
    with connect_writer(target) as conn:
        conn.execute(
            "UPDATE requests SET Weight = 4 WHERE RunLabel = $run "
            "AND Duration < (SELECT median(Duration) FROM requests WHERE RunLabel = $run)",
            {"run": run},
        )
        store_histogram.rebuild(conn, run)
    return target
