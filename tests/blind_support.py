"""One blind family's run as the store holds it, for the blind families' tests: written in its seed's
format, read by the real loader, its spans read back as dicts."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import duckdb
import numpy as np
import orjson

from ingest.loader import load_paths
from ingest.span_json import collector_paused
from reference_pipeline.simulate.blind import SUFFIX, write_run

SPAN_COLUMNS = {
    "start": "epoch_ns(Timestamp)",
    "duration": "Duration",
    "trace": "TraceId",
    "id": "SpanId",
    "parent": "ParentSpanId",
    "name": "SpanName",
    "kind": "SpanKind",
    "service": "ServiceName",
    "resource": "ResourceAttributes",
    "attrs": "SpanAttributes",
    "status": "StatusCode",
    "events": "Events",
    "links": "Links",
}


def load_run(
    tmp: Path,
    family: str,
    scenario: str,
    requests: int,
    seed: int,
    instance: Callable[[dict], str] | None = None,
    lists: bool = False,
    **opts,
) -> tuple[list[dict], dict]:
    """(spans, write_run's summary). Each span: the SPAN_COLUMNS keys, with `end` = start + duration,
    `resource` and `attrs` as dicts, `events` and `links` as the store's JSON text (with `lists`: as
    lists, [] where none), and, with `instance`, `instance` = instance(resource).

    The cyclic collector is paused meanwhile (the run's spans are acyclic): a test module keeps
    its runs, so each collection that generating, loading and reading a run set off scanned every
    span of the runs before it (8 recsys runs kept: 14.1 -> 10.6 s of CPU)."""
    with collector_paused():
        return _load_run(tmp, family, scenario, requests, seed, instance, lists, **opts)


def _load_run(
    tmp: Path,
    family: str,
    scenario: str,
    requests: int,
    seed: int,
    instance: Callable[[dict], str] | None,
    lists: bool,
    **opts,
) -> tuple[list[dict], dict]:
    out = tmp / f"{family}-{scenario}-{requests}-{seed}.tmp"
    written = write_run(out, family, scenario, requests, seed, **opts)
    path = Path(written["out"]).with_suffix(SUFFIX[written["format"]])
    Path(written["out"]).rename(path)
    db = path.with_suffix(".duckdb")
    result = load_paths([path], db, "run")
    assert not result.failed, [f.error for f in result.failed]
    select = ", ".join(SPAN_COLUMNS.values())
    with duckdb.connect(str(db), read_only=True) as conn:
        rows = conn.execute(f"SELECT {select} FROM otel_traces").fetchall()
    spans = [dict(zip(SPAN_COLUMNS, row, strict=True)) for row in rows]
    resources: dict[str, dict] = {}  # a run has few distinct resources: each text parsed once, copied
    for span in spans:
        span["end"] = span["start"] + span["duration"]
        text = span["resource"]
        resource = resources.get(text)
        if resource is None:
            resource = resources[text] = orjson.loads(text)
        span["resource"], span["attrs"] = dict(resource), orjson.loads(span["attrs"])
        if lists:
            span["events"] = orjson.loads(span["events"]) if span["events"] else []
            span["links"] = orjson.loads(span["links"]) if span["links"] else []
        if instance is not None:
            span["instance"] = instance(span["resource"])
    assert len(spans) == written["spans"]
    return spans, written


def cached(load: Callable[[str, int, int], object]) -> Callable[[str, int, int], object]:
    """`load(scenario, requests, seed)`, each run made once per test module (a module-scoped fixture
    returns it), so the tests that read one run share it."""
    return cache(load)


def seed_runs(tmp: Path, family: str, format_of: Callable[[int], str]) -> Callable[[str, int, int], object]:
    """`get(scenario, requests, seed)`: the run's spans (load_run), each run loaded once, its file in the
    format the family gives that seed (`format_of(seed)`)."""

    def load(scenario: str, requests: int, seed: int) -> list[dict]:
        spans, written = load_run(tmp, family, scenario, requests, seed)
        assert written["format"] == format_of(seed)
        return spans

    return cached(load)


def instance_label(resource: dict) -> str:
    """The instance the store names: service.instance.id, host.name:process.pid, or Zipkin's ip:port."""
    if "service.instance.id" in resource:
        return resource["service.instance.id"]
    if "process.pid" in resource:
        return f"{resource['host.name']}:{resource['process.pid']}"
    return f"{resource['net.host.ip']}:{resource['net.host.port']}"


def table_span_dicts(family, scenario: str, requests: int, seed: int,
                     instance: Callable[[dict], str] = instance_label) -> tuple[dict, ...]:
    """A family module's generated table as span dicts (times in ns from the run's start; `parent` the
    parent's `i`, -1 for a root; `resource` the resource's attributes as the file writes them, Zipkin's
    the endpoint), without the loader: the tests of a blind family read most mechanisms this way, to
    stay fast. `instance(resource)`: the instance label (instance_label unless given)."""
    return span_dicts(family.generate(scenario, requests, seed), family.setup(seed)["fmt"] == "zipkin",
                      instance)


def span_dicts(table, zipkin: bool, instance: Callable[[dict], str] = instance_label) -> tuple[dict, ...]:
    """table_span_dicts of a table already generated (a test that keeps its tables uses it directly);
    `zipkin`: whether the seed writes Zipkin v2, whose resource is the endpoint."""
    from reference_pipeline.simulate.trace_table import DEFAULT_START_NS

    out = []
    for i, (trace, parent, name, kind, res, _s, start, end, attrs, status, _m, events, _p) in enumerate(
            table.rows):
        service, ip, port = table.endpoints[res]
        resource = {"service.name": service, "net.host.ip": ip, "net.host.port": port} if zipkin else (
            table.resources[res])
        out.append({"i": i, "trace": trace, "parent": parent, "name": name, "kind": kind, "service": service,
                    "resource": resource, "instance": instance(resource),
                    "start": start - DEFAULT_START_NS, "end": end - DEFAULT_START_NS, "duration": end - start,
                    "attrs": attrs, "status": status, "events": events, "links": table.links.get(i, [])})
    return tuple(out)


def p(values, q: float) -> float:
    """The q-th percentile of values, as a float."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


def named(spans, name: str, kind: str | None = None, service: str | None = None) -> list[dict]:
    """The spans of that name (any case), kind and service."""
    return [s for s in spans if s["name"].lower() == name.lower() and kind in (None, s["kind"])
            and service in (None, s["service"])]


def kids(spans) -> dict:
    """Each parent index -> its child span dicts."""
    out: dict = {}
    for s in spans:
        out.setdefault(s["parent"], []).append(s)
    return out
