"""ahead_counts: the spans ahead of each span at its start, with the sorted keys one fit's counts share
(lock_contention._fit: by start order, by cohorts, by completion within a cohort); the same counts as
the count that sorted them for every call (kept below as the reference)."""

from __future__ import annotations

import numpy as np
from test_diagnosis_lock_midspan import traces

from tailscope.analysis.diagnosis import ahead_counts, lock_contention
from tailscope.analysis.diagnosis.model import Context


def reference(start, end, group, member, by_end):
    """lock_contention._ahead as it was: every key sorted and searched on each call."""
    horizon = int(end.max(initial=0)) + 2
    s_key = group * horizon + start
    e_key = group * horizon + end
    starts = np.sort(s_key)
    ends = np.sort(e_key)
    at_key, extra = s_key, np.zeros(len(start))
    if member is not None and len(start):
        size = np.bincount(member)
        at_key = np.full(len(size), np.iinfo(np.int64).max)
        np.minimum.at(at_key, member, s_key)
        at_key = at_key[member]
        extra = (size[member] - 1) / 2.0
        if by_end:
            order = np.lexsort((end, member))
            extra = np.empty(len(start))
            extra[order] = np.arange(len(start)) - np.searchsorted(member[order], member[order])
    started_before = np.searchsorted(starts, at_key, side="left")
    ended_by = np.searchsorted(ends, at_key, side="right")
    zero = np.sort(s_key[end == start])
    ended_by -= np.searchsorted(zero, at_key, side="right") - np.searchsorted(zero, at_key, side="left")
    group_first = np.searchsorted(starts, group * horizon, side="left")
    group_first_end = np.searchsorted(ends, group * horizon, side="left")
    return np.maximum((started_before - group_first) - (ended_by - group_first_end), 0) + extra


def test_the_shared_keys_give_the_counts_of_a_count_that_sorts_them_each_time():
    rng = np.random.default_rng(3)
    for n, groups, together in ((0, 1, 5), (1, 1, 5), (40, 2, 3), (500, 7, 20), (3000, 30, 50)):
        start = rng.integers(0, 2_000, n).astype(np.int64)  # ties: spans that start together
        dur = rng.integers(0, 60, n).astype(np.int64) * (rng.random(n) > 0.1)  # some zero-length
        end, group = start + dur, rng.integers(0, groups, n).astype(np.int64)
        member = lock_contention.cohorts(start, group, together) if n else np.zeros(0, np.int64)
        shared = ahead_counts.keys(start, end, group)
        for m, by_end in ((None, False), (member, False), (member, True)):
            expected = reference(start, end, group, m, by_end)
            assert np.array_equal(ahead_counts.ahead(start, end, group, m, by_end, shared), expected)
            assert np.array_equal(ahead_counts.ahead(start, end, group, m, by_end), expected)


def test_a_fit_sorts_its_keys_once(monkeypatch):
    sorted_keys, counts = [], []
    keys, ahead = ahead_counts.keys, ahead_counts.ahead

    def counted_keys(*args):
        sorted_keys.append(keys(*args))
        return sorted_keys[-1]

    def counted_ahead(*args):
        counts.append(args[5] if len(args) > 5 else None)
        return ahead(*args)

    monkeypatch.setattr(ahead_counts, "keys", counted_keys)
    monkeypatch.setattr(ahead_counts, "ahead", counted_ahead)
    frame = traces("lock")
    spans = np.nonzero(frame.name == frame.names.index("Pricer.quote"))[0]
    fit = lock_contention._fit(Context(frame), spans)
    assert fit is not None and fit.rho > 0.3  # a lock: both counts tried, the cohorts' by end too
    assert len(sorted_keys) == 1  # fails before: no shared keys (each count sorted its own)
    assert len(counts) == 3 and all(k is sorted_keys[0] for k in counts)
