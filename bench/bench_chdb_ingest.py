"""Where `tailscope ingest` into chdb spends its time, part by part (issue 13).

    PYTHONPATH=. .venv/bin/python bench/bench_chdb_ingest.py FILE [--work DIR] [--writes 3]
        [--setting NAME=VALUE ...]

On a fresh chdb folder: (1) decode + stage + convert the file (store.clickhouse.load._stage_file: the
DecodePool workers decode, a second thread stages and converts each batch into _ts_ready); (2) the
write of the ready table into otel_traces, `--writes` times (otel_traces and its lookup emptied
between), plain and with each `--setting` (alternately, best of each); (3) the derive: from
otel_traces (ch_write.refresh_run), from the ready table alone, and overlapped with the write on a
second session (ch_overlap.write_and_derive), `--writes` times each; then the derive's statements
one by one. Wall seconds and the process's CPU seconds (its threads, and the decode workers once
they ended) per part.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine_info import cpu_seconds
from ingest.loader import FileResult, decode_file
from ingest.parallel import DecodePool
from tailscope import sql
from tailscope.store.clickhouse import load as ch_load
from tailscope.store.clickhouse import overlap as ch_overlap
from tailscope.store.clickhouse import write as ch_write
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.clickhouse.statements import RunSelection, derive_statements
from tailscope.store.clickhouse.store import WRITE_TIME_LIMIT_S
from tailscope.store.engine import open_store

RUN = "r"


def part(name: str, fn: Callable[[], object]) -> tuple[float, float]:
    wall, spent = time.perf_counter(), cpu_seconds()
    fn()
    wall, spent = time.perf_counter() - wall, cpu_seconds() - spent
    print(f"{name:44} {wall:7.2f} s wall {spent:7.2f} s cpu", flush=True)
    return wall, spent


def stage(store: ClickHouseStore, path: Path, ready: str) -> tuple[int, int]:
    result = FileResult(path=str(path))
    with DecodePool() as pool, open(path, "rb", buffering=1 << 20) as raw:
        ch_write.clear_staged(store, ready)
        batches = decode_file(raw, str(path), result, None, pool)
        bounds, _ = ch_load._stage_file(store, batches, RUN, {}, ready)
    assert bounds is not None
    return bounds


def empty_exporter_tables(store: ClickHouseStore) -> None:
    store.query("TRUNCATE TABLE otel_traces")
    store.query("TRUNCATE TABLE otel_traces_trace_id_ts")


def write(store: ClickHouseStore, ready: str, settings: dict[str, str]) -> None:
    store.transport.query_arrow(sql.load("ingest_ready_move", "clickhouse"), {"ready": ready}, settings)


def writes(store: ClickHouseStore, ready: str, variants: list[str], times: int) -> None:
    """The write of _ts_ready into otel_traces, plain and with each variant's setting, alternately."""
    base = {"max_execution_time": WRITE_TIME_LIMIT_S}
    best: dict[str, float] = {}
    for i in range(times):
        for variant in ["plain", *variants]:
            empty_exporter_tables(store)
            settings = dict(base)
            if variant != "plain":
                name, value = variant.split("=", 1)
                settings[name] = value
            wall, _ = part(f"write #{i + 1} {variant}", lambda s=settings: write(store, ready, s))
            best[variant] = min(best.get(variant, wall), wall)
            if variant != "plain":  # back to the default for the next variant
                name = variant.split("=", 1)[0]
                store.transport.query_arrow(f"SET {name} = DEFAULT", {}, {})
                store.transport._settings.pop(name, None)  # type: ignore[attr-defined]
    for variant, wall in best.items():
        print(f"write best of {times}: {variant:40} {wall:7.2f} s")


def derive(store: ClickHouseStore, ready: str, bounds: tuple[int, int], times: int) -> None:
    """The derive from otel_traces (refresh_run, and step by step), from the ready table alone, and
    overlapped with the write (ch_overlap.write_and_derive), `times` each, alternately."""
    selection = RunSelection(bounds[0], bounds[1], {ch_write.RUN_ATTRIBUTE: RUN})
    ch_write.define_run(store, RUN, selection)
    for i in range(times):
        part(f"derive #{i + 1} from otel_traces (refresh_run)", lambda: ch_write.refresh_run(store, RUN))
        part(
            f"derive #{i + 1} from the ready table", lambda: ch_overlap._derive(store, RUN, ready, selection)
        )
        empty_exporter_tables(store)
        overlapped = lambda: ch_overlap.write_and_derive(store, RUN, ready, selection, lambda: None)  # noqa: E731
        part(f"write || derive #{i + 1} (write_and_derive)", overlapped)
    rules = ch_write.rules_in_force(store)
    phases = ch_write.phase_rules_for(store, selection)
    for i, (text, params) in enumerate(derive_statements(rules, RUN, selection, phase_rules=phases)):
        first = " ".join(text.split())[:60]
        step = lambda t=text, p=params: store.query(t, p, WRITE_TIME_LIMIT_S)  # noqa: E731
        part(f"  step {i + 1}: {first[:34]}", step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_chdb_ingest"))
    parser.add_argument("--writes", type=int, default=3)
    parser.add_argument("--setting", action="append", default=[], help="NAME=VALUE for a write variant")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    store = open_store(f"chdb://{args.work}")
    assert isinstance(store, ClickHouseStore)
    store.prepare(writing=True)
    ready = ch_overlap.ready_table(store)
    bounds: list[tuple[int, int]] = []
    part("decode + stage + convert", lambda: bounds.append(stage(store, args.file, ready)))
    writes(store, ready, args.setting, args.writes)
    derive(store, ready, bounds[0], args.writes)
    ch_overlap.drop_ready(store, ready)
    store.close()


if __name__ == "__main__":
    main()
