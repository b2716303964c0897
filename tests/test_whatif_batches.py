"""A batch consumer's what-if (issue 27): its units scored message by message (publish -> the end of
that message's processing inside its batch), and the messages replayed through the consumer's
processes with the batches formed again as the consumer forms them (whatif/batches.py). Built from
the mechanism (tests/mechanism_async.py): a consumer polling up to 16 ready messages per batch."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analysis.diagnosis import diagnose_frame, units
from tailscope.analysis.whatif import engine, evaluate
from tailscope.analysis.whatif import levers as lv
from tailscope.analysis.whatif.batches import Batches, _pool_ends, as_calm_batches
from tailscope.analysis.whatif.retime import Edit, unit_latency
from tests.mechanism_async import async_pipeline


def _consumers(frame):
    return next(p.frame for p in units.populations(frame) if p.unit == "consumer")


def test_a_batch_is_scored_message_by_message() -> None:
    """Each linked message is a unit: its publish (the linked PRODUCER span's end) to the end of the
    span that processed it in the batch (the head's children in start order take the messages in
    publish order); a consumer of one message at a time keeps its units as they are."""
    whole = async_pipeline(1, style="batch", seconds=6.0)
    f = _consumers(whole)
    reqs = f.requests
    assert reqs.message_span is not None and len(reqs.message_span) == len(whole.link_from)
    assert sorted(reqs.message_sent.tolist()) == sorted(
        (whole.start[whole.link_to] + whole.dur[whole.link_to]).tolist()
    )
    per_message = unit_latency(f, None, None, client_side=False)
    # a message ends inside its batch: never later than the batch's unit, and all of one batch
    # but the last end before it
    unit = f.requests.latency[f.request[reqs.message_span]]
    assert (per_message <= unit).all() and (per_message < unit).mean() > 0.3
    assert _consumers(async_pipeline(1, style="child", seconds=6.0)).requests.message_span is None


def _batches(sent: list[float], slots: list[float], fill: float, most: int) -> Batches:
    n = len(sent)
    return Batches(
        span=np.arange(n) + 10, sent=np.array(sent, np.int64), head=np.zeros(n, np.int64),
        pool=np.zeros(n, np.int64), ready={0: slots}, fill_ns={0: fill}, max_batch={0: most},
        trail_ns={0: 1.0}, transit_ns={0: 0.0}, spread=np.zeros(n), spread_share={0: 0.0},
    )


def test_batches_are_formed_again_first_come_first_served() -> None:
    b = _batches([0, 2, 3, 4, 20], [-1.0], fill=5.0, most=3)
    (sel, ends), sizes = _pool_ends(b, 0, np.full(5, 10.0), 0)
    # idle at 0: a fill window to 5 takes the three that have arrived (at most 3), each 10 after
    # the one before it; the ack frees the process at 36, which takes the other two at once
    assert ends[np.argsort(sel)].tolist() == [15.0, 25.0, 35.0, 46.0, 56.0] and sizes == [3, 2]
    (sel, ends), sizes = _pool_ends(b, 0, np.full(5, 10.0), 1)
    # one more process: the fourth message finds it idle (window to 9), the fifth finds it free
    assert ends[np.argsort(sel)].tolist() == [15.0, 25.0, 35.0, 19.0, 30.0] and sizes == [3, 1, 1]


def test_a_calm_lever_gives_a_backlogged_batchs_messages_a_calm_batchs_latencies() -> None:
    b = _batches([0, 1, 2, 3], [0.0], fill=1.0, most=4)
    b.head = np.array([5, 5, 6, 6])
    edit = Edit.none(8)
    edit.cut_before[6] = 100.0  # the second batch's wait set as in calm stretches
    out = as_calm_batches(b, edit, np.array([10.0, 12.0, 900.0, 950.0]), np.random.default_rng(0))
    assert out[:2].tolist() == [10.0, 12.0] and set(out[2:].tolist()) <= {10.0, 12.0}


def test_the_replay_of_a_batch_run_as_measured_forms_its_batches() -> None:
    """Nothing changed, the replay (its transit and fill window fitted to the run's batch sizes)
    gives the run's per-message p50 and p99 back."""
    f = _consumers(async_pipeline(1, style="batch", burst=True))
    x = engine.inputs(f, [])
    assert x.batches is not None
    noop = lv.Lever("noop", "nothing", "model", "the run replayed", Edit.none(len(f)))
    replayed = engine._latency(x, noop, client_side=False)
    measured = unit_latency(f, None, None, client_side=False)
    for q in (50, 99):
        assert np.percentile(replayed, q) == pytest.approx(np.percentile(measured, q), rel=0.1), q


@pytest.mark.parametrize("cause,prefix", [
    ({"paused": True, "gc_events": True}, "no_gc_stalls"),
    ({"burst": True}, "queue_as_calm:handlers"),
    ({"slow_dependency": True}, "dependency_p50"),
])
def test_a_batch_consumers_fix_lands_on_the_run_without_the_cause(cause, prefix) -> None:
    """The per-message p99 the fix predicts on the faulty run against the per-message p99 of the
    same consumer's run without the cause."""
    healthy = _consumers(async_pipeline(1, style="batch"))
    want = float(np.percentile(unit_latency(healthy, None, None, client_side=False), 99)) / 1e6
    whole = async_pipeline(1, style="batch", **cause)
    findings = [fd.to_dict(with_chart=True) for fd in diagnose_frame(whole).findings]
    result = evaluate(_consumers(whole), findings)
    fix = min((o for o in result.outcomes if o.key.startswith(prefix)), key=lambda o: o.p99_ms)
    assert result.measured.p99_ms > 3 * want
    assert fix.p99_ms == pytest.approx(want, rel=0.15), (fix.p99_ms, want)
