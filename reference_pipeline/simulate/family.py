"""What every trace family of the simulator shares: one simulated run, rendered as spans of a layout.

A family (region.py, readthrough.py, queue_worker.py) runs the discrete-event model unchanged and
says only what its traces show of it: a layout of roles (parent role, span kind, which resource side,
name, instrumentation scope, static attributes), each role's (start, end) from the model's times,
which requests have the role, per-span attributes and events, and its resources. Ids, chunking and
grouping come from `RequestIds` (spans.py), so every writer renders a family as it does the
pipeline.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reference_pipeline.simulate.model import Simulation
from reference_pipeline.simulate.naming import SDK, RoleSpec
from reference_pipeline.simulate.spans import RequestIds, SpanGroup, _mix

# role -> (parent role, kind, side, name, scope, static attributes)
Layout = dict[str, tuple[str | None, str, str, str, str, tuple[tuple[str, Any], ...]]]
Times = dict[str, tuple[np.ndarray, np.ndarray]]


class FamilySource(RequestIds):
    """The spans of one simulation in a family's shape. Subclasses set LAYOUT, NAMING and KEY (a seed
    salt, so two families' ids differ) and implement `role_times` and `resource_list`; they may
    override `present`, `attributes` and `events`."""

    LAYOUT: Layout
    NAMING: str
    KEY: int

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.naming = self.NAMING
        self.roles = tuple(self.LAYOUT)
        self.role_bits = int(np.ceil(np.log2(len(self.roles) + 2)))
        self.trace_words = (len(self.roles), len(self.roles) + 1)
        self.specs = {
            role: RoleSpec(role, parent, kind, side, name, scope, static)
            for role, (parent, kind, side, name, scope, static) in self.LAYOUT.items()
        }
        self.times = self.role_times()
        self.resources, self.resource_index = self.resource_list()
        self._key = _mix(np.array([sim.config.seed ^ self.KEY], dtype=np.uint64))[0]

    # what a family says
    def role_times(self) -> Times:
        raise NotImplementedError

    def resource_list(self) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
        raise NotImplementedError

    def present(self, role: str) -> np.ndarray | None:
        return None

    def attributes(self, role: str, reqs: np.ndarray) -> list[tuple[str, str, list]]:
        return []

    def events(self, role: str, reqs: np.ndarray) -> list[list[tuple[int, str, dict[str, Any]]]] | None:
        return None

    # RequestIds' hooks
    def _present(self, role: str) -> np.ndarray | None:
        return self.present(role)

    def _group(
        self,
        spec: RoleSpec,
        resource: int,
        reqs: np.ndarray,
        pick: list[int],
        trace_ids: list[str],
        ids: dict[str, list[str]],
    ) -> SpanGroup:
        own, parent = ids[spec.role], ids[spec.parent] if spec.parent else None
        start, end = self.times[spec.role]
        return SpanGroup(
            spec=spec,
            resource=resource,
            requests=reqs,
            trace_ids=[trace_ids[k] for k in pick],
            span_ids=[own[k] for k in pick],
            parent_ids=[parent[k] for k in pick] if parent else None,
            start_ns=start[reqs].tolist(),
            end_ns=end[reqs].tolist(),
            attrs=self.attributes(spec.role, reqs),
            events=self.events(spec.role, reqs),
            links=None,
        )


def gc_event_lists(
    sim: Simulation, reqs: np.ndarray, name: str, unit: str
) -> list[list[tuple[int, str, dict[str, Any]]]]:
    """The model's GC pauses in flight during each request, as span events named `name` with the
    duration in `unit` (`gc.duration_ms` as a float or `gc.duration_ns`) and the generation."""
    out = []
    for r in reqs.tolist():
        events = []
        for ts, gen, dur, _ in sim.gc_events.get(r, ()):
            value = {"gc.duration_ms": round(dur / 1e6, 3)} if unit == "ms" else {"gc.duration_ns": dur}
            events.append((ts, name, {**value, "gc.generation": gen}))
        out.append(events)
    return out


def resource(
    rng: np.random.Generator, service: str, host: str, language: str, **extra: Any
) -> dict[str, Any]:
    """A resource identified by host.name + process.pid (no service.instance.id), like most SDKs'
    defaults without a configured instance id."""
    return {
        "service.name": service,
        "host.name": host,
        "process.pid": int(rng.integers(2, 65000)),
        **SDK,
        "telemetry.sdk.language": language,
        **extra,
    }


def drawn(
    sim: Simulation, stream: int, median_sigma: tuple[float, float], size: int | None = None
) -> np.ndarray:
    """Log-normal ns from a family's own random stream (the model's draws stay those of the seed)."""
    from reference_pipeline.simulate.processes import lognormal

    rng = np.random.default_rng([sim.config.seed, stream])
    return lognormal(rng, median_sigma, sim.n if size is None else size).astype(np.int64)
