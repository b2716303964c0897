"""What span attributes say about a mechanism, read generically (keys by their meaning in the
OpenTelemetry conventions and by what their values do, never by a service's span names):

- `cache_signs`: evidence that a span is a cache lookup (a cache system on it or on its children,
  a cache name, a hit/miss attribute),
- `error_flags`: which spans ended in error (status, or the error attributes of HTTP/gRPC/Jaeger),
- `numeric_attributes`: the numeric attributes of a span name with values per span (size-like
  quantities are recognised by their values varying and correlating with time, see large_payload).

The frame reads attributes lazily per span name (one query each), so callers ask for few names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tailscope.analysis.diagnosis.frame import TraceFrame

# Key-value stores used as caches (OpenTelemetry db.system / db.system.name values)
CACHE_SYSTEMS = frozenset({
    "redis", "memcached", "valkey", "keydb", "dragonfly", "hazelcast", "aerospike", "ignite", "geode",
    "coherence", "ehcache", "caffeine", "momento", "infinispan", "varnish", "tarantool",
})
SYSTEM_KEYS = ("db.system", "db.system.name")
HIT_MISS_VALUES = frozenset({"hit", "miss", "hits", "misses", "stale", "expired", "refresh_hit"})
ERROR_STATUS_VALUES = frozenset({"error", "status_code_error", "2"})
TIMEOUT_HTTP = frozenset({408, 504, 499, 598, 599})
REFUSED_HTTP = frozenset({429})  # Too Many Requests: a client span's error (OpenTelemetry: 4xx on a client)
DEADLINE_GRPC = frozenset({"4", "deadline_exceeded"})


def key_is_cache(key: str) -> bool:
    k = key.lower()
    last = k.replace("-", "_").split(".")[-1]
    return "cache" in k or last in ("hit", "miss", "is_hit", "cached") or last.endswith("_hit")


def cache_signs(frame: TraceFrame, codes: list[int]) -> str | None:
    """A short description of the first sign of a cache among the attributes of the span names
    `codes` (the span's own name first, then its children's), None when there is none."""
    for code in codes:
        for key, (_, values) in frame.attributes(code).items():
            if not values:
                continue
            sample = {str(v).strip().lower() for v in values[:2000]}
            if key in SYSTEM_KEYS and sample & CACHE_SYSTEMS:
                return f"'{frame.names[code]}' has {key}={sorted(sample & CACHE_SYSTEMS)[0]}"
            if key_is_cache(key):
                return f"'{frame.names[code]}' carries {key}"
            words = {w.split()[0] for w in sample if w}
            if len(sample) <= 8 and words & HIT_MISS_VALUES:
                return f"'{frame.names[code]}' has {key}={sorted(words & HIT_MISS_VALUES)[0]}"
    return None


def has_cache_system(frame: TraceFrame, code: int) -> bool:
    """Whether the spans of a name are calls to a key-value store used as a cache (db.system)."""
    for key, (_, values) in frame.attributes(code).items():
        if key in SYSTEM_KEYS and values and {str(v).strip().lower() for v in values[:2000]} & CACHE_SYSTEMS:
            return True
    return False


STATUS_KEYS = frozenset({"otel.status_code", "status.code", "status_code"})
HTTP_STATUS_KEYS = frozenset({"http.response.status_code", "http.status_code"})
ERROR_KEYS = STATUS_KEYS | HTTP_STATUS_KEYS | {"error", "rpc.grpc.status_code", "error.type"}


def _error_verdict(k: str, s: str) -> bool | None:
    """Whether the value `s` (stripped, lower case) of the error key `k` (lower case) says error;
    None where it says nothing (an HTTP status that is not a number)."""
    if k in STATUS_KEYS:
        return s in ERROR_STATUS_VALUES
    if k == "error":
        return s in ("true", "1")
    if k in HTTP_STATUS_KEYS:
        try:
            code_value = int(float(s))
        except ValueError:
            return None
        return code_value >= 500 or code_value in TIMEOUT_HTTP or code_value in REFUSED_HTTP
    if k == "rpc.grpc.status_code":
        return s not in ("0", "ok")
    return bool(s)  # error.type


def error_flags(frame: TraceFrame, code: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(span indices, error?) for the spans of a name that carry any status or error attribute:
    status Error (`otel.status_code`, the loader's status), `error=true`, an HTTP status >= 500, a
    timeout status or 429 (a refusal), a gRPC status other than OK. None where no span of the name says
    anything. Spans in the order they first carry one of these keys (in the attributes' key order), each
    value judged once per distinct value (a name's statuses repeat), other keys not read."""
    spans, verdicts = [], []
    for key, (idx, values) in frame.attributes(code).items():
        k = key.lower()
        if k not in ERROR_KEYS:
            continue
        n = min(len(idx), len(values))
        if n == 0:
            continue
        distinct, inverse = np.unique(np.array([str(v) for v in values[:n]], dtype=str), return_inverse=True)
        judged = [_error_verdict(k, text.strip().lower()) for text in distinct.tolist()]
        inverse = inverse.reshape(-1)
        known = np.array([j is not None for j in judged], bool)[inverse]
        spans.append(np.asarray(idx[:n], dtype=np.int64)[known])
        verdicts.append(np.array([bool(j) for j in judged], bool)[inverse][known])
    if not spans or not sum(len(x) for x in spans):
        return None
    every, bad = np.concatenate(spans), np.concatenate(verdicts)
    unique, first, at = np.unique(every, return_index=True, return_inverse=True)
    flagged = np.bincount(at.reshape(-1), weights=bad, minlength=len(unique)) > 0
    order = np.argsort(first, kind="stable")  # the order in which the spans were first seen
    return unique[order], flagged[order]


