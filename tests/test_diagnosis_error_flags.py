"""error_flags (diagnosis/attributes.py, issue 29's diagnose speed): the same (span indices, error?)
as the per-span reading it replaced (kept below as the reference), in the same order, on every kind
of status value; the values of keys that say nothing about errors are not read (they were walked
span by span: 0.27 s of the 1 M-span bench's main thread)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.attributes import (
    ERROR_STATUS_VALUES,
    TIMEOUT_HTTP,
    error_flags,
)


def _reference(attrs: dict[str, tuple[np.ndarray, list[Any]]]) -> tuple[np.ndarray, np.ndarray] | None:
    """error_flags as it read every value of every key, one span at a time (main before issue 29's change)."""
    flagged: dict[int, bool] = {}
    for key, (idx, values) in attrs.items():
        k = key.lower()
        for i, v in zip(idx.tolist(), values, strict=False):
            s = str(v).strip().lower()
            if k in ("otel.status_code", "status.code", "status_code"):
                bad = s in ERROR_STATUS_VALUES
            elif k == "error":
                bad = s in ("true", "1")
            elif k in ("http.response.status_code", "http.status_code"):
                try:
                    code_value = int(float(s))
                except ValueError:
                    continue
                bad = code_value >= 500 or code_value in TIMEOUT_HTTP
            elif k == "rpc.grpc.status_code":
                bad = s not in ("0", "ok")
            elif k == "error.type":
                bad = bool(s)
            else:
                continue
            flagged[i] = flagged.get(i, False) or bad
    if not flagged:
        return None
    return np.fromiter(flagged.keys(), np.int64, len(flagged)), np.fromiter(
        flagged.values(), bool, len(flagged)
    )


class _Frame:
    def __init__(self, attrs: dict[str, tuple[np.ndarray, Any]]) -> None:
        self.attrs = attrs

    def attributes(self, code: int) -> dict[str, tuple[np.ndarray, Any]]:
        return self.attrs


class _Unread(list):
    """Values that fail the test when read."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("the values of a key that says nothing about errors were read")

    def __getitem__(self, item):  # type: ignore[no-untyped-def]
        raise AssertionError("the values of a key that says nothing about errors were read")


def test_the_flags_are_the_per_span_readings() -> None:
    rng = np.random.default_rng(29)
    choices: dict[str, list[Any]] = {
        "otel.status_code": ["ERROR", "Ok", " error ", "UNSET", 2, "2", "STATUS_CODE_ERROR", None],
        "Error": [True, False, "true", "1", 1, 0, "yes", " TRUE"],
        "http.response.status_code": [200, 500, "503", 408, "499", 404, "n/a", 504.0, "599", "abc", None],
        "http.status_code": ["200", 502, "  504 ", "1e3"],
        "rpc.grpc.status_code": [0, "0", "OK", 4, "DEADLINE_EXCEEDED", 14],
        "error.type": ["", "timeout", " ", "java.io.IOException"],
        "status.code": ["2", "1", 0],
    }
    for trial in range(40):
        keys = rng.permutation(list(choices))[: rng.integers(1, len(choices) + 1)]
        attrs = {}
        for key in keys:
            n = int(rng.integers(0, 60))
            idx = np.sort(rng.choice(200, size=n, replace=False)).astype(np.int64)
            values = [choices[key][j] for j in rng.integers(0, len(choices[key]), size=n)]
            if trial % 7 == 3:  # fewer values than spans (zip stops at the shorter)
                values = values[: n // 2]
            attrs[str(key)] = (idx, values)
        expected, got = _reference(attrs), error_flags(_Frame(attrs), 0)  # type: ignore[arg-type]
        if expected is None:
            assert got is None
            continue
        assert got is not None
        assert got[0].tolist() == expected[0].tolist()
        assert got[1].tolist() == expected[1].tolist()
        assert got[0].dtype == np.int64 and got[1].dtype == bool


def test_other_keys_are_not_read() -> None:
    attrs = {
        "payload.size": (np.arange(5, dtype=np.int64), _Unread([1, 2, 3, 4, 5])),
        "otel.status_code": (np.arange(3, dtype=np.int64), ["OK", "ERROR", "OK"]),
    }
    got = error_flags(_Frame(attrs), 0)  # type: ignore[arg-type]
    assert got is not None
    assert got[0].tolist() == [0, 1, 2] and got[1].tolist() == [False, True, False]
    assert error_flags(_Frame({"payload.size": attrs["payload.size"]}), 0) is None  # type: ignore[arg-type]
