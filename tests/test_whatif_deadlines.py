"""Calls that end at a deadline (deadlines.py), on hand-built traces: a spike of durations at one value
at the name's top is a deadline; a fix that removes a stall under an expired call re-times it (the call
ends when calm calls of its name end, the steps after it move up); a deadline with no stall removed
under it stays."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif import engine as en
from tailscope.analysis.whatif.deadlines import capped_calls, capped_names
from tailscope.analysis.whatif.levers import Lever
from tailscope.analysis.whatif.retime import Edit, layout
from tests.hand_frames import MS, hand_frame

EXPIRED = range(0, 200, 20)  # the requests whose ask expired at 300 ms
LONG = range(7, 200, 20)  # asks answered late (48-265 ms) with no stall under them: the tail up to D


def _rows(stall_shift_ms: float = 0.0, traced: bool = True) -> list[tuple]:
    """200 requests on instance a: the route asks an entity (no span for the entity's work: it runs
    elsewhere), then finishes (`traced` False: the ask has no span, only the wait before the finish).
    Ten asks expire at the 300 ms deadline: while each was in flight, a job
    on instance b was stalled (its one step 150-270 ms instead of ~5). The other asks take 2-4 ms."""
    rows: list[tuple] = []
    for k in range(200):
        t, base = 1000.0 * k, len(rows)
        ask = 300.0 if k in EXPIRED else 2.0 + (k % 7) * 0.3
        ask = 40.0 + 1.2 * k if k in LONG else ask
        rows += [(2 * k, -1, "route", "Server", 0, t, 1 + ask + 0.5 + 3 + 0.5)]
        rows += [(2 * k, base, "ask", "Internal", 0, t + 1, ask)] if traced else []
        rows += [(2 * k, base, "finish", "Internal", 0, t + 1 + ask + 0.5, 3.0)]
        step = 150.0 + 0.6 * k if k in EXPIRED else 5.0
        s = t + 20 + (stall_shift_ms if k in EXPIRED else 0.0)
        base = len(rows)
        rows += [(2 * k + 1, -1, "job", "Server", 1, s, step + 1),
                 (2 * k + 1, base, "work", "Internal", 1, s + 0.5, step)]
    return rows


def _stall_removed(frame) -> Lever:
    """A lever that removes the stalls: each stalled step back to 5 ms (as a pause lever would)."""
    edit = Edit.none(len(frame))
    work = np.nonzero((frame.name == frame.names.index("work")) & (frame.dur > 100 * MS))[0]
    edit.dur[work] = 5 * MS
    return Lever("no_stalls_test", "the stalls removed", "software", "test", edit)


def _route_latency(frame) -> np.ndarray:
    x = en.inputs(frame, [])
    lat = en._latency(x, _stall_removed(frame), client_side=False) / MS
    return lat[frame.name[frame.requests.root] == frame.names.index("route")]


def test_a_spike_of_durations_at_the_top_is_a_deadline() -> None:
    """The asks' spike at 300 ms; the route that waited for them ends ~305 ms each time too, but it
    holds the expired calls: the deadline is the innermost."""
    f = hand_frame(_rows())
    assert {f.names[k]: v / MS for k, v in capped_names(f).items()} == {"ask": 300.0, "route": 305.0}
    capped = capped_calls(f, layout(f))
    assert capped is not None
    assert {f.names[k] for k in f.name[capped.span].tolist()} == {"ask"}
    assert capped.expired.sum() == len(EXPIRED)


def test_a_smooth_tail_or_calls_that_outlast_the_value_are_no_deadline() -> None:
    """A lognormal tail (no value repeats at the top) and a value many calls outlast are no deadline."""
    rng = np.random.default_rng(3)
    rows: list[tuple] = []
    for k, d in enumerate(rng.lognormal(1.0, 1.2, 400).tolist()):
        rows += [(k, -1, "route", "Server", 0, 100.0 * k, d + 2),
                 (k, 2 * k, "call", "Client", 0, 100.0 * k + 1, d)]
    assert capped_names(hand_frame(rows)) == {}
    rows = []
    for k in range(400):  # ten calls at 300 ms, but ten more well over it
        d = 300.0 if k % 40 == 0 else 400.0 + k if k % 40 == 1 else 2.0
        rows += [(k, -1, "route", "Server", 0, 1000.0 * k, d + 2),
                 (k, 2 * k, "call", "Client", 0, 1000.0 * k + 1, d)]
    assert capped_names(hand_frame(rows)) == {}


def test_expired_calls_under_a_removed_stall_end_as_calm_calls_do() -> None:
    """The stall removed on instance b, the asks that expired while it lasted take calm asks' times and
    the route's finish moves up (1 + 2-3.8 + 4 ms). Before: the lever shortened only the jobs and
    the routes stayed at 305 ms."""
    lat = _route_latency(hand_frame(_rows()))
    # none waits for the deadline; the ten answered late stay (a calm draw may be one of them)
    assert (lat > 300).sum() == 0 and (lat > 10).sum() <= len(LONG) + 3, np.sort(lat)[-15:]


def test_a_deadline_with_no_stall_removed_under_it_stays() -> None:
    """The same stalls removed, but each 500 ms after its expired ask ended: nothing held those asks
    that the fix removes, they still expire."""
    lat = _route_latency(hand_frame(_rows(stall_shift_ms=500.0)))
    assert (lat > 300).sum() == len(EXPIRED)


def test_an_untraced_call_s_expiry_is_its_parent_s_wait_and_goes_with_the_stall() -> None:
    """No span for the ask: the finish starts 301.5 ms after the route's start where the ask expired
    (a spike of offsets at one value), 3.5-5.3 ms otherwise. The stall removed, those waits take calm
    waits' gaps: none over 300 ms (before: 305 ms); with the stalls elsewhere in time, they stay."""
    f = hand_frame(_rows(traced=False))
    capped = capped_calls(f, layout(f))
    assert capped is not None and capped.gap.all()
    assert {f.names[k] for k in f.name[capped.span[capped.expired]].tolist()} == {"finish"}
    assert capped.expired.sum() == len(EXPIRED)
    lat = _route_latency(f)
    assert (lat > 300).sum() == 0 and (lat > 10).sum() <= len(LONG) + 3, np.sort(lat)[-15:]
    lat = _route_latency(hand_frame(_rows(stall_shift_ms=500.0, traced=False)))
    assert (lat > 300).sum() == len(EXPIRED)


