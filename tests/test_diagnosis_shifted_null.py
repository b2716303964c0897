"""gc_pause's shifted null (gc_pause.shifted_null) counts what rotating every (instance, name) row of
slow bins counts: rows with no slow bin and instances with fewer than two such rows are left out of
the additions, not out of the draws (issue 29: the 1 M-span bench's 130 rows held 29 slow ones)."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analysis.diagnosis import gc_pause


def every_row(slow_cov: np.ndarray, a_need: np.ndarray, rng: np.random.Generator) -> list[int]:
    """The null as it was computed before: every row rotated and added."""
    n_inst, n_names, n_bins = slow_cov.shape
    slow_u8 = slow_cov.view(np.uint8)
    acc = np.zeros((n_inst, n_bins), np.uint8)
    null = []
    for _ in range(gc_pause.SHIFTS):
        acc[:] = 0
        shifts = rng.integers(0, n_bins, size=(n_inst, n_names))
        for i in range(n_inst):
            for j in range(n_names):
                k = int(shifts[i, j])
                acc[i, k:] += slow_u8[i, j, : n_bins - k]
                acc[i, :k] += slow_u8[i, j, n_bins - k :]
        null.append(int((acc >= a_need).sum()))
    return null


@pytest.mark.parametrize("seed", range(6))
def test_the_null_counts_what_every_row_rotated_counts(seed):
    rng = np.random.default_rng(seed)
    n_inst, n_names, n_bins = 7, 9, 400
    density = rng.uniform(0.02, 0.4)
    slow = rng.random((n_inst, n_names, n_bins)) < density
    # rows never slow, an instance with one slow row, an instance with none
    slow[:, rng.choice(n_names, 3, replace=False)] = False
    slow[1] = False
    slow[1, 4, rng.choice(n_bins, 30)] = True
    slow[2] = False
    active = np.maximum(slow.sum(axis=1), rng.integers(0, n_names, (n_inst, n_bins)))
    a_need = np.maximum(2, np.ceil(0.6 * active)).astype(np.int16)
    got = gc_pause.shifted_null(slow, a_need, np.random.default_rng(seed + 100))
    assert got == every_row(slow, a_need, np.random.default_rng(seed + 100))
    assert any(got)  # the case counts something


def test_the_null_of_a_run_with_nothing_slow_is_zero():
    slow = np.zeros((3, 4, 50), bool)
    a_need = np.full((3, 50), 2, np.int16)
    assert gc_pause.shifted_null(slow, a_need, np.random.default_rng(0)) == [0] * gc_pause.SHIFTS
