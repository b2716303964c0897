"""The diagnosis reads the attributes of a run's span names in one scan (diagnosis_names_attributes.sql)
and gives each name what a read of that name alone gives, in an order that does not depend on the
engine's row order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tailscope.analysis.diagnosis import load
from tailscope.store.duckdb.store import DuckDBStore as Store
from tests.app_data import raw_simulated_store

pytest.importorskip("reference_pipeline.simulate.api")  # the stores are the simulator's runs


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    db = tmp_path_factory.mktemp("attributes") / "store.duckdb"
    return Store(raw_simulated_store(db, [("r", "cold-cache", 1_500, 7)]))


class _Counting:
    """A reader that counts its span reads by statement."""

    def __init__(self, conn) -> None:
        self.conn, self.reads = conn, []

    def span_table(self, name: str, run: str, **params) -> pa.Table:
        self.reads.append(name)
        return self.conn.span_table(name, run, **params)


def _keys_of(conn, run: str) -> np.ndarray:
    captured = {}
    original = load._attribute_source

    def capture(conn, run, span_keys, plan=None, name_spans=None, scan_windows=None):
        captured["keys"] = span_keys
        return original(conn, run, span_keys, plan, name_spans, scan_windows)

    load._attribute_source = capture
    try:
        frame = load.load_frame(conn, run, max_spans=0)
    finally:
        load._attribute_source = original
    return frame, captured["keys"]


def test_one_scan_gives_every_name_what_its_own_read_gives(store: Store) -> None:
    with store.reading() as conn:
        frame, keys = _keys_of(conn, "r")
        counts = dict(zip(frame.names, np.bincount(frame.name).tolist(), strict=True))
        counting = _Counting(conn)
        batched = load._attribute_source(counting, "r", keys, None, counts)
        alone = load._attribute_source(conn, "r", keys, None, {})  # every name read by itself
        got = {name: batched(name) for name in frame.names}
        assert counting.reads == ["diagnosis_names_attributes"]  # one scan for all the names
        assert any(got.values())
        for name in frame.names:
            expected = alone(name)
            assert list(got[name]) == list(expected)  # keys in the same order
            for key, (idx, values) in expected.items():
                assert np.array_equal(got[name][key][0], idx) and got[name][key][1] == values
                assert np.all(np.diff(idx) > 0)  # rows in the frame's span order, whatever the engine's


def test_a_name_with_more_spans_than_the_limit_is_read_alone(store: Store, monkeypatch) -> None:
    with store.reading() as conn:
        frame, keys = _keys_of(conn, "r")
        counts = np.bincount(frame.name)
        big = frame.names[int(np.argmax(counts))]
        monkeypatch.setattr(load, "NAME_SPANS", int(counts.max()) - 1)
        counting = _Counting(conn)
        name_spans = dict(zip(frame.names, counts.tolist(), strict=True))
        source = load._attribute_source(counting, "r", keys, None, name_spans)
        source(big)
        assert counting.reads == ["diagnosis_names_attributes", "diagnosis_span_attributes"]


def test_rows_of_spans_beyond_the_limit_send_the_name_to_its_own_read() -> None:
    # the scan found more spans of a name than the limit (spans in a sample's margins, outside the frame)
    table = pa.table(
        {
            "SpanName": ["a", "a", "a", "b", "b"],
            "SpanKey": pa.array([10, 11, 12, 20, 20], pa.int64()),
            "AttrKey": ["k", "k", "k", "x", "y"],
            "AttrValue": ["1", "2", "3", "p", "q"],
        }
    )
    keys = np.array([12, 10, 20], np.int64)  # 11 is outside the frame
    out = load._by_name(table, keys, over=2)
    assert out["a"] is None  # three spans of a: read alone, under the statement's limit
    assert list(out["b"]) == ["x", "y"] and out["b"]["y"][1] == ["q"] and out["b"]["y"][0].tolist() == [2]
    assert load._by_name(table, keys)["a"]["k"][1] == ["3", "1"]  # in the frame's span order
