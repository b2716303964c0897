"""attributes.numeric_attributes parses each distinct value of a key once: the floats are those of a
parse of every value, a key with a missing or non-numeric value is not numeric, booleans are not."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.attributes import _numeric


def test_repeated_values_parse_as_each_value_would() -> None:
    rng = np.random.default_rng(3)
    pool = ["1", "2.50", "2.5", "1e3", " 7 ", "-0", "inf", "nan", "123456789.125"]
    values = [pool[i] for i in rng.integers(0, len(pool), 5_000)]
    idx, nums, carried = _numeric(np.arange(len(values)), values)
    expected = np.array([float(v) for v in values])
    finite = np.isfinite(expected)
    assert carried == len(values)
    assert np.array_equal(idx, np.nonzero(finite)[0])
    assert np.array_equal(nums, expected[finite])


def test_a_missing_or_textual_value_or_a_boolean_makes_a_key_not_numeric() -> None:
    assert _numeric(np.arange(3), ["1", None, "2"]) is None
    assert _numeric(np.arange(3), ["1", "2", "fast"]) is None
    assert _numeric(np.arange(3), ["1", "true", "2"]) is None
    idx, nums, carried = _numeric(np.arange(0), [])
    assert len(idx) == len(nums) == carried == 0
