"""The sampled span trees on ClickHouse (stage breakdown, stage mapping) read a trace without the
run's attribute filters only where no span of it is outside the run (ch_sample.sample_rows): the
answers must be those of the filtered read. Here the same traces are also in another run (each span
stored twice, once per run label): those traces are read with the filters, the others without, and
the breakdown and the mapping of the run are those of a store holding that run alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_clickhouse_ingest import _steady_file

from ingest.loader import load_paths
from tailscope.analysis import Filter, stage_breakdown
from tailscope.store.clickhouse import sample as ch_sample
from tailscope.store.clickhouse import write as ch_write
from tailscope.store.engine import open_store

pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")


def _proven_counts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(proven, sampled) of each sample_rows call from now on."""
    seen: list[tuple[int, int]] = []
    original = ch_sample.sample_rows.__wrapped__  # type: ignore[attr-defined]

    def counting(store, run, selection, ids, seconds):  # type: ignore[no-untyped-def]
        for proven in original(store, run, selection, ids, seconds):
            seen.append((len(proven), len(ids)))
            yield proven

    monkeypatch.setattr(ch_sample, "sample_rows", ch_sample.contextmanager(counting))
    return seen


def _some_traces(path: Path, out: Path, every: int) -> Path:
    """An OTLP JSON-lines file of every `every`-th trace of `path` (all of its spans)."""
    lines = []
    for line in path.read_bytes().splitlines():
        request = json.loads(line)
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                scope["spans"] = [s for s in scope["spans"] if int(s["traceId"], 16) % every == 0]
        lines.append(json.dumps(request))
    out.write_text("\n".join(lines) + "\n")
    return out


def _answers(store: object) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    breakdown = stage_breakdown(store, Filter(run="a"), "p90")
    mapping = sorted(ch_write.stage_mapping(store, "a", sample_traces=2000))
    return [tuple(row) for row in breakdown.round(9).itertuples(index=False)], mapping


def test_traces_shared_with_another_run_are_read_with_its_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _steady_file(tmp_path, 80)
    shared = _some_traces(path, tmp_path / "shared.jsonl", 3)  # a third of the traces, also in b
    alone = open_store(f"chdb://{tmp_path / 'alone'}")
    alone.prepare(writing=True)
    load_paths([path], alone, "a")
    seen = _proven_counts(monkeypatch)
    expected = _answers(alone)
    assert seen and all(proven == sampled for proven, sampled in seen)  # nothing else there
    alone.close()
    both = open_store(f"chdb://{tmp_path / 'both'}")
    both.prepare(writing=True)
    load_paths([path], both, "a")
    load_paths([shared], both, "b")
    seen.clear()
    assert _answers(both) == expected
    assert seen and all(0 < proven < sampled for proven, sampled in seen)  # both reads used
    both.close()
