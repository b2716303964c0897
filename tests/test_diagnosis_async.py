"""Issue 25: asynchronous, queue-fed work (tailscope/analysis/diagnosis/units.py). An API answers 202
after publishing; the work's latency is on the consumer's side, from the publish to the end of the
processing. Both ways OpenTelemetry propagates the context (tests/mechanism_async.py): a detached
CONSUMER child of the PRODUCER span, and a batch consumer's own trace with span links. Before units
of work, the consumer's time was no request's latency (child) or was mixed with the API's requests
(batch), and every cause below went unnamed."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analysis.diagnosis import diagnose_frame, units
from tests.mechanism_async import async_pipeline
from tests.mechanism_frames import TraceBuilder


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.evidence["stats"].get("entry_point"))
            for f in result.findings]


@pytest.mark.parametrize("style", ["child", "batch"])
def test_consumer_work_is_a_unit_from_the_publish(style: str) -> None:
    """The consumer's work is a population of its own; each unit's latency runs from its producer
    span's end (the earliest linked one for a batch) to the consumer span's end."""
    frame = async_pipeline(1, style=style, seconds=6.0)
    groups = units.populations(frame)
    assert [g.unit for g in groups] == ["request", "consumer"]
    assert groups[0].entry == "intake POST /v1/events" and groups[1].entry == "enricher events process"
    http, work = groups[0].frame, groups[1].frame
    assert len(http.requests) == int(((frame.kind == 2) & (frame.parent < 0)).sum())
    heads = units.heads(frame)
    ends = frame.start[heads] + frame.dur[heads]
    if style == "child":
        sent = frame.start[frame.parent[heads]] + frame.dur[frame.parent[heads]]
    else:
        sent = np.array([min(frame.end[frame.link_to[frame.link_from == h]]) for h in heads])
    assert sorted((work.requests.start + work.requests.latency).tolist()) == sorted(ends.tolist())
    assert sorted(work.requests.latency.tolist()) == sorted((ends - sent).tolist())


def test_an_api_that_waits_for_the_reply_keeps_one_population() -> None:
    """Request-reply over a queue: the consumer ends before the API's span does, so its work is the
    request's (the run diagnoses as before)."""
    b = TraceBuilder(2)
    for t in b.arrivals(300, 50):
        b.new_trace()
        root = b.span(None, "POST /score", "Server", "api/0", t, 0.0)
        producer = b.span(root, "jobs publish", "Producer", "api/0", t + 0.1, 0.5)
        b.span(producer, "jobs process", "Consumer", "worker/0", t + 1.0, 5.0)
        b.set_end(root, t + 6.5)
    assert units.populations(b.frame()) is None


@pytest.mark.parametrize("style", ["child", "batch"])
def test_a_burst_backlog_in_the_broker_is_queueing(style: str) -> None:
    """Bursts outrun the consumers: messages wait in the broker (for a batch consumer, fuller
    batches: the messages' arrivals, not the batches', follow the burst)."""
    result = diagnose_frame(async_pipeline(3, style=style, burst=True))
    top = result.findings[0]
    assert top.pattern == "queueing" and top.confidence >= 0.8, _found(result)
    assert top.evidence["stats"]["unit"] == "consumer", top.evidence["stats"]
    assert top.evidence["stats"]["service"] == "enricher", top.evidence["stats"]
    assert [p["unit"] for p in result.populations] == ["request", "consumer"]


@pytest.mark.parametrize("style", ["child", "batch"])
def test_reported_pauses_on_the_workers_are_gc_pause(style: str) -> None:
    """Collections stop the worker instances: the runtime's reports carry the consumer's tail."""
    result = diagnose_frame(async_pipeline(3, style=style, paused=True, gc_events=True))
    top = result.findings[0]
    assert top.pattern == "gc_pause" and top.confidence >= 0.8, _found(result)
    assert top.evidence["stats"]["entry_point"] == "enricher events process"
    assert top.share and top.share >= 0.5, top.share


@pytest.mark.parametrize("style", ["child", "batch"])
@pytest.mark.parametrize("partitioned", [False, True])
def test_unreported_pauses_on_one_message_at_a_time_are_gc_pause(style: str, partitioned: bool) -> None:
    """No GC events, one message in flight per worker: a pause stretches whichever span runs, the
    same tens of ms for a 0.3 ms decode, a 4 ms scoring step and the caller's side of a call
    (lone_stalls.py). Before: no gc_pause above 0.2."""
    result = diagnose_frame(async_pipeline(3, style=style, paused=True, partitioned=partitioned))
    top = result.findings[0]
    assert top.pattern == "gc_pause" and top.confidence >= 0.6, _found(result)
    assert all(i.startswith("enricher/") for i in top.evidence["stats"]["instances"])
    assert {"decode", "score"} <= set(top.evidence["stats"]["stretched_work_names"])


@pytest.mark.parametrize("style", ["child", "batch"])
def test_one_slow_step_is_not_a_pause(style: str) -> None:
    """The scoring step alone has a slow mode of the same size as the pauses above: one kind of
    work stretched, not the process."""
    result = diagnose_frame(async_pipeline(3, style=style, slow_step=True, partitioned=True))
    assert _conf(result, "gc_pause") < 0.5, _found(result)


@pytest.mark.parametrize("style", ["child", "batch"])
def test_a_dependency_the_consumer_calls_is_slow_dependency(style: str) -> None:
    result = diagnose_frame(async_pipeline(3, style=style, slow_dependency=True))
    top = result.findings[0]
    assert top.pattern == "slow_dependency" and top.confidence >= 0.8, _found(result)
    assert _conf(result, "gc_pause") < 0.5, _found(result)
    assert top.evidence["stats"]["unit"] == "consumer", top.evidence["stats"]
    assert top.evidence["stats"]["callee_service"] == "profiles", top.evidence["stats"]


