"""What-if: critical-path re-timing (hand-built traces), queue replay vs Erlang C, planted runs' levers."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analysis.whatif.replay import BatchCost, erlang_c_wait, replay
from tailscope.analysis.whatif.retime import Edit, layout, request_latency, retime
from tests.hand_frames import MS, as_ms, hand_frame


def test_a_shorter_span_on_a_sequential_path_moves_everything_after_it() -> None:
    rows = [
        (0, -1, "root", "Server", 0, 0, 100),
        (0, 0, "a", "Internal", 0, 0, 30),
        (0, 0, "b", "Internal", 0, 32, 28),  # 2 ms gap after a: unattributed time, kept
        (0, 0, "c", "Internal", 0, 60, 30),  # 10 ms trailing own time of the root, kept
    ]
    f = hand_frame(rows)
    edit = Edit.none(len(f))
    edit.dur[2] = 8 * MS
    out = retime(f, edit)
    assert as_ms(out.dur) == [80.0, 30.0, 8.0, 30.0]
    assert as_ms(out.rel_start) == [0.0, 0.0, 32.0, 40.0]


def test_parallel_children_hold_the_parent_open() -> None:
    rows = [
        (0, -1, "root", "Server", 0, 0, 100),
        (0, 0, "a", "Internal", 0, 0, 50),  # a and b run side by side; c waits for both
        (0, 0, "b", "Internal", 0, 0, 30),
        (0, 0, "c", "Internal", 0, 50, 40),
    ]
    f = hand_frame(rows)
    off_path = Edit.none(len(f))
    off_path.dur[2] = 5 * MS  # b is not on the critical path: nothing moves
    assert as_ms(retime(f, off_path).dur)[0] == 100.0
    on_path = Edit.none(len(f))
    on_path.dur[1] = 10 * MS  # a shrinks below b: b becomes the critical path
    assert as_ms(retime(f, on_path).dur)[0] == 80.0
    # a sum of stage times would have said 100 - 40 = 60
    both = on_path.merged(off_path)
    assert as_ms(retime(f, both).dur)[0] == 60.0


def test_nested_spans_cuts_and_a_client_wrapper() -> None:
    rows = [
        (0, -1, "call", "Client", 1, 0, 120),  # client wrapper: 10 ms out, 10 ms back
        (0, 0, "root", "Server", 0, 10, 100),
        (0, 1, "hydrate", "Internal", 0, 10, 40),
        (0, 2, "lookup", "Internal", 0, 10, 5),
        (0, 2, "fetch", "Client", 0, 15, 35),  # the miss path, nested two deep
        (0, 1, "forward", "Internal", 0, 60, 50),  # 10 ms gap before it: a queue with no span
    ]
    f = hand_frame(rows)
    edit = Edit.none(len(f))
    edit.dur[4] = 0.0
    edit.cut_before[5] = 6 * MS
    out = retime(f, edit)
    assert as_ms(out.dur)[:3] == [79.0, 59.0, 5.0]
    assert as_ms(request_latency(f, out.dur, client_side=True)) == [79.0]
    assert as_ms(request_latency(f, out.dur, client_side=False)) == [59.0]
    assert as_ms(out.absolute_start(f, layout(f)))[5] == 19.0  # 10 + 5 (hydrate) + 4 (the cut gap)


def test_a_child_outlasting_its_parent_was_not_awaited() -> None:
    rows = [
        (0, -1, "root", "Server", 0, 0, 50),
        (0, 0, "async", "Internal", 0, 10, 60),  # fire and forget: ends 20 ms after the root
        (0, 0, "work", "Internal", 0, 5, 40),
    ]
    f = hand_frame(rows)
    edit = Edit.none(len(f))
    edit.dur[1] = 20 * MS
    assert as_ms(retime(f, edit).dur)[0] == 50.0
    edit.dur[2] = 10 * MS  # the awaited work still holds the root until the clipped child's end
    assert as_ms(retime(f, edit).dur)[0] == 50.0
    leaf_edit = Edit.none(len(f))
    leaf_edit.cut_after[2] = 10 * MS
    assert as_ms(retime(f, leaf_edit).dur)[2] == 30.0


@pytest.mark.parametrize("servers,rho", [(1, 0.7), (3, 0.8)])
def test_queue_replay_matches_erlang_c(servers: int, rho: float) -> None:
    rng = np.random.default_rng(7)
    n, mu = 200_000, 1.0 / 10.0  # service 10 ms mean
    lam = rho * servers * mu
    arrival = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1 / mu, n)
    r = replay(arrival, service, BatchCost(1.0, 0.0), servers)
    wait = (r.start - arrival)[n // 10 :].mean()  # past the empty start
    expected = erlang_c_wait(lam, mu, servers)
    assert wait == pytest.approx(expected, rel=0.05)


def test_batches_leave_when_full_or_when_the_window_closes() -> None:
    arrival = np.array([0.0, 1.0, 2.0, 3.0, 100.0])
    r = replay(arrival, np.ones(5), BatchCost(10.0, 1.0), servers=1, max_batch=3, window=5.0)
    assert r.batch_size.tolist() == [3, 3, 3, 1, 1]
    assert r.start.tolist() == [2.0, 2.0, 2.0, 15.0, 105.0]  # the 4th waits for the worker


def test_a_large_batch_costs_what_its_size_measured_not_what_its_requests_were() -> None:
    # a CPU model: batches of 1 take 10 ms, of 2 18 ms, and the one batch of 4 (a pile-up behind a
    # pause) 80 ms: the cost grows faster than its size (padding to the longest sequence)
    size = np.r_[np.ones(50), np.full(20, 2), [4]].astype(int)
    took = np.r_[np.full(50, 10.0), np.full(20, 18.0), [80.0]]
    cost = BatchCost.fit(size, took)
    assert float(cost(1)) == 10.0 and float(cost(4)) == 80.0  # above the line: as measured
    assert float(cost(3)) == pytest.approx(49.0)  # between them: interpolated
    assert float(cost(6)) > 80.0  # beyond: the fitted line's slope from the last measured size
    # the batch of 4's requests, served one by one without the pile-up: a batch of 1 each, at
    # their own noise (residual 1), not at 80 ms over a line's 34 ms for 4 (2.4 x a batch of 1)
    residual = np.full(4, 80.0) / np.asarray(cost(np.full(4, 4)))
    r = replay(np.array([0.0, 100.0, 200.0, 300.0]), residual, cost, servers=1, max_batch=4)
    assert (r.end - r.start).tolist() == pytest.approx([10.0] * 4)


def test_a_stopped_process_is_found_by_its_silence_and_the_work_let_in_after_it() -> None:
    from tailscope.analysis.whatif.stalls import freezes

    rows = []
    for k in range(150):  # a request every 1 ms, each 0.5 ms, on instance 0
        start = k * 1.0 + (60.0 if k >= 75 else 0.0)  # nothing from 74.5 to 135 ms: a stop
        rows.append((k, -1, "root", "Server", 0, start, 0.5))
    rows += [(900, -1, "root", "Server", 0, 135.0, 0.5), (901, -1, "root", "Server", 0, 135.2, 0.5)]
    for k in range(150):  # instance 1: the same silence but nothing waiting at its end (idle)
        rows.append((1000 + k, -1, "root", "Server", 1, k * 1.0 + (60.3 if k >= 75 else 0.0), 0.5))
    inst, s, e = freezes(hand_frame(rows))
    assert inst.tolist() == [0] and as_ms(s) == [74.5] and as_ms(e) == [135.0]


def test_requests_accepted_as_a_stall_ends_are_spread_over_it() -> None:
    from tailscope.analysis.whatif.levers import Inputs, accepted_late

    rows = [(k, -1, "root", "Server", 0, 100.0 + 0.01 * k, 5.0) for k in range(4)]
    rows.append((9, -1, "root", "Server", 0, 300.0, 5.0))  # after no stall: stays
    f = hand_frame(rows)
    stalls = (np.array([0]), np.array([60 * MS]), np.array([100 * MS]))
    x = Inputs(f, layout(f), f.stage, None, [], 0, stalls)
    shift = accepted_late(x, stalls) / MS
    assert [round(v, 2) for v in shift] == [35.0, 25.01, 15.02, 5.03, 0.0]


def test_the_network_lever_keeps_each_links_own_typical_gap() -> None:
    from tailscope.analysis.whatif.levers import Inputs
    from tailscope.analysis.whatif.network_levers import network_p50

    rows = []
    for k, (extra, wan) in enumerate([(0, True), (0, True), (30, True), (0, False), (0, False), (4, False)]):
        base = 40.0 if wan else 0.5
        t = 10 * k
        rows.append((k, -1, "call", "Client", 1 if wan else 0, t, base + extra + 5))
        rows.append((k, 2 * k, "callee", "Server", 2, t + base / 2, 5))
    f = hand_frame(rows, instances=("a", "b", "c"))
    f.service = np.array([0 if r[4] == 0 else (1 if r[4] == 1 else 2) for r in rows])
    f.services = ["local", "remote", "callee"]
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    lever = network_p50(x, {"pattern": "network", "span_name": "call"})
    new = retime(f, lever.edit, x.lay).dur[0::2] / MS
    assert [round(v, 2) for v in new] == [45.0, 45.0, 45.0, 5.5, 5.5, 5.5]


def _lossy_node_rows() -> list[tuple]:
    """api instances 0-2 call feat (instances 3-4, traced) and redis (not traced); the node of api
    instance 2 is lossy: every fifth of its calls to feat waits 20 ms on the wire (10 out, 10 back),
    and another fifth of its redis calls 20 ms inside the CLIENT span."""
    rows = []
    for k in range(300):
        inst, t = k % 3, 10.0 * k
        lossy_feat = inst == 2 and (k // 3) % 5 == 0
        lossy_redis = inst == 2 and (k // 3) % 5 == 2
        wire = 20.0 if lossy_feat else 0.0
        base = len(rows)
        feat_end = t + 1 + 3.2 + wire
        redis = 1.0 + (20.0 if lossy_redis else 0.0)
        rows += [
            (k, -1, "GET /", "Server", inst, t, feat_end + 1 + redis + 1 - t),
            (k, base, "feat", "Client", inst, t + 1, 3.2 + wire),
            (k, base + 1, "feat", "Server", 3 + k % 2, t + 1.1 + wire / 2, 3.0),
            (k, base, "GET redis", "Client", inst, feat_end + 1, redis),
        ]
    return rows


def test_the_network_lever_fixes_every_crossing_of_a_lossy_node_traced_or_not() -> None:
    """A node's network delays all its crossings: the calls to a traced callee (a gap) and to an
    untraced one (inside the CLIENT span); both take the time of the same call from the other
    instances, whichever link the finding names."""
    from tailscope.analysis.whatif.levers import Inputs
    from tailscope.analysis.whatif.network_levers import network_p50

    rows = _lossy_node_rows()
    f = hand_frame(rows, instances=("api-0", "api-1", "api-2", "feat-0", "feat-1"))
    f.service = np.array([1 if r[4] >= 3 else 0 for r in rows])
    f.services = ["api", "feat"]
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    before = request_latency(f, f.dur, client_side=False) / MS
    assert before.max() > 27 and np.median(before) == pytest.approx(7.2)
    lever = network_p50(x, {"pattern": "network", "span_name": "feat"})
    assert lever is not None
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert after.round(3).tolist() == pytest.approx([7.2] * 300)
    assert lever.params["instances"] == 1  # api-2 only, not the feat callees it called


def test_a_lossy_nodes_body_read_after_an_untraced_call_takes_another_instances_time() -> None:
    """An object store's SDK span ends at the response headers; the body is read in its parent's own
    time after it. On the lossy node a fifth of those reads wait 20 ms for a retransmission: the
    parent's own time takes the time of the same span on the other instances, as its calls do."""
    from tailscope.analysis.whatif.levers import Inputs
    from tailscope.analysis.whatif.network_levers import network_p50

    rows, plain = [], _lossy_node_rows()
    for trace in range(300):  # _lossy_node_rows' requests, each then fetching an object
        base = len(rows)
        for r in plain[4 * trace: 4 * trace + 4]:
            rows.append((*r[:1], r[1] - 4 * trace + base, *r[2:]) if r[1] >= 0 else r)
        inst, t = rows[base][4], rows[base + 3][5] + rows[base + 3][6] + 0.5
        body = 2.0 + (20.0 if inst == 2 and (trace // 3) % 5 == 4 else 0.0)
        rows[base] = (*rows[base][:6], rows[base][6] + 1.5 + body)
        rows += [(trace, base, "blob.Fetch", "Internal", inst, t, 1.0 + body),
                 (trace, base + 4, "GetObject", "Client", inst, t, 1.0)]
    f = hand_frame(rows, instances=("api-0", "api-1", "api-2", "feat-0", "feat-1"))
    f.service = np.array([1 if r[4] >= 3 else 0 for r in rows])
    f.services = ["api", "feat"]
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    before = request_latency(f, f.dur, client_side=False) / MS
    assert before.max() > 30 and np.median(before) == pytest.approx(10.7)
    lever = network_p50(x, {"pattern": "network", "span_name": "feat"})
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert after.round(3).tolist() == pytest.approx([10.7] * 300)
    assert lever.params["own_times_redrawn"] == 20


def test_a_lossy_node_with_no_traced_callee_is_found_from_its_calls_times() -> None:
    """No callee is traced (no crossing to take a gap from): the lossy node is the instance whose calls
    pass the other instances' p99 of the same call many times as often; its calls take theirs."""
    from tailscope.analysis.whatif.levers import Inputs
    from tailscope.analysis.whatif.network_levers import network_p50

    rows = []
    for k in range(600):
        inst, t = k % 3, 10.0 * k
        lossy = inst == 2 and (k // 3) % 5 == 0
        base = len(rows)
        get = 1.0 + 0.25 * (k % 4) + (20.0 if lossy else 0.0)
        rows += [(k, -1, "GET /", "Server", inst, t, 0.5 + get + 0.5 + 2.0 + 0.5),
                 (k, base, "GET redis", "Client", inst, t + 0.5, get),
                 (k, base, "SELECT", "Client", inst, t + get + 1.0, 2.0)]
    f = hand_frame(rows, instances=("api-0", "api-1", "api-2"))
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    before = request_latency(f, f.dur, client_side=False) / MS
    assert before.max() > 24
    lever = network_p50(x, {"pattern": "network", "span_name": "GET redis"})
    assert lever is not None and lever.params["instances"] == 1
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert after.max() <= 5.25  # 1.75 ms the slowest healthy GET, 3.5 ms the rest


def test_a_lossy_nodes_calls_take_the_time_other_instances_calls_took_at_about_that_moment() -> None:
    """The callee slows for the second half of the run (every instance's calls: 1 -> 10 ms); the lossy
    node's calls lose 20 ms in every fifth. Each of its calls takes the time of another instance's
    call made about then: a first-half call is not given a second-half time."""
    from tailscope.analysis.whatif.levers import Inputs
    from tailscope.analysis.whatif.network_levers import network_p50

    rows = []
    for k in range(600):
        inst, t = k % 3, 10.0 * k
        get = (1.0 if k < 300 else 10.0) + (20.0 if inst == 2 and (k // 3) % 5 == 0 else 0.0)
        rows += [(k, -1, "GET /", "Server", inst, t, get + 1.0),
                 (k, 2 * k, "GET redis", "Client", inst, t + 0.5, get)]
    f = hand_frame(rows, instances=("api-0", "api-1", "api-2"))
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    lever = network_p50(x, {"pattern": "network", "span_name": "GET redis"})
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert after[:290].max() == pytest.approx(2.0) and after[310:].min() == pytest.approx(11.0)


def test_pause_reports_without_a_length_remove_nothing_and_name_no_fix() -> None:
    from tailscope.analysis.whatif.stalls import stalls_to_remove

    f = hand_frame([(0, -1, "root", "Server", 0, 0, 100)])
    f.gc_instance, f.gc_time, f.gc_dur = np.array([0]), np.array([10 * MS]), np.array([0])
    assert stalls_to_remove(f, [], 0) is None  # a time with no duration: no pause to take out
    f.gc_dur = np.array([30 * MS])
    inst, s, e = stalls_to_remove(f, [], 0)
    assert inst.tolist() == [0] and as_ms(e - s) == [30.0]


def _sidecar_rows() -> list[tuple]:
    """As _lossy_node_rows, each api instance (0-2) behind a sidecar proxy (5-7) on its pod: the
    proxy's inbound span is the root, the app's request its child; the app's call to feat goes out
    through the proxy's outbound span. Pod 2's node is lossy: its proxy's calls to feat (a gap) and
    its app's redis calls (inside the CLIENT span) wait 20 ms, every fifth each."""
    rows = []
    for k in range(300):
        inst, t = k % 3, 10.0 * k
        lossy_feat = inst == 2 and (k // 3) % 5 == 0
        lossy_redis = inst == 2 and (k // 3) % 5 == 2
        wire = 20.0 if lossy_feat else 0.0
        base = len(rows)
        feat_end = t + 1 + 3.4 + wire
        redis = 1.0 + (20.0 if lossy_redis else 0.0)
        end = feat_end + 1 + redis + 1
        rows += [
            (k, -1, "inbound", "Server", 5 + inst, t - 0.2, end - t + 0.4),
            (k, base, "GET /", "Server", inst, t, end - t),
            (k, base + 1, "feat", "Client", inst, t + 1, 3.4 + wire),
            (k, base + 2, "feat out", "Client", 5 + inst, t + 1.1, 3.2 + wire),
            (k, base + 3, "feat", "Server", 3 + k % 2, t + 1.2 + wire / 2, 3.0),
            (k, base + 1, "GET redis", "Client", inst, feat_end + 1, redis),
        ]
    return rows


def test_a_lossy_proxys_app_on_the_same_node_has_its_untraced_calls_fixed_too() -> None:
    """The large gaps are on the sidecar's crossings (its outbound calls); the app beside it calls
    redis (not traced) over the same node's network. The proxy and its app call only each other from
    another instance: the app is on the lossy node too, its redis calls take another pod's time."""
    from tailscope.analysis.whatif.levers import Inputs
    from tailscope.analysis.whatif.network_levers import network_p50

    rows = _sidecar_rows()
    names = ("api-0", "api-1", "api-2", "feat-0", "feat-1", "proxy-0", "proxy-1", "proxy-2")
    f = hand_frame(rows, instances=names)
    f.service = np.array([0 if r[4] < 3 else (1 if r[4] < 5 else 2) for r in rows])
    f.services = ["api", "feat", "proxy"]
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    lever = network_p50(x, {"pattern": "network", "span_name": "feat out"})
    assert lever is not None
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert after.max() == pytest.approx(after.min(), abs=0.01)
    assert lever.params["instances"] == 2  # proxy-2 and api-2 beside it, not the feat callees


def _wave_rows() -> list[tuple]:
    """A request every 10 ms for 3 s: a feature lookup whose time is its hits and misses mixed (62 %
    of lookups call the store: 0.5 ms or 5 ms), inside a 10 ms root; from 1 s to 1.5 s the hot set
    has expired at once and every lookup fetches it back in several calls (20-60 ms)."""
    rows = []
    for k in range(300):
        t = 10.0 * k
        wave = 1000 <= t < 1500
        lookup = 20.0 + 40.0 * ((k * 7) % 10) / 10 if wave else (5.0 if (k * 13) % 100 < 62 else 0.5)
        base = len(rows)
        rows += [(k, -1, "GET /", "Server", 0, t, lookup + 5.0),
                 (k, base, "lookup", "Internal", 0, t + 1, lookup)]
    return rows


def test_a_cache_finding_with_no_threshold_takes_its_wave_of_misses_out() -> None:
    """A cache finding without a hit/miss threshold (given by hand): the lookup's times are no two
    modes to split, but they rise in one stretch of the run (the hot set expired at once); the fix
    gives that stretch's lookups the times of lookups outside it, and leaves the rest as they were."""
    from tailscope.analysis.whatif.levers import Inputs, cache_hits, miss_wave

    rows = _wave_rows()
    f = hand_frame(rows)
    lookups = np.arange(1, len(rows), 2)
    wave = miss_wave(f.start[lookups], f.dur[lookups])
    truth = (f.start[lookups] >= 1000 * MS) & (f.start[lookups] < 1500 * MS)
    # every lookup of the wave, and at most the calm ones of the twentieths it begins and ends in
    assert wave is not None and wave[truth].all() and int(wave.sum()) <= 50 + 2 * 15
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    lever = cache_hits(x, {"pattern": "cache_miss", "span_name": "lookup", "evidence": {"stats": {}}})
    assert lever is not None
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    before = request_latency(f, f.dur, client_side=False) / MS
    assert after.max() <= 10.01 and after[~wave].tolist() == before[~wave].tolist()
    assert sorted(after[wave]) != sorted(before[wave])


def test_a_queueing_finding_on_a_wait_span_takes_its_peaks_out() -> None:
    """An LLM server's scheduler waits for free memory: the wait is a span of its own under the
    request, short in calm stretches and long while a peak lasts. The queueing finding that names it
    gets a lever: the peak's waits take calm waits' times; the rest stays."""
    from tailscope.analysis.whatif import evaluate

    rows = []
    for k in range(400):
        t = 10.0 * k
        wait = 100.0 + (k % 5) if 2000 <= t < 2500 else 1.0 + (k % 3) * 0.5
        base = len(rows)
        rows += [(k, -1, "POST /v1/chat", "Server", 0, t, wait + 20.0),
                 (k, base, "scheduler.wait", "Internal", 0, t, wait),
                 (k, base, "decode", "Internal", 0, t + wait, 20.0)]
    f = hand_frame(rows)
    finding = {"pattern": "queueing", "confidence": 0.9, "span_name": "scheduler.wait", "evidence": {}}
    result = evaluate(f, [finding])
    hits = [o for o in result.outcomes if o.key == "queue_as_calm:scheduler.wait"]
    assert hits and result.measured.p99_ms > 120
    assert hits[0].p99_ms == pytest.approx(22.0, abs=0.01) and hits[0].p50_ms == result.measured.p50_ms
