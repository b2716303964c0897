"""Writers: OTLP/JSON lines (the Collector file exporter's shape), Jaeger UI JSON, SpanColumns.

The OTLP writer is the fast path. Per role it builds, once, the JSON text of everything constant (name,
kind, static attributes: encoded by orjson) around `%` placeholders for the values that vary (ids,
times, dynamic attributes), so a span costs one string format. Every line is one
ExportTraceServiceRequest: resourceSpans → scopeSpans → spans, camelCase, hex ids, 64-bit integers as
decimal strings, integer enums; what `reference_pipeline.tracing` writes for the real service.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from ingest.columns import SpanColumns
from reference_pipeline.otlp_values import key_values
from reference_pipeline.simulate.spans import SpanGroup, SpanSource, string_value

_KIND_NUMBER = {"Internal": 1, "Server": 2, "Client": 3, "Producer": 4, "Consumer": 5}
_PLACEHOLDER = {"int": '{"intValue":"%d"}', "bool": '{"boolValue":%s}', "str": '{"stringValue":%s}'}


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


class _SpanTemplate:
    """One role's span as a format string; `render(group)` formats all its spans."""

    def __init__(self, group: SpanGroup) -> None:
        spec = group.spec

        def literal(value: Any) -> str:  # constant JSON text, safe inside a % format
            return _json(value).replace("%", "%%")

        text = '{"traceId":"%s","spanId":"%s"' + (',"parentSpanId":"%s"' if spec.parent else "")
        text += f',"name":{literal(spec.name)},"kind":{_KIND_NUMBER[spec.kind]}'
        text += ',"startTimeUnixNano":"%d","endTimeUnixNano":"%d"'
        attributes = [literal(kv) for kv in key_values(spec.static)]
        attributes += [f'{{"key":{literal(key)},"value":{_PLACEHOLDER[kind]}}}'
                       for key, kind, _ in group.attrs]
        if attributes:
            text += ',"attributes":[' + ",".join(attributes) + "]"
        self.format = text + "%s}"

    def render(self, group: SpanGroup) -> list[str]:
        columns: list[list] = [group.trace_ids, group.span_ids]
        if group.parent_ids is not None:
            columns.append(group.parent_ids)
        columns += [group.start_ns, group.end_ns]
        for _, kind, values in group.attrs:
            if kind == "bool":
                values = ["true" if v else "false" for v in values]
            elif kind == "str":
                values = [_json(v) for v in values]
            columns.append(values)
        columns.append(_extras(group))
        fmt = self.format
        return [fmt % row for row in zip(*columns, strict=True)]


def _extras(group: SpanGroup) -> list[str]:
    if group.events is not None:
        return ["" if not evs else ',"events":' + _json([
            {"timeUnixNano": str(ts), "name": name, "attributes": key_values(attrs)}
            for ts, name, attrs in evs
        ]) for evs in group.events]
    if group.links is not None:
        return [f',"links":[{{"traceId":"{t}","spanId":"{s}"}}]' for t, s in group.links]
    return [""] * len(group.span_ids)


def otlp_json_lines(source: SpanSource, requests_per_line: int = 512) -> Iterator[bytes]:
    """One ExportTraceServiceRequest per line, for `requests_per_line` requests' spans."""
    resources = [_json({"attributes": key_values(attrs)}) for attrs in source.resources]
    templates: dict[str, _SpanTemplate] = {}  # by role, built from the role's first group
    for groups in source.chunks(requests_per_line):
        by_resource: dict[int, dict[str, list[str]]] = {}
        for group in groups:
            template = templates.get(group.spec.role)
            if template is None:
                template = templates[group.spec.role] = _SpanTemplate(group)
            by_resource.setdefault(group.resource, {}).setdefault(group.spec.scope, []).extend(
                template.render(group)
            )
        resource_spans = []
        for resource, scopes in by_resource.items():
            scope_spans = ",".join(f'{{"scope":{{"name":{_json(scope)}}},"spans":[{",".join(spans)}]}}'
                                   for scope, spans in scopes.items())
            resource_spans.append(f'{{"resource":{resources[resource]},"scopeSpans":[{scope_spans}]}}')
        yield ('{"resourceSpans":[' + ",".join(resource_spans) + "]}\n").encode()


def _jaeger_tag(key: str, value: Any) -> dict[str, Any]:
    kind = "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else (
        "float64" if isinstance(value, float) else "string")
    return {"key": key, "type": kind, "value": value}


