"""A step taken out of a diagnosis' time (issue 29, helper scale11) that must not change what it finds:
the frame's span ends computed once (detectors asked for them ~190 times per 1 M-span diagnosis)."""

from __future__ import annotations

import pytest

from tests.hand_frames import MS, hand_frame


def _frame():
    return hand_frame(
        [
            (0, -1, "root", "Server", 0, 0, 10),
            (0, 0, "work", "Internal", 0, 1, 4),
            (1, -1, "root", "Server", 1, 5, 20),
            (1, 2, "work", "Internal", 1, 6, 12),
        ]
    )


def test_the_ends_are_computed_once_and_read_only():
    f = _frame()
    end = f.end
    assert end is f.end  # the same array: not start + dur again on every ask
    assert end.tolist() == [10 * MS, 5 * MS, 25 * MS, 18 * MS]
    with pytest.raises(ValueError):
        end[0] = 0  # a caller cannot change the ends every other detector reads


def test_the_ends_follow_a_new_start_or_duration():
    f = _frame()
    before = f.end
    f.dur = f.dur * 2
    assert f.end is not before
    assert f.end.tolist() == (f.start + f.dur).tolist()
    f.start = f.start + MS
    assert f.end.tolist() == (f.start + f.dur).tolist()
