"""The derive keeps each request's attributed time per (stage, span name) (requests.SpanTimes), and the
stage breakdown sums its sample's SpanTimes instead of building their span trees again: it reads no
span (at 100 M spans the read of the sample's spans was a scan of the run's 50 M TraceIds, 2.2 s of
CPU). The answers are the span trees' own, added in another order; a store derived before the column
existed is read from its spans, as before, until its runs are derived again."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest
from analysis_spans import S, SpanColumns, add_trace, load
from test_staged_scope import CountingConnection

from reference_pipeline.simulate.llm_server import LlmServerConfig, simulate_llm_server
from tailscope.analysis import Filter, stage_breakdown
from tailscope.cli.main import main
from tailscope.store.duckdb import statements
from tailscope.store.duckdb.connection import connect_reader, connect_writer
from tailscope.store.duckdb.derive import refresh_all
from tailscope.store.duckdb.reader import DuckDBReader
from tailscope.store.errors import StoreVersionError
from tailscope.vocabulary import STAGES


@pytest.fixture(autouse=True)
def every_request_keeps_span_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """The derive keeps SpanTimes for the lowest 1/16 of trace-id hashes, where a seeded sample of a
    band of more than 8,000 requests lies; these runs are small, so here every request keeps them
    (test_only_low_hash_requests_keep_them checks the cut)."""
    monkeypatch.setattr(statements, "SPAN_TIMES_MAX_HASH", 2**64 - 1)


def parallel_store(db_path: Path) -> None:
    """Requests with overlapping children (the sweep splits their time), nested SERVER spans (rule
    10002), spans mapped by rules and by attribute, a weighted run beside an unweighted one."""
    for run, weight in (("par", None), ("weighted", "4")):
        cols = SpanColumns()
        for n in range(1, 121):
            slow = 60 + n % 5 if n % 10 == 0 else n % 7
            model_server = S(
                "Infer", 10, 40 + slow, kind="Server", children=[S("model.forward", 12, 38 + slow)]
            )
            root = S(
                "POST /predict",
                0,
                50 + slow,
                kind="Server",
                attrs={"tailscope.sample.weight": weight} if weight else {},
                children=[
                    S("redis.get", 0, 8, kind="Client", attrs={"db.system": "redis"}),
                    S("features.fetch", 2, 9 + slow // 2),  # overlaps redis.get
                    model_server,
                    S("serialize", 40 + slow, 48 + slow, stage="serialization"),
                ],
            )
            add_trace(cols, root, n + (0 if weight is None else 1000), offset_ms=n * 200.0)
        load(db_path, run, cols)


def breakdowns(db_path: Path, run: str, band: str) -> tuple[pd.DataFrame, int]:
    with connect_reader(db_path) as conn:
        counting = CountingConnection(conn)
        table = stage_breakdown(DuckDBReader(counting), Filter(run=run), band)
    return table.sort_values(["stage", "span_name"], ignore_index=True), counting.reads


def forget_span_times(db_path: Path) -> None:
    """As in a store derived before the column existed (kept, NULL)."""
    with connect_writer(db_path) as conn:
        conn.execute("UPDATE requests SET SpanTimes = NULL")


@pytest.mark.parametrize("run", ["par", "weighted"])
def test_the_breakdown_from_span_times_is_the_span_trees_and_reads_no_span(db_path: Path, run: str) -> None:
    parallel_store(db_path)
    stored, reads = breakdowns(db_path, run, "p90")
    assert reads == 0
    assert {"redis.get", "features.fetch", "model.forward", "Infer", "POST /predict"} <= set(
        stored["span_name"]
    )
    forget_span_times(db_path)
    from_spans, reads = breakdowns(db_path, run, "p90")
    assert reads == 1  # the sample's spans, staged once
    pd.testing.assert_frame_equal(stored, from_spans, check_exact=False, rtol=1e-12)


def test_span_times_add_up_to_the_requests_stage_columns(db_path: Path) -> None:
    parallel_store(db_path)
    load(db_path, "llm", simulate_llm_server(LlmServerConfig(requests=300, seed=5, scenario="long-prompt")))
    with connect_reader(db_path) as conn:
        columns = ", ".join(f"{stage}_ns" for stage in STAGES)
        rows = conn.execute(
            f"SELECT SpanTimes, Duration, unattributed_ns, {columns} FROM requests"
        ).fetchall()
    assert len(rows) == 2 * 120 + 300
    names = set()
    for span_times, duration, unattributed, *stage_ns in rows:
        by_stage: dict[str, float] = {}
        for entry in span_times:
            by_stage[entry["stage"]] = by_stage.get(entry["stage"], 0.0) + entry["ns"]
            names.add(entry["span_name"])
        for stage, ns in zip(STAGES, stage_ns, strict=True):
            assert round(by_stage.get(stage, 0.0)) == ns, stage
        assert sum(by_stage.values()) == pytest.approx(duration, abs=1)
        assert round(by_stage.get("unattributed", 0.0)) == pytest.approx(unattributed, abs=1)
    assert {"prefill", "decode"} <= names  # the LLM server's phase spans, by their phase names


def test_a_version_3_store_migrates_and_is_read_from_its_spans_until_derived_again(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tailscope migrate` (or a writer's open) adds the column, NULL, nothing else changed; until a
    derive fills it the breakdown reads the spans, with the same answer."""
    parallel_store(db_path)
    expected, _ = breakdowns(db_path, "par", "p90")
    con = duckdb.connect(str(db_path))
    con.execute("ALTER TABLE requests DROP COLUMN SpanTimes")  # as version 3 wrote it
    con.execute("UPDATE schema_version SET version = 3")
    before = con.execute("SELECT * FROM requests ORDER BY RunLabel, TraceId").fetchall()
    con.close()
    with (
        pytest.raises(StoreVersionError, match=r"schema version 3.*tailscope migrate"),
        connect_reader(db_path),
    ):
        pass

    assert main(["migrate", "--db", str(db_path)]) == 0
    assert "schema version 3 -> 5" in capsys.readouterr().out
    with connect_reader(db_path) as conn:
        after = conn.execute(
            "SELECT * EXCLUDE (SpanTimes) FROM requests ORDER BY RunLabel, TraceId"
        ).fetchall()
        assert conn.execute("SELECT count(SpanTimes) FROM requests").fetchall()[0][0] == 0
    assert after == before
    migrated, reads = breakdowns(db_path, "par", "p90")
    assert reads == 1
    pd.testing.assert_frame_equal(migrated, expected, check_exact=False, rtol=1e-12)

    with connect_writer(db_path) as conn:
        refresh_all(conn)  # a rule edit, or any run's next whole derive
    derived, reads = breakdowns(db_path, "par", "p90")
    assert reads == 0
    pd.testing.assert_frame_equal(derived, expected, check_exact=False, rtol=1e-12)


def test_only_low_hash_requests_keep_them_and_a_sample_beyond_them_reads_its_spans(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(statements, "SPAN_TIMES_MAX_HASH", 2**60 - 1)  # as shipped
    parallel_store(db_path)
    with connect_reader(db_path) as conn:
        kept = conn.execute(
            "SELECT count(*) FILTER (WHERE hash(TraceId) <= 2**60 - 1), count(SpanTimes),"
            " count(*) FILTER (WHERE SpanTimes IS NOT NULL AND hash(TraceId) > 2**60 - 1), count(*)"
            " FROM requests"
        ).fetchall()[0]
    assert kept[0] == kept[1] > 0 and kept[2] == 0 and kept[3] == 240
    with connect_reader(db_path) as conn:  # 12 band requests: most beyond the kept ones
        counting = CountingConnection(conn)
        table = stage_breakdown(DuckDBReader(counting), Filter(run="par"), "p90")
    assert counting.reads == 1 and not table.empty
    assert not any("_ts_span_times" in text for text in counting.texts)  # not looked for
