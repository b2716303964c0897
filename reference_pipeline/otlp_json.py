"""ReadableSpans as OTLP/JSON: the reference encoding (dicts, `encode_request`) and the exporter's
cheap one (`request_line`: the JSON text written directly), which must parse into the same thing.

The file exporter runs in the traced process, so its cost is tracing overhead. Building a dict per
attribute and another per value, then serialising them, cost ~42 µs per light-mode request span
(26 attributes) on the 2-core VM; writing each attribute's JSON from a cached key prefix and an
f-string costs ~13 µs (bench/RESULTS.md, "Light tracing: its cost cut"). Integers and strings, what
spans carry nearly always, take that path; every other value, events, links and status go through
the reference encoding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from reference_pipeline.otlp_values import any_value, key_values

_KIND = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}
_CACHE_MAX = 4096  # attribute keys and span names seen (a service has tens)


def _events(events: Sequence) -> list[dict]:
    return [
        {"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": key_values(e.attributes)}
        for e in events
    ]


def _links(links: Sequence) -> list[dict]:
    return [
        {
            "traceId": f"{link.context.trace_id:032x}",
            "spanId": f"{link.context.span_id:016x}",
            "attributes": key_values(link.attributes),
        }
        for link in links
    ]


def _status(span: ReadableSpan) -> dict | None:
    status = span.status
    if status.status_code is StatusCode.UNSET:
        return None
    out: dict[str, Any] = {"code": _STATUS[status.status_code.name]}
    if status.description:
        out["message"] = status.description
    return out


def span_to_otlp(span: ReadableSpan) -> dict:
    # each ReadableSpan property builds a fresh proxy or tuple: read each once
    ctx, parent, attributes = span.context, span.parent, span.attributes
    events, links = span.events, span.links
    out: dict = {
        "traceId": f"{ctx.trace_id:032x}",
        "spanId": f"{ctx.span_id:016x}",
        "name": span.name,
        "kind": _KIND[span.kind.name],
        "startTimeUnixNano": str(span.start_time),
        "endTimeUnixNano": str(span.end_time),
    }
    if parent is not None:
        out["parentSpanId"] = f"{parent.span_id:016x}"
    if attributes:
        out["attributes"] = key_values(attributes)
    if events:
        out["events"] = _events(events)
    if links:
        out["links"] = _links(links)
    if (status := _status(span)) is not None:
        out["status"] = status
    return out


def _grouped(spans: Sequence[ReadableSpan]) -> dict[int, tuple[Resource, dict[tuple, list]]]:
    by_resource: dict[int, tuple[Resource, dict[tuple, list]]] = {}
    for span in spans:
        _, scopes = by_resource.setdefault(id(span.resource), (span.resource, {}))
        scope = span.instrumentation_scope
        key = (scope.name, scope.version) if scope else ("", None)
        scopes.setdefault(key, []).append(span)
    return by_resource


def _scope(name: str, version: str | None) -> dict:
    return {"name": name, **({"version": version} if version else {})}


def encode_request(spans: Sequence[ReadableSpan]) -> dict:
    """An ExportTraceServiceRequest (OTLP/JSON) grouping spans by resource, then by scope."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": key_values(resource.attributes)},
                "scopeSpans": [
                    {"scope": _scope(*key), "spans": [span_to_otlp(s) for s in items]}
                    for key, items in scopes.items()
                ],
            }
            for resource, scopes in _grouped(spans).values()
        ]
    }


# ---------------------------------------------------------------------------- the cheap path
_KEY_PREFIX: dict[str, str] = {}  # key -> '{"key":"<key>","value":'
_INT_PREFIX: dict[str, str] = {}  # key -> '{"key":"<key>","value":{"intValue":"'
_NAME: dict[str, str] = {}  # span name -> its JSON string


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _key_prefix(key: str) -> str:
    found = _KEY_PREFIX.get(key)
    if found is None:
        found = '{"key":' + _json_text(key) + ',"value":'
        if len(_KEY_PREFIX) < _CACHE_MAX:
            _KEY_PREFIX[key] = found
    return found


def _name(name: str) -> str:
    found = _NAME.get(name)
    if found is None:
        found = _json_text(name)
        if len(_NAME) < _CACHE_MAX:
            _NAME[name] = found
    return found


def attributes_json(attributes: Mapping[str, Any]) -> str:
    """A KeyValue list's JSON, without its brackets."""
    # a span's attributes are a read-only proxy over the SDK's BoundedAttributes, whose item view
    # runs in Python: its copy() is one C-level dict copy
    copy = getattr(attributes, "copy", None)
    items = copy() if copy is not None else attributes
    parts = []
    for key, value in items.items():
        kind = type(value)
        if kind is int:
            prefix = _INT_PREFIX.get(key)
            if prefix is None:
                prefix = _key_prefix(key) + '{"intValue":"'
                if len(_INT_PREFIX) < _CACHE_MAX:
                    _INT_PREFIX[key] = prefix
            parts.append(f'{prefix}{value}"}}}}')
        elif kind is str:
            parts.append(f'{_key_prefix(key)}{{"stringValue":{_json_text(value)}}}}}')
        else:
            parts.append(f"{_key_prefix(key)}{_json_text(any_value(value))}}}")
    return ",".join(parts)


def span_json(span: ReadableSpan) -> str:
    """One span's OTLP/JSON text: parses into span_to_otlp(span)."""
    ctx, parent, attributes = span.context, span.parent, span.attributes
    out = (
        f'{{"traceId":"{ctx.trace_id:032x}","spanId":"{ctx.span_id:016x}","name":{_name(span.name)},'
        f'"kind":{_KIND[span.kind.name]},"startTimeUnixNano":"{span.start_time}",'
        f'"endTimeUnixNano":"{span.end_time}"'
    )
    if parent is not None:
        out += f',"parentSpanId":"{parent.span_id:016x}"'
    if attributes:
        out += f',"attributes":[{attributes_json(attributes)}]'
    if events := span.events:
        out += ',"events":' + _json_text(_events(events))
    if links := span.links:
        out += ',"links":' + _json_text(_links(links))
    if (status := _status(span)) is not None:
        out += ',"status":' + _json_text(status)
    return out + "}"


def request_line(spans: Sequence[ReadableSpan]) -> bytes:
    """encode_request(spans) as one line of JSON (no newline), written directly."""
    resources = []
    for resource, scopes in _grouped(spans).values():
        scope_spans = ",".join(
            f'{{"scope":{_json_text(_scope(*key))},"spans":[{",".join(map(span_json, items))}]}}'
            for key, items in scopes.items()
        )
        head = _json_text({"attributes": key_values(resource.attributes)})
        resources.append(f'{{"resource":{head},"scopeSpans":[{scope_spans}]}}')
    return f'{{"resourceSpans":[{",".join(resources)}]}}'.encode()