@pytest.mark.parametrize("style", ["child", "batch"])
def test_a_healthy_async_run_names_nothing(style: str) -> None:
    result = diagnose_frame(async_pipeline(4, style=style))
    named = [f.pattern for f in result.findings if f.confidence >= 0.5]
    assert set(named) <= {"compute_bound"}, _found(result)


def test_a_batch_consumers_links_are_read_from_the_store(tmp_path) -> None:
    """Through the store: the CONSUMER spans' links (diagnosis_links.sql) find each message's
    producer span, so a batch unit's latency starts at its earliest message's publish, and the
    burst's backlog is named as in the built frame."""
    from analysis_spans import load

    from tailscope.analysis.diagnosis import diagnose
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.source import reading
    from tailscope.store.duckdb.store import DuckDBStore
    from tests.mechanism_async import async_builder, to_columns

    builder, _ = async_builder(3, style="batch", burst=True)
    load(tmp_path / "s.duckdb", "async", to_columns(builder))
    store = DuckDBStore(tmp_path / "s.duckdb")
    with reading(store) as conn:
        frame = load_frame(conn, "async")
    assert len(frame.link_from) == len(builder.links)
    assert (frame.kind[frame.link_to] == 4).all() and (frame.kind[frame.link_from] == 5).all()
    result = diagnose(store, "async")
    top = result.findings[0]
    assert top.pattern == "queueing" and top.confidence >= 0.8, _found(result)
    assert top.evidence["stats"]["unit"] == "consumer"


@pytest.mark.parametrize("style", ["child", "batch"])
def test_cold_replicas_added_in_a_burst_are_judged_on_their_processing(style: str) -> None:
    """Three replicas join at the last burst and serve 24-38 messages each, the first ones ~150x
    slower. Their warm-up is read from their own processing (the broker wait, shared by every
    worker, left out) and from fewer than 40 units (before: judged on all instances against a
    121 ms plateau of end-to-end waits, AUC 0.18)."""
    from tailscope.analysis.diagnosis import cold_start
    from tailscope.analysis.diagnosis.model import Context

    frame = async_pipeline(3, style=style, burst=True, cold_replicas=3, cold_at=0.8)
    work = units.populations(frame)[1].frame
    (found,) = cold_start.detect(Context(work))
    stats = found.evidence["stats"]
    assert stats["judged_on"] == "instances started mid-run", stats
    assert stats["auc"] >= 0.9 and stats["ratio"] >= 2.5 and stats["warm_median_ms"] < 15, stats
    assert stats["warmup_span"] == "score"


@pytest.mark.parametrize("stamp", ["start", "end"])
def test_gc_events_stamped_when_the_pause_ended_are_read_from_their_start(stamp: str) -> None:
    """A runtime that reports a collection once it is over stamps the event at the pause's end: no
    span of the paused worker ends inside [t - duration, t], while work ends all through
    [t, t + duration] (gc_stamps.py). Read as starts, those pauses would sit after the stalls
    (before: every event read as the pause's start)."""
    from tailscope.analysis.diagnosis.gc_stamps import pause_starts
    from tests.mechanism_async import async_builder

    builder, pauses = async_builder(3, paused=True, partitioned=True)
    frame = builder.frame()
    rows = [(frame.instances.index(inst), a, z) for inst, spans in pauses.spans.items() for a, z in spans]
    inst = np.array([r[0] for r in rows])
    t0 = ((np.array([r[1] for r in rows]) - min(r[6] for r in builder.rows)) * 1e6).astype(np.int64)
    dur = ((np.array([r[2] - r[1] for r in rows])) * 1e6).astype(np.int64)
    stamped = t0 if stamp == "start" else t0 + dur
    starts, moved = pause_starts(inst, stamped, dur, frame.instance, frame.start + frame.dur)
    assert moved == (stamp == "end")
    assert (starts == t0).all()


@pytest.mark.parametrize("style", ["child", "batch"])
def test_messages_waiting_for_consumers_busy_in_the_forward_are_compute_bound(style: str) -> None:
    """A 40 ms scoring step keeps the consumers busy most of the time: messages wait in the broker
    for one to free up, at random (no burst). That wait is the forward's doing in proportion to its
    part of the busy time (before: no compute_bound at all for one message at a time)."""
    result = diagnose_frame(async_pipeline(3, style=style, score_ms=40.0, rps=70.0))
    top = result.findings[0]
    assert top.pattern == "compute_bound" and top.confidence >= 0.8, _found(result)
    assert top.evidence["stats"]["tail_excess_share_waiting_for_busy_consumers"] > 0.1
    assert _conf(result, "queueing") < 0.5, _found(result)


def test_the_report_names_each_kind_of_unit() -> None:
    """`diagnose` (text and --json) lists the kinds of units and their latencies: the HTTP answers'
    p99 is milliseconds, the consumer work's hundreds of ms."""
    from tailscope.cli.diagnose_cmd import render_text

    out = diagnose_frame(async_pipeline(3, burst=True)).to_dict()
    assert [p["unit"] for p in out["populations"]] == ["request", "consumer"]
    assert out["populations"][1]["tail"]["p99_ms"] > 20 * out["populations"][0]["tail"]["p99_ms"]
    text = render_text(out)
    assert "units of work" in text and "consumer units (publish to end of processing) of enricher" in text
    assert out["findings"][0]["evidence"]["stats"]["tail_excess_ms"] > 0