def numeric_attributes(
    frame: TraceFrame, code: int, min_coverage: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{key: (span indices, float values)} for the attributes of a name whose values are numbers on at
    least `min_coverage` spans (booleans and strings left out)."""
    if code not in frame._numeric_cache:  # detectors ask for a name again and again: parse it once
        frame._numeric_cache[code] = {
            key: _numeric(idx, values) for key, (idx, values) in frame.attributes(code).items()
        }
    out = {}
    for key, parsed in frame._numeric_cache[code].items():
        if parsed is None or parsed[2] < min_coverage or len(parsed[1]) < min_coverage:
            continue
        out[key] = (parsed[0], parsed[1])
    return out


def _numeric(idx: Any, values: list[Any]) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(span indices, float values) of an attribute's finite numeric values and how many spans carry
    it; None where its values are booleans or not numbers."""
    sample = values[:50]
    if any(isinstance(v, bool) or str(v).strip().lower() in ("true", "false") for v in sample):
        return None
    # each distinct value parsed once (a name's values repeat: sizes, flags, ids of a few models);
    # with a missing value among them, every value as before
    codes, distinct = pd.factorize(np.asarray(values, dtype=object))
    try:
        if len(codes) and codes.min() < 0:
            nums = np.asarray(values, dtype=str).astype(np.float64)
        else:
            nums = np.asarray(distinct, dtype=str).astype(np.float64)[codes]  # one C-level pass
    except (TypeError, ValueError):
        return None
    ok = np.isfinite(nums)
    return np.asarray(idx)[ok], nums[ok], len(values)


def text_codes(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(np.array([str(v) for v in values], dtype=object), return_inverse=True): the distinct
    values as text, sorted, and each value's position among them; the same arrays, by hashing (each
    distinct value sorted once, not every value: a name's key over 50,000 spans ~4 -> ~1 ms)."""
    text = np.empty(len(values), dtype=object)
    text[:] = values
    if not all(type(v) is str for v in text):
        text = np.array([str(v) for v in text], dtype=object)
    codes, distinct = pd.factorize(text)
    order = np.argsort(distinct, kind="stable")
    rank = np.empty(len(distinct), np.intp)
    rank[order] = np.arange(len(distinct))
    return np.asarray(distinct, dtype=object)[order], rank[codes]
