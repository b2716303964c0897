"""The levers of the newer patterns on hand-built traces: calls cut by a deadline and retried
(timeout_retry), a stage whose time follows the payload size (large_payload), stalls from a CPU
quota (cpu_throttling). Each re-times through the critical path: a parallel branch that did not
change still holds its parent open."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analysis.whatif import cause_levers as cl
from tailscope.analysis.whatif import evaluate
from tailscope.analysis.whatif.payload_levers import payload_at_median
from tailscope.analysis.whatif.retime import request_latency, retime
from tailscope.analysis.whatif.stalls import on_period
from tests.hand_frames import MS, hand_frame, lever_inputs

RETRY = {
    "pattern": "timeout_retry",
    "confidence": 0.9,
    "span_name": "call",
    "evidence": {"stats": {"service": "svc", "timeout_ms": 250.0}},
}


def _retry_rows() -> list[tuple]:
    return [
        # a request whose call timed out at 250 ms and was made again after a 20 ms back-off, beside a
        # parallel branch of 55 ms; the step after them waits for both
        (0, -1, "root", "Server", 0, 0, 322),
        (0, 0, "prep", "Internal", 0, 0, 5),
        (0, 0, "call", "Client", 0, 5, 250),
        (0, 0, "side", "Client", 0, 5, 55),
        (0, 0, "call", "Client", 0, 275, 40),
        (0, 0, "post", "Internal", 0, 315, 5),
        # a request whose call answered at once: nothing to change
        (1, -1, "root", "Server", 0, 1000, 30),
        (1, 6, "prep", "Internal", 0, 1000, 5),
        (1, 6, "call", "Client", 0, 1005, 10),
        (1, 6, "side", "Client", 0, 1005, 12),
        (1, 6, "post", "Internal", 0, 1017, 5),
    ]


def test_no_timeouts_answers_at_the_first_attempt_and_keeps_the_parallel_branch() -> None:
    f = hand_frame(_retry_rows())
    x = lever_inputs(f)
    lever = cl.no_timeouts(x, RETRY)
    assert lever is not None and lever.key == "no_timeouts:call" and lever.pattern == "timeout_retry"
    new = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    # the call (40 ms, the attempt that answered) from 5 ms ends at 45; the side branch at 60 holds
    # the request: post 60-65, the root's 2 ms of own time after it: 67 (a sum of stage times would
    # say 322 - 250 - 20 = 52)
    assert new.round(3).tolist() == [67.0, 30.0]


def test_hedged_call_answers_at_the_hedge_plus_the_copy() -> None:
    f = hand_frame(_retry_rows())
    x = lever_inputs(f)
    lever = cl.hedged(x, RETRY, hedge_ms=30.0)
    assert lever is not None and lever.params["hedge_ms"] == 30.0
    new = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    # a copy at 30 ms taking the retry's 40: the call ends at 5 + 70 = 75 > the side branch's 60
    assert new.round(3).tolist() == [82.0, 30.0]


def test_calls_side_by_side_are_a_fan_out_not_a_retry() -> None:
    rows = [
        (0, -1, "root", "Server", 0, 0, 100),
        (0, 0, "call", "Client", 0, 0, 90),
        (0, 0, "call", "Client", 0, 2, 60),  # started while the first ran
    ]
    f = hand_frame(rows)
    assert cl.no_timeouts(lever_inputs(f), RETRY) is None


def test_the_engine_names_the_retry_fix_for_the_finding_card() -> None:
    f = hand_frame(_retry_rows())
    result = evaluate(f, [RETRY])
    fix = result.for_finding(RETRY)
    assert fix is not None and fix.key == "no_timeouts:call"
    assert fix.p99_ms < result.measured.p99_ms
    keys = {o["key"] for o in result.to_dict()["outcomes"]}
    assert {"no_timeouts:call", "hedged:call"} <= keys


def _payload_frame(sizes: list[float]):
    rows, dumps = [], []
    for t, size in enumerate(sizes):  # times in binary fractions of a ms: exact in ns
        t0 = 1000.0 * t
        dump, send, render = 1 + 0.5 * size, 0.5 + 0.25 * size, 2.0 + t % 3
        base = len(rows)
        rows.append((t, -1, "root", "Server", 0, t0, dump + send + render + 1))
        dumps.append(len(rows))
        rows.append((t, base, "dumps", "Internal", 0, t0, dump))
        rows.append((t, base, "send", "Internal", 0, t0 + dump, send))
        rows.append((t, base, "render", "Internal", 0, t0 + dump + send, render))
    f = hand_frame(rows)
    values = {"items": (np.array(dumps), list(sizes))}
    f.attribute_source = lambda name: values if name == "dumps" else {}
    return f


def test_payload_lever_puts_every_stage_that_follows_the_size_at_the_median() -> None:
    sizes = [10.0 + 3 * k for k in range(60)] + [500.0, 800.0, 1000.0]
    f = _payload_frame(sizes)
    median = float(np.median(sizes))
    finding = {
        "pattern": "large_payload",
        "confidence": 0.9,
        "span_name": "dumps",
        "evidence": {"stats": {"size_attribute": "items", "size_on": "span", "size_p50": median}},
    }
    x = lever_inputs(f)
    lever = payload_at_median(x, finding)
    assert lever is not None and lever.params["stages"] == 2  # dumps and send; render does not follow
    new = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    old = request_latency(f, f.dur, client_side=False) / MS
    capped = np.minimum(sizes, median)
    render = old - (1 + 0.5 * np.array(sizes)) - (0.5 + 0.25 * np.array(sizes)) - 1
    expected = 1 + 0.5 * capped + 0.5 + 0.25 * capped + render + 1
    assert new == pytest.approx(expected, abs=1e-3)


def test_payload_lever_needs_the_runs_attributes() -> None:
    f = _payload_frame([10.0 + k for k in range(60)])
    f.attribute_source = None
    finding = {"pattern": "large_payload", "span_name": "dumps",
               "evidence": {"stats": {"size_attribute": "items", "size_on": "span"}}}
    assert payload_at_median(lever_inputs(f), finding) is None


def test_stalls_that_end_on_the_quota_period_are_the_throttling_ones() -> None:
    inst = np.array([0, 0, 0, 0, 1])
    end = np.array([100, 200, 300, 347, 450]) * MS + 1 * MS  # one instance, phase 1 ms; one off it
    kept = on_period((inst, end - 20 * MS, end))
    assert kept[0].tolist() == [0, 0, 0, 1] and (kept[2] / MS).tolist() == [101, 201, 301, 451]


def test_no_throttling_removes_the_stalls_and_redraws_the_spans_across_a_boundary() -> None:
    rows = []
    for k in range(8):  # instance 0 (throttled): 4 ms of work every 25 ms, nothing crossing
        rows.append((k, -1, "work", "Server", 0, 25.0 * k + 2, 4))
    rows.append((20, -1, "work", "Server", 0, 290, 14))  # stalled 290-300: ends on the boundary
    rows.append((21, -1, "other", "Server", 1, 290, 14))  # across it on an unthrottled instance
    f = hand_frame(rows)
    x = lever_inputs(f)
    x.throttle_stalls = (np.array([0, 0, 0]), np.array([92, 192, 292]) * MS, np.array([100, 200, 300]) * MS)
    finding = {"pattern": "cpu_throttling", "evidence": {"stats": {"instances": ["a"]}}}
    lever = cl.no_throttling(x, finding)
    assert lever is not None and lever.pattern == "cpu_throttling" and lever.params["instances"] == 1
    new = retime(f, lever.edit, x.lay).dur / MS
    assert new[-2] == 4.0  # crossed 300 ms on the throttled instance: a calm one's time
    assert new[-1] == 14.0  # instance 1 is not throttled
    assert new[:8].tolist() == [4.0] * 8


def test_a_fan_out_to_several_peers_keeps_the_retry_of_one() -> None:
    rows = [
        (0, -1, "root", "Server", 0, 0, 300),
        (0, 0, "GET", "Client", 0, 0, 120),  # pricing: cut at 120 ms, made again at once
        (0, 0, "GET", "Client", 0, 0, 30),  # inventory, side by side
        (0, 0, "GET", "Client", 0, 120, 25),  # pricing, second attempt
    ]
    f = hand_frame(rows)
    peers = {"server.address": (np.array([1, 2, 3]), ["pricing", "inventory", "pricing"])}
    f.attribute_source = lambda name: peers if name == "GET" else {}
    finding = {**RETRY, "span_name": "GET"}
    x = lever_inputs(f)
    lever = cl.no_timeouts(x, finding)
    assert lever is not None
    new = retime(f, lever.edit, x.lay).dur / MS
    # pricing answers in 25 ms beside inventory's 30; the root's 155 ms of own time after them kept
    assert new[:4].tolist() == [185.0, 25.0, 30.0, 0.0]


def test_callee_at_its_p50_sets_every_call_to_the_median_of_those_that_answered() -> None:
    f = hand_frame(_retry_rows())
    x = lever_inputs(f)
    lever = cl.callee_p50(x, RETRY)
    assert lever is not None and lever.params["p50_ms"] == 25.0  # 40 and 10: the 250 ms one cut
    new = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    # request 0: the call 25 ms from 5, the side branch (60) holds it: 67; request 1: its call 10 ->
    # 25 ms, now longer than the side branch: 5 + 25 + post 5 + 8 ms of the root's own time = 43
    assert new.round(3).tolist() == [67.0, 43.0]


def test_a_dependency_named_only_on_the_requests_client_wrappers_is_still_found() -> None:
    from tailscope.analysis.whatif.levers import dependency_p50

    rows = []
    for k, took in enumerate([10, 10, 10, 90]):  # a caller that only forwards: its calls are the
        rows.append((k, -1, "GET", "Client", 0, 100 * k, took + 2))  # requests' client wrappers
        rows.append((k, 2 * k, "backend", "Server", 1, 100 * k + 1, took))
    f = hand_frame(rows)
    assert (f.requests.client_span >= 0).all()
    x = lever_inputs(f)
    lever = dependency_p50(x, {"pattern": "slow_dependency", "span_name": "GET"})
    assert lever is not None and lever.params["p50_ms"] == 12.0
    assert (request_latency(f, retime(f, lever.edit, x.lay).dur, True) / MS).tolist() == [12.0] * 4


@pytest.mark.parametrize("work_ms", [540, 620])
def test_the_callee_work_a_timed_out_attempt_abandoned_does_not_hold_the_caller(work_ms) -> None:
    """The callee's SERVER span under an attempt cut at the deadline runs on after the client gave
    up (less than half of it inside the attempt, so it is laid out in the request root; at 620 ms it
    outlasts the root too): with the callee fixed it is not there to hold the request open (the
    Jaeger pool-retry run: 283.8 % before)."""
    rows = [
        (0, -1, "root", "Server", 0, 0, 600),
        (0, 0, "call", "Client", 0, 5, 250),  # cut at the deadline
        (0, 1, "serve", "Server", 1, 6, work_ms),  # the callee's abandoned work from 6 ms
        (0, 0, "side", "Client", 0, 5, 55),
        (0, 0, "call", "Client", 0, 275, 40),  # made again, answered
        (0, 0, "post", "Internal", 0, 315, 285),
    ]
    f = hand_frame(rows)
    assert f.excl_parent[2] == 0  # detached from the attempt, laid out in the root
    x = lever_inputs(f)
    for lever in (cl.no_timeouts(x, RETRY), cl.callee_p50(x, RETRY)):
        assert lever is not None
        new = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
        # the call answered from 5 ms (40 ms; callee_p50: the one answered call's 40), the side
        # branch to 60, post 285 ms from 60: 345 (the abandoned work held it to 546 / 600 before)
        assert new.round(3).tolist() == [345.0], lever.key


def _throttled_proxy_rows(slow: bool) -> list[tuple]:
    """A sidecar proxy (instance 0) in front of an app (1) that reads a database through it (not
    traced: `db`) and calls `ads` (2) through the proxy's outbound span. Calm requests every 25 ms;
    `slow`: one request meets the proxy's quota three times: its db call crosses the 300 ms boundary,
    the proxy forwards its ads call only at 400 ms, and replies only at 500 ms."""
    rows: list[tuple] = []

    def request(trace: int, t: float, db: float, sent: float, reply: float) -> None:
        b = len(rows)
        app_end = t + 0.3 + db + 0.1 + sent + 6.6 + 0.2
        rows.extend([
            (trace, -1, "inbound", "Server", 0, t, app_end + reply + 0.1 - t),
            (trace, b, "GET /", "Server", 1, t + 0.1, app_end - t - 0.1),
            (trace, b + 1, "db", "Client", 1, t + 0.2, db),
            (trace, b + 1, "POST", "Client", 1, t + 0.3 + db, sent + 6.8),
            (trace, b + 3, "out", "Client", 0, t + 0.4 + db, sent + 6.6),
            (trace, b + 4, "blend", "Server", 2, t + 0.5 + db + sent, 6.4),
        ])

    for k in range(12):  # none crosses a 100 ms boundary
        request(k, 25.0 * k + 2, 3.0, 0.0, 0.0)
    if slow:
        request(20, 285.0, 15.2, 400.0 - 300.7, 500.0 - 406.7)
    return rows


def test_a_throttled_proxys_held_calls_sends_and_replies_take_their_usual_time() -> None:
    """The stalls are the proxy's (its quota's boundaries at every 100 ms); the app beside it (its node
    mate: they call only each other) has its database calls proxied as bytes, so a call across the
    proxy's boundary is held too; the ads call sent on a boundary waited for the proxy to forward it;
    the inbound span's reply after the app answered waited for the next period."""
    rows = _throttled_proxy_rows(slow=True)
    f = hand_frame(rows, instances=("proxy", "app", "ads"))
    f.service = np.array([r[4] for r in rows])
    f.services = ["proxy", "app", "ads"]
    x = lever_inputs(f)
    x.throttle_stalls = (np.zeros(5, np.int64), np.array([95, 195, 295, 395, 495]) * MS,
                         np.array([100, 200, 300, 400, 500]) * MS)
    finding = {"pattern": "cpu_throttling", "evidence": {"stats": {"instances": ["proxy"]}}}
    lever = cl.no_throttling(x, finding)
    assert lever is not None
    calm = request_latency(f, f.dur, client_side=False)[:12] / MS
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert after[-1] == pytest.approx(calm[0], abs=0.3), (after[-1], calm[0])
    assert after[:12] == pytest.approx(calm, abs=0.01)


