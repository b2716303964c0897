"""A call stretched by its caller's stall is the stall's, not a slow dependency (slow_dependency.far_side).

The mechanism: a feed service's JVM stops for mixed collections (60-200 ms, every 1.5-3 s per pod,
reported as GC events). A call whose reply arrives during a stop is read when the stop ends: the
caller's CLIENT span stretches, the callee's SERVER span does not (another process). The call, seen
from the caller, has a heavy tail; the dependency does not. Where the callee's side of the call is
traced - its SERVER span, or the outbound span of a sidecar proxy that stands between (another
service's CLIENT span) - its tail is the dependency's. A dependency whose own answers are slow at times
stays slow_dependency through the sidecar."""

from __future__ import annotations

import numpy as np
from mechanism_frames import MS, Pauses, TraceBuilder
from mechanism_stalls import quota_stalls

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.slow_dependency import stalled_time


def _feed(seed: int, paused: bool, slow_ads: bool, sidecar: bool, n: int = 4000, rps: float = 120.0,
          throttled_sidecar: bool = False, late_replies: float = 0.0, rare_slow: float = 0.0):
    """feed pods (three) rank, then call the ads service, through a sidecar whose outbound span is
    traced (`sidecar`) or not; `paused`: the JVM's stops; `throttled_sidecar`: the untraced sidecar
    under a CPU quota (requests and replies wait for its next period); `slow_ads`: 4 % of the ads
    answers take 80-250 ms more, `rare_slow`: that share of them 200-400 ms more; `late_replies`: that
    share of the replies held 50-80 ms between the callee and the caller (an untraced hop)."""
    b = TraceBuilder(seed)
    pods = [f"feed/{i}" for i in range(3)]
    until = n / rps * 1000.0 + 3000.0
    stops: dict[str, list[tuple[float, float]]] = {}
    gc = []
    for pod in pods:
        at = float(b.rng.uniform(0, 1500))
        while paused and at < until:
            length = float(b.rng.uniform(60.0, 200.0))
            stops.setdefault(pod, []).append((at, at + length))
            gc.append((pod, at, at + length))
            at += length + float(b.rng.uniform(1500.0, 3000.0))
    pauses = Pauses(stops)
    proxy = quota_stalls(b, pods, until, rate=0.25) if throttled_sidecar else Pauses()
    for t in b.arrivals(n, rps):
        b.new_trace()
        pod = pods[int(b.rng.integers(3))]
        root = b.span(None, "GET /api/v1/feed", "Server", pod, t, 0.0)
        end = pauses.run(pod, t + 0.2, float(b.rng.lognormal(np.log(5.0), 0.2)))
        b.span(root, "FeedRanker.rank", "Internal", pod, t + 0.2, end - t - 0.2)
        sent = pauses.run(pod, end + 0.1, 0.1)
        work = float(b.rng.lognormal(np.log(10.0), 0.2))
        if slow_ads and b.rng.random() < 0.04:
            work += float(b.rng.uniform(80.0, 250.0))
        if b.rng.random() < rare_slow:
            work += float(b.rng.uniform(200.0, 400.0))
        call = b.span(root, "POST", "Client", pod, sent, 0.0)
        out_at = proxy.run(pod, sent, 0.3)  # the sidecar forwards the request once it runs
        ads = f"ads/{int(b.rng.integers(3))}"
        if sidecar:
            out = b.span(call, "ads:8080/*", "Client", pod, out_at + 0.1, work + 0.8, service="feed-sidecar")
            b.span(out, "POST /v1/blend", "Server", ads, out_at + 0.5, work)
        else:
            b.span(call, "POST /v1/blend", "Server", ads, out_at + 0.4, work)
        back = proxy.run(pod, out_at + work + 0.8, 0.2)  # and hands the reply back once it runs
        if b.rng.random() < late_replies:
            back += float(b.rng.uniform(50.0, 80.0))
        read = pauses.run(pod, back, 0.2)  # the reply is read once the caller runs
        b.set_end(call, read)
        b.set_end(root, pauses.run(pod, read + 0.1, 0.5))
    return diagnose_frame(b.frame(gc=gc))


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def test_a_call_stretched_by_the_callers_pauses_is_not_a_slow_dependency():
    for sidecar in (False, True):
        result = _feed(5, paused=True, slow_ads=False, sidecar=sidecar)
        assert _conf(result, "gc_pause") >= 0.5, result.findings
        assert _conf(result, "slow_dependency") < 0.5, (sidecar, result.findings)


def test_a_dependency_slow_at_times_behind_a_sidecar_stays_a_slow_dependency():
    result = _feed(6, paused=False, slow_ads=True, sidecar=True)
    assert _conf(result, "slow_dependency") >= 0.5, result.findings


def test_calls_stretched_by_a_throttled_untraced_sidecar_are_not_a_slow_dependency():
    """The sidecar between the app and the callee is not traced: its stops stretch the app's CLIENT
    span around the callee's SERVER span, whose own time is fine: the call's tail is not the callee's."""
    result = _feed(7, paused=False, slow_ads=False, sidecar=False, throttled_sidecar=True)
    assert _conf(result, "slow_dependency") < 0.5, result.findings


def test_a_reply_read_in_a_reported_pause_is_stalled_time():
    """A pause the runtime reported (a GC event) that gc_pause's timing episodes do not hold still
    holds the caller's call: the reply is read when the pause ends."""
    b = TraceBuilder(1)
    for i in range(60):
        b.new_trace()
        root = b.span(None, "GET /feed", "Server", "feed/0", i * 100.0, 30.0)
        call = b.span(root, "POST", "Client", "feed/0", i * 100.0 + 1, 20.0)
        b.span(call, "POST /v1/blend", "Server", "ads/0", i * 100.0 + 2, 5.0)
    frame = b.frame(gc=[("feed/0", 1010.0, 1025.0), ("feed/0", 2010.0, 2014.0)])
    ctx = Context(frame)
    first = slice(0, 1)  # gc_pause's episodes hold the first pause only
    ctx.notes["gc_episodes"] = (frame.gc_instance[first], frame.gc_time[first],
                                frame.gc_time[first] + frame.gc_dur[first])
    calls = frame.name == frame.names.index("POST")
    stalled = stalled_time(ctx, calls)
    at = frame.start // MS
    assert stalled[calls & (at == 1001)].tolist() == [11 * MS]  # in the timing episode: 1010-1021
    assert stalled[calls & (at == 2001)].tolist() == [4 * MS]  # reported only
    assert stalled[~calls].sum() == 0


def test_a_call_whose_tail_is_outside_the_callees_span_is_not_a_slow_dependency():
    """8 % of the replies are held 50-80 ms on an untraced hop between the callee and the caller, and
    0.2 % of the callee's answers are slow (200-400 ms): those carry the call's tail excess as its
    callee's own time, yet the call's heavy p99 is the hop's. The dependency's tail is its own side's:
    p99 / p50 of the callee's SERVER spans."""
    result = _feed(8, paused=False, slow_ads=False, sidecar=False, late_replies=0.08, rare_slow=0.002)
    assert _conf(result, "slow_dependency") < 0.5, result.findings