def test_a_call_another_lever_set_to_an_expired_time_still_ends_with_the_stall_gone() -> None:
    """Two fixes at once: one lever set the asks' times (another instance's calls at that moment,
    themselves expired: 300 ms), the other removed the stall under them. With both removed an ask is
    no longer than either fix leaves it (as Edit.merged): calm. Before: the set time had the last word
    (305 ms routes)."""
    f = hand_frame(_rows())
    lever = _stall_removed(f)
    asks = np.nonzero((f.name == f.names.index("ask")) & (f.dur >= 300 * MS))[0]
    lever.edit.dur[asks] = 300 * MS
    x = en.inputs(f, [])
    lat = en._latency(x, lever, client_side=False) / MS
    lat = lat[f.name[f.requests.root] == f.names.index("route")]
    assert (lat > 300).sum() == 0 and (lat > 10).sum() <= len(LONG) + 3, np.sort(lat)[-15:]


def test_a_deadline_that_cuts_calls_as_often_in_calm_stretches_is_not_the_stall_s() -> None:
    """400 requests: 20 asks expire, ten of them while a job on b stalled, ten in calm stretches; the
    stalls also lie under 150 asks that answered in 2-4 ms. The disturbed asks expire no more often
    than the calm ones: the deadline is not the stall's, every expiry stays. Before: the ten under a
    stall took calm times."""
    rows: list[tuple] = []
    for k in range(400):
        t, base = 1000.0 * k, len(rows)
        expired = k % 20 == 0
        ask = 300.0 if expired else 40.0 + k * 0.5 if k % 20 == 11 else 2.0 + (k % 7) * 0.3
        rows += [(2 * k, -1, "route", "Server", 0, t, 1 + ask + 0.5 + 3 + 0.5),
                 (2 * k, base, "ask", "Internal", 0, t + 1, ask),
                 (2 * k, base, "finish", "Internal", 0, t + 1 + ask + 0.5, 3.0)]
        stalled = (expired and k % 40 == 0) or (not expired and k % 20 < 8)
        step = 150.0 + 0.1 * k if stalled else 5.0
        base = len(rows)
        rows += [(2 * k + 1, -1, "job", "Server", 1, t + 0.5, step + 1),
                 (2 * k + 1, base, "work", "Internal", 1, t + 1, step)]
    lat = _route_latency(hand_frame(rows))
    assert (lat > 300).sum() == 20
