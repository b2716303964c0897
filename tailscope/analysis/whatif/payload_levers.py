"""The large_payload lever: each request handling more than the typical payload handles the typical
one (the run's median, or where the sizes grew through the run, the size before they grew)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, SPAN_KINDS
from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever
from tailscope.analysis.whatif.loop_blockers import loop_waits
from tailscope.analysis.whatif.retime import Edit


def _sizes(x: Inputs, spans: np.ndarray, key: str, on_root: bool) -> np.ndarray | None:
    """The size attribute per span (nan where a span or its request's root lacks it); None where the
    run's attributes cannot be read (a frame built without a store)."""
    f = x.frame
    if f.attribute_source is None:
        return None
    out = np.full(len(f), np.nan)
    codes = np.unique(f.name[f.requests.root]).tolist() if on_root else [int(f.name[spans[0]])]
    for code in codes:
        idx, values = f.attributes(code).get(key, (np.zeros(0, np.int64), []))
        v = np.array([_number(value) for value in values], np.float64)
        ok = idx >= 0
        out[idx[ok]] = v[ok]
    if on_root:
        per_request = out[f.requests.root]
        return per_request[f.request[spans]]
    return out[spans]


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


MIN_RHO = 0.5  # a stage's own time follows the size (Spearman), as the large_payload finding asks
MIN_SPANS = 50


def _trace_sizes(x: Inputs, spans: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Per trace: the size its spans of the finding's name handled (their mean; nan where none). A
    trace, not a request: the payload crosses services (made in one, sent, parsed in another)."""
    trace = x.frame.trace
    n = int(trace.max(initial=-1)) + 1
    ok = np.isfinite(size)
    total = np.bincount(trace[spans[ok]], weights=size[ok], minlength=n)
    count = np.bincount(trace[spans[ok]], minlength=n)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


MODE_SEPARATION = 2.5  # two sizes, not a spread: Ashman's D of the log sizes' modes (> 2: clean modes)
MODE_SHARE = 0.1  # each mode holds at least this share of the traces
GROWN_RATIO = 2.0  # the larger mode's share in the run's last fifth over its share in the first


def grown_from(x: Inputs, per_trace: np.ndarray) -> float | None:
    """Where the payloads grew through the run (a client rollout: the sizes fall in two modes, the
    larger one's share at the end at least twice its share at the start), the size before they grew:
    the smaller mode's median; the run's median is then a grown one. None where they did not."""
    from tailscope.analysis.diagnosis.stats import gmm2

    ok = np.nonzero(np.isfinite(per_trace) & (per_trace > 0))[0]
    if len(ok) < 5 * MIN_SPANS:
        return None
    logs = np.log(per_trace[ok])
    mix = gmm2(logs)
    if mix is None or min(mix.w) < MODE_SHARE:
        return None
    if mix.separation < MODE_SEPARATION:
        return None
    large = logs > mix.threshold
    f = x.frame
    began = np.full(len(per_trace), np.iinfo(np.int64).max)
    np.minimum.at(began, f.trace, f.start.astype(np.int64))
    order = np.argsort(began[ok], kind="stable")
    fifth = max(len(ok) // 5, 1)
    first, last = float(large[order[:fifth]].mean()), float(large[order[-fifth:]].mean())
    if last < GROWN_RATIO * first or last - first < MODE_SHARE:
        return None
    return float(np.median(per_trace[ok][~large]))


def payload_at_median(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """Every request handling more than the median size (where the sizes grew through the run: the
    size before they grew, `grown_from`) handles it: each stage whose own time follows the trace's
    payload size (the finding's span, and the transfer and parsing of the same
    payload along its path) loses its fitted time per unit for the part above the median."""
    from tailscope.analysis.diagnosis.stats import spearman, theil_sen

    stats = (finding.get("evidence") or {}).get("stats", {})
    key = stats.get("size_attribute")
    name = finding.get("span_name")
    spans = x.spans_named(name, in_requests=False)
    if not key or len(spans) == 0:
        return None
    size = _sizes(x, spans, key, stats.get("size_on") == "request root")
    if size is None or not np.isfinite(size).any():
        return None
    f, lay = x.frame, x.lay
    per_trace = _trace_sizes(x, spans, size)
    median = float(stats.get("size_p50") or np.nanmedian(per_trace))
    before = grown_from(x, per_trace)
    median = min(median, before) if before is not None else median
    inside = np.nonzero(np.isfinite(per_trace[f.trace]))[0]
    own = lay.trailing.astype(np.float64)  # a leaf: its duration; a parent: its time after its children
    edit = Edit.none(len(f))
    rng = x.rng(23)
    stages = []
    # one fit per span name, service and kind: a call's CLIENT span holds the transfer, its SERVER
    # span of the same name does not
    kinds = len(SPAN_KINDS)
    stage_key = (f.name[inside] * (len(f.services) + 1) + f.service[inside]) * kinds + f.kind[inside]
    for key_code in np.unique(stage_key).tolist():
        sel = inside[stage_key == key_code]
        code = int(f.name[sel[0]])
        if len(sel) < MIN_SPANS:
            continue
        v, y = per_trace[f.trace[sel]], own[sel]
        if float(np.ptp(v)) == 0 or not spearman(v, y) >= MIN_RHO:  # nan (a constant time): no
            continue
        slope, _ = theil_sen(v, y, rng)
        if slope <= 0:
            continue
        floor = float(np.quantile(y[v <= median], 0.01)) if (v <= median).any() else 0.0
        cut = np.minimum(slope * np.maximum(v - median, 0.0), np.maximum(y - floor, 0.0))
        edit.cut_after[sel] = cut
        stages.append(f.names[code])
    if not edit.cut_after.any():
        return None
    # the steps cut that hold a loop (CPU, not a CLIENT call's wait): the other requests' waits behind
    # them on a single-threaded loop go with the time they no longer hold it
    blockers = np.nonzero((edit.cut_after > 0) & (f.kind != KIND_CLIENT) & (f.request >= 0))[0]
    busy = (f.start + f.dur - lay.trailing)[blockers].astype(np.float64)
    waits = loop_waits(x, edit, blockers, busy, lay.trailing[blockers] - edit.cut_after[blockers])
    loop = "; on a single-threaded loop the other requests' waits behind them replayed" if waits else ""
    return Lever(
        f"payload_p50:{name}",
        f"Payloads at the median {key} ({median:,.0f}), '{name}' and {len(stages) - 1} more stage(s)",
        SOFTWARE,
        f"each request handling more than the median {key} handles the median (pagination, streaming, "
        "fewer fields, a size cap): every stage whose own time follows the size (Spearman >= 0.5: "
        "serialising, sending, parsing the payload) loses its fitted time per unit above the median" + loop,
        edit,
        pattern="large_payload",
        span_name=name,
        requeue=True,
        params={"size_p50": median, "stages": len(stages), "loop_waits_cut": waits},
    )


REPEATED = 3  # a call its parent makes this many times in a row is made once per item (N+1)


def _repeated_runs(x: Inputs, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The spans of a name that run one after another under one parent, REPEATED or more in a row
    with no other sibling between them: (those spans, their run's number, whether each is its run's
    first); None where fewer than half the parents that make the call repeat it so."""
    f, lay = x.frame, x.lay
    kids = np.nonzero(np.isin(lay.parent, lay.parent[spans]) & (lay.parent >= 0))[0]
    kids = kids[np.lexsort((f.start[kids], lay.parent[kids]))]
    same = f.name[kids] == f.name[spans[0]]
    par = lay.parent[kids]
    new_run = np.r_[True, (par[1:] != par[:-1]) | ~same[1:] | ~same[:-1]]
    run = np.cumsum(new_run) - 1
    repeated = same & (np.bincount(run)[run] >= REPEATED)
    if len(np.unique(par[repeated])) < 0.5 * len(np.unique(lay.parent[spans])):
        return None
    return kids[repeated], run[repeated], new_run[repeated]


def batched_calls(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A payload that grows with the number of calls, not their size (N+1: one query per item, the
    size is the count): each run of the repeated call becomes one call (an IN list, a batch API) that
    takes the longest of the run's times; the others and the gaps before them are gone."""
    name = finding.get("span_name")
    spans = x.spans_named(name)
    if len(spans) < MIN_SPANS:
        return None
    runs = _repeated_runs(x, spans)
    if runs is None:
        return None
    calls, run, first = runs
    f, lay = x.frame, x.lay
    longest = np.zeros(int(run.max()) + 1)
    np.maximum.at(longest, run, f.dur[calls].astype(np.float64))
    rest = calls[~first]
    edit = Edit.none(len(f))
    edit.dur[calls[first]] = longest[run[first]]
    edit.dur[rest] = 0.0
    edit.cut_before[rest] = lay.gap[rest]
    return Lever(
        f"payload_batched:{name}",
        f"'{name}' made once for all items instead of once per item",
        SOFTWARE,
        f"each run of '{name}' called once per item (N+1) becomes one call taking the longest of the run's "
        "times (an IN list, a batch API, eager loading); the other calls and the work between them go",
        edit,
        pattern="large_payload",
        span_name=name,
        params={"runs": int(first.sum()), "calls_removed": len(rest)},
    )