def test_the_throttling_lever_takes_the_stalls_of_single_stretched_spans(monkeypatch) -> None:
    """A process with about one request in flight (a proxy) shows its quota's stalls only as single
    stretched spans (quota_stalls' episodes, not gc_pause's quiet stretches): the lever reads those
    too, as the cpu_throttling finding did."""
    from tailscope.analysis.diagnosis import quota_stalls
    from tailscope.analysis.whatif.engine import inputs

    def episodes(ctx):
        ctx.notes["gc_episodes"] = (np.zeros(3, np.int64), np.array([95, 195, 295]) * MS,
                                    np.array([100, 200, 300]) * MS)
        return []

    monkeypatch.setattr(quota_stalls, "detect", episodes)
    f = hand_frame([(k, -1, "work", "Server", 0, 25.0 * k + 2, 4) for k in range(12)])
    x = inputs(f, [{"pattern": "cpu_throttling", "confidence": 0.9, "evidence": {"stats": {}}}])
    assert x.throttle_stalls is not None and len(x.throttle_stalls[0]) == 3


def test_retries_a_proxy_makes_inside_one_call_are_fixed_to_the_calls_median() -> None:
    """The sidecar retries a cut try and the app's one span covers both tries and the back-off (no
    attempt of its own): the callee fixed, every call takes the calls' median."""
    rows = []
    for t in range(100):
        took = 190.0 if t % 10 == 0 else 10.0 + t % 3  # a try cut at 80 ms, the back-off, the retry
        rows.append((t, -1, "root", "Server", 0, 1000.0 * t, took + 2.0))
        rows.append((t, 0 if t == 0 else len(rows) - 1, "call", "Client", 0, 1000.0 * t + 1.0, took))
    f = hand_frame(rows)
    lever = cl.callee_p50(lever_inputs(f), RETRY)
    assert lever is not None
    x = lever_inputs(f)
    new = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert new.max() == pytest.approx(13.0, abs=0.01)


