"""Steps taken out of a diagnosis' time (issue 29, helper scale11) that must not change what it finds:
the frame's span ends computed once, and gc_pause's shifted null summed from one slice per name."""

from __future__ import annotations

import numpy as np
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


def _null_old(slow: np.ndarray, need: np.ndarray, rng: np.random.Generator, rounds: int) -> list[int]:
    """gc_pause's null as it was summed before (two slice adds per name and round)."""
    n_inst, n_names, n_bins = slow.shape
    acc, out = np.zeros((n_inst, n_bins), np.uint8), []
    u8 = slow.view(np.uint8)
    for _ in range(rounds):
        acc[:] = 0
        shifts = rng.integers(0, n_bins, size=(n_inst, n_names))
        for i in range(n_inst):
            for j in range(n_names):
                k = int(shifts[i, j])
                acc[i, k:] += u8[i, j, : n_bins - k]
                acc[i, :k] += u8[i, j, n_bins - k :]
        out.append(int((acc >= need).sum()))
    return out


def test_gc_pause_null_counts_equal_the_two_slice_sum():
    """The shifted null of gc_pause (one add per name over the bins laid twice end to end) counts the
    same co-slow cells as the two-slice sum, round by round, from the same draws."""
    from tailscope.analysis.diagnosis import gc_pause

    rng = np.random.default_rng(3)
    slow = rng.random((3, 5, 97)) < 0.3
    need = rng.integers(1, 4, size=(3, 97)).astype(np.int16)
    expected = _null_old(slow, need, np.random.default_rng(11), 60)
    assert gc_pause.shifted_null(slow, need, np.random.default_rng(11), 60) == expected
    assert len(set(expected)) > 1  # the rounds differ: the shifts matter
