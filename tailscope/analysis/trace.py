"""One trace as a Gantt table: spans with depth, stage, self and attributed time, critical path and
each span's duration ranked among the spans of the same name in the run."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tailscope import sql
from tailscope.analysis.phases import phase_rules_in_force
from tailscope.analysis.source import Source, reading
from tailscope.analysis.stages import rules_in_force
from tailscope.analysis.types import Gantt
from tailscope.query.builders import span_tree_query
from tailscope.store.clickhouse import ClickHouseStore

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
    if isinstance(source, ClickHouseStore):
        loaded = _read_clickhouse(source, trace_id, run)
    else:
        with reading(source) as conn:
            loaded = _read(conn, trace_id, run)
    run, tree, client, ranks, reason = loaded
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


Loaded = tuple[str | None, pd.DataFrame | None, tuple[Any, ...] | None, dict[int, float], str | None]


def _no_tree(trace_id: str, run: str, spans: int) -> str:
    return f"trace {trace_id!r} has no request root" if spans else f"no trace {trace_id!r} in run {run!r}"


def _read(conn: Any, trace_id: str, run: str | None) -> Loaded:
    """The span tree, client span and ranks of one trace from a DuckDB store (or a reason)."""
    if run is None:
        row = conn.execute(sql.load("trace_run"), [trace_id]).fetchone()
        run = row[0] if row else None
    if run is None:
        return run, None, None, {}, f"no trace {trace_id!r} in the store"
    text, params = span_tree_query(
        rules_in_force(conn), "trace", run, trace_id=trace_id, phase_rules=phase_rules_in_force(conn)
    )
    tree = conn.execute(text, params).df()
    if tree.empty:
        spans = conn.execute(sql.load("trace_span_count"), [run, trace_id]).fetchone()[0]
        return run, None, None, {}, _no_tree(trace_id, run, spans)
    client_id = tree["ClientSpanId"].iloc[0]
    client = None
    if isinstance(client_id, str):
        client = conn.execute(sql.load("client_span"), [run, trace_id, client_id]).fetchone()
    names = [*tree["SpanName"], *([client[2]] if client else [])]
    durations = [int(d) for d in tree["Duration"]] + ([int(client[6])] if client else [])
    ranks = dict(conn.execute(sql.load("gantt_rank"), [names, durations, durations, run]).fetchall())
    return run, tree, client, ranks, None


def _read_clickhouse(store: ClickHouseStore, trace_id: str, run: str | None) -> Loaded:
    """As _read, on a ClickHouse store (analysis.trace_ch: the span tree inside ClickHouse)."""
    from tailscope.analysis import trace_ch

    run = run if run is not None else trace_ch.trace_run(store, trace_id)
    if run is None:
        return run, None, None, {}, f"no trace {trace_id!r} in the store"
    selection = trace_ch.trace_selection(store, run, trace_id)
    tree = trace_ch.span_tree(store, selection, trace_id) if selection is not None else None
    if tree is None or tree.empty:
        spans = trace_ch.span_count(store, selection, trace_id) if selection is not None else 0
        return run, None, None, {}, _no_tree(trace_id, run, spans)
    client_id = tree["ClientSpanId"].iloc[0]
    client = trace_ch.client_span(store, trace_id, client_id) if isinstance(client_id, str) else None
    names = [*tree["SpanName"], *([client[2]] if client else [])]
    durations = [int(d) for d in tree["Duration"]] + ([int(client[6])] if client else [])
    return run, tree, client, trace_ch.ranks(store, run, names, durations), None