def test_every_instance_throttled_the_uncrossed_calls_are_weighted_by_their_chance_to_cross_none() -> None:
    """A quota that lets 30 ms of every 100 ms run: a call started in that part crosses the boundary
    with a chance of its length over 30 ms, so the calls that crossed none are the short ones. A
    crossed call takes the time of an uncrossed one weighted by the inverse of that chance: their
    times come out as the calls' own, not shorter."""
    rng = np.random.default_rng(8)
    rows, true, crossed = [], [], []
    for k in range(3000):
        period = 100.0 * (k // 3)
        start = period + float(rng.uniform(0, 30))
        d = float(rng.uniform(2, 25))
        over = start + d > period + 30
        rows.append((k, -1, "POST", "Client", 0, start, d + (70 if over else 0)))
        true.append(d)
        crossed.append(over)
    f = hand_frame(rows)
    x = lever_inputs(f)
    ends = np.arange(1, 1001) * 100.0
    x.throttle_stalls = (np.zeros(1000, np.int64), (ends - 70) * MS, ends * MS)
    lever = cl.no_throttling(x, {"pattern": "cpu_throttling", "evidence": {"stats": {"instances": ["a"]}}})
    assert lever is not None
    new = retime(f, lever.edit, x.lay).dur / MS
    crossed = np.array(crossed)
    own = float(np.mean(np.array(true)[crossed]))
    assert abs(float(np.mean(new[crossed])) - own) < 0.1 * own, (np.mean(new[crossed]), own)


def test_callee_p50_reads_the_deadline_from_the_attempts_where_the_finding_gives_none() -> None:
    """A cause given with no timeout (a callee down half the run: half the attempts cut at 300 ms,
    then made again): the cut attempts sit at one ceiling, the deadline; the p50 is taken over the
    attempts that answered (10-14 ms), not over all of them (a cut one's 300 ms)."""
    rows = []
    for k in range(40):
        t, base = 1000.0 * k, len(rows)
        if k % 2:  # cut at 300 ms, made again after a 25 ms back-off, cut again: the fallback
            rows += [(k, -1, "root", "Server", 0, t, 650), (k, base, "call", "Client", 0, t + 1, 300.0),
                     (k, base, "call", "Client", 0, t + 326, 300.0),
                     (k, base, "fallback", "Internal", 0, t + 640, 5)]
        else:
            rows += [(k, -1, "root", "Server", 0, t, 17),
                     (k, base, "call", "Client", 0, t + 1, 10.0 + 0.1 * k)]
    f = hand_frame(rows)
    finding = {**RETRY, "evidence": {"stats": {"service": "svc"}}}
    lever = cl.callee_p50(lever_inputs(f), finding)
    assert lever is not None and lever.params["p50_ms"] < 15.0, lever.params
