"""One trace as a Gantt table: spans with depth, stage, self and attributed time, critical path and
each span's duration ranked among the spans of the same name in the run."""

from __future__ import annotations

import pandas as pd

from tailscope.analysis.source import Source, reading
from tailscope.analysis.types import Gantt

COLUMNS = [
    "span_id",
    "parent_span_id",
    "name",
    "service",
    "kind",
    "stage",
    "depth",
    "start_offset_ms",
    "duration_ms",
    "exclusive_ms",
    "attributed_ms",
    "critical",
    "duration_pct_rank",
    "status",
    "in_request",
]


def critical_path(spans: pd.DataFrame) -> set[str]:
    """Span ids on the critical path: from the root, repeatedly the child that ends last before the
    point reached so far (Jaeger's definition), using the effective (clipped) intervals."""
    children: dict[str, list[tuple[int, int, str]]] = {}
    root = None
    for span_id, parent, start, end, depth in spans[
        ["SpanId", "ParentSpanId", "EffStart", "EffEnd", "Depth"]
    ].itertuples(index=False):
        if depth == 0:
            root = span_id
        else:
            children.setdefault(parent, []).append((end, start, span_id))
    on_path: set[str] = set()

    def walk(span_id: str, limit: int) -> None:
        on_path.add(span_id)
        cursor = limit
        for end, start, child in sorted(children.get(span_id, []), reverse=True):
            if end <= cursor and end > start:
                walk(child, end)
                cursor = start

    if root is not None:
        walk(root, 2**62)
    return on_path


def trace_gantt(source: Source, trace_id: str, run: str | None = None) -> Gantt:
    """One trace's spans for a Gantt chart (see types.Gantt), with the critical path marked and each
    span's duration ranked among spans of the same name in the run."""
    with reading(source) as reader:
        read = reader.trace_tree(trace_id, run)
    run, tree, client, ranks = read.run, read.tree, read.client, read.ranks
    reason = None
    if run is None:
        reason = f"no trace {trace_id!r} in the store"
    elif tree is None:
        reason = _no_tree(trace_id, run, read.spans)
    if reason or tree is None:
        return Gantt(
            run=run,
            trace_id=trace_id,
            root_span_id=None,
            duration_ms=None,
            client_duration_ms=None,
            spans=pd.DataFrame(columns=COLUMNS),
            reason=reason,
        )
    root = tree[tree["Depth"] == 0].iloc[0]
    origin = int(client[5]) if client and client[5] < root["StartNs"] else int(root["StartNs"])
    on_path = critical_path(tree)
    order = _depth_first(tree)
    rows = []
    if client:
        rows.append(
            (
                client[0],
                client[1],
                client[2],
                client[3],
                client[4],
                "client",
                -1,
                (client[5] - origin) / 1e6,
                client[6] / 1e6,
                None,
                None,
                False,
                ranks.get(len(tree) + 1),  # the client span is the last name ranked
                client[7],
                False,
            )
        )
    for i in order:
        s = tree.iloc[i]
        rows.append(
            (
                s["SpanId"],
                s["ParentSpanId"],
                s["SpanName"],
                s["ServiceName"],
                s["SpanKind"],
                "unattributed" if s["Depth"] == 0 else s["Stage"],
                int(s["Depth"]),
                (int(s["StartNs"]) - origin) / 1e6,
                int(s["Duration"]) / 1e6,
                int(s["ExclusiveNs"]) / 1e6,
                float(s["AttributedNs"]) / 1e6,
                s["SpanId"] in on_path,
                ranks.get(i + 1),
                s["StatusCode"],
                True,
            )
        )
    return Gantt(
        run=run,
        trace_id=trace_id,
        root_span_id=root["SpanId"],
        duration_ms=int(root["Duration"]) / 1e6,
        client_duration_ms=client[6] / 1e6 if client else None,
        spans=pd.DataFrame(rows, columns=COLUMNS),
    )


def _depth_first(tree: pd.DataFrame) -> list[int]:
    """Row positions in depth-first order, siblings by start time."""
    kids: dict[str, list[tuple[int, str, int]]] = {}
    root = 0
    for i, (span_id, parent, start, depth) in enumerate(
        tree[["SpanId", "ParentSpanId", "StartNs", "Depth"]].itertuples(index=False)
    ):
        if depth == 0:
            root = i
        else:
            kids.setdefault(parent, []).append((int(start), span_id, i))
    order: list[int] = []
    stack = [root]
    while stack:
        i = stack.pop()
        order.append(i)
        for _, _, child in sorted(kids.get(tree.iloc[i]["SpanId"], []), reverse=True):
            stack.append(child)
    return order


def _no_tree(trace_id: str, run: str, spans: int) -> str:
    return f"trace {trace_id!r} has no request root" if spans else f"no trace {trace_id!r} in run {run!r}"
