"""How many same-group spans are ahead of each span when it starts (lock_contention.py's count of the
requests ahead at a shared resource), on arrays. The sorted start and end keys of a set of spans do
not depend on how the spans are counted (by start order, by cohorts, by completion within a cohort),
so one fit's counts share them (`keys`): they were sorted and searched again for each count, a third
of lock_contention's time at 1 M spans (bench/RESULTS.md, scale19)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Keys:
    """The spans' (group, start) and (group, end) keys sorted, the zero-length spans' starts, and
    where each span's group begins in both orders."""

    s_key: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    zero: np.ndarray
    group_first: np.ndarray
    group_first_end: np.ndarray


def keys(start: np.ndarray, end: np.ndarray, group: np.ndarray) -> Keys:
    horizon = int(end.max(initial=0)) + 2
    s_key = group * horizon + start
    starts, ends = np.sort(s_key), np.sort(group * horizon + end)
    return Keys(
        s_key,
        starts,
        ends,
        np.sort(s_key[end == start]),
        np.searchsorted(starts, group * horizon, side="left"),
        np.searchsorted(ends, group * horizon, side="left"),
    )


def ahead(
    start: np.ndarray, end: np.ndarray, group: np.ndarray, member: np.ndarray | None, by_end: bool,
    k: Keys | None = None,
) -> np.ndarray:
    """concurrency_at_start on arrays; `member`: cohort ids, or None to count by start order; `k`:
    keys(start, end, group), computed here when not given."""
    k = keys(start, end, group) if k is None else k
    at_key, extra = k.s_key, np.zeros(len(start))
    if member is not None and len(start):
        size = np.bincount(member)
        at_key = np.full(len(size), np.iinfo(np.int64).max)
        np.minimum.at(at_key, member, k.s_key)
        at_key = at_key[member]
        extra = (size[member] - 1) / 2.0
        if by_end:
            order = np.lexsort((end, member))
            extra = np.empty(len(start))
            extra[order] = np.arange(len(start)) - np.searchsorted(member[order], member[order])
    started_before = np.searchsorted(k.starts, at_key, side="left")
    ended_by = np.searchsorted(k.ends, at_key, side="right")
    # zero-length spans that start exactly at s ended "by s" without having started before it
    ended_by -= np.searchsorted(k.zero, at_key, side="right") - np.searchsorted(k.zero, at_key, side="left")
    return np.maximum((started_before - k.group_first) - (ended_by - k.group_first_end), 0) + extra
