"""Passes the diagnosis shares or computes once instead of again (issue 29: diagnose's speed) give what
each caller's own pass gave: the same arrays and values, bit for bit, on hand-built runs."""

from __future__ import annotations

import itertools

import numpy as np

from tailscope.analysis.diagnosis import loop_blocks, worker_waits
from tailscope.analysis.diagnosis.frame import SPAN_KINDS
from tailscope.analysis.diagnosis.model import Context
from tests.test_diagnosis_loop_blocks import _loop_service
from tests.test_diagnosis_worker_waits import _service


def _stalls(frame, seed: int, n: int = 40) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`n` random stretches of 20-400 ms on the frame's instances, sorted as gc_pause keeps them."""
    rng = np.random.default_rng(seed)
    inst = rng.integers(0, len(frame.instances), n).astype(np.int64)
    t0 = rng.integers(0, int(frame.end.max()), n).astype(np.int64)
    t1 = t0 + rng.integers(20_000_000, 400_000_000, n).astype(np.int64)
    order = np.lexsort((t0, inst))
    return inst[order], t0[order], t1[order]


def _same(a: dict | None, b: dict | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    assert a["finding"].to_dict(True) == b["finding"].to_dict(True)
    for x, y in zip(a["episodes"], b["episodes"], strict=True):
        assert np.array_equal(x, y)
    assert np.array_equal(a["spans"], b["spans"])


def test_loop_blocks_measures_its_steps_once_and_scores_them_again_per_stalls(monkeypatch):
    """find() is asked before gc_pause has its stalls and again after: the second answer equals a
    fresh computation that knew the stalls from the start, and the steps are measured only once."""
    measure, calls = loop_blocks._measure, []

    def counted(*args, **kwargs):
        calls.append(1)
        return measure(*args, **kwargs)

    for seed, blocker, own_span in ((2, True, True), (3, True, False), (2, False, True)):
        frame = _loop_service(seed, blocker, own_span).frame()
        stalls = _stalls(frame, seed)
        calls.clear()
        monkeypatch.setattr(loop_blocks, "_measure", counted)
        ctx = Context(frame)
        first = loop_blocks.find(ctx)
        measured = len(calls)
        ctx.notes["gc_episodes"] = stalls
        again = loop_blocks.find(ctx)
        assert len(calls) == measured > 0  # the stall-free measures were not taken again
        monkeypatch.setattr(loop_blocks, "_measure", measure)
        fresh = Context(frame)
        fresh.notes["gc_episodes"] = stalls
        _same(again, loop_blocks.find(fresh))
        _same(first, loop_blocks.find(Context(frame)))
        if blocker:
            assert again is not None and first is not None


def _expected_and_seen_per_group(ctx, ep_inst, ep_t0, ep_t1):
    """worker_waits._expected_and_seen as it was: every span's instance compared per group, and one
    binary search pair per stretch."""
    f = ctx.frame
    work = np.isin(f.kind, (SPAN_KINDS.index("Unspecified"), SPAN_KINDS.index("Internal")))
    work &= f.leaf & (f.request >= 0) & np.isin(f.instance, np.unique(ep_inst))
    spans = np.nonzero(work)[0]
    out = {}
    if len(spans) == 0:
        return out
    order = np.lexsort((f.start[spans], f.name[spans], f.instance[spans]))
    spans = spans[order]
    key = f.instance[spans].astype(np.int64) * len(f.names) + f.name[spans]
    cuts = np.r_[0, np.nonzero(np.diff(key))[0] + 1, len(spans)]
    mid = ep_t0 + (ep_t1 - ep_t0) // 2
    for a, b in itertools.pairwise(cuts.tolist()):
        if b - a < worker_waits.MIN_SPANS:
            continue
        group = spans[a:b]
        inst = int(f.instance[group[0]])
        here = ep_inst == inst
        on = f.instance == inst
        life = float(f.end[on].max() - f.start[on].min())
        concurrency = len(group) * float(np.median(f.dur[group])) / max(life, 1.0)
        start, end = f.start[group], f.end[group]
        longest = int(f.dur[group].max())
        seen = 0
        for m, t1 in zip(mid[here], ep_t1[here], strict=True):
            lo, hi = np.searchsorted(start, m - longest), np.searchsorted(start, m, side="right")
            seen += int((end[lo:hi] >= t1).sum())
        out[(inst, int(f.name[group[0]]))] = (concurrency * int(here.sum()), seen)
    return out


def test_worker_waits_expected_and_seen_match_the_per_group_pass():
    for seed, starved in ((4, True), (4, False), (5, True)):
        frame = _service(seed, starved).frame()
        for k in range(3):
            ep = _stalls(frame, 10 * seed + k, n=25 + 10 * k)
            ctx = Context(frame)
            got = worker_waits._expected_and_seen(ctx, *ep)
            want = _expected_and_seen_per_group(ctx, *ep)
            assert got == want and len(want) > 0


def test_stopped_accepts_overlapping_spans_match_a_mask_per_stop():
    """_overlapping (sorted spans, two binary searches a stop) finds per stop the spans that one mask
    over every span per stop found, boundaries included (a span ending at a stop's start, or starting
    at its end, is not in it)."""
    from tailscope.analysis.diagnosis.stopped_accepts import _overlapping

    frame = _service(4, True).frame()
    work = np.nonzero(frame.leaf & (frame.request >= 0))[0]
    w_inst, w_start, w_end = frame.instance[work], frame.start[work], frame.end[work]
    rng = np.random.default_rng(7)
    for n in (1, 30, 200):
        inst, t0, t1 = _stalls(frame, n, n)
        edge = rng.choice(work, n)  # stops that begin where a span ends, or end where one begins
        third = n // 3
        t0[:third], t1[third : 2 * third] = frame.end[edge[:third]], frame.start[edge[third : 2 * third]]
        inst[: 2 * third] = frame.instance[edge[: 2 * third]]
        t1 = np.maximum(t1, t0 + 1)
        got = _overlapping(frame, work, inst, t0, t1)
        want = [work[(w_inst == i) & (w_start < b) & (w_end > a)]
                for i, a, b in zip(inst, t0, t1, strict=True)]
        assert [sorted(x.tolist()) for x in got] == [sorted(x.tolist()) for x in want]
        assert sum(len(x) for x in want) > 0


def test_pool_release_peer_of_reads_each_name_once_and_answers_as_before(monkeypatch):
    """peer_of is asked for the same names by head_of_line, transaction_waits and pool_release: the
    answer is read once per name and run, and is the most common peer named on the name's spans."""
    from tailscope.analysis.diagnosis import pool_release
    from tests.mechanism_frames import TraceBuilder

    b = TraceBuilder(1)
    for k in range(60):
        b.new_trace()
        root = b.span(None, "GET /", "Server", "api/0", 10.0 * k, 5.0)
        db = "db-1" if k % 3 else "db-2"
        b.span(root, "SELECT", "Client", "api/0", 10.0 * k + 1, 2.0, server__address=db)
        b.span(root, "GET cache", "Client", "api/0", 10.0 * k + 3, 1.0, net__peer__name="cache")
        b.span(root, "render", "Internal", "api/0", 10.0 * k + 4, 1.0)
    frame = b.frame()
    read, peer = [], pool_release._peer_of
    monkeypatch.setattr(pool_release, "_peer_of", lambda ctx, code: read.append(code) or peer(ctx, code))
    ctx = Context(frame)
    codes = [frame.names.index(n) for n in ("SELECT", "GET cache", "render")]
    first = [pool_release.peer_of(ctx, c) for c in codes]
    assert first == ["db-1", "cache", None]
    assert [pool_release.peer_of(ctx, c) for c in codes * 2] == first * 2
    assert sorted(read) == sorted(codes)


def _gmm2_every_round(x: np.ndarray, iters: int = 60):
    """gmm2's EM as it was before it stopped at its fixed point: all `iters` rounds (the reference)."""
    import math

    from tailscope.analysis.diagnosis.stats import _resp, _weighted_square

    n, sd_all = len(x), float(x.std())
    floor = max(sd_all * 0.02, 1e-3)
    mu = [float(np.quantile(x, 0.25)), float(np.quantile(x, 0.9))]
    sd, w = [sd_all / 2, sd_all / 2], [0.7, 0.3]
    r, q, work = np.empty(n), np.empty(n), np.empty(n)
    for _ in range(iters):
        _resp(x, w, mu, sd, r, work)
        n1 = float(r.sum())
        n0 = n - n1
        if n1 < 1 or n0 < 1:
            return None
        np.subtract(1, r, out=q)
        mu = [float(np.multiply(q, x, out=work).sum() / n0), float(np.multiply(r, x, out=work).sum() / n1)]
        sd = [max(math.sqrt(float(_weighted_square(q, x, mu[0], work).sum() / n0)), floor),
              max(math.sqrt(float(_weighted_square(r, x, mu[1], work).sum() / n1)), floor)]
        w = [n0 / n, n1 / n]
    return (w, mu, sd) if mu[1] >= mu[0] else (w[::-1], mu[::-1], sd[::-1])


def test_gmm2_stops_at_its_fixed_point_with_the_same_fit(monkeypatch):
    """EM rounds after the parameters repeat to the bit give them again: gmm2 stops there, with the
    fit all 60 rounds gave (clean modes converge in a few rounds; overlapping ones may run them all)."""
    from tailscope.analysis.diagnosis import stats

    rng = np.random.default_rng(7)
    sets = [
        np.r_[rng.normal(10, 1, 900), rng.normal(40, 2, 100)],  # two clean modes
        np.r_[rng.normal(10, 3, 500), rng.normal(14, 3, 500)],  # overlapping
        rng.lognormal(2.0, 0.6, 2000),  # one skewed mode
        np.r_[np.full(200, 5.0), rng.normal(30, 1, 50)],  # a constant mode: the sd floor
    ]
    rounds: list[int] = []
    resp = stats._resp
    monkeypatch.setattr(stats, "_resp", lambda *a, **k: (rounds.append(len(a)), resp(*a, **k))[1])
    for x in sets:
        rounds.clear()
        mix = stats.gmm2(x)
        reference = _gmm2_every_round(x)
        assert (mix is None) == (reference is None)
        if mix is not None:
            w, mu, sd = reference
            assert (mix.w, mix.mu, mix.sd) == (tuple(w), tuple(mu), tuple(sd))  # to the bit
    rounds.clear()
    stats.gmm2(sets[0])
    assert sum(1 for r in rounds if r == 6) < 60  # fails before: every fit ran all 60 rounds


def test_text_codes_match_unique_of_the_values_as_text():
    from tailscope.analysis.diagnosis.attributes import text_codes

    rng = np.random.default_rng(3)
    ids = [f"user-{k}" for k in rng.integers(0, 500, 5000)]
    cases = [
        ids,
        [str(k) for k in rng.integers(0, 40, 3000)],  # numbers as text: sorted as text
        [1, "1", None, "None", 2.5, "b", "a", "", "é", "a"],  # not text: as str() makes it
        ["x"],
        [],
    ]
    for values in cases:
        uniq, code = text_codes(values)
        text = np.array([str(v) for v in values], dtype=object)
        want_uniq, want_code = np.unique(text, return_inverse=True)
        assert list(uniq) == list(want_uniq)
        assert np.array_equal(code, want_code.reshape(-1))
