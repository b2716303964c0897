"""Tail vs body (BubbleUp): which attribute values and stages set the selected requests (a heatmap
rectangle or the tail) apart from the rest. SQL: tail_stages.sql and tail_attributes.sql, both over
tail_selection.sql."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tailscope.analysis.histogram import exact_quantile, run_histogram, tail_groups
from tailscope.analysis.source import Source, reading
from tailscope.analysis.types import Filter, Rect, TailVsBody
from tailscope.analysis.views import _check_stage, _no_requests_reason
from tailscope.vocabulary import ALL_STAGES


def _whole_run_groups(conn: Any, flt: Filter, tail_quantile: float) -> dict[bool, tuple] | None:
    """tail_stages.sql's rows for a whole large run, from its histogram (analysis.histogram): the
    exact threshold from the buckets its ranks fall in, the tail's sums read, the rest the run's
    totals less them. None where the run has no histogram to read (the exact path then)."""
    histogram = run_histogram(conn, flt)
    if histogram is None or flt.run is None:
        return None
    threshold = exact_quantile(conn, flt.run, histogram.e2e, tail_quantile)
    return None if threshold is None else tail_groups(conn, flt.run, histogram, threshold)


def tail_vs_body(
    source: Source,
    flt: Filter,
    rect: Rect | None = None,
    tail_quantile: float = 0.99,
    stage: str | None = None,
    limit: int = 50,
    sample: int = 1000,
    max_values_per_key: int = 30,
) -> TailVsBody:
    """BubbleUp: which attribute values (span attributes of any span of the request, resource
    attributes of the request root, the request's dominant stage) are over-represented in the
    selected set vs the rest, and which stages differ most. The selected set is the rectangle when
    given, else the requests at or above the tail quantile of e2e latency. Attribute shares come from
    a seeded sample of up to `sample` requests on each side."""
    stage_param = _check_stage(stage)
    if rect is not None:
        selection = (
            f"requests started {rect.start:%H:%M:%S}–{rect.end:%H:%M:%S} with "
            f"{stage or 'e2e'} latency {rect.low_ms:g}–{rect.high_ms:g} ms"
        )
        sel = [
            True,
            rect.start,
            rect.end,
            stage_param,
            int(rect.low_ms * 1e6),
            stage_param,
            int(rect.high_ms * 1e6),
        ]
    else:
        selection = f"requests at or above the p{tail_quantile * 100:g} of e2e latency"
        sel = [False, None, None, stage_param, None, stage_param, None]
    attr_cols = ["source", "span_name", "key", "value", "selected_pct", "rest_pct", "difference_pct", "lift"]
    stage_cols = ["stage", "selected_mean_ms", "rest_mean_ms", "delta_ms", "selected_share", "rest_share"]
    with reading(source) as conn:
        head: list[Any] = [tail_quantile, *sel]
        groups = _whole_run_groups(conn, flt, tail_quantile) if rect is None else None
        if groups is None:
            groups = {row[0]: row for row in conn.run("tail_stages", head, where=flt).fetchall()}
        selected, rest = groups.get(True), groups.get(False)
        empty = TailVsBody(
            selection=selection,
            selected_requests=selected[1] if selected else 0,
            rest_requests=rest[1] if rest else 0,
            attributes=pd.DataFrame(columns=attr_cols),
            stages=pd.DataFrame(columns=stage_cols),
        )
        if not groups:
            empty.reason = _no_requests_reason(conn, flt)
            return empty
        if not selected or not rest:
            empty.reason = "the selection holds every request or none: nothing to compare"
            return empty
        limits = [int(sample), int(max_values_per_key)]
        attrs = conn.run("tail_attributes", [*head, *limits], where=flt).fetchall()
    stage_rows = []
    for i, name in enumerate(ALL_STAGES):
        s_ns, r_ns = selected[3 + i] or 0.0, rest[3 + i] or 0.0
        stage_rows.append(
            (
                name,
                s_ns / 1e6,
                r_ns / 1e6,
                (s_ns - r_ns) / 1e6,
                s_ns / selected[2] if selected[2] else 0.0,
                r_ns / rest[2] if rest[2] else 0.0,
            )
        )
    stages = pd.DataFrame(stage_rows, columns=stage_cols).sort_values(
        "delta_ms", ascending=False, ignore_index=True
    )
    attr_rows = []
    for source_name, span_name, key, value, sel_n, rest_n, sel_total, rest_total in attrs:
        s_pct = 100.0 * sel_n / sel_total if sel_total else 0.0
        r_pct = 100.0 * rest_n / rest_total if rest_total else 0.0
        lift = s_pct / r_pct if r_pct > 0 else float("inf") if s_pct > 0 else 1.0
        attr_rows.append((source_name, span_name, key, value, s_pct, r_pct, s_pct - r_pct, lift))
    attributes = pd.DataFrame(attr_rows, columns=attr_cols)
    if not attributes.empty:
        attributes = attributes.sort_values(
            ["difference_pct", "key", "value"], ascending=[False, True, True], ignore_index=True
        ).head(limit)
    return TailVsBody(
        selection=selection,
        selected_requests=selected[1],
        rest_requests=rest[1],
        attributes=attributes,
        stages=stages,
    )
