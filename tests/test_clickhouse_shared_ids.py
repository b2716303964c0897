"""Two runs of one ClickHouse store that hold traces with the same ids (the same export loaded under
two labels, then one of them changed; request ids reused by a test harness): a view of one run reads
that run's spans only, as DuckDB does by its RunLabel. Tail vs body's attributes and the LLM latency
read spans by trace id; before they were held to the run's selection they counted the other run's
spans too (the parity store's queue-fed run shared the hand-built run's ids and showed it)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from parity_traces import _frameworks

from tailscope.analysis import Filter, llm_latency, tail_vs_body
from tailscope.store.clickhouse import dedupe as ch_dedupe
from tailscope.store.clickhouse import write as ch_write
from tailscope.store.clickhouse.statements import RunSelection
from tailscope.store.engine import open_store

pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")

OTHER = {"gen_ai.usage.prompt_tokens": "999999", "only.in.the.other.run": "yes"}


def _other_run(table: pa.Table) -> pa.Table:
    """The same spans (ids, times) with other span attributes."""
    changed = [
        json.dumps({**json.loads(text or "{}"), **OTHER}) for text in table["SpanAttributes"].to_pylist()
    ]
    index = table.schema.get_field_index("SpanAttributes")
    return table.set_column(index, "SpanAttributes", pa.array(changed, pa.string()))


def _load(store: object, run: str, batches: list[pa.Table]) -> None:
    bounds = [ch_dedupe.append_spans_once(store, batch, run) for batch in batches]
    selection = RunSelection(min(b[0] for b in bounds), max(b[1] for b in bounds), {"tailscope.run": run})
    ch_write.define_run(store, run, selection)
    ch_write.refresh_run(store, run)


def _answers(store: object) -> tuple[list, list]:
    tail = tail_vs_body(store, Filter(run="a"), tail_quantile=0.9, sample=100_000, limit=100_000)
    assert tail.reason is None and len(tail.attributes) > 0
    attributes = sorted(map(tuple, tail.attributes.round(9).astype(str).values.tolist()))
    llm = [tuple(row) for row in llm_latency(store, Filter(run="a")).round(9).astype(str).values.tolist()]
    return attributes, llm


def test_a_runs_views_read_its_own_spans_where_another_run_shares_its_trace_ids(tmp_path: Path) -> None:
    batches = _frameworks()  # vLLM / TGI requests: token attributes for the LLM latency
    alone = open_store(f"chdb://{tmp_path / 'alone'}")
    alone.create_tables()
    _load(alone, "a", batches)
    expected = _answers(alone)
    alone.close()
    both = open_store(f"chdb://{tmp_path / 'both'}")
    both.create_tables()
    _load(both, "a", batches)
    _load(both, "b", [_other_run(batch) for batch in batches])
    got = _answers(both)
    both.close()
    assert not any("only.in.the.other.run" in str(row) for row in got[0])
    assert got == expected
