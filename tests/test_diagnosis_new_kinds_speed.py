"""new_kinds' two shortcuts give what the longer ways gave (issue 29: 151 -> 52 ms of the 1 M-span
bench's diagnosis): a name's steps (each distinct instance, start, duration's first span) by a lexsort,
and an attribute skipped before the text of each value is made where its raw values show it cannot
have 2..MAX_KINDS distinct texts."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tailscope.analysis.diagnosis import new_kinds


def steps_by_unique(f, code: int) -> np.ndarray:
    """The steps as np.unique(axis=0) found them before."""
    spans = np.nonzero((f.name == code) & (f.request >= 0))[0]
    key = np.stack([f.instance[spans], f.start[spans], f.dur[spans]], axis=1)
    _, first = np.unique(key, axis=0, return_index=True)
    steps = spans[np.sort(first)]
    return steps[np.argsort(f.start[steps], kind="stable")]


@pytest.mark.parametrize("seed", range(8))
def test_steps_are_the_first_span_of_each_distinct_step(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    start = rng.integers(0, 400, n)  # few starts and durations: many spans share a step
    f = SimpleNamespace(
        name=rng.integers(0, 3, n),
        request=np.where(rng.random(n) < 0.1, -1, 0),
        instance=rng.integers(0, 4, n),
        start=start,
        dur=rng.integers(1, 6, n),
    )
    for code in range(3):
        got = new_kinds._steps(f, code)
        assert np.array_equal(got, steps_by_unique(f, code))
        assert len(got) < ((f.name == code) & (f.request >= 0)).sum()  # the case merges spans


def text_out_of_range(raw: np.ndarray) -> bool:
    """The rule as the text of each value says it."""
    distinct = len(np.unique(np.asarray([str(v) for v in raw])))
    return not 2 <= distinct <= new_kinds.MAX_KINDS


@pytest.mark.parametrize(
    "values",
    [
        ["a"] * 50,
        ["a", "b"] * 20,
        [None, "None"] * 10,  # two raw values, one text
        [None, "x"] * 10,
        [str(i) for i in range(new_kinds.MAX_KINDS)],
        [str(i) for i in range(new_kinds.MAX_KINDS + 1)],
        [str(i) for i in range(new_kinds.MAX_KINDS)] + [None, "None"],
        [str(i) for i in range(300)],
        [1, "1"] * 5,  # other types: left to the text
        [1.0, 2.0, 3.0],
        [[1], [2]],  # unhashable
    ],
)
def test_a_skipped_attribute_is_one_the_text_rule_skips(values):
    raw = np.empty(len(values), dtype=object)
    raw[:] = values
    if new_kinds._kinds_out_of_range(raw):
        assert text_out_of_range(raw)


def test_most_attributes_of_items_are_skipped_early():
    raw = np.asarray([f"key-{i}" for i in range(2000)], dtype=object)
    assert new_kinds._kinds_out_of_range(raw)
    assert new_kinds._kinds_out_of_range(np.asarray(["model"] * 100, dtype=object))
