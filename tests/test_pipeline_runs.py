"""The reference pipeline end to end where nothing is timed: the CLI's run writes complete traces that
ingest, and a head-sampled run keeps whole requests. They start the real processes under real load but
compare no latency, so they run in the parallel phase; the timed scenarios are test_pipeline_e2e.py's
(the serial phase, tests/conftest.py)."""

from __future__ import annotations

import json
import os

import pytest
from pipeline_runs import NEEDS_PIPELINE, query, run_and_load
from process_support import children_of

from reference_pipeline import span_model as sm

pytestmark = NEEDS_PIPELINE


def test_cli_run_writes_complete_traces_that_ingest(tmp_path, capsys) -> None:
    from ingest.loader import load_paths
    from tailscope.cli.main import main

    out, db = tmp_path / "steady.jsonl", tmp_path / "store.duckdb"
    code = main(
        [
            "pipeline",
            "run",
            "--scenario",
            "steady",
            "--duration",
            "3",
            "--rps",
            "10",
            "--max-batch",
            "4",
            "--max-wait-ms",
            "3",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert not children_of(os.getpid()), "the downstream and service processes are gone"
    assert "errors" in printed and "p99" in printed and "req/s" in printed
    load_paths([out], db, "cli")

    # every request: one loadgen CLIENT span whose trace continues into the service and downstream
    names = dict(
        query(
            db,
            "SELECT SpanName, count(*) FROM otel_traces WHERE ServiceName = ? GROUP BY 1",
            [sm.SERVICE_NAME],
        )
    )
    requests = names[sm.ROOT_SPAN]
    assert requests >= 10
    for name in (
        sm.RECEIVE,
        sm.PARSE,
        sm.HYDRATE,
        sm.TOKENIZE,
        sm.QUEUE_WAIT,
        sm.FORWARD,
        sm.POSTPROCESS,
        sm.LOCK_WAIT,
        sm.DOWNSTREAM,
        sm.SERIALIZE,
    ):
        assert names.get(name) == requests, name
    (orphans,) = query(
        db,
        """
        SELECT count(*) FROM otel_traces s
        WHERE s.ServiceName = ? AND s.SpanName = ? AND NOT EXISTS (
            SELECT 1 FROM otel_traces c WHERE c.SpanId = s.ParentSpanId AND c.TraceId = s.TraceId
              AND c.ServiceName = ? AND c.SpanKind = 'Client')
        """,
        [sm.SERVICE_NAME, sm.ROOT_SPAN, sm.LOADGEN_SERVICE_NAME],
    )[0]
    assert orphans == 0, "every server root continues a load generator CLIENT span"
    (downstream_orphans,) = query(
        db,
        """
        SELECT count(*) FROM otel_traces s
        WHERE s.ServiceName = ? AND NOT EXISTS (
            SELECT 1 FROM otel_traces c WHERE c.SpanId = s.ParentSpanId AND c.SpanName = ?)
        """,
        [sm.DOWNSTREAM_SERVICE_NAME, sm.DOWNSTREAM],
    )[0]
    assert downstream_orphans == 0
    stages = dict(
        query(
            db,
            """
        SELECT SpanName, any_value(SpanAttributes->>'tailscope.stage') FROM otel_traces
        WHERE ServiceName = ? GROUP BY 1""",
            [sm.SERVICE_NAME],
        )
    )
    assert stages == {name: sm.STAGE_OF[name] for name in stages}
    resource = json.loads(
        query(
            db, "SELECT ResourceAttributes FROM otel_traces WHERE ServiceName = ? LIMIT 1", [sm.SERVICE_NAME]
        )[0][0]
    )
    for key in (
        *(k for k in sm.RESOURCE_KEYS if k != "tailscope.gpu.name"),
        "service.name",
        "host.name",
        "service.instance.id",
        "process.pid",
    ):
        assert key in resource, key
    assert resource["tailscope.model.weights"] in {"pretrained", "random-init"}
    assert resource["tailscope.batch.max_size"] == "4"
    (bad_batches,) = query(
        db,
        """
        SELECT count(*) FROM otel_traces WHERE SpanName = ? AND CAST(SpanAttributes->>'batch.size' AS INT) > 4
        """,
        [sm.FORWARD],
    )[0]
    assert bad_batches == 0


@pytest.mark.slow
def test_a_sampled_run_keeps_a_dropped_requests_downstream_call_out_too(tmp_path) -> None:
    """Head sampling at 0.25: every process draws by the trace id, the downstream service included,
    so the calls of the requests the service dropped are not exported as requests of their own (they
    were, 0.1 ms each, half the sampled run's requests, before the downstream sampled); the kept
    requests stand for 4 each."""
    store = tmp_path / "store.duckdb"
    run_and_load(tmp_path, "steady", store, label="sampled", sample_rate=0.25)
    rows = query(
        store,
        "SELECT ServiceName, count(*), min(Weight), max(Weight) FROM requests WHERE RunLabel = ? GROUP BY 1",
        ["sampled"],
    )
    assert [(service, low, high) for service, _n, low, high in rows] == [(sm.SERVICE_NAME, 4.0, 4.0)]
    downstream = query(
        store,
        "SELECT count(*) FROM otel_traces WHERE RunLabel = ? AND ServiceName = ?",
        ["sampled", sm.DOWNSTREAM_SERVICE_NAME],
    )[0][0]
    assert 0 < downstream <= rows[0][1]