def jaeger_json(source: SpanSource, requests_per_chunk: int = 512) -> Iterator[bytes]:
    """Jaeger UI JSON ({"data": [trace, ...]}, times in microseconds) in pieces to concatenate."""
    yield b'{"data":['
    processes = [
        {"serviceName": attrs["service.name"],
         "tags": [_jaeger_tag(k, v) for k, v in attrs.items() if k != "service.name"]}
        for attrs in source.resources
    ]
    first = True
    for groups in source.chunks(requests_per_chunk):
        traces: dict[int, dict[str, Any]] = {}
        for group in groups:
            spec = group.spec
            static = [_jaeger_tag(k, v) for k, v in spec.static]
            static += [{"key": "span.kind", "type": "string", "value": spec.kind.lower()},
                       {"key": "otel.scope.name", "type": "string", "value": spec.scope}]
            for k, request in enumerate(group.requests.tolist()):
                trace_id = group.trace_ids[k]
                trace = traces.setdefault(request, {"traceID": trace_id, "spans": [], "processes": {},
                                                    "warnings": None})
                references = []
                if group.parent_ids is not None:
                    references.append({"refType": "CHILD_OF", "traceID": trace_id,
                                       "spanID": group.parent_ids[k]})
                if group.links is not None:
                    link_trace, link_span = group.links[k]
                    references.append({"refType": "FOLLOWS_FROM", "traceID": link_trace, "spanID": link_span})
                start, end = group.start_ns[k], group.end_ns[k]
                logs = []
                if group.events is not None:
                    logs = [{"timestamp": ts // 1000,
                             "fields": [_jaeger_tag("event", name),
                                        *(_jaeger_tag(a, v) for a, v in attrs.items())]}
                            for ts, name, attrs in group.events[k]]
                process_id = f"p{group.resource}"
                trace["processes"][process_id] = processes[group.resource]
                trace["spans"].append({
                    "traceID": trace_id, "spanID": group.span_ids[k], "operationName": spec.name,
                    "references": references, "startTime": start // 1000, "duration": (end - start) // 1000,
                    "tags": static + [_jaeger_tag(key, values[k]) for key, _, values in group.attrs],
                    "logs": logs, "processID": process_id, "warnings": None,
                })
        for _, trace in sorted(traces.items()):
            yield (b"" if first else b",") + orjson.dumps(trace)
            first = False
    yield b"]}\n"


def span_columns(source: SpanSource, requests_per_batch: int = 4096) -> Iterator[SpanColumns]:
    """The spans as SpanColumns batches, the shape every decoder hands the store."""
    resources = [{k: string_value(v) for k, v in attrs.items()} for attrs in source.resources]
    services = [attrs["service.name"] for attrs in resources]
    for groups in source.chunks(requests_per_batch):
        batch = SpanColumns()
        for group in groups:
            spec, n = group.spec, len(group.span_ids)
            static = {k: string_value(v) for k, v in spec.static}
            batch.timestamp_ns += group.start_ns
            batch.duration_ns += [e - s for s, e in zip(group.start_ns, group.end_ns, strict=True)]
            batch.trace_id += group.trace_ids
            batch.span_id += group.span_ids
            batch.parent_span_id += group.parent_ids if group.parent_ids is not None else [""] * n
            batch.trace_state += [""] * n
            batch.span_name += [spec.name] * n
            batch.span_kind += [spec.kind] * n
            batch.service_name += [services[group.resource]] * n
            batch.resource_attributes += [resources[group.resource]] * n
            batch.scope_name += [spec.scope] * n
            batch.scope_version += [""] * n
            if group.attrs:
                keys = [key for key, _, _ in group.attrs]
                rows = zip(*(values for _, _, values in group.attrs), strict=True)
                batch.span_attributes += [
                    {**static, **{k: string_value(v) for k, v in zip(keys, row, strict=True)}} for row in rows
                ]
            else:
                batch.span_attributes += [dict(static) for _ in range(n)]
            batch.status_code += ["Unset"] * n
            batch.status_message += [""] * n
            if group.events is not None:
                batch.events += [[(ts, name, {k: str(v) for k, v in attrs.items()})
                                  for ts, name, attrs in evs] for evs in group.events]
            else:
                batch.events += [[] for _ in range(n)]
            if group.links is not None:
                batch.links += [[(t, s, "", {})] for t, s in group.links]
            else:
                batch.links += [[] for _ in range(n)]
        yield batch
