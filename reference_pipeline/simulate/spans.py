"""From the model's arrays to spans, a chunk of requests at a time, ready for any writer.

Ids are a hash of (seed, request, role), so any span's id can be computed anywhere (a forward span's
link to its batch leader may point into another chunk) and memory stays flat however many requests
are simulated. A chunk yields one `SpanGroup` per (role, resource): the spans of one role that share a
resource, with every varying value as a plain Python list, which is what the writers loop over.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ingest.anyvalue import format_double
from reference_pipeline import span_model as sm
from reference_pipeline.simulate.model import ROLES, Simulation
from reference_pipeline.simulate.naming import (
    RoleSpec,
    dynamic_attributes,
    entity_key,
    present,
    resources,
    role_specs,
)

_TRACE_WORDS = (14, 15)  # the two hash inputs of a trace id beside the 14 roles
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective scramble of 64-bit words."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _hex_words(words: np.ndarray, chars: int) -> list[str]:
    text = words.astype(">u8").tobytes().hex()
    return [text[k : k + chars] for k in range(0, len(text), chars)]


@dataclass
class SpanGroup:
    spec: RoleSpec
    resource: int
    requests: np.ndarray
    trace_ids: list[str]
    span_ids: list[str]
    parent_ids: list[str] | None
    start_ns: list[int]
    end_ns: list[int]
    attrs: list[tuple[str, str, list]]  # (key, type, values): type int | bool | str
    events: list[list[tuple[int, str, dict[str, int]]]] | None  # python.gc events, root spans only
    links: list[tuple[str, str]] | None  # (trace id, span id) of the batch leader's forward span


class RequestIds:
    """What every span source shares: deterministic span and trace ids per (request, role), hashed
    from the seeded key, the span count, chunking and grouping by role and resource. A source sets
    `roles`, `role_bits` (room for the role index, and the trace words after it, below the request
    number), `trace_words`, `_key`, `sim`, `specs`, `resource_index`, says which requests have a role
    (`_present`: None for all) and renders one group (`_group`)."""

    roles: tuple[str, ...]
    specs: dict[str, RoleSpec]
    resource_index: dict[str, np.ndarray]
    role_bits: int
    trace_words: tuple[int, int]
    sim: Simulation
    _key: np.uint64

    def _present(self, role: str) -> np.ndarray | None:
        raise NotImplementedError

    def _group(self, spec: RoleSpec, resource: int, reqs: np.ndarray, pick: list[int],
               trace_ids: list[str], ids: dict[str, list[str]]) -> SpanGroup:
        raise NotImplementedError

    def groups(self, first: int, stop: int) -> Iterator[SpanGroup]:
        """Span groups of requests [first, stop): one per role and resource, in role order."""
        requests = np.arange(first, stop)
        trace_ids = self.trace_ids(requests)
        ids = {role: self.span_ids(role, requests) for role in self.roles}
        for role in self.roles:
            spec = self.specs[role]
            mask = self._present(role)
            local = np.arange(len(requests)) if mask is None else np.flatnonzero(mask[first:stop])
            where = self.resource_index[spec.side][first + local]
            for resource in np.unique(where).tolist():
                pick = local[where == resource]
                yield self._group(spec, resource, first + pick, pick.tolist(), trace_ids, ids)

    def span_count(self) -> int:
        total = 0
        for role in self.roles:
            mask = self._present(role)
            total += self.sim.n if mask is None else int(mask.sum())
        return total

    def span_ids(self, role: str, requests: np.ndarray) -> list[str]:
        words = (requests.astype(np.uint64) << np.uint64(self.role_bits)) | np.uint64(self.roles.index(role))
        return _hex_words(_mix(words ^ self._key), 16)

    def trace_ids(self, requests: np.ndarray) -> list[str]:
        base = requests.astype(np.uint64) << np.uint64(self.role_bits)
        words = np.stack([base | np.uint64(w) for w in self.trace_words], axis=1)
        return _hex_words(_mix(words ^ self._key), 32)

    def chunks(self, size: int = 2048) -> Iterator[list[SpanGroup]]:
        for first in range(0, self.sim.n, size):
            yield list(self.groups(first, min(first + size, self.sim.n)))


class SpanSource(RequestIds):
    """The spans of one simulation under one naming, by chunk of requests (in send order)."""

    roles, role_bits, trace_words = ROLES, 4, _TRACE_WORDS

    def __init__(self, sim: Simulation, naming: str = "reference", run_label: str | None = None) -> None:
        self.sim, self.naming = sim, naming
        self.specs = role_specs(naming, sim.config)
        self.resources, self.resource_index = resources(sim, naming, run_label)
        self._key = _mix(np.array([sim.config.seed], dtype=np.uint64))[0]
        self._dynamic = {role: dynamic_attributes(sim, role, naming) for role in ROLES}

    def _present(self, role: str) -> np.ndarray | None:
        return present(self.sim, role)

    def _group(self, spec: RoleSpec, resource: int, reqs: np.ndarray, pick: list[int],
               trace_ids: list[str], ids: dict[str, list[str]]) -> SpanGroup:
        sim = self.sim
        own, parent = ids[spec.role], ids[spec.parent] if spec.parent else None
        start, end = sim.times[spec.role]
        attrs = []
        for key, kind, values in self._dynamic[spec.role]:
            if kind == "entity":
                attrs.append((key, "str", [entity_key(v) for v in values[reqs].tolist()]))
            else:
                attrs.append((key, kind, values[reqs].tolist()))
        events = links = None
        if spec.role == "root" and sim.config.gc_events:
            events = [[(ts, sm.GC_EVENT, {"gc.generation": gen, "gc.duration_ns": dur, "gc.collected": col})
                       for ts, gen, dur, col in sim.gc_events.get(r, ())] for r in reqs.tolist()]
        elif spec.role == "forward":
            leaders = sim.leader[reqs]
            links = list(zip(self.trace_ids(leaders), self.span_ids("forward", leaders), strict=True))
        return SpanGroup(
            spec=spec, resource=resource, requests=reqs,
            trace_ids=[trace_ids[k] for k in pick], span_ids=[own[k] for k in pick],
            parent_ids=[parent[k] for k in pick] if parent else None,
            start_ns=start[reqs].tolist(), end_ns=end[reqs].tolist(), attrs=attrs, events=events, links=links,
        )


def string_value(value: Any) -> str:
    """An attribute value as the store keeps it (the Collector's AsString)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_double(value)
    return str(value)
